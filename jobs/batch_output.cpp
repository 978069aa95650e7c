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

  ojson line;
  line["id"] = request_id;
  line["custom_id"] = req.custom_id;
  ojson response;
  response["status_code"] = 200;
  response["request_id"] = ResponseRequestId(request_id);
  response["body"] = std::move(body);
  line["response"] = std::move(response);
  line["error"] = nullptr;
  return Dump(line);
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
