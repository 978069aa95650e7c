// ClaimChunks: the chunks of hand-built plans (nested groups, a group larger than C with and
// without children, ungrouped requests, C = 1, identical prompts), each checked against the rule's
// invariants, and the invariants on the plans of random prompts.
#include "engine/core/claim_groups.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace llmq {
namespace {

using Chunks = std::vector<std::pair<uint32_t, uint32_t>>;  // [begin, end) per chunk

Chunks Ranges(const std::vector<ClaimChunk>& chunks) {
  Chunks out;
  for (const ClaimChunk& c : chunks) out.emplace_back(c.begin, c.end);
  return out;
}

// A plan of n requests in input order with the given groups ({begin, end, shared, parent}).
Plan Hand(uint32_t n, std::vector<PlanGroup> groups) {
  Plan p;
  p.order.resize(n);
  std::iota(p.order.begin(), p.order.end(), 0u);
  p.groups = std::move(groups);
  return p;
}

// The rule's invariants: the chunks cover the order in order without gaps (a partition into
// consecutive ranges), none is empty or over C, none splits a group of at most C requests, and a
// chunk crosses the boundary of a larger group only while it holds fewer than C / 2 requests.
void ExpectInvariants(const Plan& plan, uint32_t c, const std::vector<ClaimChunk>& chunks) {
  const uint32_t n = static_cast<uint32_t>(plan.order.size());
  uint32_t at = 0;
  for (const ClaimChunk& ch : chunks) {
    EXPECT_EQ(ch.begin, at) << "consecutive";
    EXPECT_LT(ch.begin, ch.end) << "not empty";
    EXPECT_LE(ch.end - ch.begin, std::max(c, 1u)) << "at most C";
    at = ch.end;
  }
  EXPECT_EQ(at, n) << "covers the order";
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& grp = plan.groups[g];
    for (const ClaimChunk& ch : chunks) {
      const bool apart = ch.end <= grp.begin || grp.end <= ch.begin;
      const bool whole = ch.begin <= grp.begin && grp.end <= ch.end;
      if (grp.end - grp.begin <= c) {
        EXPECT_TRUE(apart || whole) << "group " << g << " split";
        continue;
      }
      for (uint32_t b : {grp.begin, grp.end})
        if (ch.begin < b && b < ch.end) {
          EXPECT_LT(2 * (b - ch.begin), c)
              << "chunk [" << ch.begin << ", " << ch.end << ") crosses group " << g << " at " << b
              << " holding half of C already";
        }
    }
  }
}

std::vector<ClaimChunk> Checked(const Plan& plan, uint32_t c) {
  std::vector<ClaimChunk> chunks = ClaimChunks(plan, c);
  ExpectInvariants(plan, c, chunks);
  return chunks;
}

TEST(ClaimChunks, EmptyPlanAndAPlanThatFitsAreNoneAndOne) {
  EXPECT_TRUE(ClaimChunks(Plan{}, 4).empty());
  EXPECT_EQ(Ranges(Checked(Hand(3, {{0, 2, 8, -1}}), 4)), (Chunks{{0, 3}}));
  EXPECT_EQ(Ranges(Checked(Hand(4, {}), 4)), (Chunks{{0, 4}}));
}

TEST(ClaimChunks, UngroupedRequestsArePackedGreedily) {
  EXPECT_EQ(Ranges(Checked(Hand(10, {}), 4)), (Chunks{{0, 4}, {4, 8}, {8, 10}}));
}

TEST(ClaimChunks, SmallTopLevelGroupsStayWholeAndArePackedTogether) {
  // Groups of 3, 2, 3 and 1 ungrouped request, C = 5: 3 + 2 fit; 3 + 1 fit.
  const Plan p = Hand(9, {{0, 3, 8, -1}, {3, 5, 8, -1}, {5, 8, 8, -1}});
  EXPECT_EQ(Ranges(Checked(p, 5)), (Chunks{{0, 5}, {5, 9}}));
  // C = 4: 3 + 2 do not fit; the group of 3 is never split to fill a chunk.
  EXPECT_EQ(Ranges(Checked(p, 4)), (Chunks{{0, 3}, {3, 5}, {5, 9}}));
}

TEST(ClaimChunks, AGroupLargerThanCWithoutChildrenIsCutInOrder) {
  // Ungrouped 0, 1; a group of 7 identical prompts [2, 9); ungrouped 9, 10, 11. C = 3.
  const Plan p = Hand(12, {{2, 9, 16, -1}});
  // [0, 2) holds 2 >= 3 / 2: cut at the group's start; the group's last request alone would be
  // a tiny chunk: it takes what follows.
  EXPECT_EQ(Ranges(Checked(p, 3)), (Chunks{{0, 2}, {2, 5}, {5, 8}, {8, 11}, {11, 12}}));
  // C = 4: [0, 2) holds half of C: cut; 7 = 4 + 3, and 3 >= 2: cut at the group's end.
  EXPECT_EQ(Ranges(Checked(p, 4)), (Chunks{{0, 2}, {2, 6}, {6, 9}, {9, 12}}));
  // C = 5: [0, 2) holds less than half: it takes the group's first requests.
  EXPECT_EQ(Ranges(Checked(p, 5)), (Chunks{{0, 5}, {5, 9}, {9, 12}}));
}

TEST(ClaimChunks, AChainOfNestedGroupsIsCutIntoHalfFullChunks) {
  // Prompts each extending the last (a conversation turn by turn): group i = [i, 300) inside
  // group i - 1. C = 64: the groups of 64 or fewer, [236, 300), are one item; before them every
  // request is its own item in its own large group, packed until half of C.
  std::vector<PlanGroup> chain;
  for (uint32_t i = 0; i + 1 < 300; ++i)
    chain.push_back({i, 300, static_cast<int32_t>(16 * (i + 1)), static_cast<int32_t>(i) - 1});
  const std::vector<ClaimChunk> chunks = Checked(Hand(300, chain), 64);
  Chunks expected;
  for (uint32_t b = 0; b < 224; b += 32) expected.emplace_back(b, b + 32);
  expected.emplace_back(224, 236);  // 12 < 32: the next item (64) does not fit
  expected.emplace_back(236, 300);
  EXPECT_EQ(Ranges(chunks), expected);
}

TEST(ClaimChunks, ALargeGroupIsSplitAlongItsChildren) {
  // One system prompt over 12 requests [0, 12): request 0 directly in it; templates A [1, 4),
  // B [4, 10) (documents B1 [4, 6) and B2 [6, 9) inside it, request 9 directly in B), and
  // requests 10, 11 directly in the system prompt's group. C = 4.
  const Plan p =
      Hand(12, {{0, 12, 8, -1}, {1, 4, 16, 0}, {4, 10, 24, 0}, {4, 6, 32, 2}, {6, 9, 32, 2}});
  // Items of the root group: 0, A(3), B(6 > 4: cut alone), 10, 11. 0 + A fit in 4; B's items
  // B1(2), B2(3), 9 -> [B1], [B2 + 9]; then 10, 11.
  EXPECT_EQ(Ranges(Checked(p, 4)), (Chunks{{0, 4}, {4, 6}, {6, 10}, {10, 12}}));
  // C = 6: B fits whole, so the root group's items pack as 0 + A, then B, then 10 + 11.
  EXPECT_EQ(Ranges(Checked(p, 6)), (Chunks{{0, 4}, {4, 10}, {10, 12}}));
  // C = 12: the plan is one chunk.
  EXPECT_EQ(Ranges(Checked(p, 12)), (Chunks{{0, 12}}));
}

TEST(ClaimChunks, IdenticalPromptsArePlannedThenCutInOrder) {
  // Ten identical prompts (one group, no children) and one other sharing nothing, C = 4.
  std::vector<std::vector<int32_t>> prompts(10, {1, 2, 3, 4});
  prompts.insert(prompts.begin() + 3, {9, 9});
  const std::vector<std::span<const int32_t>> spans(prompts.begin(), prompts.end());
  const StatusOr<Plan> plan = PlanPrefixes(spans, 1);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan.value().groups.size(), 1u);
  EXPECT_EQ(Ranges(Checked(plan.value(), 4)), (Chunks{{0, 4}, {4, 8}, {8, 10}, {10, 11}}));
  // The group's chunks take its requests in input order (the planner keeps identical prompts so).
  EXPECT_EQ(std::vector<uint32_t>(plan.value().order.begin(), plan.value().order.begin() + 4),
            (std::vector<uint32_t>{0, 1, 2, 4}));
}

TEST(ClaimChunks, OneRequestPerChunkAtCOne) {
  const Plan p = Hand(5, {{0, 5, 8, -1}, {0, 3, 16, 0}, {0, 2, 24, 1}});
  EXPECT_EQ(Ranges(Checked(p, 1)), (Chunks{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
  EXPECT_EQ(Ranges(Checked(p, 0)), Ranges(ClaimChunks(p, 1))) << "0 is taken as 1";
}

TEST(ClaimChunks, InvariantsHoldOnRandomPlans) {
  std::mt19937 rng(27);
  for (int trial = 0; trial < 200; ++trial) {
    // Prompts over a 3-token alphabet, so that prefixes nest at several depths.
    const int n = 1 + static_cast<int>(rng() % 60);
    std::vector<std::vector<int32_t>> prompts(n);
    for (auto& p : prompts) {
      p.resize(rng() % 7);
      for (int32_t& t : p) t = static_cast<int32_t>(rng() % 3);
    }
    const std::vector<std::span<const int32_t>> spans(prompts.begin(), prompts.end());
    const StatusOr<Plan> plan = PlanPrefixes(spans, 1 + static_cast<int>(rng() % 2));
    ASSERT_TRUE(plan.ok());
    for (uint32_t c : {1u, 2u, 3u, 5u, 8u, 64u}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " C " + std::to_string(c));
      Checked(plan.value(), c);
    }
  }
}

}  // namespace
}  // namespace llmq
