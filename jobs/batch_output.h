// Output lines in the OpenAI Batch API shape:
// {"id": "batch_req_…", "custom_id": "…", "response": {"status_code": 200, "request_id": "…",
//  "body": {chat.completion | text_completion object with usage}}, "error": null}
// and, for a refused line, {"id": …, "custom_id": …, "response": null,
//  "error": {"code": "invalid_request", "message": "…"}}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobs/batch_request.h"

namespace llmq::jobs {

// A token as logprobs report it: its text (its bytes, invalid UTF-8 as U+FFFD) and its bytes.
struct LogprobToken {
  std::string token;
  std::string bytes;
  double logprob = 0.0;  // -inf is written as -9999.0 (as OpenAI and vLLM do)
};

// One generated token's log-probability and the most likely tokens of its position.
struct TokenLogprob {
  LogprobToken chosen;
  std::vector<LogprobToken> top;  // logprob descending
};

// A tool call of an assistant message (issue 25).
struct ToolCallOut {
  std::string id;         // "call_..."
  std::string name;       // the function's
  std::string arguments;  // a JSON object's text
};

struct Choice {
  std::string text;                    // the completion (assistant message content for chat)
  std::string finish_reason;           // "stop" | "length" | "tool_calls"
  std::vector<TokenLogprob> logprobs;  // one per completion token when req.logprobs >= 0
  // Chat: the message's calls, as message.tool_calls; with calls an empty `text` is written as
  // content null (OpenAI's shape).
  std::vector<ToolCallOut> tool_calls;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all n choices
  int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache
};

// One successful output line (no trailing newline). `request_id` is unique per line (the line's
// "id"; response.request_id is "req_" + 32 hex digits of its SHA-256, distinct from it); `created`
// is unix seconds; `system_fingerprint` (null when empty) names the build and the model's files.
// Text that is not valid UTF-8 is written with U+FFFD replacements. With req.logprobs >= 0 each
// choice's "logprobs" is OpenAI's shape: chat {"content": [{token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}], "refusal": null}; completions {tokens, token_logprobs,
// top_logprobs: [{token: logprob}] (the top req.logprobs and the chosen token), text_offset (code
// points of the tokens' texts before each)}.
std::string SuccessLine(const BatchRequest& req, const std::vector<Choice>& choices,
                        const Usage& usage, const std::string& request_id, int64_t created,
                        const std::string& model, const std::string& system_fingerprint = "");

// response.request_id of the line whose id is `request_id`.
std::string ResponseRequestId(const std::string& request_id);

// One error output line for a refused or failed request. `custom_id` may be empty (unknown).
std::string ErrorLine(const std::string& custom_id, const std::string& request_id,
                      const std::string& message);

}  // namespace llmq::jobs
