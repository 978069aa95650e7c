// Output lines in the OpenAI Batch API shape (openai-openapi's BatchRequestOutput):
// {"id": "batch_req_…", "custom_id": "…", "response": {"status_code": 200, "request_id": "…",
//  "body": {chat.completion | text_completion | response object with usage}}, "error": null};
// for a line refused as OpenAI's API refuses a request (a bad field, a prompt too long, an
// unsupported feature), its HTTP 400 response: {"id": …, "custom_id": …, "response":
//  {"status_code": 400, "request_id": "…", "body": {"error": {"message": "…", "type":
//  "invalid_request_error", "param": "max_tokens" | null, "code": null}}}, "error": null};
// and for a failure outside HTTP (cancelled, the engine failed the request), {"id": …,
//  "custom_id": …, "response": null, "error": {"code": "…", "message": "…"}}.
// custom_id is always a string: a line whose own could not be read gets "line-<n>".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jobs/batch_request.h"

namespace llmq::jobs {

// A token as logprobs report it: its bytes (for a chosen token, the bytes it added to the text) and
// their text, TokenText(bytes).
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
  std::vector<ToolCallOut> tool_calls = {};
  // Chat with a reasoning parser (model.reasoning_parser): the message's thought, written as
  // message.reasoning_content (null when unset), and whether it has an answer (false: content
  // null). Without one neither is written and content is always `text`.
  bool reasoning_parsed = false;
  std::optional<std::string> reasoning_content = {};
  bool has_content = true;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all n choices
  int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache
  // Completion tokens of the thought, over all n choices (a reasoning parser's; else 0): written
  // as completion_tokens_details.reasoning_tokens, as OpenAI counts its reasoning models'.
  int64_t reasoning_tokens = 0;
};

// A token's bytes as logprobs name them: the bytes themselves when they are valid UTF-8, else
// OpenAI's spelling of raw bytes, "bytes:" and \xNN (two lowercase hex digits) per byte, e.g.
// "bytes:\xe2\x80" for a token holding the first two bytes of "…" (so that tokens holding
// different parts of characters keep distinct names).
std::string TokenText(const std::string& bytes);

// The custom_id an output line carries: the line's own, or "line-<n>" (n the 1-based line number)
// when it had none that could be read (`custom_id` empty: invalid JSON, not an object, a missing
// or non-string custom_id).
std::string OutputCustomId(const std::string& custom_id, int64_t line);

// One successful output line (no trailing newline). `request_id` is unique per line (the line's
// "id"; response.request_id is "req_" + 32 hex digits of its SHA-256, distinct from it); `created`
// is unix seconds; `system_fingerprint` (null when empty) names the build and the model's files.
// Text that is not valid UTF-8 is written with U+FFFD replacements. With req.logprobs >= 0 each
// choice's "logprobs" is OpenAI's shape: chat {"content": [{token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}], "refusal": null}; completions {tokens, token_logprobs,
// top_logprobs: [{token: logprob}] (the top req.logprobs and the chosen token), text_offset (code
// points of the text before each token: a character split over several tokens counts at the first;
// a token named "bytes:..." adds its bytes)}. Each chosen token's bytes are the bytes it added to
// the text, so that its tokens' bytes, joined, are the text (request_builder.h, TokenPieces).
// A /v1/responses line (one choice) gets a Response object: "id": "resp_…", "object": "response",
// "status": "completed", or "incomplete" with incomplete_details {"reason": "max_output_tokens"}
// when max_output_tokens (or the context) cut it; "output": a reasoning item (its thought, with a
// reasoning parser), a message item ({"type": "message", "role": "assistant", "content":
// [{"type": "output_text", "text", "annotations": [], "logprobs" (with include
// message.output_text.logprobs, the chat shape's entries)}]}, left out when the output is calls
// alone) and a function_call item per call ({"call_id": the chat id "call_…", "name",
// "arguments"}); usage as input_tokens / output_tokens with their details; the rest repeats the
// request (BatchRequest::responses_echo). Item ids ("msg_", "fc_", "rs_" and 32 hex digits) are
// derived from `request_id`, so the same in a resumed run.
std::string SuccessLine(const BatchRequest& req, const std::vector<Choice>& choices,
                        const Usage& usage, const std::string& request_id, int64_t created,
                        const std::string& model, const std::string& system_fingerprint = "");

// response.request_id of the line whose id is `request_id`.
std::string ResponseRequestId(const std::string& request_id);

// The output line of a line refused as OpenAI's API refuses a request: its HTTP 400 response
// (above). `param`: the field at fault as OpenAI names it (the body's field path, "max_tokens",
// "messages[1].role"; a field of the line itself: "custom_id", "url", "method", "body"); "" writes
// null (no single field: invalid JSON, a prompt the KV cache cannot hold). `custom_id` may be
// empty (unknown: written as OutputCustomId(custom_id, line)).
std::string RefusedLine(const std::string& custom_id, int64_t line, const std::string& request_id,
                        const std::string& message, const std::string& param);

// Codes of the failures outside HTTP (top-level "error").
inline constexpr const char* kCancelledCode = "batch_cancelled";  // as OpenAI's cancelled batches
inline constexpr const char* kEngineErrorCode = "engine_error";   // the engine failed the request

// The output line of a request that failed outside HTTP: "response": null, "error": {code,
// message}. `custom_id` may be empty (written as OutputCustomId(custom_id, line)).
std::string ErrorLine(const std::string& custom_id, int64_t line, const std::string& request_id,
                      const std::string& code, const std::string& message);

}  // namespace llmq::jobs
