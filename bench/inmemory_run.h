// The pre-queue, in-memory `llmq run` path (formerly daemon/batch_runner.{h,cpp}), kept ONLY as
// the baseline of bench/queue_bench: it is not part of the binary and nothing else uses it. Its
// behaviour is the removed code's; only the engine API it calls was brought up to date
// (LlmEngine::Create, Status Step(std::vector<RequestOutput>*)).
//
// BatchRunner: the bridge from a job file (jobs/) to the engine (engine/) and back, used by
// `llmq run` (and later by the daemon): parse every line, turn the good ones into engine requests
// (chat template, tokenization, limits), run the whole file as one planned window, and write one
// output line per input line, in input order.
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "engine/text/chat_template.h"

namespace llmq::bench {

struct BatchRunOptions {
  std::string input;       // OpenAI Batch JSONL
  std::string output;      // one line per input line (errors in place, as vLLM's run_batch)
  std::string errors;      // when set, error lines go here instead (OpenAI's split)
  std::string model_name;  // echoed in responses when a line names none
  ChatTemplate chat_template = ChatTemplate::kLlama2;
  EngineOptions engine;
  bool progress = false;  // a progress line on stderr
};

struct BatchSummary {
  int64_t requests = 0, failed = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, computed_prompt_tokens = 0;
  int64_t completion_tokens = 0, preemptions = 0;
  double wall_seconds = 0, output_tokens_per_second = 0;
  double ttft_p50 = 0, ttft_p95 = 0, latency_p50 = 0, latency_p95 = 0;
  std::string ToJson() const;
  std::string ToText() const;
};

// Runs the file. A bad line becomes an error line naming line and field; only an unreadable input,
// an unwritable output or similar fails the whole run.
Status RunBatchFile(const Model& model, const BatchRunOptions& opt, BatchSummary* summary);

}  // namespace llmq::bench
