// White-box tests of the planned queue, without an engine or a model: fake requests with token ids
// and lead sequences that a real BlockManager gives blocks, as the engine's steps would. Planning
// order, holes after a removal, materialization, admission and the groups' pins taken and
// released, each followed by CheckInvariants.
#include "engine/core/planned_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <stdexcept>

#include "engine/sampling/sampler.h"

namespace llmq {
namespace {

constexpr int kBs = 4;  // block size of every test here

using Phase = PlannedQueue::Entry::Phase;

struct FakeRequest : PlannedQueue::Entry {
  std::vector<int32_t> tokens;
  Sequence seq;  // the lead sequence, once materialized
};

std::vector<int32_t> Range(int from, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class PlannedQueueTest : public ::testing::Test {
 protected:
  FakeRequest* Add(PlannedQueue* q, std::vector<int32_t> tokens) {
    auto r = std::make_unique<FakeRequest>();
    r->tokens = std::move(tokens);
    r->prompt = r->tokens;
    q->Add(r.get());
    reqs_.push_back(std::move(r));
    return reqs_.back().get();
  }
  // n requests with distinct prompts, planned.
  std::vector<FakeRequest*> Planned(PlannedQueue* q, int n) {
    std::vector<FakeRequest*> rs;
    for (int i = 0; i < n; ++i) rs.push_back(Add(q, Range(100 * i, 6)));
    EXPECT_TRUE(q->PlanWindow().ok());
    return rs;
  }
  // Materialize's next entry, given its lead sequence as the engine does.
  FakeRequest* Next(PlannedQueue* q) {
    auto* r = static_cast<FakeRequest*>(q->Materialize());
    if (!r) return nullptr;
    r->seq.seq_id = next_seq_id_++;
    r->seq.tokens = r->tokens;
    r->seq.num_prompt = static_cast<int>(r->tokens.size());
    r->lead = &r->seq;
    return r;
  }
  // The scheduler admits r (its blocks from the pool, prefix hits included) for the first time.
  // False (and no change) when the pool has no room or a block r needs is in flight.
  bool TryAdmit(PlannedQueue* q, FakeRequest* r) {
    std::vector<std::pair<int, int>> copies;
    if (blocks_.Allocate(&r->seq, 0, &copies) != BlockManager::Admit::kOk) return false;
    blocks_.CopiesDone();
    r->seq.status = SeqStatus::kRunning;
    q->Admitted(r);
    return true;
  }
  void Admit(PlannedQueue* q, FakeRequest* r) { ASSERT_TRUE(TryAdmit(q, r)); }
  // A step computed r's whole prompt: its full blocks enter the prefix cache.
  void Compute(FakeRequest* r) {
    r->seq.num_computed = static_cast<int>(r->tokens.size());
    blocks_.MarkComputed(&r->seq);
  }
  // r finished (or was cancelled): its blocks go back, its position becomes a hole.
  void Finish(PlannedQueue* q, FakeRequest* r) {
    blocks_.Release(&r->seq);
    r->seq.status = SeqStatus::kFinished;
    q->Remove(r);
  }
  void Check(const PlannedQueue& q) {
    const Status queue = q.CheckInvariants();
    EXPECT_TRUE(queue.ok()) << queue.message();
    const Status blocks = blocks_.CheckInvariants();
    EXPECT_TRUE(blocks.ok()) << blocks.message();
    // Every reference is a live lead's block table entry or a pin.
    std::vector<int> refs(blocks_.num_blocks(), 0);
    for (const auto& r : reqs_)
      for (int32_t b : r->seq.block_table) ++refs[b];
    q.CountPins(&refs);
    for (int b = 0; b < blocks_.num_blocks(); ++b)
      EXPECT_EQ(refs[b], blocks_.ref_count(b)) << "block " << b;
  }
  static int Pins(const PlannedQueue& q, int num_blocks) {
    std::vector<int> refs(num_blocks, 0);
    q.CountPins(&refs);
    return std::accumulate(refs.begin(), refs.end(), 0);
  }

  BlockManager blocks_{64, kBs};
  std::vector<std::unique_ptr<FakeRequest>> reqs_;
  int64_t next_seq_id_ = 0;
};

TEST_F(PlannedQueueTest, PlansTheWindowGroupByGroupAndLaterWindowsAfterIt) {
  PlannedQueue q(&blocks_, true);
  const std::vector<int32_t> sys = Range(100, 8), t1 = Range(200, 8), t2 = Range(300, 8);
  FakeRequest* a = Add(&q, Cat(Cat(sys, t1), Range(1000, 3)));
  FakeRequest* b = Add(&q, Cat(Cat(sys, t2), Range(2000, 3)));
  FakeRequest* c = Add(&q, Cat(Cat(sys, t1), Range(3000, 3)));
  EXPECT_EQ(q.num_window(), 3u);
  EXPECT_EQ(q.Materialize(), nullptr);  // nothing is queued before the window is planned
  ASSERT_TRUE(q.PlanWindow().ok());
  EXPECT_EQ(q.num_window(), 0u);
  EXPECT_EQ(q.num_queued(), 3u);
  // The two requests under t1 are neighbours, and a (first seen) leads.
  EXPECT_EQ(a->position + 1, c->position);
  EXPECT_EQ(b->position, a->position == 0 ? 2u : 0u);
  for (FakeRequest* r : {a, b, c}) EXPECT_EQ(r->phase, Phase::kQueued);
  // A later window queues after everything planned before.
  FakeRequest* d = Add(&q, Cat(Cat(sys, t1), Range(4000, 3)));
  ASSERT_TRUE(q.PlanWindow().ok());
  EXPECT_EQ(d->position, 3u);
  EXPECT_EQ(q.At(d->position), d);
  Check(q);
}

// Segments (the daemon's jobs) keep their order: the planner groups within each, never across,
// so that a job's last requests do not wait behind a larger subtree of the next job's. Groups
// and pins still form within a segment.
TEST_F(PlannedQueueTest, SegmentsKeepTheirOrderAndArePlannedEachOnItsOwn) {
  PlannedQueue q(&blocks_, true);
  const std::vector<int32_t> sys = Range(100, 8), t1 = Range(200, 8), t2 = Range(300, 8);
  std::vector<FakeRequest*> first, second;
  // Segment 1: two under t2 around one under t1; segment 2: three under t1 (the larger subtree
  // over the whole window, which unsegmented planning would put first).
  for (const auto& tail : {t2, t1, t2}) {
    first.push_back(Add(&q, Cat(Cat(sys, tail), Range(1000 + 10 * first.size(), 3))));
    first.back()->segment = 1;
  }
  for (int i = 0; i < 3; ++i) {
    second.push_back(Add(&q, Cat(Cat(sys, t1), Range(2000 + 10 * i, 3))));
    second.back()->segment = 2;
  }
  ASSERT_TRUE(q.PlanWindow().ok());
  for (FakeRequest* r : first) EXPECT_LT(r->position, 3u) << "segment 1 first";
  for (FakeRequest* r : second) EXPECT_GE(r->position, 3u);
  // Within segment 1, the two under t2 are neighbours and the first seen leads.
  EXPECT_EQ(first[0]->position, 0u);
  EXPECT_EQ(first[2]->position, 1u);
  EXPECT_EQ(first[1]->position, 2u);
  // The groups of both segments pin their shared blocks as their leads compute them.
  FakeRequest* lead = Next(&q);
  ASSERT_EQ(lead, first[0]);
  Admit(&q, lead);
  Compute(lead);
  q.UpdatePins();
  EXPECT_GT(Pins(q, blocks_.num_blocks()), 0);
  Check(q);
}

TEST_F(PlannedQueueTest, WithoutThePlannerOrABadPlanTheWindowRunsInArrivalOrder) {
  PlannedQueue off(&blocks_, false);
  std::vector<FakeRequest*> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(Add(&off, Cat(Range(100, 8), Range(1000 * i, 2))));
  ASSERT_TRUE(off.PlanWindow().ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rs[i]->position, static_cast<uint64_t>(i));

  PlannedQueue bad(&blocks_, true, [](const std::vector<std::span<const int32_t>>& p, int) {
    Plan plan;
    plan.order.assign(p.size(), 0);  // not a permutation
    return plan;
  });
  std::vector<FakeRequest*> bs;
  for (int i = 0; i < 3; ++i) bs.push_back(Add(&bad, Cat(Range(100, 8), Range(1000 * i, 2))));
  const Status st = bad.PlanWindow();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("arrival order"), std::string::npos) << st.message();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bs[i]->position, static_cast<uint64_t>(i));
  EXPECT_EQ(Pins(bad, blocks_.num_blocks()), 0);

  PlannedQueue fails(&blocks_, true,
                     [](const std::vector<std::span<const int32_t>>&, int) -> StatusOr<Plan> {
                       return Status::Internal("boom");
                     });
  for (int i = 0; i < 2; ++i) Add(&fails, Range(10 * i, 5));
  EXPECT_NE(fails.PlanWindow().message().find("boom"), std::string::npos);
  EXPECT_EQ(fails.num_queued(), 2u);
  Check(fails);
}

TEST_F(PlannedQueueTest, MaterializeHandsOutTheQueueInOrderOneAtATimeSkippingHoles) {
  PlannedQueue q(&blocks_, false);
  const std::vector<FakeRequest*> rs = Planned(&q, 5);
  EXPECT_EQ(Next(&q), rs[0]);
  Check(q);
  // Cancelled while queued, before or after being handed out: a hole, stepped over.
  q.Remove(rs[1]);
  q.Remove(rs[0]);
  EXPECT_EQ(q.At(1), nullptr);
  EXPECT_EQ(q.num_queued(), 3u);
  EXPECT_EQ(Next(&q), rs[2]);
  EXPECT_EQ(Next(&q), rs[3]);
  Check(q);
  // Only as many as asked for: the rest stay bare (no lead) until the next call.
  EXPECT_EQ(rs[4]->lead, nullptr);
  EXPECT_EQ(Next(&q), rs[4]);
  EXPECT_EQ(q.Materialize(), nullptr);
  EXPECT_EQ(q.Materialize(), nullptr);
  // A request removed from the window never reaches the queue.
  FakeRequest* w = Add(&q, Range(900, 6));
  q.Remove(w);
  EXPECT_EQ(q.num_window(), 0u);
  ASSERT_TRUE(q.PlanWindow().ok());
  EXPECT_EQ(q.Materialize(), nullptr);
  Check(q);
}

TEST_F(PlannedQueueTest, AdmissionFollowsTheQueueAndFinishedEntriesAreDropped) {
  PlannedQueue q(&blocks_, false);
  const std::vector<FakeRequest*> rs = Planned(&q, 4);
  for (int i = 0; i < 2; ++i) Admit(&q, Next(&q));
  q.UpdatePins();
  EXPECT_EQ(q.num_admitted(), 2u);
  EXPECT_EQ(q.num_queued(), 2u);
  EXPECT_EQ(q.next_to_admit(), 2u);
  EXPECT_EQ(rs[1]->phase, Phase::kAdmitted);
  Check(q);
  // Admitted entries are read by nobody: dropped from the front (without groups).
  EXPECT_EQ(q.first_held(), 2u);
  EXPECT_EQ(q.At(0), nullptr);
  Finish(&q, rs[0]);
  EXPECT_EQ(q.num_admitted(), 1u);
  // Queued entries removed at the front move the admission mark past them.
  Next(&q);
  q.Remove(rs[2]);
  q.Remove(rs[3]);
  q.UpdatePins();
  EXPECT_EQ(q.next_to_admit(), 4u);
  EXPECT_EQ(q.num_queued(), 0u);
  EXPECT_EQ(q.bookkeeping_size(), 0u);
  Check(q);
}

// One group of three requests sharing two full blocks (8 tokens), then a request outside it.
class PlannedQueuePinTest : public PlannedQueueTest {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) g_.push_back(Add(&q_, Cat(shared_, Range(1000 * (i + 1), 3))));
    other_ = Add(&q_, Range(5000, 11));
    ASSERT_TRUE(q_.PlanWindow().ok());
    for (int i = 0; i < 3; ++i) ASSERT_EQ(g_[i]->position, static_cast<uint64_t>(i));
  }
  // The group's first member, admitted and computed: the group is pinned.
  FakeRequest* PinnedByFirst() {
    FakeRequest* a = Next(&q_);
    Admit(&q_, a);
    Compute(a);
    q_.UpdatePins();
    EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 2);
    return a;
  }
  const std::vector<int32_t> shared_ = Range(100, 2 * kBs);
  PlannedQueue q_{&blocks_, true};
  std::vector<FakeRequest*> g_;
  FakeRequest* other_ = nullptr;
};

TEST_F(PlannedQueuePinTest, PinsTheSharedBlocksOnceComputedUntilEveryMemberWasAdmitted) {
  FakeRequest* a = Next(&q_);
  Admit(&q_, a);
  q_.UpdatePins();
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 0) << "not computed yet: nothing to pin";
  Check(q_);
  Compute(a);
  q_.UpdatePins();
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 2);
  EXPECT_EQ(blocks_.ref_count(a->seq.block_table[0]), 2);
  EXPECT_EQ(blocks_.ref_count(a->seq.block_table[1]), 2);
  EXPECT_EQ(blocks_.ref_count(a->seq.block_table[2]), 1);  // a's own block is not pinned
  Check(q_);
  // a finishes before its group's other members were admitted: the pins keep its shared blocks
  // in use, so the next member hits them whatever else the pool needs meanwhile.
  const int32_t shared0 = a->seq.block_table[0], shared1 = a->seq.block_table[1];
  Finish(&q_, a);
  EXPECT_EQ(blocks_.ref_count(shared0), 1);
  Check(q_);
  FakeRequest* b = Next(&q_);
  Admit(&q_, b);
  q_.UpdatePins();
  EXPECT_EQ(b->seq.block_table[0], shared0);
  EXPECT_EQ(b->seq.block_table[1], shared1);
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 2) << "c is still to be admitted";
  Check(q_);
  FakeRequest* c = Next(&q_);
  Admit(&q_, c);
  q_.UpdatePins();
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 0) << "every member admitted: each holds its own";
  EXPECT_EQ(blocks_.ref_count(shared0), 2);
  Check(q_);
}

TEST_F(PlannedQueuePinTest, AGroupWhoseLastMembersAreCancelledLetsGoOfItsPins) {
  PinnedByFirst();
  Next(&q_);
  q_.Remove(g_[1]);
  q_.Remove(g_[2]);
  q_.UpdatePins();
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 0);
  EXPECT_EQ(q_.next_to_admit(), 3u);
  Check(q_);
}

TEST_F(PlannedQueuePinTest, ReleasePinsDropsThemAndAPreemptedMemberIsNotPinnedFrom) {
  FakeRequest* a = PinnedByFirst();
  EXPECT_TRUE(q_.ReleasePins());
  EXPECT_FALSE(q_.ReleasePins());
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 0);
  Check(q_);
  // Preempted (its blocks freed, waiting again): no pin is taken from its (empty) table.
  blocks_.Release(&a->seq);
  a->seq.status = SeqStatus::kWaiting;
  a->seq.num_computed = 0;
  q_.UpdatePins();
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 0);
  Check(q_);
  // Re-admitted and recomputed (it hits its own cached blocks): pinned again.
  std::vector<std::pair<int, int>> copies;
  ASSERT_EQ(blocks_.Allocate(&a->seq, 0, &copies), BlockManager::Admit::kOk);
  blocks_.CopiesDone();
  a->seq.status = SeqStatus::kRunning;
  Compute(a);
  q_.UpdatePins();
  EXPECT_EQ(Pins(q_, blocks_.num_blocks()), 2);
  Check(q_);
}

// Random windows, admissions in queue order, computes, finishes and cancels in any phase: the
// invariants hold after every operation, and when everything is done nothing is pinned or held.
TEST_F(PlannedQueueTest, RandomOperationsKeepTheInvariants) {
  int steps_pinned = 0;  // the operations after which some group held pins
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    reqs_.clear();
    Rng rng(seed);
    PlannedQueue q(&blocks_, true);
    std::vector<std::vector<int32_t>> heads;
    for (int h = 0; h < 3; ++h) heads.push_back(Range(100 * (h + 1), 4 + h * 3));
    std::vector<FakeRequest*> live, admitted;
    auto pick = [&](std::vector<FakeRequest*>& v) -> FakeRequest* {
      if (v.empty()) return nullptr;
      const size_t i = rng.NextU64() % v.size();
      FakeRequest* r = v[i];
      v.erase(v.begin() + i);
      return r;
    };
    int made = 0;
    std::vector<FakeRequest*> materialized;  // handed out, not yet admitted, in order
    for (int op = 0; op < 400; ++op) {
      switch (rng.NextU64() % 6) {
        case 0:  // a request joins the window
          if (made < 60) {
            const auto& h = heads[rng.NextU64() % heads.size()];
            live.push_back(Add(&q, Cat(h, Range(1000 * ++made, 1 + rng.NextU64() % 6))));
          }
          break;
        case 1:
          ASSERT_TRUE(q.PlanWindow().ok());
          break;
        case 2:  // the scheduler admits the next handed-out one if the pool has room
          if (materialized.size() < 3)
            if (FakeRequest* r = Next(&q)) materialized.push_back(r);
          if (!materialized.empty() && TryAdmit(&q, materialized.front())) {
            admitted.push_back(materialized.front());
            materialized.erase(materialized.begin());
          }
          q.UpdatePins();
          break;
        case 3:  // an admitted one computes its prompt
          if (!admitted.empty()) Compute(admitted[rng.NextU64() % admitted.size()]);
          q.UpdatePins();
          break;
        case 4:  // one finishes
          if (FakeRequest* r = pick(admitted)) {
            live.erase(std::find(live.begin(), live.end(), r));
            Finish(&q, r);
          }
          break;
        case 5:  // one is cancelled, in whatever phase
          if (FakeRequest* r = pick(live)) {
            if (auto it = std::find(admitted.begin(), admitted.end(), r); it != admitted.end())
              admitted.erase(it);
            if (auto it = std::find(materialized.begin(), materialized.end(), r);
                it != materialized.end())
              materialized.erase(it);
            Finish(&q, r);
          }
          break;
      }
      Check(q);
      if (HasFailure()) return;
      steps_pinned += Pins(q, blocks_.num_blocks()) > 0;
    }
    for (FakeRequest* r : live) Finish(&q, r);
    q.UpdatePins();
    EXPECT_EQ(Pins(q, blocks_.num_blocks()), 0) << "seed " << seed;
    EXPECT_EQ(q.bookkeeping_size(), 0u) << "seed " << seed;
    EXPECT_EQ(blocks_.num_in_use(), 0) << "seed " << seed;
    Check(q);
  }
  EXPECT_GT(steps_pinned, 400) << "the operations hardly ever pinned a group";
}

}  // namespace
}  // namespace llmq
