// Scheduler: continuous batching under a token budget per step (max_num_batched_tokens) and a
// sequence cap (max_num_seqs), with chunked prefill. Decode tokens go first, then prefill chunks
// of running sequences, then newly admitted ones in arrival order (FCFS: nobody is overtaken, so
// nobody starves). A sequence is admitted only when blocks for its whole length fit in the pool.
// Not thread-safe: owned by the engine's step loop.
#pragma once

#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace llmq {

struct SchedulerOptions {
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 256;
};

struct ScheduledSeq {
  Sequence* seq;
  int num_tokens;  // tokens of seq computed in this step, from seq->num_computed on
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& opt, BlockManager* blocks) : opt_(opt), blocks_(blocks) {}
  void Add(Sequence* seq) { waiting_.push_back(seq); }
  // Plans one step. Empty when there is nothing to run.
  std::vector<ScheduledSeq> Schedule();
  // Drops a finished sequence from the running set and frees its blocks.
  void Finish(Sequence* seq);
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }

 private:
  SchedulerOptions opt_;
  BlockManager* blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
};

}  // namespace llmq
