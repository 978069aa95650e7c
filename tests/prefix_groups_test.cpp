// Prefix groups on hand-built batches, and the decode order that puts sequences sharing prefix
// blocks next to each other; then through the real runner and engine: the groups a step of forked
// samples carries, and outputs that the reordering leaves bit for bit as they were.
#include "engine/core/prefix_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/core/model_runner.h"

namespace llmq {
namespace {

constexpr int kBs = 4;

// A batch of sequences given by block table, computed tokens and tokens in the step.
struct SeqSpec {
  std::vector<int32_t> blocks;
  int computed;
  int tokens = 1;
};

StepBatch Batch(const std::vector<SeqSpec>& seqs) {
  StepBatch b;
  b.Clear();
  for (const SeqSpec& s : seqs) b.max_blocks = std::max<int32_t>(b.max_blocks, s.blocks.size());
  for (const SeqSpec& s : seqs) {
    for (int i = 0; i < s.tokens; ++i) {
      b.token_ids.push_back(0);
      b.positions.push_back(s.computed + i);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(s.computed + s.tokens);
    b.block_tables.insert(b.block_tables.end(), s.blocks.begin(), s.blocks.end());
    b.block_tables.resize(b.block_tables.size() + b.max_blocks - s.blocks.size(), -1);
  }
  return b;
}

std::vector<PrefixGroup> Groups(const std::vector<SeqSpec>& seqs) {
  StepBatch b = Batch(seqs);
  DetectPrefixGroups(kBs, &b);
  return b.prefix_groups;
}

using G = std::vector<PrefixGroup>;

TEST(PrefixGroups, NoneWhenNothingIsShared) {
  EXPECT_EQ(Groups({}), G{});
  EXPECT_EQ(Groups({{{0, 1}, 6}}), G{});
  EXPECT_EQ(Groups({{{0, 1}, 6}, {{2, 3}, 6}, {{4}, 3}}), G{});
  // Same first block but not adjacent: groups are runs of consecutive sequences.
  EXPECT_EQ(Groups({{{0, 1}, 6}, {{2, 3}, 6}, {{0, 4}, 6}}), G{});
}

TEST(PrefixGroups, OneGroup) {
  // Three decodes at position 9 share blocks 0 and 1 (tokens 0..7), each writing its own block.
  EXPECT_EQ(Groups({{{0, 1, 2}, 9}, {{0, 1, 3}, 9}, {{0, 1, 4}, 9}}), (G{{0, 3, 2}}));
  // Members at different lengths share what the shortest has computed of the common blocks.
  EXPECT_EQ(Groups({{{5}, 0}, {{0, 1, 2}, 9}, {{0, 1, 3, 7}, 13}}), (G{{1, 2, 2}}));
}

TEST(PrefixGroups, TwoGroups) {
  EXPECT_EQ(Groups({{{0, 1, 2}, 9}, {{0, 1, 3}, 9}, {{8, 4}, 5}, {{8, 6}, 5}, {{8, 7}, 5}}),
            (G{{0, 2, 2}, {2, 3, 1}}));
}

TEST(PrefixGroups, ADifferentBlockBreaksTheRun) {
  // The middle sequence has its own block 1: the first and last share blocks 0 and 1 but are not
  // adjacent, so the group is all three over block 0.
  EXPECT_EQ(Groups({{{0, 1, 2}, 9}, {{0, 9, 3}, 9}, {{0, 1, 4}, 9}}), (G{{0, 3, 1}}));
  // A sequence with another first block splits the run in two.
  EXPECT_EQ(
      Groups({{{0, 1, 2}, 9}, {{0, 1, 3}, 9}, {{7, 1, 4}, 9}, {{0, 1, 5}, 9}, {{0, 1, 6}, 9}}),
      (G{{0, 2, 2}, {3, 2, 2}}));
  // Nested sharing: a long common prefix inside a short one is worth more on its own.
  EXPECT_EQ(
      Groups({{{0, 1, 2, 3, 4}, 17}, {{0, 1, 2, 3, 5}, 17}, {{0, 1, 2, 3, 6}, 17}, {{0, 8, 9}, 9}}),
      (G{{0, 3, 4}}));
}

TEST(PrefixGroups, TheQuerysOwnBlockIsNotShared) {
  // Decodes at position 7 write into block 1; only block 0 (tokens 0..3) is computed context.
  EXPECT_EQ(Groups({{{0, 1}, 7}, {{0, 1}, 7}}), (G{{0, 2, 1}}));
  // At position 3 the query is in block 0 itself: nothing before it to share.
  EXPECT_EQ(Groups({{{0}, 3}, {{0}, 3}}), G{});
  // A prefill chunk from token 4 on: block 0 is shared with a decode, its own block 1 is not.
  EXPECT_EQ(Groups({{{0, 1, 2}, 9}, {{0, 1, 3}, 4, 6}}), (G{{0, 2, 1}}));
  // A fresh prefill (nothing computed) shares nothing, even where its table starts the same.
  EXPECT_EQ(Groups({{{0, 1, 2}, 9}, {{0, 1, 3}, 0, 12}}), G{});
}

// The partition by the plain dynamic programme over every run [i, j), O(S^2), as
// DetectPrefixGroups computed it until 2026-12-04: the best saved reads, ties to longer runs.
G ReferenceGroups(const StepBatch& b) {
  const int S = b.num_seqs();
  if (S < 2 || b.max_blocks == 0) return {};
  std::vector<int32_t> common(S - 1);
  for (int s = 0; s + 1 < S; ++s) {
    auto shareable = [&](int q) {
      const int computed = b.context_lens[q] - (b.query_start[q + 1] - b.query_start[q]);
      return std::min(computed / kBs, b.max_blocks);
    };
    const int n = std::min(shareable(s), shareable(s + 1));
    int k = 0;
    while (k < n &&
           b.block_tables[s * b.max_blocks + k] == b.block_tables[(s + 1) * b.max_blocks + k])
      ++k;
    common[s] = k;
  }
  std::vector<int64_t> best(S + 1, 0);
  std::vector<int32_t> start(S + 1, 0);
  for (int j = 1; j <= S; ++j) {
    best[j] = best[j - 1];
    start[j] = j - 1;
    int32_t shared = b.max_blocks;
    for (int i = j - 2; i >= 0; --i) {
      shared = std::min(shared, common[i]);
      if (shared == 0) break;
      const int64_t gain = best[i] + int64_t{j - 1 - i} * shared;
      if (gain >= best[j]) best[j] = gain, start[j] = i;
    }
  }
  G g;
  for (int j = S; j > 0; j = start[j]) {
    const int i = start[j];
    if (j - i < 2) continue;
    g.push_back({i, j - i, *std::min_element(common.begin() + i, common.begin() + j - 1)});
  }
  std::reverse(g.begin(), g.end());
  return g;
}

// Random steps whose sequences descend from a few nested prefixes (so that neighbours share
// plateaus of equal prefixes, nested inside shorter ones), at random lengths: the groups are the
// plain programme's, partition and ties alike.
TEST(PrefixGroups, TheGroupsAreThoseOfThePlainProgrammeOverEveryRun) {
  std::mt19937 rng(20261204);
  int nonempty = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int S = 2 + static_cast<int>(rng() % 70), max_blocks = 1 + static_cast<int>(rng() % 9);
    // Prefix trees: root r's blocks 100 r + k; a child c of it shares its first `depth` blocks.
    const int roots = 1 + static_cast<int>(rng() % 3), children = 1 + static_cast<int>(rng() % 3);
    std::vector<SeqSpec> seqs;
    int fresh = 10000;
    int root = 0, child = 0;
    for (int s = 0; s < S; ++s) {
      if (rng() % 4 == 0) root = static_cast<int>(rng() % roots);  // runs of the same prefix
      if (rng() % 3 == 0) child = static_cast<int>(rng() % children);
      const int depth = 1 + child % max_blocks;
      SeqSpec q;
      for (int k = 0; k < max_blocks; ++k)
        q.blocks.push_back(k < depth ? 100 * root + k : 1000 * (child + 1) + 100 * root + k);
      if (rng() % 5 == 0) q.blocks[static_cast<int>(rng() % max_blocks)] = fresh++;
      q.computed = static_cast<int>(rng() % (max_blocks * kBs));
      q.tokens = rng() % 6 == 0 ? 1 + static_cast<int>(rng() % 3) : 1;
      q.tokens = std::min(q.tokens, max_blocks * kBs - q.computed);
      seqs.push_back(q);
    }
    StepBatch b = Batch(seqs);
    const G want = ReferenceGroups(b);
    DetectPrefixGroups(kBs, &b);
    ASSERT_EQ(b.prefix_groups, want) << "trial " << trial;
    nonempty += !want.empty();
  }
  EXPECT_GT(nonempty, 1500);  // the steps do share prefixes
}

std::vector<int32_t> Order(const std::vector<int32_t>& first, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> order;
  OrderBySharedFirstBlock(first, tokens, &order);
  return order;
}

TEST(PrefixGroups, DecodesSharingAFirstBlockAreMadeAdjacent) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(Order({}, {}), V{});
  EXPECT_EQ(Order({3, 3, 5, 5}, {1, 1, 1, 1}), (V{0, 1, 2, 3}));  // already together
  // A fork appended after other requests joins its parent's block: stable otherwise.
  EXPECT_EQ(Order({3, 3, 5, 6, 3, 5}, {1, 1, 1, 1, 1, 1}), (V{0, 1, 4, 2, 5, 3}));
  // Prefill entries (after the leading decodes) keep their place, whatever their blocks.
  EXPECT_EQ(Order({3, 5, 3, 5, 3}, {1, 1, 1, 7, 1}), (V{0, 2, 1, 3, 4}));
  // Sequences without blocks never group.
  EXPECT_EQ(Order({-1, 4, -1, 4}, {1, 1, 1, 1}), (V{0, 1, 3, 2}));
}

// The runner over sequences with hand-made block tables: the batch order, the groups it carries
// and decode_only.
class RunnerBatchTest : public ::testing::Test {
 protected:
  Sequence* Seq(std::vector<int32_t> blocks, int computed, int len) {
    auto s = std::make_unique<Sequence>();
    s->tokens.assign(len, 1);
    s->num_prompt = len;
    s->num_computed = computed;
    s->block_table = std::move(blocks);
    s->status = SeqStatus::kRunning;
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

// A backend that writes each logits row's index into its row (and counts nothing else).
class RowIndexBackend : public Backend {
 public:
  explicit RowIndexBackend(int vocab) : vocab_(vocab) {}
  std::string name() const override { return "rows"; }
  Status AllocateKv(int, int) override { return Status::Ok(); }
  Status Forward(const StepBatch& b, float* logits) override {
    for (size_t i = 0; i < b.logits_rows.size(); ++i)
      std::fill_n(logits + i * vocab_, vocab_, static_cast<float>(b.logits_rows[i]));
    return Status::Ok();
  }
  Status CopyBlocks(const std::vector<std::pair<int, int>>&) override { return Status::Ok(); }
  uint64_t weight_bytes() const override { return 0; }
  int64_t kv_bytes_per_token() const override { return 0; }

 private:
  int vocab_;
};

// The runner's logits buffer holds what the largest step sampled, exactly (not a doubled
// capacity), and each step's rows.
TEST_F(RunnerBatchTest, LogitsAreSizedToTheRowsSampled) {
  constexpr int kVocab = 8;
  RowIndexBackend be(kVocab);
  ModelRunner runner(&be, kVocab, kBs);
  std::vector<Sequence*> samplers;
  std::vector<ScheduledSeq> step;
  for (int n : {3, 5, 2, 7}) {
    while (static_cast<int>(step.size()) < n)
      step.push_back({Seq({static_cast<int32_t>(10 + step.size())}, 2, 3), 1});
    const std::vector<ScheduledSeq> now(step.begin(), step.begin() + n);
    ASSERT_TRUE(runner.Run(now, &samplers).ok());
    ASSERT_EQ(runner.logits().size(), static_cast<size_t>(n * kVocab));
    for (int i = 0; i < n; ++i) EXPECT_EQ(runner.logits()[i * kVocab + kVocab - 1], i);
  }
  EXPECT_EQ(runner.logits_capacity(), static_cast<size_t>(7 * kVocab));
}

TEST_F(RunnerBatchTest, ForkedDecodesAreGroupedAndFlagged) {
  ModelRunner runner(nullptr, 8, kBs);
  // a and its fork a2 share blocks 0, 1; b in between has its own.
  Sequence* a = Seq({0, 1, 2}, 9, 10);
  Sequence* b = Seq({5, 6, 7}, 9, 10);
  Sequence* a2 = Seq({0, 1, 3}, 9, 10);
  StepBatch batch;
  std::vector<Sequence*> samplers;
  runner.Build({{a, 1}, {b, 1}, {a2, 1}}, &batch, &samplers);
  EXPECT_EQ(samplers, (std::vector<Sequence*>{a, a2, b}));  // batch order
  EXPECT_TRUE(batch.decode_only);
  EXPECT_EQ(batch.prefix_groups, (G{{0, 2, 2}}));
  EXPECT_EQ(batch.slot_mapping, (std::vector<int32_t>{2 * kBs + 1, 3 * kBs + 1, 7 * kBs + 1}));
  EXPECT_EQ(batch.logits_rows, (std::vector<int32_t>{0, 1, 2}));
  // A prefill in the step: not decode-only; it keeps its place after the decodes.
  Sequence* c = Seq({0, 1, 8}, 4, 10);
  runner.Build({{a, 1}, {b, 1}, {a2, 1}, {c, 6}}, &batch, &samplers);
  EXPECT_FALSE(batch.decode_only);
  EXPECT_EQ(batch.query_start, (std::vector<int32_t>{0, 1, 2, 3, 9}));
  EXPECT_EQ(batch.prefix_groups, (G{{0, 2, 2}}));
  EXPECT_EQ(samplers, (std::vector<Sequence*>{a, a2, b, c}));
}

}  // namespace
}  // namespace llmq
