// LlmEngine: add requests, step until done. One step = schedule -> run -> postprocess (sample,
// detokenize, check stops, finish). Not thread-safe: one thread drives it.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/block_manager.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/tokenizer.h"

namespace llmq {

struct EngineOptions {
  int block_size = 16;
  int num_blocks = 0;                       // 0: from kv_memory_bytes
  int64_t kv_memory_bytes = int64_t{1} << 30;
  SchedulerOptions scheduler;
};

class LlmEngine {
 public:
  // `tokenizer` may be null (ids only: no text, no stop strings).
  LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
            const EngineOptions& opt);
  // Queues a request. One that can never run (empty, too long for the context or the KV pool,
  // bad parameters) finishes at once with finish_reason "error" on the next Step().
  void Add(Request req);
  // Runs one step; returns the requests that finished in it.
  std::vector<RequestOutput> Step();
  bool HasWork() const { return scheduler_.HasWork() || !rejected_.empty(); }
  const BlockManager& blocks() const { return blocks_; }
  int num_blocks() const { return blocks_.num_blocks(); }

 private:
  // Appends a sampled token; returns true when the sequence is finished.
  bool Append(Sequence* s, int token);
  RequestOutput Finish(Sequence* s);

  ModelConfig cfg_;
  Backend* backend_;
  const Tokenizer* tok_;
  EngineOptions opt_;
  BlockManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::vector<std::unique_ptr<Sequence>> live_;
  std::vector<RequestOutput> rejected_;
  std::vector<int32_t> eos_;
};

// Blocks that `kv_memory_bytes` buys at fp32 K/V.
int KvBlocksFor(const ModelConfig& cfg, int64_t kv_memory_bytes, int block_size);

}  // namespace llmq
