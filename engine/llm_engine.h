// LlmEngine: add requests, step until done. One step = schedule -> run -> postprocess (sample,
// detokenize, check stops, fork n > 1 samples, finish).
//
// Offline planning: requests added since the last step form the pending window; with the planner
// on, the window is ordered by PlanPrefixes (depth-first over shared prompt prefixes) before it is
// queued, and each group's shared prefix blocks are pinned from the moment its first request has
// computed them until the group's last request is admitted. Not thread-safe: one thread drives it.
#pragma once

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/block_manager.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "engine/prefix_planner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/tokenizer.h"

namespace llmq {

struct EngineOptions {
  int block_size = 16;
  int num_blocks = 0;  // 0: from kv_memory_bytes
  int64_t kv_memory_bytes = int64_t{1} << 30;
  bool enable_prefix_cache = true;
  bool enable_planner = true;
  SchedulerOptions scheduler;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int peak_blocks_in_use = 0;
};

struct RequestState;

class LlmEngine {
 public:
  // `tokenizer` may be null (ids only: no text, no stop strings).
  LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
            const EngineOptions& opt);
  ~LlmEngine();
  // Queues a request. One that can never run (empty, too long for the context or the KV pool,
  // bad parameters) finishes at once with `error` set on the next Step().
  void Add(Request req);
  // Runs one step; returns the requests that finished in it.
  std::vector<RequestOutput> Step();
  bool HasWork() const;
  const BlockManager& blocks() const { return blocks_; }
  int num_blocks() const { return blocks_.num_blocks(); }
  // Tokens one sequence can ever hold: the context, or the KV pool if smaller.
  int max_sequence_tokens() const {
    return std::min(cfg_.max_position_embeddings, blocks_.num_blocks() * blocks_.block_size());
  }
  const EngineStats& stats() const { return stats_; }

 private:
  void PlanWindow();
  void UpdatePins(const ScheduleResult& r);
  bool ReleasePins();                            // true when any block was pinned
  int MaxLen(int prompt, int max_tokens) const;  // prompt + max_tokens, capped at the context
  bool Append(Sequence* s, int token);           // true when s is finished
  void FinishSeq(Sequence* s, std::vector<RequestOutput>* done);
  void Fork(Sequence* parent);  // the n - 1 other samples share its blocks
  std::unique_ptr<Sequence> NewSeq(RequestState* st, int index);

  ModelConfig cfg_;
  Backend* backend_;
  const Tokenizer* tok_;
  EngineOptions opt_;
  BlockManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  ScheduleResult sched_;
  EngineStats stats_;
  int64_t next_seq_id_ = 0;
  std::vector<std::unique_ptr<RequestState>> window_;  // added, not yet planned
  std::unordered_map<RequestState*, std::unique_ptr<RequestState>> live_;
  std::vector<RequestOutput> rejected_;
  std::vector<int32_t> eos_;

  // Pinning: the planned order of the current window and its groups.
  struct Group {
    PlanGroup g;
    std::vector<int32_t> pinned;  // blocks the engine holds a reference on
    bool done = false;
    uint32_t scan = 0;  // members before this position have all finished
  };
  std::vector<RequestState*> planned_;  // queue order; null once finished
  std::unordered_map<const RequestState*, uint32_t> position_;
  std::vector<Group> groups_;
  uint32_t next_to_admit_ = 0;  // first position of planned_ never admitted
};

// Blocks that `kv_memory_bytes` buys at fp32 K/V.
int KvBlocksFor(const ModelConfig& cfg, int64_t kv_memory_bytes, int block_size);

}  // namespace llmq
