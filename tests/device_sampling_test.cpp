// Sampling through the seam (Backend::ForwardSample): the engine draws each row's u from the
// request's own stream and hands the backend RowSampling; the ids must equal the host sampler's.
// The backend here is the CPU backend sampling "on its device" with SampleTokenWithDraw (the
// reference a GPU sampler is held to, tests/gpu/), so every difference is the engine's plumbing:
// the order and number of draws, which steps may sample on the device, forks, logprobs.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/sampling/sampler.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "engine/text/tokenizer.h"
#include "kernels/cpu/ops.h"
#include "tests/small_model.h"

namespace llmq {
namespace {

// The CPU backend, claiming to sample on its device and, with `applies_masks`, to apply a
// constrained step's token masks there: it computes them after its forward pass (as the CUDA
// backend does while its device runs it) and applies them to its logits before sampling or
// returning them. Counts which path each step took.
class HostSampledBackend : public CpuBackend {
 public:
  HostSampledBackend(const ModelConfig& cfg, const Weights& w, bool applies_masks = false)
      : CpuBackend(cfg, w), vocab_(cfg.vocab_size), applies_masks_(applies_masks) {}
  bool samples_on_device() const override { return true; }
  bool applies_masks() const override { return applies_masks_; }
  Status Forward(const StepBatch& b, float* logits) override {
    ++forward_calls;
    masked_forward_calls += b.masks != nullptr;
    LLMQ_RETURN_IF_ERROR(CpuBackend::Forward(b, logits));
    return applies_masks_ ? ApplyMasks(b, logits) : Status::Ok();
  }
  Status ForwardSample(const StepBatch& b, const RowSampling* rows, int32_t* ids) override {
    ++sample_calls;
    masked_sample_calls += b.masks != nullptr;
    if (b.masks != nullptr && !applies_masks_)
      return Status::Internal("a constrained step sampled by a backend that ignores its masks");
    std::vector<float> logits(b.logits_rows.size() * static_cast<size_t>(vocab_));
    LLMQ_RETURN_IF_ERROR(CpuBackend::Forward(b, logits.data()));
    LLMQ_RETURN_IF_ERROR(ApplyMasks(b, logits.data()));
    for (size_t i = 0; i < b.logits_rows.size(); ++i)
      ids[i] = SampleRow(&logits[i * vocab_], vocab_, rows[i]);
    return Status::Ok();
  }
  int forward_calls = 0, sample_calls = 0;
  int masked_forward_calls = 0, masked_sample_calls = 0;
  int computed_before = 0;  // steps whose masks someone computed before the backend did

 private:
  Status ApplyMasks(const StepBatch& b, float* logits) {
    if (b.masks == nullptr) return Status::Ok();
    computed_before += b.masks->computed();
    const uint32_t* words = b.masks->Compute();
    kernels::ApplyTokenBitmask(logits, static_cast<int64_t>(b.logits_rows.size()), vocab_, words,
                               b.masks->words_per_row());
    return Status::Ok();
  }
  int vocab_;
  bool applies_masks_;
};

// Prefill chunks of 64 tokens: mixed steps, and steps that sample nothing.
std::map<std::string, RequestOutput> RunAll(const ModelConfig& cfg, Backend* be,
                                            const std::vector<Request>& reqs) {
  return testing::RunEngineOn(cfg, be, reqs, /*budget=*/64, /*num_blocks=*/128);
}

// Requests of every kind: greedy, seeded sampling with each filter, n = 3 samples (their first
// token comes from shared logits), logprobs, penalties.
std::vector<Request> Mixed(int count, bool host_only_kinds) {
  std::vector<Request> reqs;
  Rng rng(7);
  for (int i = 0; i < count; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt_ids.push_back(1);
    const int len = 2 + static_cast<int>(rng.NextU64() % 40);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(3 + static_cast<int>(rng.NextU64() % 400));
    r.params.max_tokens = 6 + i % 7;
    r.params.ignore_eos = true;
    r.params.seed = 500 + i;
    r.params.temperature = i % 5 == 0 ? 0.f : 0.7f + 0.1f * (i % 4);
    if (i % 5 == 1) r.params.top_k = 20;
    if (i % 5 == 2) r.params.top_p = 0.85f;
    if (i % 5 == 3) r.params.min_p = 0.05f;
    if (i % 5 == 4) {
      r.params.top_k = 50;
      r.params.top_p = 0.9f;
    }
    if (host_only_kinds) {  // short, so that the steps after them sample on the device
      if (i % 6 == 1) r.n = 3;
      if (i % 6 == 2) r.params.logprobs = 2;
      if (i % 6 == 3) r.params.frequency_penalty = 0.5f;
      if (i % 6 >= 1 && i % 6 <= 3) r.params.max_tokens = 3;
    }
    reqs.push_back(r);
  }
  return reqs;
}

class DeviceSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testing::MakeSmallModel("device_sampling", 17, 256, &cfg_, &w_); }
  static void TearDownTestSuite() { w_.reset(); }
  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
};
ModelConfig DeviceSamplingTest::cfg_;
std::unique_ptr<Weights> DeviceSamplingTest::w_;

// `reqs` on the CPU backend (want) and on one sampling "on its device" (got, checked to have the
// same tokens), with that backend's call counts.
struct Both {
  std::map<std::string, RequestOutput> want, got;
  int forward_calls = 0, sample_calls = 0;
};
Both RunBoth(const ModelConfig& cfg, const Weights& w, const std::vector<Request>& reqs) {
  CpuBackend host(cfg, w);
  HostSampledBackend on_device(cfg, w);
  Both r;
  r.want = RunAll(cfg, &host, reqs);
  r.got = RunAll(cfg, &on_device, reqs);
  testing::ExpectSameIds(r.got, r.want, "host vs device sampling");
  r.forward_calls = on_device.forward_calls;
  r.sample_calls = on_device.sample_calls;
  return r;
}

TEST_F(DeviceSamplingTest, IdsEqualTheHostSamplersWhenEveryStepSamplesOnTheDevice) {
  const Both r = RunBoth(cfg_, *w_, Mixed(24, false));
  // Steps that sample nothing (prefill chunks that end inside a prompt) take Forward.
  EXPECT_GT(r.sample_calls, 0);
}

TEST_F(DeviceSamplingTest, RowsThatNeedTheLogitsKeepTheHostPathAndTheStreamsStayInStep) {
  const Both r = RunBoth(cfg_, *w_, Mixed(30, true));
  for (const auto& [id, o] : r.got) {
    for (size_t k = 0; k < o.completions.size(); ++k) {
      EXPECT_EQ(o.completions[k].logprobs.size(), r.want.at(id).completions[k].logprobs.size())
          << id;
    }
  }
  EXPECT_GT(r.forward_calls, 0);
  // Once the requests with logprobs and penalties are done, the rest sample on the device.
  EXPECT_GT(r.sample_calls, 0);
}

// Structured outputs (issue 24) on stories260K: a real tokenizer (byte fallback) for a JSON
// grammar; constrained requests, greedy and sampled, beside longer unconstrained ones.
class DeviceSamplingMasks : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::SharedModel("stories260K");
    LLMQ_SKIP_WITHOUT_SHARED(dir, "stories260K");
    ASSERT_TRUE(LoadModelConfig(dir, &cfg_).ok());
    ASSERT_TRUE(Weights::Load(dir, cfg_, &w_).ok());
    ASSERT_TRUE(Tokenizer::Load(dir, &tok_).ok());
    Grammar g;
    ASSERT_TRUE(CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 10}, "n": {"type": "integer"}},
        "required": ["name", "n"], "additionalProperties": false})"),
                                  &g)
                    .ok());
    std::shared_ptr<CompiledGrammar> grammar;
    ASSERT_TRUE(CompiledGrammar::Compile(
                    std::move(g),
                    std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok_)), &grammar)
                    .ok());
    for (int i = 0; i < 10; ++i) {
      Request r;
      r.id = "r" + std::to_string(i);
      r.prompt_ids = tok_->Encode("Once upon a time " + std::to_string(i));
      r.params.seed = 40 + i;
      r.params.temperature = i % 3 == 0 ? 0.f : 0.9f;
      r.params.top_p = i % 3 == 2 ? 0.9f : 1.f;
      if (i < kConstrained) {
        r.grammar = grammar;
        r.params.max_tokens = 30;
      } else {  // outlive the constrained ones: the last steps have no masks
        r.params.max_tokens = 60;
        r.params.ignore_eos = true;
      }
      reqs_.push_back(r);
    }
  }
  static constexpr int kConstrained = 6;  // reqs_[0, 6) have the grammar
  ModelConfig cfg_;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<Request> reqs_;
};

// A constrained step is sampled on the device only by a backend that applies its masks there
// (applies_masks), which finds them not yet computed after its forward pass; any other backend
// gets Forward for it, the masks applied on the host, and ForwardSample for the steps without a
// constrained row. Both give the ids of the CPU backend (masks on the host after Forward).
TEST_F(DeviceSamplingMasks, AConstrainedStepSamplesOnTheDeviceOnlyWhereTheBackendAppliesMasks) {
  CpuBackend host(cfg_, *w_);
  const auto want = testing::RunEngineOn(cfg_, &host, reqs_, 64, 128, tok_.get());
  for (int i = 0; i < kConstrained; ++i) {  // under the grammar: stories never open a brace
    const std::string text = want.at(reqs_[i].id).completions.at(0).text;
    EXPECT_EQ(text.substr(0, 1), "{") << text;
  }
  for (bool applies : {true, false}) {
    SCOPED_TRACE(applies ? "applies masks" : "ignores masks");
    HostSampledBackend be(cfg_, *w_, applies);
    const auto got = testing::RunEngineOn(cfg_, &be, reqs_, 64, 128, tok_.get());
    testing::ExpectSameIds(got, want, "host vs device sampling under masks");
    EXPECT_EQ(be.computed_before, 0);
    EXPECT_GT(be.sample_calls, 0);
    if (applies) {
      EXPECT_GT(be.masked_sample_calls, 0);
      EXPECT_EQ(be.masked_forward_calls, 0);  // nothing here needs the logits on the host
    } else {
      EXPECT_EQ(be.masked_sample_calls, 0);
      EXPECT_GT(be.masked_forward_calls, 0);
    }
  }
}

// Claims to apply token masks but samples without ever computing them (a broken backend).
class ForgetsMasks final : public HostSampledBackend {
 public:
  ForgetsMasks(const ModelConfig& cfg, const Weights& w) : HostSampledBackend(cfg, w, true) {}
  Status ForwardSample(const StepBatch& b, const RowSampling* rows, int32_t* ids) override {
    StepBatch unmasked = b;
    unmasked.masks = nullptr;
    return HostSampledBackend::ForwardSample(unmasked, rows, ids);
  }
};

// Its constrained step fails with a Status naming the fault (the engine fails that step's
// requests), never draws without the grammar or reads forced tokens that were never found.
TEST_F(DeviceSamplingMasks, MasksTheBackendNeverComputedFailTheStep) {
  ForgetsMasks be(cfg_, *w_);
  EngineOptions opt;
  opt.num_blocks = 128;
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(LlmEngine::Create(cfg_, &be, tok_.get(), opt, &engine).ok());
  engine->Add(reqs_[0]);
  std::vector<RequestOutput> out;
  int failed_steps = 0;
  while (engine->HasWork()) {
    const Status st = engine->Step(&out);
    if (st.ok()) continue;
    ++failed_steps;
    EXPECT_NE(st.message().find("did not compute the step's token masks"), std::string::npos)
        << st.ToString();
  }
  EXPECT_EQ(failed_steps, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].error.find("did not compute the step's token masks"), std::string::npos)
      << out[0].error;
}

TEST(SampleTokenWithDraw, IsSampleTokenWithTheDrawTakenFromTheStream) {
  std::vector<float> logits(300);
  Rng lr(3);
  for (float& x : logits) x = static_cast<float>(lr.NextDouble() * 8.0 - 4.0);
  for (int c = 0; c < 200; ++c) {
    SamplingParams p;
    p.temperature = c % 7 == 0 ? 0.f : 0.3f + 0.01f * c;
    p.top_k = c % 3 == 0 ? 10 + c : 0;
    p.top_p = c % 4 == 0 ? 0.8f : 1.f;
    p.min_p = c % 5 == 0 ? 0.1f : 0.f;
    Rng a(1000 + c), b(1000 + c);
    const int want = SampleToken(logits.data(), 300, p, &a);
    const double u = IsGreedy(p) ? 0.0 : b.NextDouble();
    EXPECT_EQ(SampleTokenWithDraw(logits.data(), 300, p, u), want) << c;
    EXPECT_EQ(a.NextU64(), b.NextU64()) << "the streams advanced differently, case " << c;
  }
}

}  // namespace
}  // namespace llmq
