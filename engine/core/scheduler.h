// Scheduler: continuous batching under a token budget per step (max_num_batched_tokens) and a
// sequence cap (max_num_seqs), with chunked prefill. Each step: decode tokens of running
// sequences first, then prefill chunks of running sequences, then newly admitted sequences in
// queue order. A sequence is admitted only when the blocks for its tokens fit; when a decode needs
// a block and none is left, the most recently admitted sequence is preempted (its blocks freed —
// its cached full blocks may hit again — and it is recomputed later, first in the queue). Queue
// order is never overtaken, so no request starves. Not thread-safe: owned by the step loop.
#pragma once

#include <deque>
#include <vector>

#include "engine/core/block_manager.h"
#include "engine/core/sequence.h"

namespace llmq {

struct SchedulerOptions {
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 256;
};

struct ScheduledSeq {
  Sequence* seq;
  int num_tokens;  // tokens of seq computed in this step, from seq->num_computed on
};

struct ScheduleResult {
  std::vector<ScheduledSeq> seqs;
  std::vector<std::pair<int, int>> copies;  // KV blocks to copy (src, dst) before running
  std::vector<Sequence*> preempted;
  std::vector<Sequence*> admitted;  // admitted in this step (first time or again)
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& opt, BlockManager* blocks) : opt_(opt), blocks_(blocks) {}
  void Add(Sequence* seq) { waiting_.push_back(seq); }
  // A sequence that starts out running (a fork sharing its parent's blocks). Forks are not held
  // to max_num_seqs: the n samples of an admitted request always run together.
  void AddRunning(Sequence* seq);
  // Plans one step; `out` is cleared first. Empty when there is nothing to run.
  void Schedule(ScheduleResult* out);
  // Drops a finished sequence from the running set and frees its blocks.
  void Finish(Sequence* seq);
  // Drops a sequence that is waiting or running (cancelled, failed) and frees its blocks.
  void Remove(Sequence* seq);
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  const std::vector<Sequence*>& running() const { return running_; }

 private:
  void Preempt(Sequence* seq, ScheduleResult* out);

  SchedulerOptions opt_;
  BlockManager* blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
};

}  // namespace llmq
