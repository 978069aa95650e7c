#include "engine/scheduler.h"

#include <algorithm>

namespace llmq {

std::vector<ScheduledSeq> Scheduler::Schedule() {
  std::vector<ScheduledSeq> out;
  int budget = opt_.max_num_batched_tokens;
  // Decode tokens first: one each, they keep the batch's throughput.
  for (Sequence* s : running_)
    if (s->pending() == 1 && budget > 0) out.push_back({s, 1}), --budget;
  // Prefills already under way continue in chunks.
  for (Sequence* s : running_)
    if (s->pending() > 1 && budget > 0) {
      const int n = std::min(s->pending(), budget);
      out.push_back({s, n});
      budget -= n;
    }
  // Admit in arrival order while the budget, the sequence cap and the pool allow.
  while (!waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(opt_.max_num_seqs)) {
    Sequence* s = waiting_.front();
    if (!blocks_->Reserve(s, s->max_len)) break;
    waiting_.pop_front();
    s->status = SeqStatus::kRunning;
    running_.push_back(s);
    const int n = std::min(s->pending(), budget);
    out.push_back({s, n});
    budget -= n;
  }
  return out;
}

void Scheduler::Finish(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_->Release(seq);
  seq->status = SeqStatus::kFinished;
}

}  // namespace llmq
