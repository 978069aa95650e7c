#include "jobs/batch_output.h"

#include <nlohmann/json.hpp>

namespace llmq::jobs {
namespace {

using ojson = nlohmann::ordered_json;

// Compact, UTF-8 kept as is, invalid bytes written as U+FFFD (never throws on bad text).
std::string Dump(const ojson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, ojson::error_handler_t::replace);
}

}  // namespace

std::string SuccessLine(const BatchRequest& req, const std::vector<Choice>& choices,
                        const Usage& usage, const std::string& request_id, int64_t created,
                        const std::string& model) {
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
      c["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    } else {
      c["text"] = choices[i].text;
    }
    c["logprobs"] = nullptr;
    c["finish_reason"] = choices[i].finish_reason;
    out_choices.push_back(std::move(c));
  }
  body["choices"] = std::move(out_choices);
  ojson u;
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  body["usage"] = std::move(u);

  ojson line;
  line["id"] = request_id;
  line["custom_id"] = req.custom_id;
  ojson response;
  response["status_code"] = 200;
  response["request_id"] = request_id;
  response["body"] = std::move(body);
  line["response"] = std::move(response);
  line["error"] = nullptr;
  return Dump(line);
}

std::string ErrorLine(const std::string& custom_id, const std::string& request_id,
                      const std::string& message) {
  ojson line;
  line["id"] = request_id;
  line["custom_id"] = custom_id.empty() ? ojson(nullptr) : ojson(custom_id);
  line["response"] = nullptr;
  line["error"] = {{"code", "invalid_request"}, {"message", message}};
  return Dump(line);
}

}  // namespace llmq::jobs
