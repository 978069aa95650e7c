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

struct Choice {
  std::string text;           // the completion (assistant message content for chat)
  std::string finish_reason;  // "stop" | "length"
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all n choices
  int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache
};

// One successful output line (no trailing newline). `request_id` is unique per line; `created` is
// unix seconds. Text that is not valid UTF-8 is written with U+FFFD replacements.
std::string SuccessLine(const BatchRequest& req, const std::vector<Choice>& choices,
                        const Usage& usage, const std::string& request_id, int64_t created,
                        const std::string& model);

// One error output line for a refused or failed request. `custom_id` may be empty (unknown).
std::string ErrorLine(const std::string& custom_id, const std::string& request_id,
                      const std::string& message);

}  // namespace llmq::jobs
