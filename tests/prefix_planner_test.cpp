// PrefixPlanner: ordering and group reporting on hand-built workloads, plus a brute-force check of
// every documented property on random small inputs.
#include "engine/core/prefix_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace llmq {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

std::vector<std::span<const int32_t>> Spans(const Prompts& prompts) {
  return {prompts.begin(), prompts.end()};
}

Plan RunPlan(const Prompts& prompts, int block_size) {
  StatusOr<Plan> plan = PlanPrefixes(Spans(prompts), block_size);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? std::move(plan).value() : Plan{};
}

bool IsPermutation(const std::vector<uint32_t>& order, size_t n) {
  if (order.size() != n) return false;
  std::vector<bool> seen(n, false);
  for (uint32_t i : order) {
    if (i >= n || seen[i]) return false;
    seen[i] = true;
  }
  return true;
}

size_t Lcp(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// n consecutive token ids starting at `first`: disjoint id ranges share nothing.
std::vector<int32_t> Seq(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Positions of each request in the order.
std::vector<uint32_t> Positions(const Plan& plan) {
  std::vector<uint32_t> pos(plan.order.size());
  for (uint32_t k = 0; k < plan.order.size(); ++k) pos[plan.order[k]] = k;
  return pos;
}

// Checks every property the header promises, by brute force (quadratic and worse: small inputs).
void CheckPlanBruteForce(const Prompts& prompts, int bs, const Plan& plan) {
  const size_t n = prompts.size();
  ASSERT_TRUE(IsPermutation(plan.order, n));
  const auto pos = Positions(plan);

  // unique_tokens == number of distinct non-empty prefixes == sum of edge lengths.
  std::set<std::vector<int32_t>> prefixes;
  for (const auto& p : prompts) {
    for (size_t k = 1; k <= p.size(); ++k) prefixes.emplace(p.begin(), p.begin() + k);
  }
  EXPECT_EQ(plan.unique_tokens, static_cast<int64_t>(prefixes.size()));

  // Ordering: for every request i and every k, the requests sharing i's first k tokens are
  // contiguous in the order (contiguity at every nesting level).
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 1; k <= prompts[i].size(); ++k) {
      uint32_t lo = UINT32_MAX, hi = 0, members = 0;
      for (size_t j = 0; j < n; ++j) {
        if (Lcp(prompts[i], prompts[j]) >= k) {
          lo = std::min(lo, pos[j]);
          hi = std::max(hi, pos[j]);
          ++members;
        }
      }
      ASSERT_EQ(hi - lo + 1, members) << "request " << i << " prefix " << k << " not contiguous";
    }
  }
  // A prompt that is a proper prefix of another comes first; identical prompts in input order.
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i == j || Lcp(prompts[i], prompts[j]) != prompts[i].size()) continue;
      if (prompts[i].size() < prompts[j].size() || i < j) {
        EXPECT_LT(pos[i], pos[j]) << i << " should precede " << j;
      }
    }
  }

  // Groups: valid, nested ranges; parents first and innermost; shared_tokens is the members'
  // common prefix rounded down to blocks, at least one block, more than the parent's.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& grp = plan.groups[g];
    ASSERT_LT(grp.begin, grp.end);
    ASSERT_LE(grp.end, n);
    EXPECT_GE(grp.end - grp.begin, 2u);
    EXPECT_GE(grp.shared_tokens, bs);
    EXPECT_EQ(grp.shared_tokens % bs, 0);
    size_t lcp = SIZE_MAX;
    const auto& first = prompts[plan.order[grp.begin]];
    for (uint32_t k = grp.begin; k < grp.end; ++k) {
      lcp = std::min(lcp, Lcp(first, prompts[plan.order[k]]));
    }
    EXPECT_EQ(grp.shared_tokens, static_cast<int32_t>(lcp / bs * bs)) << "group " << g;
    // Maximal: no request outside shares those tokens with the members.
    for (uint32_t k = 0; k < n; ++k) {
      if (k >= grp.begin && k < grp.end) continue;
      EXPECT_LT(Lcp(first, prompts[plan.order[k]]), static_cast<size_t>(grp.shared_tokens))
          << "group " << g << " misses request at " << k;
    }
    // Parent: the innermost group whose range encloses this one; ranges never cross.
    int32_t innermost = -1;
    for (size_t h = 0; h < plan.groups.size(); ++h) {
      if (h == g) continue;
      const PlanGroup& o = plan.groups[h];
      const bool disjoint = o.end <= grp.begin || grp.end <= o.begin;
      const bool encloses = o.begin <= grp.begin && grp.end <= o.end;
      const bool inside = grp.begin <= o.begin && o.end <= grp.end;
      ASSERT_TRUE(disjoint || encloses || inside) << "groups " << g << " and " << h << " cross";
      ASSERT_FALSE(encloses && inside) << "groups " << g << " and " << h << " have one range";
      if (encloses && (innermost < 0 || o.end - o.begin < plan.groups[innermost].end -
                                                              plan.groups[innermost].begin)) {
        innermost = static_cast<int32_t>(h);
      }
    }
    EXPECT_EQ(grp.parent, innermost) << "group " << g;
    if (grp.parent >= 0) {
      EXPECT_LT(grp.parent, static_cast<int32_t>(g));
      EXPECT_GT(grp.shared_tokens, plan.groups[grp.parent].shared_tokens);
    }
  }

  // Complete: whenever >= 2 requests share k >= bs tokens (k a multiple of bs), exactly that set
  // of requests is a group, with shared_tokens >= k.
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = bs; k <= prompts[i].size(); k += bs) {
      std::vector<uint32_t> set;
      for (size_t j = 0; j < n; ++j) {
        if (Lcp(prompts[i], prompts[j]) >= k) set.push_back(pos[j]);
      }
      if (set.size() < 2) continue;
      const uint32_t lo = *std::min_element(set.begin(), set.end());
      const auto it = std::find_if(plan.groups.begin(), plan.groups.end(), [&](const PlanGroup& g) {
        return g.begin == lo && g.end == lo + set.size();
      });
      ASSERT_NE(it, plan.groups.end()) << "no group for request " << i << " prefix " << k;
      EXPECT_GE(it->shared_tokens, static_cast<int32_t>(k));
    }
  }
}

TEST(PrefixPlanner, EmptyInput) {
  const Plan plan = RunPlan({}, 16);
  EXPECT_TRUE(plan.order.empty());
  EXPECT_TRUE(plan.groups.empty());
  EXPECT_EQ(plan.unique_tokens, 0);
}

TEST(PrefixPlanner, EmptyPromptsComeFirst) {
  const Prompts prompts = {Seq(1, 20), {}, Seq(1, 20), {}};
  const Plan plan = RunPlan(prompts, 16);
  EXPECT_EQ(plan.order, (std::vector<uint32_t>{1, 3, 0, 2}));
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].begin, 2u);
  EXPECT_EQ(plan.groups[0].end, 4u);
  EXPECT_EQ(plan.groups[0].shared_tokens, 16);
  EXPECT_EQ(plan.unique_tokens, 20);
}

TEST(PrefixPlanner, FlatPrefixShuffledIsOneGroup) {
  constexpr int kPrefix = 1000, kDocs = 500;
  std::mt19937 rng(7);
  const auto prefix = Seq(1, kPrefix);
  Prompts prompts;
  int64_t doc_tokens = 0;
  for (int d = 0; d < kDocs; ++d) {
    // Each document starts with its own token, so documents share nothing with each other.
    std::vector<int32_t> doc = {100000 + d};
    const int len = 100 + static_cast<int>(rng() % 201);
    for (int k = 1; k < len; ++k) doc.push_back(static_cast<int32_t>(rng() % 32000));
    doc_tokens += len;
    prompts.push_back(Concat({prefix, doc}));
  }
  std::shuffle(prompts.begin(), prompts.end(), rng);
  for (int bs : {1, 16, 64}) {
    const Plan plan = RunPlan(prompts, bs);
    ASSERT_TRUE(IsPermutation(plan.order, kDocs));
    ASSERT_EQ(plan.groups.size(), 1u) << bs;
    EXPECT_EQ(plan.groups[0].begin, 0u);
    EXPECT_EQ(plan.groups[0].end, static_cast<uint32_t>(kDocs));
    EXPECT_EQ(plan.groups[0].shared_tokens, kPrefix / bs * bs);
    EXPECT_EQ(plan.groups[0].parent, -1);
    EXPECT_EQ(plan.unique_tokens, kPrefix + doc_tokens);
  }
}

TEST(PrefixPlanner, NestedSystemTemplatesDocuments) {
  constexpr int kSystem = 200, kTemplate = 300, kTemplates = 8, kDocs = 64, kBs = 16;
  std::mt19937 rng(11);
  const auto system = Seq(1, kSystem);
  Prompts prompts;
  std::vector<int> template_of;
  int64_t tokens = kSystem + kTemplates * kTemplate;
  for (int t = 0; t < kTemplates; ++t) {
    const auto tmpl = Seq(10000 + 1000 * t, kTemplate);
    for (int d = 0; d < kDocs; ++d) {
      std::vector<int32_t> doc = {100000 + t * kDocs + d};
      const int len = 20 + static_cast<int>(rng() % 50);
      for (int k = 1; k < len; ++k) doc.push_back(static_cast<int32_t>(rng() % 50));
      tokens += len;
      prompts.push_back(Concat({system, tmpl, doc}));
      template_of.push_back(t);
    }
  }
  std::vector<uint32_t> perm(prompts.size());
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), rng);
  Prompts shuffled;
  std::vector<int> shuffled_template;
  for (uint32_t i : perm) {
    shuffled.push_back(prompts[i]);
    shuffled_template.push_back(template_of[i]);
  }

  const Plan plan = RunPlan(shuffled, kBs);
  ASSERT_TRUE(IsPermutation(plan.order, shuffled.size()));
  EXPECT_EQ(plan.unique_tokens, tokens);
  ASSERT_EQ(plan.groups.size(), 1u + kTemplates);
  const PlanGroup& top = plan.groups[0];
  EXPECT_EQ(top.begin, 0u);
  EXPECT_EQ(top.end, static_cast<uint32_t>(kTemplates * kDocs));
  EXPECT_EQ(top.shared_tokens, kSystem / kBs * kBs);
  EXPECT_EQ(top.parent, -1);
  std::set<int> templates_seen;
  uint32_t next_begin = 0;
  for (int g = 1; g <= kTemplates; ++g) {
    const PlanGroup& grp = plan.groups[g];
    EXPECT_EQ(grp.parent, 0);
    EXPECT_EQ(grp.shared_tokens, (kSystem + kTemplate) / kBs * kBs);
    EXPECT_EQ(grp.begin, next_begin);  // the template groups tile the system group, in order
    ASSERT_EQ(grp.end - grp.begin, static_cast<uint32_t>(kDocs));
    next_begin = grp.end;
    // Each template's 64 requests are exactly this range.
    const int t = shuffled_template[plan.order[grp.begin]];
    for (uint32_t k = grp.begin; k < grp.end; ++k) {
      EXPECT_EQ(shuffled_template[plan.order[k]], t);
    }
    EXPECT_TRUE(templates_seen.insert(t).second);
  }
  // Equal-sized siblings come in order of first appearance in the input.
  std::vector<uint32_t> first_seen(kTemplates, UINT32_MAX);
  for (uint32_t i = 0; i < shuffled.size(); ++i) {
    first_seen[shuffled_template[i]] = std::min(first_seen[shuffled_template[i]], i);
  }
  for (int g = 2; g <= kTemplates; ++g) {
    EXPECT_LT(first_seen[shuffled_template[plan.order[plan.groups[g - 1].begin]]],
              first_seen[shuffled_template[plan.order[plan.groups[g].begin]]]);
  }
}

TEST(PrefixPlanner, IdenticalPromptsStayInInputOrder) {
  const auto same = Seq(1, 40);
  const Prompts prompts = {Seq(500, 30), same, Seq(900, 5), same, same, Seq(700, 3), same};
  const Plan plan = RunPlan(prompts, 16);
  ASSERT_TRUE(IsPermutation(plan.order, prompts.size()));
  // The four copies form the largest subtree, so they come first, in input order.
  EXPECT_EQ(std::vector<uint32_t>(plan.order.begin(), plan.order.begin() + 4),
            (std::vector<uint32_t>{1, 3, 4, 6}));
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].begin, 0u);
  EXPECT_EQ(plan.groups[0].end, 4u);
  EXPECT_EQ(plan.groups[0].shared_tokens, 32);
  EXPECT_EQ(plan.unique_tokens, 40 + 30 + 5 + 3);
  CheckPlanBruteForce(prompts, 16, plan);
}

TEST(PrefixPlanner, PromptThatIsPrefixOfAnother) {
  const auto a = Seq(1, 50);
  const auto b = Concat({a, Seq(1000, 30)});
  for (const Prompts& prompts : {Prompts{b, a}, Prompts{a, b}}) {
    const Plan plan = RunPlan(prompts, 16);
    const uint32_t ia = prompts[0].size() == 50 ? 0 : 1;
    EXPECT_EQ(plan.order, (std::vector<uint32_t>{ia, 1 - ia}));  // the shorter one ends first
    ASSERT_EQ(plan.groups.size(), 1u);
    EXPECT_EQ(plan.groups[0].shared_tokens, 48);
    EXPECT_EQ(plan.unique_tokens, 80);
  }
}

TEST(PrefixPlanner, SharingLessThanABlockReportsNoGroupButStaysAdjacent) {
  const auto common = Seq(1, 10);
  const Prompts prompts = {Concat({common, Seq(100, 20)}), Seq(500, 30),
                           Concat({common, Seq(200, 20)}), Seq(600, 30),
                           Concat({common, Seq(300, 20)})};
  const Plan plan = RunPlan(prompts, 16);
  ASSERT_TRUE(IsPermutation(plan.order, prompts.size()));
  EXPECT_TRUE(plan.groups.empty());
  EXPECT_EQ(std::vector<uint32_t>(plan.order.begin(), plan.order.begin() + 3),
            (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(plan.unique_tokens, 10 + 3 * 20 + 2 * 30);
  CheckPlanBruteForce(prompts, 16, plan);
}

TEST(PrefixPlanner, BlockRoundingMergesNestedLevelsIntoOneGroup) {
  // Inner branch at 40 tokens and outer at 36 both round down to 32: one group, not two.
  const auto base = Seq(1, 36);
  const auto inner = Concat({base, Seq(100, 4)});
  const Prompts prompts = {Concat({inner, {7}}), Concat({inner, {8}}), Concat({base, {9}})};
  const Plan plan = RunPlan(prompts, 16);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].shared_tokens, 32);
  EXPECT_EQ(plan.groups[0].end - plan.groups[0].begin, 3u);
  const Plan fine = RunPlan(prompts, 4);
  ASSERT_EQ(fine.groups.size(), 2u);
  EXPECT_EQ(fine.groups[0].shared_tokens, 36);
  EXPECT_EQ(fine.groups[1].shared_tokens, 40);
  EXPECT_EQ(fine.groups[1].parent, 0);
  CheckPlanBruteForce(prompts, 16, plan);
  CheckPlanBruteForce(prompts, 4, fine);
}

TEST(PrefixPlanner, ChildrenLargerSubtreeFirstThenFirstAppearance) {
  const auto sys = Seq(1, 16);
  auto with = [&](int32_t branch, int32_t doc) { return Concat({sys, {branch, doc}}); };
  // Branch 5: 1 request (index 0); branch 6: 3 requests (first at 1); branch 7: 3 (first at 2);
  // branch 8: 1 request (index 3).
  const Prompts prompts = {with(5, 0), with(6, 0), with(7, 0), with(8, 0),
                           with(7, 1), with(6, 1), with(6, 2), with(7, 2)};
  const Plan plan = RunPlan(prompts, 1);
  EXPECT_EQ(plan.order, (std::vector<uint32_t>{1, 5, 6, 2, 4, 7, 0, 3}));
  CheckPlanBruteForce(prompts, 1, plan);
}

TEST(PrefixPlanner, Deterministic) {
  std::mt19937 rng(3);
  Prompts prompts;
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> p(rng() % 60);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 3);
    prompts.push_back(p);
  }
  const Plan a = RunPlan(prompts, 4);
  const Plan b = RunPlan(prompts, 4);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.unique_tokens, b.unique_tokens);
  ASSERT_EQ(a.groups.size(), b.groups.size());
  for (size_t g = 0; g < a.groups.size(); ++g) {
    EXPECT_EQ(a.groups[g].begin, b.groups[g].begin);
    EXPECT_EQ(a.groups[g].end, b.groups[g].end);
    EXPECT_EQ(a.groups[g].shared_tokens, b.groups[g].shared_tokens);
    EXPECT_EQ(a.groups[g].parent, b.groups[g].parent);
  }
}

TEST(PrefixPlanner, RandomSmallInputsMatchBruteForce) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 1500; ++trial) {
    const int alphabet = 1 + static_cast<int>(rng() % 3);
    const int bs = 1 + static_cast<int>(rng() % 4);
    const int n = static_cast<int>(rng() % 30);
    const int max_len = 1 + static_cast<int>(rng() % 14);
    Prompts prompts;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p(rng() % (max_len + 1));
      for (auto& t : p) t = static_cast<int32_t>(rng() % alphabet) - 1;  // negatives too
      prompts.push_back(p);
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " bs " << bs << " n " << n);
    CheckPlanBruteForce(prompts, bs, RunPlan(prompts, bs));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(PrefixPlanner, DeepChainNeedsNoRecursion) {
  // Prompt i is the first i+1 tokens of one base sequence: a path of 20,000 nodes.
  constexpr int kN = 20000;
  const auto base = Seq(1, kN);
  std::vector<std::span<const int32_t>> spans;
  for (int i = kN - 1; i >= 0; --i) spans.emplace_back(base.data(), i + 1);  // longest first
  const Plan plan = PlanPrefixes(spans, 16).value();
  ASSERT_EQ(plan.order.size(), static_cast<size_t>(kN));
  for (int k = 0; k < kN; ++k) ASSERT_EQ(plan.order[k], static_cast<uint32_t>(kN - 1 - k));
  EXPECT_EQ(plan.unique_tokens, kN);
  // A group per block boundary that >= 2 prompts reach: depths 16, 32, ..., below kN.
  ASSERT_EQ(plan.groups.size(), static_cast<size_t>((kN - 1) / 16));
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    EXPECT_EQ(plan.groups[g].shared_tokens, static_cast<int32_t>(16 * (g + 1)));
    EXPECT_EQ(plan.groups[g].parent, static_cast<int32_t>(g) - 1);
  }
}

}  // namespace
}  // namespace llmq
