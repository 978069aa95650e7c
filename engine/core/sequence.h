// Request / Sequence: what was asked, and the live state of one generation.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"
#include "engine/structured/matcher.h"
#include "engine/text/tokenizer.h"

namespace llmq {

using Clock = std::chrono::steady_clock;

struct Request {
  std::string id;                   // unique among the engine's unfinished requests
  std::vector<int32_t> prompt_ids;  // BOS included when the model asks for it
  SamplingParams params;            // no seed: the engine uses DefaultSeed("", id)
  int n = 1;                        // parallel samples; they share the prompt's KV blocks
  // The planner reorders the requests added together (for shared prefixes) only among those of
  // one segment; segments keep the order they were added in. The daemon gives each job its own,
  // so that a job's last requests never wait behind the next job's.
  uint64_t plan_segment = 0;
  // When the request arrived (e.g. when its job was accepted), by the engine's time source
  // (EngineOptions::time); unset: the time of Add.
  std::optional<Clock::time_point> arrival;
  // Structured outputs (issue 24): the grammar every sample's text must follow (null: none),
  // shared by every request with the same schema. Each token is drawn under its mask
  // (engine/core/grammar_masks.h); a sample ends "stop" when its document is complete and EOS is
  // drawn, or when the document admits no continuation; EOS is honoured there even with
  // ignore_eos. Needs the engine's tokenizer; min_tokens must be 0.
  std::shared_ptr<CompiledGrammar> grammar;
  // With a trigger the grammar is lazy (tool_choice "auto", issue 25): a sample is free until the
  // bytes of its tokens (Tokenizer::TokenBytes: control tokens' text included) contain
  // `grammar_trigger` (with grammar_trigger_at_start: begin with it); from the trigger's first
  // byte on they must follow the grammar, which begins with the trigger. A sample whose bytes
  // after the trigger (in the token that completed it) the grammar refuses goes on free. Empty:
  // the grammar applies from the first token.
  std::string grammar_trigger;
  bool grammar_trigger_at_start = false;
  // With it (a reasoning model's "</think>"), the trigger is looked for only in the bytes after
  // the first occurrence of these: a trigger inside the thought is text. Not with
  // grammar_trigger_at_start. Empty: from the first token.
  std::string grammar_trigger_after;
};

struct Completion {
  std::vector<int32_t> ids;   // ends with the stop token when one stopped it
  std::string text;           // stop token / stop string excluded
  std::string finish_reason;  // "stop" | "length"
  // One per id when params.logprobs >= 0 (the stop token's too), else empty.
  std::vector<TokenLogprobs> logprobs;
  // Where the grammar took over: the index in `ids` of the token whose bytes hold its first byte
  // (a lazy grammar's trigger), and that byte's offset in them; 0, 0 for a grammar from the first
  // token; -1 when there is no grammar or a lazy one never took over.
  int grammar_from_token = -1;
  int grammar_from_byte = 0;
  // One per logprobs entry: the byte of `text` where that id's text begins, so that id i added
  // text[text_begin[i], text_begin[i + 1]) (the last one up to text.size()). Non-decreasing, at
  // most text.size(). An id that added nothing (a control id, a stop id, a byte held back until
  // its character completes, anything past a stop string) begins where the next one does.
  std::vector<int32_t> text_begin;
};

struct RequestMetrics {
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;    // taken from the prefix cache when first admitted
  int computed_prompt_tokens = 0;  // run through the model (recomputation after preemption too)
  int completion_tokens = 0;       // over all n samples
  int preemptions = 0;
  double queue_seconds = 0;  // arrival -> first admitted
  double ttft_seconds = 0;   // first admitted -> first token
  // Mean gap between consecutive tokens after the first, averaged over the samples that have two
  // tokens or more; 0 when none has.
  double itl_seconds = 0;
  double total_seconds = 0;  // arrival -> finished (last sample, cancelled or failed)
};

struct RequestOutput {
  std::string id;
  std::vector<Completion> completions;  // n, by sample index; empty when !ok()
  // Non-empty: the request did not complete: refused when added, "cancelled", or
  // "backend: <message>" when a step it ran in failed.
  std::string error;
  bool cancelled = false;  // Cancel()ed (error is "cancelled")
  RequestMetrics metrics;
  bool ok() const { return error.empty(); }
};

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct RequestState;  // llm_engine.cpp: the n samples of one request

struct Sequence {
  int64_t seq_id = 0;
  RequestState* owner = nullptr;
  int sample_index = 0;
  const SamplingParams* params = nullptr;
  std::vector<int32_t> tokens;  // prompt + completion so far
  int num_prompt = 0;
  int num_computed = 0;                // tokens whose K/V are in the cache
  int max_len = 0;                     // prompt + the completion budget (never past the context)
  std::vector<int32_t> block_table;    // physical block of each logical block
  std::vector<uint64_t> block_hashes;  // identity hash of each full block, as far as computed
  int num_registered = 0;              // leading blocks known to the prefix cache
  std::vector<uint64_t> in_flight;     // hashes of blocks this sequence is computing for the cache
  SeqStatus status = SeqStatus::kWaiting;
  bool ever_admitted = false;
  Rng rng;
  std::unique_ptr<IncrementalDecoder> detok;  // null when no tokenizer is attached
  std::unique_ptr<Matcher> matcher;           // Request::grammar's state after its tokens
  // A lazy grammar waiting for its trigger: the completion's last bytes (those a trigger may
  // still begin in; before `trigger_armed`, those Request::grammar_trigger_after may), which start
  // at byte `trigger_base` of the completion.
  bool trigger_waiting = false;
  bool trigger_armed = true;  // grammar_trigger_after came (or there is none)
  std::string trigger_bytes;
  size_t trigger_base = 0;
  int grammar_from_token = -1;  // Completion::grammar_from_token / _byte
  int grammar_from_byte = 0;
  std::string text;  // completion text released so far
  std::string finish_reason;
  std::vector<TokenLogprobs> logprobs;  // one per completion token when params->logprobs >= 0
  std::vector<int32_t> text_begin;      // per logprobs entry: text.size() before its token
  bool stopped_by_string = false;
  Clock::time_point last_token_at;  // when its latest token was sampled
  double token_gaps_seconds = 0;    // sum of the gaps between its tokens after the first

  int num_completion() const { return static_cast<int>(tokens.size()) - num_prompt; }
  // Tokens still to run through the model: the prompt's rest in prefill, 1 in decode.
  int pending() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace llmq
