#include "jobs/batch_output.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "base/text.h"
#include "jobs/sha256.h"

namespace llmq::jobs {
namespace {

using ojson = nlohmann::ordered_json;

// Compact, UTF-8 kept as is, invalid bytes written as U+FFFD (never throws on bad text).
std::string Dump(const ojson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, ojson::error_handler_t::replace);
}

constexpr double kMinLogprob = -9999.0;  // what -inf is written as

double Logprob(double lp) {
  return lp >= kMinLogprob ? lp : kMinLogprob;  // also NaN
}

ojson Bytes(const std::string& b) {
  ojson a = ojson::array();
  for (char c : b) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

ojson ChatToken(const LogprobToken& t) {
  return {{"token", t.token}, {"logprob", Logprob(t.logprob)}, {"bytes", Bytes(t.bytes)}};
}

// Code points of a UTF-8 string (what Python's len() counts).
int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

ojson ChatLogprobs(const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const TokenLogprob& t : lps) {
    ojson e = ChatToken(t.chosen);
    ojson top = ojson::array();
    for (const LogprobToken& x : t.top) top.push_back(ChatToken(x));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

ojson CompletionLogprobs(const std::vector<TokenLogprob>& lps) {
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  int64_t offset = 0;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.chosen.token);
    token_lps.push_back(Logprob(t.chosen.logprob));
    ojson top = ojson::object();
    for (const LogprobToken& x : t.top)
      if (!top.contains(x.token)) top[x.token] = Logprob(x.logprob);
    if (!top.contains(t.chosen.token)) top[t.chosen.token] = Logprob(t.chosen.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += CodePoints(t.chosen.bytes);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

// A successful output line around its response body.
std::string Line(const std::string& custom_id, const std::string& request_id, ojson body) {
  ojson line;
  line["id"] = request_id;
  line["custom_id"] = custom_id;
  ojson response;
  response["status_code"] = 200;
  response["request_id"] = ResponseRequestId(request_id);
  response["body"] = std::move(body);
  line["response"] = std::move(response);
  line["error"] = nullptr;
  return Dump(line);
}

// An id of a Response or one of its output items: `prefix` and 32 hex digits of the line's id and
// the item's name (the same in a resumed run).
std::string ItemId(const char* prefix, const std::string& request_id, const std::string& item) {
  return prefix + Sha256Hex(request_id + "/" + item).substr(0, 32);
}

// A /v1/responses line's Response object: the request's echo (BatchRequest::responses_echo), and
// as output its thought (a reasoning item, with a reasoning parser), its message (unless it is
// calls alone) and its calls (function_call items), in the order the model wrote them.
ojson ResponseBody(const BatchRequest& req, const Choice& ch, const Usage& usage,
                   const std::string& request_id, int64_t created, const std::string& model) {
  const bool cut = ch.finish_reason == "length";
  const char* status = cut ? "incomplete" : "completed";
  const ojson echo =
      req.responses_echo.empty() ? ojson::object() : ojson::parse(req.responses_echo);
  auto echoed = [&](const char* key) { return echo.contains(key) ? echo.at(key) : ojson(nullptr); };
  ojson output = ojson::array();
  if (ch.reasoning_parsed && ch.reasoning_content)
    output.push_back(
        {{"id", ItemId("rs_", request_id, "reasoning")},
         {"type", "reasoning"},
         {"summary", ojson::array()},
         {"content", ojson::array({{{"type", "reasoning_text"}, {"text", *ch.reasoning_content}}})},
         {"status", cut && !ch.has_content ? "incomplete" : "completed"}});
  if (ch.has_content && (ch.tool_calls.empty() || !ch.text.empty())) {
    ojson text = {{"type", "output_text"}, {"text", ch.text}, {"annotations", ojson::array()}};
    if (req.logprobs >= 0) text["logprobs"] = ChatLogprobs(ch.logprobs).at("content");
    output.push_back({{"id", ItemId("msg_", request_id, "message")},
                      {"type", "message"},
                      {"status", ch.tool_calls.empty() ? status : "completed"},
                      {"role", "assistant"},
                      {"content", ojson::array({std::move(text)})}});
  }
  for (size_t k = 0; k < ch.tool_calls.size(); ++k) {
    const ToolCallOut& t = ch.tool_calls[k];
    output.push_back({{"id", ItemId("fc_", request_id, "call/" + std::to_string(k))},
                      {"type", "function_call"},
                      {"status", "completed"},
                      {"call_id", t.id},
                      {"name", t.name},
                      {"arguments", t.arguments}});
  }
  ojson b;
  b["id"] = ItemId("resp_", request_id, "response");
  b["object"] = "response";
  b["created_at"] = created;
  b["status"] = status;
  b["background"] = false;
  b["error"] = nullptr;
  b["incomplete_details"] = cut ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr);
  b["instructions"] = echoed("instructions");
  b["max_output_tokens"] = echoed("max_output_tokens");
  b["model"] = model;
  b["output"] = std::move(output);
  b["parallel_tool_calls"] = echo.value("parallel_tool_calls", true);
  b["previous_response_id"] = nullptr;
  b["reasoning"] = echoed("reasoning");
  b["temperature"] = echoed("temperature");
  b["text"] = echo.value("text", ojson{{"format", {{"type", "text"}}}});
  b["tool_choice"] = echo.value("tool_choice", ojson("none"));
  b["tools"] = echo.value("tools", ojson::array());
  b["top_logprobs"] = echoed("top_logprobs");
  b["top_p"] = echoed("top_p");
  b["truncation"] = "disabled";
  b["usage"] = {
      {"input_tokens", usage.prompt_tokens},
      // llmq does not count cache writes apart (every computed full block joins the prefix cache).
      {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}, {"cache_write_tokens", 0}}},
      {"output_tokens", usage.completion_tokens},
      {"output_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}},
      {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  b["metadata"] = echoed("metadata");
  b["access_programs"] = nullptr;
  return b;
}

}  // namespace

std::string TokenText(const std::string& bytes) {
  if (IsUtf8(bytes)) return bytes;
  std::string s = "bytes:";
  for (char c : bytes) {
    char h[5];
    std::snprintf(h, sizeof h, "\\x%02x", static_cast<unsigned char>(c));
    s += h;
  }
  return s;
}

std::string OutputCustomId(const std::string& custom_id, int64_t line) {
  return custom_id.empty() ? "line-" + std::to_string(line) : custom_id;
}

std::string ResponseRequestId(const std::string& request_id) {
  return "req_" + Sha256Hex(request_id).substr(0, 32);
}

std::string SuccessLine(const BatchRequest& req, const std::vector<Choice>& choices,
                        const Usage& usage, const std::string& request_id, int64_t created,
                        const std::string& model, const std::string& system_fingerprint) {
  const bool chat = req.endpoint == Endpoint::kChatCompletions;
  ojson body;
  if (req.endpoint == Endpoint::kResponses) {
    body = ResponseBody(req, choices.at(0), usage, request_id, created, model);
    return Line(req.custom_id, request_id, std::move(body));
  }
  body["id"] = (chat ? "chatcmpl-" : "cmpl-") + request_id;
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["created"] = created;
  body["model"] = model;
  ojson out_choices = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    ojson c;
    c["index"] = i;
    if (chat) {
      const Choice& ch = choices[i];
      c["message"] = {{"role", "assistant"}};
      c["message"]["content"] = ch.has_content && (ch.tool_calls.empty() || !ch.text.empty())
                                    ? ojson(ch.text)
                                    : ojson(nullptr);
      c["message"]["refusal"] = nullptr;
      if (!ch.tool_calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCallOut& t : ch.tool_calls)
          calls.push_back({{"id", t.id},
                           {"type", "function"},
                           {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        c["message"]["tool_calls"] = std::move(calls);
      }
      if (ch.reasoning_parsed)
        c["message"]["reasoning_content"] =
            ch.reasoning_content ? ojson(*ch.reasoning_content) : ojson(nullptr);
    } else {
      c["text"] = choices[i].text;
    }
    if (req.logprobs < 0) {
      c["logprobs"] = nullptr;
    } else {
      c["logprobs"] =
          chat ? ChatLogprobs(choices[i].logprobs) : CompletionLogprobs(choices[i].logprobs);
    }
    c["finish_reason"] = choices[i].finish_reason;
    out_choices.push_back(std::move(c));
  }
  body["choices"] = std::move(out_choices);
  ojson u;
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  u["completion_tokens_details"] = {{"reasoning_tokens", usage.reasoning_tokens},
                                    {"audio_tokens", 0},
                                    {"accepted_prediction_tokens", 0},
                                    {"rejected_prediction_tokens", 0}};
  body["usage"] = std::move(u);
  body["system_fingerprint"] =
      system_fingerprint.empty() ? ojson(nullptr) : ojson(system_fingerprint);
  return Line(req.custom_id, request_id, std::move(body));
}

std::string RefusedLine(const std::string& custom_id, int64_t line, const std::string& request_id,
                        const std::string& message, const std::string& param) {
  ojson error;
  error["message"] = message;
  error["type"] = "invalid_request_error";
  error["param"] = param.empty() ? ojson(nullptr) : ojson(param);
  error["code"] = nullptr;
  ojson response;
  response["status_code"] = 400;
  response["request_id"] = ResponseRequestId(request_id);
  response["body"] = {{"error", std::move(error)}};
  ojson out;
  out["id"] = request_id;
  out["custom_id"] = OutputCustomId(custom_id, line);
  out["response"] = std::move(response);
  out["error"] = nullptr;
  return Dump(out);
}

std::string ErrorLine(const std::string& custom_id, int64_t line, const std::string& request_id,
                      const std::string& code, const std::string& message) {
  ojson out;
  out["id"] = request_id;
  out["custom_id"] = OutputCustomId(custom_id, line);
  out["response"] = nullptr;
  out["error"] = {{"code", code}, {"message", message}};
  return Dump(out);
}

}  // namespace llmq::jobs
