#include "engine/core/scheduler.h"

#include <algorithm>

namespace llmq {

void Scheduler::AddRunning(Sequence* seq) {
  seq->status = SeqStatus::kRunning;
  running_.push_back(seq);
}

void Scheduler::Preempt(Sequence* seq, ScheduleResult* out) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_->Release(seq);
  seq->num_computed = 0;
  seq->status = SeqStatus::kWaiting;
  waiting_.push_front(seq);
  out->preempted.push_back(seq);
}

void Scheduler::Schedule(ScheduleResult* out) {
  out->seqs.clear();
  out->copies.clear();
  out->preempted.clear();
  out->admitted.clear();
  int budget = opt_.max_num_batched_tokens;
  // Decode tokens first; each needs a slot, and taking one may preempt from the back.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->pending() != 1) continue;
    bool self_preempted = false;
    while (!blocks_->AppendSlot(s, &out->copies)) {
      Sequence* victim = running_.back();
      Preempt(victim, out);
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // s was the last running sequence
    out->seqs.push_back({s, 1});
    --budget;
  }
  // Prefills under way continue in chunks.
  for (Sequence* s : running_)
    if (s->pending() > 1 && budget > 0) {
      const int n = std::min(s->pending(), budget);
      out->seqs.push_back({s, n});
      budget -= n;
    }
  // Admit in queue order while the budget, the sequence cap and the pool allow; not in a step
  // that had to preempt (the pool is short right now).
  const int reserve = std::max(1, blocks_->num_blocks() / 100);
  while (out->preempted.empty() && !waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(opt_.max_num_seqs)) {
    Sequence* s = waiting_.front();
    // A lone sequence may use the whole pool: the engine refused any that could never fit.
    if (blocks_->Allocate(s, running_.empty() ? 0 : reserve, &out->copies) !=
        BlockManager::Admit::kOk)
      break;
    waiting_.pop_front();
    s->status = SeqStatus::kRunning;
    running_.push_back(s);
    out->admitted.push_back(s);
    const int n = std::min(s->pending(), budget);
    out->seqs.push_back({s, n});
    budget -= n;
  }
}

void Scheduler::Remove(Sequence* seq) {
  if (seq->status == SeqStatus::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
    blocks_->Release(seq);  // a waiting sequence holds none; Release also forgets in-flight hashes
    seq->status = SeqStatus::kFinished;
  } else if (seq->status == SeqStatus::kRunning) {
    Finish(seq);
  }
}

void Scheduler::Finish(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_->Release(seq);
  seq->status = SeqStatus::kFinished;
}

}  // namespace llmq
