// White-box tests of the block manager: reference counts, the prefix cache (full blocks and
// token-granular partial reuse by copy), eviction order and the in-flight rule, each followed by
// CheckInvariants.
#include "engine/core/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace llmq {
namespace {

constexpr int kBs = 4;  // block size of every test here

class BlockManagerTest : public ::testing::Test {
 protected:
  // A waiting sequence over `tokens`.
  Sequence* Seq(std::vector<int32_t> tokens) {
    auto s = std::make_unique<Sequence>();
    s->seq_id = static_cast<int64_t>(seqs_.size());
    s->tokens = std::move(tokens);
    s->num_prompt = static_cast<int>(s->tokens.size());
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }
  // Admits s and marks its prompt computed, as a step would; the copies it needed are done.
  void Compute(BlockManager* bm, Sequence* s) {
    copies_.clear();
    ASSERT_EQ(bm->Allocate(s, 0, &copies_), BlockManager::Admit::kOk);
    bm->CopiesDone();
    s->num_computed = static_cast<int>(s->tokens.size());
    bm->MarkComputed(s);
    Check(*bm);
  }
  static void Check(const BlockManager& bm) {
    const Status st = bm.CheckInvariants();
    EXPECT_TRUE(st.ok()) << st.message();
  }
  static std::vector<int32_t> Range(int from, int n) {
    std::vector<int32_t> v(n);
    std::iota(v.begin(), v.end(), from);
    return v;
  }
  static std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::vector<std::pair<int, int>> copies_;
};

TEST_F(BlockManagerTest, FullBlocksHitAndTheLastTokenIsAlwaysComputed) {
  BlockManager bm(16, kBs);
  Sequence* a = Seq(Range(100, 12));  // three full blocks
  Compute(&bm, a);
  EXPECT_EQ(bm.num_cached(), 3u);
  Sequence* b = Seq(Range(100, 12));  // the same prompt: two blocks hit, the third holds the last
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->block_table[0], a->block_table[0]);
  EXPECT_EQ(b->block_table[1], a->block_table[1]);
  // The third block is reused partially: its first 3 tokens by copy, the 12th is computed.
  EXPECT_NE(b->block_table[2], a->block_table[2]);
  EXPECT_EQ(b->num_computed, 11);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0], std::make_pair(a->block_table[2], b->block_table[2]));
  EXPECT_EQ(bm.ref_count(a->block_table[0]), 2);
  bm.CopiesDone();
  Check(bm);
  bm.Release(b);
  bm.Release(a);
  EXPECT_EQ(bm.num_in_use(), 0);
  Check(bm);
}

// Freed blocks are taken again most recently freed first, before any block never used, so the
// pool memory touched (num_touched) grows only with the blocks live (or cached) at once.
TEST_F(BlockManagerTest, FreedBlocksAreReusedMostRecentlyFreedFirst) {
  BlockManager bm(64, kBs, /*enable_prefix_cache=*/false);
  EXPECT_EQ(bm.num_touched(), 0);
  Sequence* a = Seq(Range(100, 10));  // three blocks
  Compute(&bm, a);
  Sequence* b = Seq(Range(200, 6));  // two blocks
  Compute(&bm, b);
  EXPECT_EQ(bm.num_touched(), 5);
  const std::vector<int32_t> a_blocks = a->block_table, b_blocks = b->block_table;
  bm.Release(a);
  bm.Release(b);  // freed last (its last block first): its first block is on top of the free list
  std::vector<int32_t> want = b_blocks;
  want.insert(want.end(), a_blocks.begin(), a_blocks.end());
  Sequence* c = Seq(Range(300, 20));  // five blocks: exactly the five freed ones
  Compute(&bm, c);
  EXPECT_EQ(c->block_table, want);
  EXPECT_EQ(bm.num_touched(), 5);
  Sequence* d = Seq(Range(400, 4));  // a sixth live block: the first never used
  Compute(&bm, d);
  EXPECT_EQ(bm.num_touched(), 6);
  // Many short sequences one after the other touch one block each time, the same one.
  bm.Release(c);
  bm.Release(d);
  for (int i = 0; i < 20; ++i) {
    Sequence* e = Seq(Range(1000 + 4 * i, 3));
    Compute(&bm, e);
    EXPECT_EQ(e->block_table[0], d->block_table[0]);
    bm.Release(e);
  }
  EXPECT_EQ(bm.num_touched(), 6);
  Check(bm);
}

TEST_F(BlockManagerTest, PromptsDivergingInsideABlockShareItsLeadingTokensByCopy) {
  BlockManager bm(16, kBs);
  const std::vector<int32_t> shared = Range(1, 6);  // one full block + 2 tokens of the next
  Sequence* a = Seq(Cat(shared, Range(50, 6)));
  Compute(&bm, a);
  Sequence* b = Seq(Cat(shared, Range(80, 6)));
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->block_table[0], a->block_table[0]);  // the full block: shared
  EXPECT_EQ(b->num_computed, 6);                    // + the 2 shared tokens of block 1
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, a->block_table[1]);
  EXPECT_EQ(copies_[0].second, b->block_table[1]);
  EXPECT_EQ(b->num_registered, 1);
  // The source is held until the copy ran, on top of a's reference.
  EXPECT_EQ(bm.ref_count(a->block_table[1]), 2);
  EXPECT_EQ(bm.num_copy_holds(), 1);
  bm.CopiesDone();
  EXPECT_EQ(bm.ref_count(a->block_table[1]), 1);
  EXPECT_EQ(bm.num_copy_holds(), 0);
  // b's own block 1 enters the cache once b computed it; a's stays too (different tokens).
  b->num_computed = static_cast<int>(b->tokens.size());
  bm.MarkComputed(b);
  EXPECT_EQ(bm.num_cached(), 5u);  // a's 3 + b's blocks 1 and 2 (block 0 is a's)
  Check(bm);
}

TEST_F(BlockManagerTest, TheLongestSharedStartWins) {
  BlockManager bm(32, kBs);
  const std::vector<int32_t> head = Range(1, 4);
  Compute(&bm, Seq(Cat(head, {7, 90, 91, 92, 93})));  // shares 1 token of block 1 with c
  Sequence* b = Seq(Cat(head, {7, 8, 9, 60, 61}));    // shares 3
  Compute(&bm, b);
  Sequence* c = Seq(Cat(head, {7, 8, 9, 10, 11}));
  copies_.clear();
  ASSERT_EQ(bm.Allocate(c, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(c->num_computed, 7);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, b->block_table[1]);
  bm.CopiesDone();
  Check(bm);
}

TEST_F(BlockManagerTest, ADifferentFirstBlockSharesNothingOfTheBlocksAfterIt) {
  BlockManager bm(16, kBs);
  Compute(&bm, Seq(Cat(Range(1, 4), Range(20, 8))));
  // Block 1 starts with the same tokens, but block 0 differs: nothing is reused.
  Sequence* b = Seq(Cat(Range(2, 4), Range(20, 3)));
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(copies_.empty());
  bm.CopiesDone();
  Check(bm);
}

TEST_F(BlockManagerTest, NoPartialReuseWithTheCacheOff) {
  BlockManager bm(16, kBs, /*enable_prefix_cache=*/false);
  Compute(&bm, Seq(Range(1, 10)));
  Sequence* b = Seq(Range(1, 7));
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(copies_.empty());
  Check(bm);
}

TEST_F(BlockManagerTest, TheCopySourceIsNeverEvictedBeforeItsCopyRan) {
  // 5 blocks. a and then d compute 2 each and finish: their blocks are cached and unreferenced,
  // on the LRU in the order a1 a0 d1 d0 (a sequence's tail first); one block is free.
  BlockManager bm(5, kBs);
  Sequence* a = Seq(Range(1, 8));
  Compute(&bm, a);
  const int32_t a0 = a->block_table[0], a1 = a->block_table[1];
  bm.Release(a);
  Sequence* d = Seq(Range(300, 8));
  Compute(&bm, d);
  const int32_t d1 = d->block_table[1];
  bm.Release(d);
  EXPECT_EQ(bm.num_available(), 5);
  // b shares block 0 and 2 tokens of block 1 and needs 4 new blocks; a0 (a hit) and a1 (the
  // copy's source) are held, so only 3 can be taken: no space, and nothing is held.
  Sequence* b = Seq(Cat(Range(1, 6), Range(40, 12)));
  EXPECT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kNoSpace);
  EXPECT_TRUE(copies_.empty());
  EXPECT_EQ(bm.num_copy_holds(), 0);
  Check(bm);
  // c needs 2 new blocks: the free one, then an eviction. a1 is the least recently used block,
  // but it is held as the source: d1 is evicted instead.
  Sequence* c = Seq(Cat(Range(1, 6), Range(40, 4)));
  ASSERT_EQ(bm.Allocate(c, 0, &copies_), BlockManager::Admit::kOk);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, a1);
  EXPECT_EQ(c->block_table[0], a0);
  EXPECT_EQ(c->num_computed, 6);
  EXPECT_EQ(std::count(c->block_table.begin(), c->block_table.end(), a1), 0);
  EXPECT_EQ(std::count(c->block_table.begin(), c->block_table.end(), d1), 1);
  Check(bm);
  // After the copy the source is let go, still cached: it serves the next sequence too.
  bm.CopiesDone();
  EXPECT_EQ(bm.ref_count(a1), 0);
  Check(bm);
  copies_.clear();
  Sequence* e = Seq(Cat(Range(1, 7), {99}));
  ASSERT_EQ(bm.Allocate(e, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(e->num_computed, 7);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, a1);
  bm.CopiesDone();
  Check(bm);
}

TEST_F(BlockManagerTest, AnEvictedBlockIsNoLongerOfferedForPartialReuse) {
  BlockManager bm(3, kBs);
  Sequence* a = Seq(Range(1, 8));
  Compute(&bm, a);
  bm.Release(a);  // a's 2 blocks: cached, on the LRU; 1 block free
  // A different prompt takes all 3 blocks: the free one, then both of a's.
  Sequence* other = Seq(Range(200, 12));
  Compute(&bm, other);
  bm.Release(other);
  Check(bm);
  Sequence* b = Seq(Range(1, 6));
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(copies_.empty());
  bm.CopiesDone();
  Check(bm);
}

// A cached block enters the token-granular index only when an admission looks under its parent:
// a completion's or a document's blocks, never looked under, never cost their kBs-1 entries.
TEST_F(BlockManagerTest, CachedBlocksAreIndexedOnlyWhenLookedUnder) {
  BlockManager bm(32, kBs);
  Sequence* a = Seq(Range(1, 12));  // a0 a1 a2, each pending under its parent
  Compute(&bm, a);
  EXPECT_EQ(bm.num_cached(), 3u);
  EXPECT_EQ(bm.num_prefix_entries(), 0u);
  // b hits a0 and looks under it: a1 is indexed (and serves 2 tokens), a2 still waits.
  Sequence* b = Seq(Cat(Range(1, 6), Range(50, 3)));
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->num_computed, 6);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, a->block_table[1]);
  EXPECT_EQ(bm.num_prefix_entries(), static_cast<size_t>(kBs - 1));
  bm.CopiesDone();
  Check(bm);
  // A prompt that starts like no first block looks under none of them: first blocks are indexed
  // (a0, and nothing else is a first block), a1's children still wait.
  Sequence* c = Seq(Range(1, 2));
  ASSERT_EQ(bm.Allocate(c, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(c->num_computed, 1);  // a0's first token, copied
  EXPECT_EQ(bm.num_prefix_entries(), static_cast<size_t>(2 * (kBs - 1)));
  bm.CopiesDone();
  Check(bm);
}

// A pending block whose parent takes new content is orphaned: unreachable, never indexed.
TEST_F(BlockManagerTest, APendingBlockWhoseParentIsEvictedIsNeverIndexed) {
  BlockManager bm(4, kBs);
  Sequence* a = Seq(Range(1, 12));
  Compute(&bm, a);
  const int32_t a0 = a->block_table[0], a2 = a->block_table[2];
  bm.Release(a);                         // LRU: a2 a1 a0 (the tail first); one block free
  bm.Ref(a2);                            // pinned: a1 is now the least recently used
  Sequence* other = Seq(Range(200, 8));  // the free block, then a1 (a2's parent) is evicted
  Compute(&bm, other);
  bm.Unref(a2);
  Check(bm);  // a2: cached, its parent's content gone, neither indexed nor pending
  EXPECT_EQ(bm.num_cached(), 4u);  // a0, a2 and other's two
  // d hits a0 and looks under it (a1 left its list when evicted); nothing of a2 is offered.
  Sequence* d = Seq(Range(1, 11));
  ASSERT_EQ(bm.Allocate(d, 0, &copies_), BlockManager::Admit::kNoSpace);  // 2 needed, 1 evictable
  bm.Release(other);
  ASSERT_EQ(bm.Allocate(d, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(d->block_table[0], a0);
  EXPECT_EQ(d->num_computed, 4);
  EXPECT_TRUE(copies_.empty());
  Check(bm);
}

TEST_F(BlockManagerTest, ABlockInFlightIsWaitedForNotComputedTwice) {
  BlockManager bm(16, kBs);
  Sequence* a = Seq(Range(1, 9));
  ASSERT_EQ(bm.Allocate(a, 0, &copies_), BlockManager::Admit::kOk);  // computing, not yet done
  Sequence* b = Seq(Range(1, 9));
  EXPECT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kWaitInFlight);
  EXPECT_TRUE(b->block_table.empty());
  a->num_computed = 9;
  bm.MarkComputed(a);
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->num_computed, 8);
  bm.CopiesDone();
  Check(bm);
}

// Two prompts that diverge inside a block, the first still computing that block's start: the
// second waits for those tokens, then copies them from the first's live (uncached, partly filled)
// block instead of computing them again; a third admitted in the same step copies from the same
// source, never from the second's block, whose own copy has not run yet.
TEST_F(BlockManagerTest, AStartBeingComputedIsWaitedForThenCopiedFromTheLiveBlock) {
  BlockManager bm(16, kBs);
  Compute(&bm, Seq(Range(1, 4)));             // block [1 2 3 4] cached
  Sequence* a = Seq(Cat(Range(1, 6), {50}));  // hits it; block 1 is [5 6 50], partly filled
  ASSERT_EQ(bm.Allocate(a, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(a->num_computed, 4);
  Check(bm);
  Sequence* b = Seq(Cat(Range(1, 6), {80, 81}));  // shares [5 6] of a's block 1
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kWaitInFlight);
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_TRUE(copies_.empty());
  // a's step computes only token 5 (a chunk): b still waits for token 6.
  a->num_computed = 5;
  bm.MarkComputed(a);
  Check(bm);
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kWaitInFlight);
  a->num_computed = 7;
  bm.MarkComputed(a);
  Check(bm);
  EXPECT_EQ(bm.num_cached(), 1u);  // a's block 1 is not full: not cached, live
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->block_table[0], a->block_table[0]);
  EXPECT_EQ(b->num_computed, 6);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0], std::make_pair(a->block_table[1], b->block_table[1]));
  EXPECT_EQ(bm.ref_count(a->block_table[1]), 2);  // held until the copy ran
  Check(bm);
  Sequence* c = Seq(Cat(Range(1, 6), {90}));
  ASSERT_EQ(bm.Allocate(c, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(c->num_computed, 6);
  ASSERT_EQ(copies_.size(), 2u);
  EXPECT_EQ(copies_[1], std::make_pair(a->block_table[1], c->block_table[1]));
  Check(bm);
  // a finishes before the copies ran: its block stays until they did, then goes back blank.
  const int32_t a1 = a->block_table[1];
  bm.Release(a);
  EXPECT_EQ(bm.ref_count(a1), 2);
  Check(bm);
  bm.CopiesDone();
  EXPECT_EQ(bm.ref_count(a1), 0);
  EXPECT_EQ(bm.num_free(), 16 - 3);  // in use: block 0, b's and c's own block 1
  Check(bm);
}

// A live block's start is waited for only while a running sequence computes it: once its
// sequence is gone (preempted, cancelled), the next one computes the tokens itself.
TEST_F(BlockManagerTest, ALiveStartIsNoLongerWaitedForOnceItsSequenceWent) {
  BlockManager bm(16, kBs);
  Sequence* a = Seq(Range(1, 3));
  ASSERT_EQ(bm.Allocate(a, 0, &copies_), BlockManager::Admit::kOk);
  Sequence* b = Seq(Cat(Range(1, 2), {70, 71}));
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kWaitInFlight);
  bm.Release(a);
  Check(bm);
  ASSERT_EQ(bm.Allocate(b, 0, &copies_), BlockManager::Admit::kOk);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(copies_.empty());
  Check(bm);
  bm.Release(b);
  EXPECT_EQ(bm.num_in_use(), 0);
  Check(bm);
}

TEST_F(BlockManagerTest, ForksShareBlocksAndCopyASharedPartialBlockOnWrite) {
  BlockManager bm(16, kBs);
  Sequence* a = Seq(Range(1, 6));
  Compute(&bm, a);
  Sequence* child = Seq({});
  bm.Fork(*a, child);
  child->tokens = a->tokens;
  child->num_computed = a->num_computed;
  EXPECT_EQ(bm.ref_count(a->block_table[1]), 2);
  // The child samples a token and writes it into the shared partial block 1: it gets a copy.
  child->tokens.push_back(42);
  copies_.clear();
  ASSERT_TRUE(bm.AppendSlot(child, &copies_));
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, a->block_table[1]);
  EXPECT_EQ(copies_[0].second, child->block_table[1]);
  EXPECT_EQ(bm.ref_count(a->block_table[1]), 1);
  EXPECT_EQ(child->block_table[0], a->block_table[0]);
  Check(bm);
  bm.Release(child);
  bm.Release(a);
  EXPECT_EQ(bm.num_in_use(), 0);
  Check(bm);
}

}  // namespace
}  // namespace llmq
