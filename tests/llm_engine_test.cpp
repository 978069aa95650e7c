// The engine's batch invariance: many prompts generated together give, token for token, what each
// gives alone, under any token budget (so any chunking of prefills and mix with decodes).
#include "engine/core/llm_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "engine/backends/cpu_backend.h"
#include "engine/tools/model_maker.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

class LlmEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DType dt;
    ASSERT_TRUE(ShapeConfig("tiny", &cfg_, &dt).ok());
    cfg_.num_heads = 8, cfg_.num_kv_heads = 2, cfg_.head_dim = 8;  // GQA 4:1
    const std::string dir = testing::TmpDir("engine_model");
    ASSERT_TRUE(WriteRandomModel(cfg_, DType::kF32, 3, dir).ok());
    ASSERT_TRUE(Weights::Load(dir, cfg_, &w_).ok());
  }
  static void TearDownTestSuite() { w_.reset(); }

  static std::vector<Request> Prompts(int count) {
    std::vector<Request> reqs;
    Rng rng(99);
    for (int i = 0; i < count; ++i) {
      Request r;
      r.id = "req-" + std::to_string(i);
      const int len = 3 + static_cast<int>(rng.NextU64() % 70);
      r.prompt_ids.push_back(1);
      for (int j = 1; j < len; ++j)
        r.prompt_ids.push_back(3 + static_cast<int>(rng.NextU64() % 500));
      r.params.max_tokens = 12 + i % 9;
      r.params.ignore_eos = true;
      r.params.temperature = i % 2 ? 0.0f : 0.9f;  // half greedy, half seeded sampling
      r.params.top_p = i % 4 == 0 ? 0.8f : 1.0f;
      r.params.seed = 1000 + i;
      reqs.push_back(r);
    }
    return reqs;
  }

  // `cfg` is cfg_ unless a test changes what the backend does not read (the EOS ids).
  static std::map<std::string, RequestOutput> Run(
      const std::vector<Request>& reqs, int budget, const ModelConfig& cfg = cfg_,
      kernels::WeightType type = kernels::WeightType::kF32, KvDtype kv = KvDtype::kF32) {
    return testing::RunEngine(cfg, *w_, reqs, budget, /*num_blocks=*/128, type, kv);
  }

  // Sixteen prompts together give, under each token budget, what each gives alone.
  static void ExpectTogetherEqualsAlone(kernels::WeightType type, KvDtype kv = KvDtype::kF32) {
    const std::vector<Request> reqs = Prompts(16);
    for (int budget : {2048, 40, 7}) {
      const auto together = Run(reqs, budget, cfg_, type, kv);
      ASSERT_EQ(together.size(), reqs.size());
      for (const Request& r : reqs) {
        const auto alone = Run({r}, 2048, cfg_, type, kv);
        const RequestOutput& t = together.at(r.id);
        EXPECT_EQ(t.completions.at(0).ids, alone.at(r.id).completions.at(0).ids)
            << r.id << " budget " << budget << " " << kernels::WeightTypeName(type) << " KV "
            << KvDtypeName(kv);
        EXPECT_EQ(t.completions.at(0).ids.size(), static_cast<size_t>(r.params.max_tokens));
        EXPECT_EQ(t.completions.at(0).finish_reason, "length");
      }
    }
  }

  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
};

ModelConfig LlmEngineTest::cfg_;
std::unique_ptr<Weights> LlmEngineTest::w_;

TEST_F(LlmEngineTest, SixteenPromptsTogetherEqualEachAlone) {
  ExpectTogetherEqualsAlone(kernels::WeightType::kF32);
}

// The same with bf16 and int8 weights (engine.weight_dtype): the GEMM's contract holds per type.
TEST_F(LlmEngineTest, SixteenPromptsTogetherEqualEachAloneWithBf16Weights) {
  ExpectTogetherEqualsAlone(kernels::WeightType::kBf16);
}

TEST_F(LlmEngineTest, SixteenPromptsTogetherEqualEachAloneWithInt8Weights) {
  ExpectTogetherEqualsAlone(kernels::WeightType::kInt8);
}

// And with a bf16 KV cache (engine.kv_dtype), under fp32 and int8 weights: each value is rounded
// once, when written, whatever the batch, the chunking or the other sequences.
TEST_F(LlmEngineTest, SixteenPromptsTogetherEqualEachAloneWithBf16Kv) {
  ExpectTogetherEqualsAlone(kernels::WeightType::kF32, KvDtype::kBf16);
  ExpectTogetherEqualsAlone(kernels::WeightType::kInt8, KvDtype::kBf16);
}

TEST_F(LlmEngineTest, DifferentSeedsGiveDifferentSamples) {
  std::vector<Request> reqs = Prompts(2);
  reqs[1] = reqs[0];
  reqs[1].id = "other";
  reqs[1].params.seed = 4242;
  const auto out = Run(reqs, 2048);
  EXPECT_NE(out.at(reqs[0].id).completions[0].ids, out.at("other").completions[0].ids);
}

// Llama 3 and Qwen list several EOS ids (generation_config.json): each of them stops, and ends the
// completion; ignore_eos ignores them all.
TEST_F(LlmEngineTest, EveryEosIdStops) {
  std::vector<Request> reqs = Prompts(1);
  reqs[0].params.temperature = 0;
  reqs[0].params.max_tokens = 12;
  const std::vector<int32_t> free_run = Run(reqs, 2048).at(reqs[0].id).completions[0].ids;
  ASSERT_EQ(free_run.size(), 12u);
  const int32_t stop = free_run[5];
  const size_t first = std::find(free_run.begin(), free_run.end(), stop) - free_run.begin();
  int32_t unused = 0;  // an id greedy never produces here, listed first
  while (std::find(free_run.begin(), free_run.end(), unused) != free_run.end()) ++unused;
  ModelConfig cfg = cfg_;
  cfg.eos_token_ids = {unused, stop};
  reqs[0].params.ignore_eos = false;
  const Completion c = Run(reqs, 2048, cfg).at(reqs[0].id).completions[0];
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_EQ(c.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  reqs[0].params.ignore_eos = true;
  EXPECT_EQ(Run(reqs, 2048, cfg).at(reqs[0].id).completions[0].ids, free_run);
}

TEST_F(LlmEngineTest, RejectsWhatCanNeverRun) {
  CpuBackend be(cfg_, *w_);
  EngineOptions opt;
  opt.num_blocks = 4;  // 64 tokens
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(LlmEngine::Create(cfg_, &be, nullptr, opt, &engine).ok());
  Request big;
  big.id = "big";
  big.prompt_ids.assign(60, 5);
  big.params.max_tokens = 10;
  Request empty;
  empty.id = "empty";
  Request bad_id;
  bad_id.id = "bad";
  bad_id.prompt_ids = {1, 999999};
  Request fine;
  fine.id = "fine";
  fine.prompt_ids = {1, 7, 8};
  fine.params.max_tokens = 4;
  for (Request* r : {&big, &empty, &bad_id, &fine}) engine->Add(*r);
  std::map<std::string, RequestOutput> out;
  std::vector<RequestOutput> step;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step(&step).ok());
    for (RequestOutput& o : step) out[o.id] = o;
    step.clear();
  }
  ASSERT_EQ(out.size(), 4u);
  EXPECT_FALSE(out["big"].ok());
  EXPECT_NE(out["big"].error.find("exceed the KV cache"), std::string::npos) << out["big"].error;
  EXPECT_FALSE(out["empty"].ok());
  EXPECT_NE(out["bad"].error.find("outside the vocabulary"), std::string::npos);
  ASSERT_TRUE(out["fine"].ok()) << out["fine"].error;
  EXPECT_LE(out["fine"].completions.at(0).ids.size(), 4u);
}

TEST_F(LlmEngineTest, MoreRequestsThanThePoolHoldsAllComplete) {
  CpuBackend be(cfg_, *w_);
  EngineOptions opt;
  opt.num_blocks = 12;  // room for about three of these at a time
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(LlmEngine::Create(cfg_, &be, nullptr, opt, &engine).ok());
  const std::vector<Request> reqs = Prompts(10);
  for (const Request& r : reqs) engine->Add(r);
  std::vector<RequestOutput> done;
  int steps = 0;
  while (engine->HasWork() && steps++ < 10000) {
    ASSERT_TRUE(engine->Step(&done).ok());
    EXPECT_LE(engine->blocks().num_in_use(), 12);
  }
  for (const RequestOutput& o : done) EXPECT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(done.size(), reqs.size());
  EXPECT_EQ(engine->blocks().num_in_use(), 0);
}

// The work in flight (ForEachInFlight: what llmq status' ETA subtracts): after every step, the
// completion tokens it reports for the unfinished requests and those of the finished ones add up
// to every token sampled, through preemptions (a small pool) and n = 2 samples.
TEST_F(LlmEngineTest, TheTokensInFlightAndFinishedAddUpToThoseSampled) {
  CpuBackend be(cfg_, *w_);
  EngineOptions opt;
  opt.num_blocks = 12;
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(LlmEngine::Create(cfg_, &be, nullptr, opt, &engine).ok());
  std::vector<Request> reqs = Prompts(10);
  reqs[3].n = 2;
  for (const Request& r : reqs) engine->Add(r);
  std::vector<RequestOutput> done;
  int64_t finished_tokens = 0, max_in_flight = 0;
  for (int steps = 0; engine->HasWork() && steps < 10000; ++steps) {
    done.clear();
    ASSERT_TRUE(engine->Step(&done).ok());
    for (const RequestOutput& o : done) {
      ASSERT_TRUE(o.ok()) << o.error;
      for (const Completion& c : o.completions)
        finished_tokens += static_cast<int64_t>(c.ids.size());
    }
    int64_t in_flight = 0;
    std::set<std::string> seen;
    engine->ForEachInFlight([&](const std::string& id, int64_t tokens) {
      EXPECT_TRUE(seen.insert(id).second) << id;
      EXPECT_GT(tokens, 0) << id;
      in_flight += tokens;
    });
    max_in_flight = std::max(max_in_flight, in_flight);
    ASSERT_EQ(in_flight + finished_tokens, engine->stats().tokens_generated) << "step " << steps;
  }
  EXPECT_FALSE(engine->HasWork());
  EXPECT_GT(max_in_flight, 0);
  EXPECT_GT(engine->stats().preemptions, 0) << "the pool must be too small for all at once";
}

}  // namespace
}  // namespace llmq
