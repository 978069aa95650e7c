// Tests for engine/sampling/logprobs.h and the engine's log-probabilities: the log-sum-exp against
// double, the top lists' order, every generated position of the engine against a plain double
// softmax over the CPU backend's logits for that sequence (greedy, sampled, n > 1, truncated
// sampling), and the first position against the float64 reference logits of
// ../shared/models/tiny-llama3.
#include "engine/sampling/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "tests/reference_forward.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// log_softmax of a row in double (the plain reference).
std::vector<double> LogSoftmax(const std::vector<double>& row) {
  const double m = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double x : row) sum += std::exp(x - m);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = row[i] - m - std::log(sum);
  return out;
}

// Checks one token's logprobs against the reference log-softmax `want`: the chosen token's value,
// the top list's size, order (logprob descending, id ascending) and values, that it holds the k
// largest, and that it agrees with the chosen token.
void CheckAgainst(const TokenLogprobs& got, int32_t chosen, int k, const std::vector<double>& want,
                  const std::string& where) {
  EXPECT_EQ(got.id, chosen) << where;
  EXPECT_NEAR(got.logprob, want[chosen], 1e-4) << where;
  ASSERT_EQ(got.top.size(), static_cast<size_t>(k)) << where;
  std::vector<double> sorted = want;
  std::sort(sorted.rbegin(), sorted.rend());
  for (int i = 0; i < k; ++i) {
    const TopLogprob& t = got.top[i];
    EXPECT_NEAR(t.logprob, want[t.id], 1e-4) << where << " top " << i;
    EXPECT_NEAR(t.logprob, sorted[i], 1e-4)
        << where << " top " << i << " is not the " << i << "th largest";
    if (i > 0) {
      const TopLogprob& p = got.top[i - 1];
      EXPECT_TRUE(p.logprob > t.logprob || (p.logprob == t.logprob && p.id < t.id))
          << where << " top list out of order at " << i;
    }
    if (t.id == chosen) {
      EXPECT_EQ(t.logprob, got.logprob) << where;
    }
  }
  if (k > 0) {
    EXPECT_LE(got.logprob, got.top[0].logprob) << where;
  }
}

TEST(LogprobsTest, LogSumExpMatchesDouble) {
  Rng rng(5);
  for (int vocab : {1, 7, 8, 100, 32000}) {
    std::vector<float> row(vocab);
    for (float& x : row) x = static_cast<float>(rng.NextDouble() * 40 - 20);
    std::vector<double> d(row.begin(), row.end());
    const double m = *std::max_element(d.begin(), d.end());
    double sum = 0;
    for (double x : d) sum += std::exp(x - m);
    EXPECT_NEAR(LogSumExp(row.data(), vocab), m + std::log(sum), 1e-5) << vocab;
  }
}

TEST(LogprobsTest, NanAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> row = {0.0f, nan, -kInf, 0.0f};
  const float lse = LogSumExp(row.data(), 4);
  EXPECT_NEAR(lse, std::log(2.0f), 1e-6);
  EXPECT_NEAR(TokenLogprob(row.data(), 4, lse, 0), -std::log(2.0f), 1e-6);
  EXPECT_EQ(TokenLogprob(row.data(), 4, lse, 1), -kInf);  // NaN counts as -inf
  EXPECT_EQ(TokenLogprob(row.data(), 4, lse, 2), -kInf);
  std::vector<TopLogprob> top;
  TopLogprobs(row.data(), 4, lse, 4, &top);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].id, 0);  // ties: lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 2);  // -inf before NaN
  EXPECT_EQ(top[3].id, 1);
  std::vector<float> inf = {kInf, 1.0f, kInf};
  const float l2 = LogSumExp(inf.data(), 3);
  EXPECT_NEAR(TokenLogprob(inf.data(), 3, l2, 2), -std::log(2.0f), 1e-6);
  EXPECT_EQ(TokenLogprob(inf.data(), 3, l2, 1), -kInf);
  std::vector<float> none = {-kInf, nan};
  EXPECT_EQ(LogSumExp(none.data(), 2), -kInf);
  TopLogprobs(row.data(), 4, lse, 9, &top);  // k beyond the vocabulary
  EXPECT_EQ(top.size(), 4u);
}

class EngineLogprobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testing::MakeSmallModel("logprobs_model", 8, 256, &cfg_, &w_); }
  static void TearDownTestSuite() { w_.reset(); }

  static std::map<std::string, RequestOutput> Run(const std::vector<Request>& reqs) {
    return testing::RunEngine(cfg_, *w_, reqs, /*budget=*/23);  // prefills chunked, mixed
  }

  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
};
ModelConfig EngineLogprobsTest::cfg_;
std::unique_ptr<Weights> EngineLogprobsTest::w_;

TEST_F(EngineLogprobsTest, EveryGeneratedPositionIsTheSoftmaxOfTheCpuLogits) {
  std::vector<Request> reqs;
  auto add = [&](const std::string& id, float t, int n, int k, int top_k) {
    Request r;
    r.id = id;
    r.prompt_ids = {1};
    for (int i = 0; i < 9 + static_cast<int>(reqs.size()) * 5; ++i)
      r.prompt_ids.push_back(3 + (i * 37 + static_cast<int>(reqs.size()) * 11) % 500);
    r.params.temperature = t;
    r.params.top_k = top_k;
    r.params.max_tokens = 10;
    r.params.ignore_eos = true;
    r.params.seed = 77 + reqs.size();
    r.params.logprobs = k;
    // Penalties change what is sampled, never the reported distribution (the raw logits).
    if (id == "penalized") r.params.frequency_penalty = 1.5f;
    r.n = n;
    reqs.push_back(r);
  };
  add("greedy", 0.0f, 1, 5, 0);
  add("sampled-n3", 1.0f, 3, 3, 0);
  add("top-k-n2", 0.7f, 2, 0, 4);
  add("top20", 1.3f, 1, 20, 0);
  add("penalized", 0.0f, 1, 2, 0);
  const auto out = Run(reqs);
  CpuBackend ref(cfg_, *w_);
  const int bs = 16, vocab = cfg_.vocab_size;
  ASSERT_TRUE(ref.AllocateKv(8, bs).ok());
  std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const Request& r : reqs) {
    const RequestOutput& o = out.at(r.id);
    ASSERT_TRUE(o.ok()) << o.error;
    ASSERT_EQ(o.completions.size(), static_cast<size_t>(r.n));
    for (size_t c = 0; c < o.completions.size(); ++c) {
      const Completion& comp = o.completions[c];
      ASSERT_EQ(comp.logprobs.size(), comp.ids.size()) << r.id;
      std::vector<int> ids(r.prompt_ids.begin(), r.prompt_ids.end());
      ids.insert(ids.end(), comp.ids.begin(), comp.ids.end() - 1);
      const std::vector<float> logits =
          testing::ForwardOneSequence(ref, ids, 0, static_cast<int>(ids.size()), table, bs, vocab);
      for (size_t i = 0; i < comp.ids.size(); ++i) {
        const size_t pos = r.prompt_ids.size() - 1 + i;
        const std::vector<double> row(logits.begin() + pos * vocab,
                                      logits.begin() + (pos + 1) * vocab);
        const std::vector<double> want = LogSoftmax(row);
        CheckAgainst(comp.logprobs[i], comp.ids[i], r.params.logprobs, want,
                     r.id + " sample " + std::to_string(c) + " token " + std::to_string(i));
        if (r.id == "greedy") {
          EXPECT_EQ(comp.logprobs[i].top[0].id, comp.ids[i]);
        }
      }
    }
  }
  // The n samples of a request differ (own streams), yet each is checked against its own tokens.
  EXPECT_NE(out.at("sampled-n3").completions[0].ids, out.at("sampled-n3").completions[1].ids);
}

TEST_F(EngineLogprobsTest, LogprobsChangeNoIds) {
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt_ids = {1, 5 + i, 9, 40 + i};
    r.params.temperature = i % 2 ? 0.9f : 0.0f;
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    r.params.seed = i;
    r.n = 1 + i % 2;
    reqs.push_back(r);
  }
  const auto plain = Run(reqs);
  for (Request& r : reqs) r.params.logprobs = 4;
  const auto with = Run(reqs);
  for (const Request& r : reqs)
    for (size_t c = 0; c < plain.at(r.id).completions.size(); ++c) {
      EXPECT_EQ(plain.at(r.id).completions[c].ids, with.at(r.id).completions[c].ids) << r.id;
      EXPECT_TRUE(plain.at(r.id).completions[c].logprobs.empty());
      EXPECT_EQ(with.at(r.id).completions[c].logprobs.size(),
                with.at(r.id).completions[c].ids.size());
      // Where each id's text begins, one per logprobs entry (no tokenizer here: no text).
      EXPECT_EQ(with.at(r.id).completions[c].text_begin,
                std::vector<int32_t>(with.at(r.id).completions[c].ids.size(), 0));
    }
}

// The first generated position against the float64 Hugging Face forward's last-prompt-position
// logits: the chosen token's log-probability and the top 20 within 1e-4.
TEST(ReferenceLogprobs, TinyLlama3FirstTokenMatchesFloat64Reference) {
  const std::string dir = testing::SharedModel("tiny-llama3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama3");
  Model m;
  ASSERT_TRUE(LoadModel(dir, &m).ok());
  EngineOptions opt;
  opt.num_blocks = 64;
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(LlmEngine::Create(m.cfg, m.backend.get(), nullptr, opt, &engine).ok());
  std::map<std::string, nlohmann::json> refs;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(dir) / "reference")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream f(e.path());
    const nlohmann::json ref = nlohmann::json::parse(f);
    Request r;
    r.id = e.path().filename().string();
    r.prompt_ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    r.params.temperature = 0;
    r.params.max_tokens = 2;
    r.params.logprobs = 20;
    engine->Add(r);
    refs[r.id] = ref;
  }
  ASSERT_GE(refs.size(), 4u);
  std::vector<RequestOutput> done;
  while (engine->HasWork()) ASSERT_TRUE(engine->Step(&done).ok());
  ASSERT_EQ(done.size(), refs.size());
  for (const RequestOutput& o : done) {
    ASSERT_TRUE(o.ok()) << o.error;
    const nlohmann::json& ref = refs.at(o.id);
    const std::vector<double> want =
        LogSoftmax(ref["last_prompt_position_logits"].get<std::vector<double>>());
    const Completion& c = o.completions.at(0);
    ASSERT_FALSE(c.logprobs.empty());
    EXPECT_EQ(c.ids[0], ref["completion_ids"][0].get<int>()) << o.id;
    CheckAgainst(c.logprobs[0], c.ids[0], 20, want, o.id);
    EXPECT_EQ(c.logprobs[0].top[0].id, c.ids[0]) << o.id;
  }
}

}  // namespace
}  // namespace llmq
