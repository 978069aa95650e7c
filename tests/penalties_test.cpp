// Tests for engine/sampling/penalties.h and the engine's use of it: each step's formula and their
// order, each penalty's and logit_bias's effect on a model's greedy choice (checked against a plain
// greedy decode over the CPU backend's logits with the formula applied in double), min_tokens and
// stop_token_ids, neutral values that change nothing, and batch invariance with penalties on.
#include "engine/sampling/penalties.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "tests/reference_forward.h"
#include "tests/small_model.h"

namespace llmq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(PenaltiesTest, EachStepByItsFormulaInOrder) {
  std::vector<float> l = {1.0f, -1.0f, 2.0f, 0.5f, -2.0f, 3.0f, 0.0f, 0.25f};
  const std::vector<int32_t> prompt = {0, 1}, generated = {2, 2, 3};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{5, -1.0f}, {1, 4.0f}};
  p.min_tokens = 4;
  p.stop_token_ids = {6};
  const std::vector<int32_t> eos = {7};
  ASSERT_TRUE(HasPenalties(p, 3));
  ApplyPenalties(p, eos, {prompt, generated}, l.data(), 8);
  // min_tokens: 6 and 7 blocked; bias: 5 -> 2, 1 -> 3; repetition over {0, 1, 2, 3}: 0 -> 0.5,
  // 1 -> 1.5 (positive after its bias), 2 -> 1, 3 -> 0.25; frequency / presence over {2: 2, 3: 1}:
  // 2 -> 1 - 1 - 0.25, 3 -> 0.25 - 0.5 - 0.25.
  EXPECT_EQ(l, (std::vector<float>{0.5f, 1.5f, -0.25f, -0.5f, -2.0f, 2.0f, -kInf, -kInf}));
}

TEST(PenaltiesTest, MinTokensOnlyBeforeItsCountAndEosKeptWithIgnoreEos) {
  SamplingParams p;
  p.min_tokens = 2;
  const std::vector<int32_t> eos = {1}, gen1 = {0}, gen2 = {0, 0};
  EXPECT_TRUE(HasPenalties(p, 1));
  EXPECT_FALSE(HasPenalties(p, 2));
  std::vector<float> l = {0.0f, 5.0f};
  ApplyPenalties(p, eos, {{}, gen1}, l.data(), 2);
  EXPECT_EQ(l[1], -kInf);
  l = {0.0f, 5.0f};
  p.ignore_eos = true;
  ApplyPenalties(p, eos, {{}, gen1}, l.data(), 2);
  EXPECT_EQ(l[1], 5.0f);
}

TEST(PenaltiesTest, DefaultsDoNothingAndIdsOutsideTheVocabularyAreSkipped) {
  SamplingParams p;
  EXPECT_FALSE(HasPenalties(p, 0));
  EXPECT_FALSE(HasPenalties(p, 100));
  p.presence_penalty = 1.0f;
  EXPECT_FALSE(HasPenalties(p, 0));  // nothing generated yet: nothing to penalize
  EXPECT_TRUE(HasPenalties(p, 1));
  p.logit_bias = {{99, 5.0f}};
  p.repetition_penalty = 1.5f;
  std::vector<float> l = {1.0f, 2.0f};
  const std::vector<int32_t> prompt = {-3, 77}, gen = {1};
  ApplyPenalties(p, {}, {prompt, gen}, l.data(), 2);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f / 1.5f - 1.0f}));
}

class EnginePenaltiesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testing::MakeSmallModel("penalties_model", 21, 256, &cfg_, &w_); }
  static void TearDownTestSuite() { w_.reset(); }

  static Request Base(const std::string& id) {
    Request r;
    r.id = id;
    r.prompt_ids = {1, 17, 230, 17, 45, 230, 99, 17};
    r.params.temperature = 0;
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    return r;
  }

  static std::map<std::string, RequestOutput> Run(const std::vector<Request>& reqs,
                                                  int budget = 2048) {
    return testing::RunEngine(cfg_, *w_, reqs, budget);
  }
  static std::vector<int32_t> Ids(const Request& r) {
    const auto out = Run({r});
    EXPECT_TRUE(out.at(r.id).ok()) << out.at(r.id).error;
    return out.at(r.id).completions.at(0).ids;
  }

  // A plain greedy decode: the CPU backend's logits of prompt + completion so far (one fresh pass
  // per token), `adjust` applied in double, argmax (ties to the lowest id).
  using Adjust = std::function<void(const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& gen, std::vector<double>* row)>;
  static std::vector<int32_t> PlainGreedy(const Request& r, const Adjust& adjust) {
    CpuBackend be(cfg_, *w_);
    const int bs = 16, vocab = cfg_.vocab_size;
    EXPECT_TRUE(be.AllocateKv(8, bs).ok());
    const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<int32_t> gen;
    for (int step = 0; step < r.params.max_tokens; ++step) {
      std::vector<int> ids(r.prompt_ids.begin(), r.prompt_ids.end());
      ids.insert(ids.end(), gen.begin(), gen.end());
      const int n = static_cast<int>(ids.size());
      const std::vector<float> all = testing::ForwardOneSequence(be, ids, 0, n, table, bs, vocab);
      std::vector<double> row(all.end() - vocab, all.end());
      adjust(r.prompt_ids, gen, &row);
      gen.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    }
    return gen;
  }
  static std::map<int32_t, int> Count(const std::vector<int32_t>& ids) {
    std::map<int32_t, int> c;
    for (int32_t id : ids) ++c[id];
    return c;
  }

  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
};
ModelConfig EnginePenaltiesTest::cfg_;
std::unique_ptr<Weights> EnginePenaltiesTest::w_;

TEST_F(EnginePenaltiesTest, GreedyWithoutPenaltiesIsThePlainArgmaxAndNeutralValuesChangeNothing) {
  const Request base = Base("base");
  const std::vector<int32_t> greedy = Ids(base);
  EXPECT_EQ(greedy, PlainGreedy(base, [](auto&, auto&, auto*) {}));
  Request neutral = base;
  neutral.params.presence_penalty = 0;
  neutral.params.frequency_penalty = 0;
  neutral.params.repetition_penalty = 1;
  neutral.params.min_tokens = 0;
  neutral.params.logit_bias = {{5, 0.0f}};
  EXPECT_EQ(Ids(neutral), greedy);
  // Seeded sampling too, n = 2.
  Request sampled = base;
  sampled.params.temperature = 0.8f;
  sampled.params.seed = 3;
  sampled.n = 2;
  Request sampled_neutral = neutral;
  sampled_neutral.params.temperature = 0.8f;
  sampled_neutral.params.seed = 3;
  sampled_neutral.n = 2;
  sampled_neutral.id = "n";
  const auto a = Run({sampled}), b = Run({sampled_neutral});
  for (int c = 0; c < 2; ++c)
    EXPECT_EQ(a.at("base").completions[c].ids, b.at("n").completions[c].ids);
}

TEST_F(EnginePenaltiesTest, LogitBiasMinus100ChangesTheGreedyTokenAndPlus100ForcesOne) {
  const Request base = Base("b");
  const std::vector<int32_t> greedy = Ids(base);
  Request ban = base;
  ban.params.logit_bias = {{greedy[0], -100.0f}};
  const std::vector<int32_t> banned = Ids(ban);
  EXPECT_NE(banned[0], greedy[0]);
  EXPECT_EQ(std::count(banned.begin(), banned.end(), greedy[0]), 0);
  EXPECT_EQ(banned, PlainGreedy(ban, [&](auto&, auto&, std::vector<double>* row) {
              (*row)[greedy[0]] += -100.0;
            }));
  Request force = base;
  const int32_t forced = 300;
  ASSERT_EQ(std::count(greedy.begin(), greedy.end(), forced), 0);
  force.params.logit_bias = {{forced, 100.0f}};
  EXPECT_EQ(Ids(force), std::vector<int32_t>(base.params.max_tokens, forced));
}

TEST_F(EnginePenaltiesTest, PresenceFrequencyAndRepetitionPenaltiesByTheirFormulas) {
  const Request base = Base("b");
  const std::vector<int32_t> greedy = Ids(base);
  Request presence = base;
  presence.params.presence_penalty = 2.0f;
  const auto want_presence = PlainGreedy(presence, [](auto&, auto& gen, std::vector<double>* row) {
    for (const auto& [id, n] : Count(gen)) (*row)[id] -= 2.0;
  });
  Request frequency = base;
  frequency.params.frequency_penalty = 0.7f;
  const auto want_frequency =
      PlainGreedy(frequency, [](auto&, auto& gen, std::vector<double>* row) {
        for (const auto& [id, n] : Count(gen)) (*row)[id] -= 0.7 * n;
      });
  Request repetition = base;
  repetition.params.repetition_penalty = 1.8f;
  const auto want_repetition =
      PlainGreedy(repetition, [](auto& prompt, auto& gen, std::vector<double>* row) {
        std::vector<int32_t> all = prompt;
        all.insert(all.end(), gen.begin(), gen.end());
        for (const auto& [id, n] : Count(all)) {
          double& l = (*row)[id];
          l = l > 0 ? l / double(1.8f) : l * double(1.8f);
        }
      });
  EXPECT_EQ(Ids(presence), want_presence);
  EXPECT_EQ(Ids(frequency), want_frequency);
  EXPECT_EQ(Ids(repetition), want_repetition);
  // Each changes this greedy completion (which repeats itself).
  EXPECT_LT(Count(greedy).size(), greedy.size());
  EXPECT_NE(want_presence, greedy);
  EXPECT_NE(want_frequency, greedy);
  EXPECT_NE(want_repetition, greedy);
  // A presence penalty this strong never picks a token twice here.
  EXPECT_EQ(Count(want_presence).size(), want_presence.size());
}

TEST_F(EnginePenaltiesTest, StopTokenIdsStopAndMinTokensHoldsThemAndEosOff) {
  Request base = Base("b");
  const std::vector<int32_t> greedy = Ids(base);
  Request stop = base;
  stop.params.stop_token_ids = {greedy[2]};
  const size_t first = std::find(greedy.begin(), greedy.end(), greedy[2]) - greedy.begin();
  const auto out = Run({stop}).at("b").completions[0];
  EXPECT_EQ(out.finish_reason, "stop");
  EXPECT_EQ(out.ids, std::vector<int32_t>(greedy.begin(), greedy.begin() + first + 1));
  // min_tokens: the stop id is blocked for the first 5 tokens (a plain greedy decode with it at
  // -inf there), and stops the completion again after them.
  Request held = stop;
  held.params.min_tokens = 5;
  const std::vector<int32_t> plain =
      PlainGreedy(held, [&](auto&, auto& gen, std::vector<double>* row) {
        if (gen.size() < 5) (*row)[greedy[2]] = -kInf;
      });
  size_t end = 5;
  while (end < plain.size() && plain[end] != greedy[2]) ++end;
  const auto h = Run({held}).at("b").completions[0];
  EXPECT_EQ(h.finish_reason, end < plain.size() ? "stop" : "length");
  EXPECT_EQ(h.ids,
            std::vector<int32_t>(plain.begin(), plain.begin() + std::min(end + 1, plain.size())));
  EXPECT_GE(h.ids.size(), 6u);
  EXPECT_EQ(std::count(h.ids.begin(), h.ids.begin() + 5, greedy[2]), 0);
}

TEST_F(EnginePenaltiesTest, PenalizedRequestsTogetherEqualEachAlone) {
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r = Base("r" + std::to_string(i));
    r.prompt_ids.push_back(50 + 7 * i);
    r.params.temperature = i % 2 ? 0.9f : 0.0f;
    r.params.seed = 10 + i;
    r.params.presence_penalty = 0.3f * (i % 3);
    r.params.frequency_penalty = 0.4f * (i % 2);
    r.params.repetition_penalty = 1.0f + 0.2f * (i % 4);
    r.params.logit_bias = {{static_cast<int32_t>(100 + i), 3.0f}};
    r.params.min_tokens = i;
    r.params.logprobs = i % 3;
    r.n = 1 + i % 2;
    reqs.push_back(r);
  }
  const auto together = Run(reqs, 19);
  for (const Request& r : reqs) {
    const auto alone = Run({r});
    for (int c = 0; c < r.n; ++c) {
      EXPECT_EQ(together.at(r.id).completions[c].ids, alone.at(r.id).completions[c].ids) << r.id;
      const auto& a = together.at(r.id).completions[c].logprobs;
      const auto& b = alone.at(r.id).completions[c].logprobs;
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].logprob, b[i].logprob) << r.id;
    }
  }
}

}  // namespace
}  // namespace llmq
