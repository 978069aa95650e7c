// PlannedQueue: the engine's requests from Add to admission. Requests added since the last step
// form the window; PlanWindow orders it (PlanPrefixes, depth-first over shared prompt prefixes,
// when the planner is on) and appends it to the queue; the engine creates Sequences only for the
// queue's head (Materialize), as the scheduler can admit them; the scheduler admits them in
// queue order (Admitted). Each planned group's shared prefix blocks are pinned (an extra reference
// in the BlockManager) from the moment a running member has computed them until every member was
// admitted, so that the group's later members hit them in the prefix cache however long the group
// runs.
//
// Positions count every request ever planned; a request keeps its position for life. A request
// that finishes or is cancelled leaves a hole at its position (Remove): the queue and the groups
// step over holes, and entries are dropped from the front once nobody reads them.
//
// Invariants (CheckInvariants):
//   - every live entry of the queue sits at its own position; each entry is in exactly one phase
//     (window, queued, admitted) and the counts agree;
//   - admission follows the queue: live entries before next_to_admit() are admitted, those from it
//     on are queued (so num_queued() = the live entries from next_to_admit() on);
//   - live entries before the materialized mark have a lead sequence, those after it have none;
//   - groups are in non-decreasing `begin` order; a group holds pins only while some member is
//     still to be admitted (begin < next_to_admit() < end), and then on exactly its shared blocks.
// Not thread-safe: owned by the engine's step loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/core/block_manager.h"
#include "engine/core/prefix_planner.h"
#include "engine/core/sequence.h"

namespace llmq {

class PlannedQueue {
 public:
  // What the queue holds of a request; the engine's RequestState extends it. The queue never owns
  // entries: the caller keeps each alive until Remove.
  struct Entry {
    enum class Phase { kWindow, kQueued, kAdmitted };
    Phase phase = Phase::kWindow;
    uint64_t position = 0;  // in planned order (valid from kQueued on)
    // The prompt the planner orders by; read only while in the window.
    std::span<const int32_t> prompt;
    // The window is planned one run of consecutive entries of equal segment at a time: entries
    // of different segments keep their order (Request::plan_segment).
    uint64_t segment = 0;
    // The sequence that runs the prompt, set by the caller when Materialize hands the entry out;
    // pins are taken from its block table once it has computed a group's shared prefix.
    const Sequence* lead = nullptr;
  };
  using Planner =
      std::function<StatusOr<Plan>(const std::vector<std::span<const int32_t>>&, int block_size)>;

  // `planner` null: PlanPrefixes; `enable_planner` false: arrival order, no groups. Groups are
  // pinned only when `blocks` has its prefix cache on (a pin keeps nothing reusable otherwise).
  PlannedQueue(BlockManager* blocks, bool enable_planner, Planner planner = nullptr);
  PlannedQueue(const PlannedQueue&) = delete;
  PlannedQueue& operator=(const PlannedQueue&) = delete;

  // Adds `e` (phase kWindow) to the window.
  void Add(Entry* e);
  // Orders the window and appends it to the queue, with its groups: each run of consecutive
  // entries of one segment is planned on its own, runs stay in arrival order. Non-OK when the
  // planner failed (an error, no permutation, std::bad_alloc): that run is queued in arrival
  // order, without groups.
  Status PlanWindow();
  // The next live queued entry past those already handed out, in planned order; null when there
  // is none. The caller sets its `lead` and hands that sequence to the scheduler.
  Entry* Materialize();
  // `e` was admitted by the scheduler for the first time (admission is in queue order).
  void Admitted(Entry* e);
  // After a step's admissions: releases the pins of groups whose members were all admitted, and
  // pins each group whose shared prefix a running member has computed (registered in the cache).
  void UpdatePins();
  // Drops every pin (pins are an optimisation: the engine calls this rather than let them stall
  // admission). True when any block was pinned.
  bool ReleasePins();
  // `e` finished or was cancelled, in whatever phase: it leaves the window, or turns into a hole.
  void Remove(Entry* e);

  // The live entry at `position`; null for a hole or a position no longer (or not yet) held.
  Entry* At(uint64_t position) const;
  size_t num_window() const { return window_.size(); }
  size_t num_queued() const { return num_queued_; }      // planned, never admitted
  size_t num_admitted() const { return num_admitted_; }  // admitted, not yet removed
  uint64_t next_to_admit() const { return next_to_admit_; }
  // Positions before it are no longer held (all admitted or holes; At says null).
  uint64_t first_held() const { return planned_base_; }
  // Entries in the queue's own containers: bounded by what is in flight.
  size_t bookkeeping_size() const { return window_.size() + planned_.size() + groups_.size(); }
  // Adds one to (*refs)[b] for each pin on block b (the engine's reference accounting).
  void CountPins(std::vector<int>* refs) const;
  // The invariants above; O(queue + groups). For tests. Internal saying which on a violation.
  Status CheckInvariants() const;

 private:
  struct Group {
    uint64_t begin, end;  // positions of its members
    int32_t shared_tokens;
    std::vector<int32_t> pinned;  // blocks the queue holds a reference on
    bool done = false;
    uint64_t scan = 0;  // members before this position have all finished
  };
  // Plans window_[begin, end) (one segment) and appends it to the queue with its groups.
  Status PlanRun(size_t begin, size_t end);

  BlockManager* blocks_;
  bool enable_planner_;
  Planner planner_;
  std::vector<Entry*> window_;  // added, not yet planned
  // The queue in planned order: planned_[i] is position planned_base_ + i, null once removed.
  std::deque<Entry*> planned_;
  uint64_t planned_base_ = 0;
  uint64_t materialized_ = 0;   // positions before it were handed out (or are holes)
  uint64_t next_to_admit_ = 0;  // every position before it was admitted or is a hole
  size_t num_queued_ = 0, num_admitted_ = 0;
  // In non-decreasing `begin` order: UpdatePins stops at the first group not reached yet.
  std::deque<Group> groups_;
};

}  // namespace llmq
