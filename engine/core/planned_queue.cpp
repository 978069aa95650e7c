#include "engine/core/planned_queue.h"

#include <algorithm>
#include <iterator>
#include <numeric>

namespace llmq {

using Phase = PlannedQueue::Entry::Phase;

namespace {

// A planner's order must be a permutation of the window: it comes from EngineOptions::planner.
Status CheckPermutation(const std::vector<uint32_t>& order, size_t n) {
  std::vector<bool> seen(n);
  for (uint32_t i : order) {
    if (i >= seen.size() || seen[i]) return Status::Internal("order is not a permutation");
    seen[i] = true;
  }
  if (order.size() != n) return Status::Internal("order is not a permutation");
  return Status::Ok();
}

}  // namespace

PlannedQueue::PlannedQueue(BlockManager* blocks, bool enable_planner, Planner planner)
    : blocks_(blocks), enable_planner_(enable_planner), planner_(std::move(planner)) {}

void PlannedQueue::Add(Entry* e) {
  e->phase = Phase::kWindow;
  window_.push_back(e);
}

PlannedQueue::Entry* PlannedQueue::At(uint64_t position) const {
  if (position < planned_base_ || position >= planned_base_ + planned_.size()) return nullptr;
  return planned_[position - planned_base_];
}

Status PlannedQueue::PlanWindow() {
  if (window_.empty()) return Status::Ok();
  Status status;
  for (size_t begin = 0, end = 0; begin < window_.size(); begin = end) {
    end = begin + 1;
    while (end < window_.size() && window_[end]->segment == window_[begin]->segment) ++end;
    if (Status st = PlanRun(begin, end); !st.ok() && status.ok()) status = st;
  }
  window_.clear();
  return status;
}

Status PlannedQueue::PlanRun(size_t begin, size_t end) {
  const size_t n = end - begin;
  Status status;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  const uint64_t base = planned_base_ + planned_.size();
  const int block_size = blocks_->block_size();
  if (enable_planner_ && n > 1) {
    std::vector<std::span<const int32_t>> prompts;
    std::vector<Group> groups;
    // std::bad_alloc while planning (a huge window) fails the plan as an error the planner
    // returns does: no exception leaves PlanWindow.
    try {
      prompts.reserve(n);
      for (size_t i = begin; i < end; ++i) prompts.push_back(window_[i]->prompt);
      StatusOr<Plan> plan =
          planner_ ? planner_(prompts, block_size) : PlanPrefixes(prompts, block_size);
      status = plan.ok() ? CheckPermutation(plan->order, n) : plan.status();
      if (status.ok()) {
        if (blocks_->prefix_cache_enabled())
          for (const PlanGroup& g : plan->groups)
            groups.push_back({g.begin + base, g.end + base, g.shared_tokens, {}, false, 0});
        // UpdatePins stops at the first group not yet reached: keep them sorted by `begin` (the
        // planner emits parents before children, so this is already so; stable keeps it so).
        std::stable_sort(groups.begin(), groups.end(),
                         [](const Group& a, const Group& b) { return a.begin < b.begin; });
        order = std::move(plan->order);
        groups_.insert(groups_.end(), std::make_move_iterator(groups.begin()),
                       std::make_move_iterator(groups.end()));
      }
    } catch (const std::exception& e) {
      status = Status::Internal(e.what());
    }
    if (!status.ok())
      status =
          Status::Internal("planner: " + status.message() + "; a window of " + std::to_string(n) +
                           " requests runs in arrival order, without pins");
  }
  for (uint32_t i : order) {
    Entry* e = window_[begin + i];
    e->phase = Phase::kQueued;
    e->position = planned_base_ + planned_.size();
    planned_.push_back(e);
    ++num_queued_;
  }
  return status;
}

PlannedQueue::Entry* PlannedQueue::Materialize() {
  // Positions dropped from the front are all admitted or holes.
  materialized_ = std::max(materialized_, planned_base_);
  const uint64_t end = planned_base_ + planned_.size();
  while (materialized_ < end) {
    Entry* e = At(materialized_++);
    if (e) return e;  // else removed while queued
  }
  return nullptr;
}

void PlannedQueue::Admitted(Entry* e) {
  e->phase = Phase::kAdmitted;
  --num_queued_;
  ++num_admitted_;
  next_to_admit_ = std::max(next_to_admit_, e->position + 1);
}

void PlannedQueue::UpdatePins() {
  // Admission follows the queue, so every live position below the latest admitted one was
  // admitted too. Holes (removed before admission) must not hold the mark back: a group whose last
  // members were cancelled would keep its pin forever.
  const uint64_t end = planned_base_ + planned_.size();
  while (next_to_admit_ < end && !At(next_to_admit_)) ++next_to_admit_;

  // Groups are in non-decreasing `begin` order: those not reached yet (and all after them) need
  // nothing. The reached ones that are not done enclose next_to_admit_, so there are few (one per
  // level of nesting).
  const int block_size = blocks_->block_size();
  uint64_t keep_from = next_to_admit_;  // planned_ entries before it are read by nobody
  size_t reached = 0;
  for (; reached < groups_.size() && groups_[reached].begin < next_to_admit_; ++reached) {
    Group& grp = groups_[reached];
    if (grp.done) continue;
    if (next_to_admit_ >= grp.end) {  // every member admitted: each holds its own references
      for (int32_t b : grp.pinned) blocks_->Unref(b);
      grp.pinned.clear();
      grp.done = true;
      continue;
    }
    if (!grp.pinned.empty()) continue;
    // Pin once a running member has computed the shared prefix.
    // Members that finished stay finished: skip them once, so a step never rescans them.
    grp.scan = std::max(grp.scan, grp.begin);
    while (grp.scan < next_to_admit_ && !At(grp.scan)) ++grp.scan;
    keep_from = std::min(keep_from, grp.scan);
    for (uint64_t p = grp.scan; p < next_to_admit_; ++p) {
      const Entry* e = At(p);
      if (!e) continue;  // finished
      const Sequence* s = e->lead;
      if (s->status != SeqStatus::kRunning || s->num_registered * block_size < grp.shared_tokens)
        continue;
      // The pins are the queue's own references: the engine's CheckInvariants counts them
      // (CountPins) next to the sequences' block tables, and only this function and ReleasePins
      // drop them.
      const int nb = grp.shared_tokens / block_size;
      for (int i = 0; i < nb; ++i) {
        blocks_->Ref(s->block_table[i]);
        grp.pinned.push_back(s->block_table[i]);
      }
      break;
    }
  }
  groups_.erase(std::remove_if(groups_.begin(), groups_.begin() + reached,
                               [](const Group& g) { return g.done; }),
                groups_.begin() + reached);
  while (!planned_.empty() && planned_base_ < keep_from) {
    planned_.pop_front();
    ++planned_base_;
  }
}

bool PlannedQueue::ReleasePins() {
  bool any = false;
  for (Group& g : groups_) {
    for (int32_t b : g.pinned) blocks_->Unref(b);
    any = any || !g.pinned.empty();
    g.pinned.clear();
  }
  return any;
}

void PlannedQueue::Remove(Entry* e) {
  switch (e->phase) {
    case Phase::kWindow:
      window_.erase(std::find(window_.begin(), window_.end(), e));
      return;
    case Phase::kQueued:
      --num_queued_;
      break;
    case Phase::kAdmitted:
      --num_admitted_;
      break;
  }
  // A planned slot turns into a hole; Materialize and UpdatePins step over holes.
  if (At(e->position) == e) planned_[e->position - planned_base_] = nullptr;
}

void PlannedQueue::CountPins(std::vector<int>* refs) const {
  for (const Group& g : groups_)
    for (int32_t b : g.pinned) ++(*refs)[b];
}

Status PlannedQueue::CheckInvariants() const {
  auto fail = [](std::string m) { return Status::Internal(std::move(m)); };
  for (const Entry* e : window_)
    if (e->phase != Phase::kWindow) return fail("a window entry is not in phase kWindow");
  size_t queued = 0;
  for (size_t i = 0; i < planned_.size(); ++i) {
    const Entry* e = planned_[i];
    if (!e) continue;
    const uint64_t p = planned_base_ + i;
    const std::string at = "position " + std::to_string(p) + ": ";
    if (e->position != p) return fail(at + "entry says position " + std::to_string(e->position));
    if (p < next_to_admit_ && e->phase != Phase::kAdmitted)
      return fail(at + "not admitted, yet before next_to_admit " + std::to_string(next_to_admit_));
    if (p >= next_to_admit_ && e->phase != Phase::kQueued)
      return fail(at + "not queued, yet from next_to_admit " + std::to_string(next_to_admit_));
    queued += e->phase == Phase::kQueued;
    if ((p < materialized_) != (e->lead != nullptr))
      return fail(at + (e->lead ? "a lead sequence past" : "no lead sequence before") +
                  " the materialized mark " + std::to_string(materialized_));
  }
  if (queued != num_queued_)
    return fail(std::to_string(num_queued_) + " queued counted, " + std::to_string(queued) +
                " in the queue");
  const int block_size = blocks_->block_size();
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Group& g = groups_[i];
    if (i > 0 && g.begin < groups_[i - 1].begin) return fail("groups out of begin order");
    if (g.pinned.empty()) continue;
    if (g.done || g.begin >= next_to_admit_ || next_to_admit_ >= g.end)
      return fail("a group holds pins outside its admission");
    if (static_cast<int>(g.pinned.size()) != g.shared_tokens / block_size)
      return fail("a group pins " + std::to_string(g.pinned.size()) + " blocks for " +
                  std::to_string(g.shared_tokens) + " shared tokens");
  }
  return Status::Ok();
}

}  // namespace llmq
