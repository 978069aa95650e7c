// Request / Sequence: what was asked, and the live state of one generation.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/tokenizer.h"

namespace llmq {

using Clock = std::chrono::steady_clock;

struct Request {
  std::string id;
  std::vector<int32_t> prompt_ids;  // BOS included when the model asks for it
  SamplingParams params;
};

struct RequestOutput {
  std::string id;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> completion_ids;  // ends with the stop token when one stopped it
  std::string text;                     // the completion's text, stop token / string excluded
  std::string finish_reason;            // "stop" or "length"; "error" with `error` set
  std::string error;
  int cached_prompt_tokens = 0;
  double queue_seconds = 0, ttft_seconds = 0, total_seconds = 0;
};

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  Request req;
  std::vector<int32_t> tokens;      // prompt + completion so far
  int num_prompt = 0;
  int num_computed = 0;             // tokens whose K/V are in the cache
  int max_len = 0;                  // prompt + the completion budget (never past the context)
  std::vector<int32_t> block_table; // physical block of each logical block
  SeqStatus status = SeqStatus::kWaiting;
  Rng rng;
  std::unique_ptr<IncrementalDecoder> detok;  // null when no tokenizer is attached
  std::string text;                           // completion text released so far
  std::string finish_reason;
  bool stopped_by_string = false;
  Clock::time_point arrival, first_token;

  int num_completion() const { return static_cast<int>(tokens.size()) - num_prompt; }
  // Tokens still to run through the model: the prompt's rest in prefill, 1 in decode.
  int pending() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace llmq
