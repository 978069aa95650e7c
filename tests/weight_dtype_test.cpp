// engine.weight_dtype and engine.kv_dtype on the CPU backend (issue 26): what `auto` resolves to,
// that a BF16 checkpoint packed as bf16 gives the fp32 packing's bits, the bytes each type holds,
// the accuracy of bf16 and int8 weights and of a bf16 KV cache against fp32 on a real trained model
// (stories260K) and the family models, and the flags, keys and plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/backends/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/tools/model_maker.h"
#include "tests/reference_forward.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using kernels::WeightType;
using json = nlohmann::json;
namespace fs = std::filesystem;

// Logits of every position of `toks`, one sequence in one step, [toks.size(), vocab].
std::vector<float> AllLogits(const ModelConfig& cfg, const Weights& w, WeightType type,
                             const std::vector<int>& toks, KvDtype kv = KvDtype::kF32) {
  CpuBackend be(cfg, w, type, kv);
  const int bs = 16, blocks = (static_cast<int>(toks.size()) + bs - 1) / bs;
  EXPECT_TRUE(be.AllocateKv(blocks, bs).ok());
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  return testing::ForwardOneSequence(be, toks, 0, static_cast<int>(toks.size()), table, bs,
                                     cfg.vocab_size);
}

ModelConfig SmallConfig() {
  ModelConfig cfg;
  DType unused;
  EXPECT_TRUE(ShapeConfig("tiny", &cfg, &unused).ok());
  cfg.vocab_size = 300;
  cfg.max_position_embeddings = 128;
  return cfg;
}

// A random model of `cfg` stored as `dt`, written to the scratch folder `name` and loaded.
std::unique_ptr<Weights> RandomWeights(const ModelConfig& cfg, DType dt, uint64_t seed,
                                       const std::string& name) {
  const std::string dir = testing::TmpDir(name);
  EXPECT_TRUE(WriteRandomModel(cfg, dt, seed, dir).ok());
  std::unique_ptr<Weights> w;
  EXPECT_TRUE(Weights::Load(dir, cfg, &w).ok());
  return w;
}

TEST(WeightDtype, AutoIsTheCheckpointsOwnTypeAndBf16OfABf16CheckpointChangesNoBit) {
  const ModelConfig cfg = SmallConfig();
  std::vector<int> toks;
  for (int i = 0; i < 40; ++i) toks.push_back((i * 37 + 5) % cfg.vocab_size);
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    const auto w = RandomWeights(cfg, dt, 7, std::string("auto_") + DTypeName(dt));
    ASSERT_NE(w, nullptr);
    const WeightType resolved = CpuBackend::ResolveWeightType(WeightDtype::kAuto, cfg, *w);
    EXPECT_EQ(resolved, dt == DType::kBF16 ? WeightType::kBf16 : WeightType::kF32) << DTypeName(dt);
    EXPECT_EQ(CpuBackend::ResolveWeightType(WeightDtype::kInt8, cfg, *w), WeightType::kInt8);
    EXPECT_EQ(CpuBackend::ResolveWeightType(WeightDtype::kBf16, cfg, *w), WeightType::kBf16);
    EXPECT_EQ(CpuBackend::ResolveWeightType(WeightDtype::kF32, cfg, *w), WeightType::kF32);
    if (dt != DType::kBF16) continue;
    // bf16 values widen to fp32 exactly, and the chain is the same: the same logits, bit for bit.
    const std::vector<float> f32 = AllLogits(cfg, *w, WeightType::kF32, toks);
    const std::vector<float> bf16 = AllLogits(cfg, *w, WeightType::kBf16, toks);
    ASSERT_EQ(f32.size(), bf16.size());
    EXPECT_EQ(0, std::memcmp(f32.data(), bf16.data(), f32.size() * sizeof(float)));
  }
}

TEST(WeightDtype, WeightBytesCountTheChosenType) {
  const ModelConfig cfg = SmallConfig();
  const auto w = RandomWeights(cfg, DType::kF32, 8, "bytes");
  ASSERT_NE(w, nullptr);
  // What the packed matrices (the embedding and the LM head too) take beside the fp32 norms.
  const uint64_t norms = (2ull * cfg.num_layers + 1) * cfg.hidden_size * 4;
  uint64_t matrices[3] = {};
  for (WeightType t : {WeightType::kF32, WeightType::kBf16, WeightType::kInt8}) {
    CpuBackend be(cfg, *w, t);  // checks what it holds against WeightBytesFor itself
    EXPECT_EQ(be.weight_bytes(), CpuBackend::WeightBytesFor(cfg, t)) << WeightTypeName(t);
    EXPECT_EQ(be.weight_type(), t);
    matrices[static_cast<int>(t)] = be.weight_bytes() - norms;
  }
  EXPECT_EQ(matrices[0], 2 * matrices[1]);  // bf16: half of fp32
  // int8: a quarter, plus one fp32 scale per (padded) output column and the embedding in bf16.
  EXPECT_GT(matrices[2], matrices[0] / 4);
  EXPECT_LT(matrices[2], matrices[0] / 4 + matrices[0] / 16);
}

// A backend's load drops each matrix's mapped pages once packed (Weights::ReleasePages); what is
// read afterwards (a test's reference forward, another backend) faults in the same bytes again.
TEST(WeightDtype, ReleasedPagesReadBackUnchanged) {
  const ModelConfig cfg = SmallConfig();
  const auto w = RandomWeights(cfg, DType::kBF16, 9, "release");
  ASSERT_NE(w, nullptr);
  const std::string name = LayerTensorName(1, "mlp.up_proj.weight");
  const std::vector<float> before = w->ToF32(name);
  w->ReleasePages(name);
  EXPECT_EQ(w->ToF32(name), before);
  std::vector<int> toks(20);
  for (int i = 0; i < 20; ++i) toks[i] = (i * 11 + 3) % cfg.vocab_size;
  const std::vector<float> first = AllLogits(cfg, *w, WeightType::kInt8, toks);  // releases all
  EXPECT_EQ(AllLogits(cfg, *w, WeightType::kInt8, toks), first);
}

struct Accuracy {
  double max_abs = 0, mean_abs = 0;  // |logit - fp32 logit| over every position and token
  double mean_kl = 0, max_kl = 0;    // KL(fp32 || type) of each position's next-token distribution
  int positions = 0, agree = 0;      // positions whose argmax is the fp32 one
  double share = 0;                  // bounds only: the least share of positions that agree
};

// log softmax of one row, in double.
std::vector<double> LogSoftmax(const float* x, int n) {
  const double m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = x[i] - m - std::log(s);
  return out;
}

// Adds the positions of one sequence: `ref` and `got` are [positions, vocab].
void Compare(const std::vector<float>& ref, const std::vector<float>& got, int vocab, Accuracy* acc,
             double* abs_sum) {
  const int rows = static_cast<int>(ref.size() / vocab);
  for (int r = 0; r < rows; ++r) {
    const float* a = &ref[static_cast<size_t>(r) * vocab];
    const float* b = &got[static_cast<size_t>(r) * vocab];
    for (int v = 0; v < vocab; ++v) {
      const double d = std::fabs(double{a[v]} - b[v]);
      acc->max_abs = std::max(acc->max_abs, d);
      *abs_sum += d;
    }
    const std::vector<double> lp = LogSoftmax(a, vocab), lq = LogSoftmax(b, vocab);
    double kl = 0;
    for (int v = 0; v < vocab; ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
    acc->mean_kl += kl;
    acc->max_kl = std::max(acc->max_kl, kl);
    acc->agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    ++acc->positions;
  }
}

// Over every reference of the shared model in `dir` (a greedy run: its prompt, then its
// completion, as one text), each position's logits of `type` weights and a `kv` cache against
// fp32's.
Accuracy MeasureOn(const std::string& dir, WeightType type, KvDtype kv = KvDtype::kF32) {
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  EXPECT_TRUE(LoadModelConfig(dir, &cfg).ok());
  EXPECT_TRUE(Weights::Load(dir, cfg, &w).ok());
  std::vector<fs::path> refs;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "reference"))
    if (e.path().extension() == ".json") refs.push_back(e.path());
  std::sort(refs.begin(), refs.end());
  EXPECT_GE(refs.size(), 2u);
  Accuracy acc;
  double abs_sum = 0;
  for (const fs::path& p : refs) {
    std::ifstream f(p);
    const json ref = json::parse(f);
    std::vector<int> toks = ref["prompt_ids"].get<std::vector<int>>();
    for (int t : ref["completion_ids"].get<std::vector<int>>()) toks.push_back(t);
    toks.resize(std::min<size_t>(toks.size(), cfg.max_position_embeddings));
    Compare(AllLogits(cfg, *w, WeightType::kF32, toks), AllLogits(cfg, *w, type, toks, kv),
            cfg.vocab_size, &acc, &abs_sum);
  }
  acc.mean_abs = abs_sum / (static_cast<double>(acc.positions) * cfg.vocab_size);
  acc.mean_kl /= acc.positions;
  std::printf(
      "%s %s weights, %s KV vs f32 over %d positions: logit error max %.4g mean %.4g; KL mean "
      "%.4g max %.4g; greedy agreement %d/%d (%.2f%%)\n",
      fs::path(dir).filename().c_str(), WeightTypeName(type), KvDtypeName(kv), acc.positions,
      acc.max_abs, acc.mean_abs, acc.mean_kl, acc.max_kl, acc.agree, acc.positions,
      100.0 * acc.agree / acc.positions);
  return acc;
}

// `acc` within bounds of the same fields (the agreement as a share of the positions).
void ExpectWithin(const Accuracy& acc, const Accuracy& bound_with_share, const char* what) {
  const Accuracy& b = bound_with_share;
  EXPECT_LT(acc.max_abs, b.max_abs) << what;
  EXPECT_LT(acc.mean_abs, b.mean_abs) << what;
  EXPECT_LT(acc.mean_kl, b.mean_kl) << what;
  EXPECT_LT(acc.max_kl, b.max_kl) << what;
  EXPECT_GE(acc.agree, acc.positions * b.share) << what;
}

// Measured on 2026-12-02 over the 5 references' 671 positions (teacher-forced: fp32 reproduces
// llama2.c's greedy completions, so fp32's argmax is the reference's next token there); every ISA
// path gives the same bits:
//   bf16: logit error max 0.1287 mean 0.0157; KL mean 3.73e-05 max 8.02e-04; agreement 669/671
//   int8: logit error max 0.3551 mean 0.0577; KL mean 3.67e-04 max 5.32e-03; agreement 664/671
// (the embedding read from the packed table: bf16 for both; with it in int8, int8 measured max
// 0.3965 here and doubled the KL on the family models below.)
// The bounds leave about 3x margin on the errors; agreement: issue 26's >= 99% (bf16) and, with
// margin under the measured 98.96%, >= 97% (int8; the issue asks >= 95%).
TEST(WeightDtype, Stories260KAccuracyAgainstF32) {
  const std::string dir = testing::SharedModel("stories260K");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "stories260K");
  const Accuracy bf16 = MeasureOn(dir, WeightType::kBf16);
  ExpectWithin(bf16,
               {.max_abs = 0.4, .mean_abs = 0.05, .mean_kl = 1.5e-4, .max_kl = 3e-3, .share = 0.99},
               "bf16");
  const Accuracy int8 = MeasureOn(dir, WeightType::kInt8);
  ExpectWithin(int8,
               {.max_abs = 1.0, .mean_abs = 0.2, .mean_kl = 1.5e-3, .max_kl = 2e-2, .share = 0.97},
               "int8");
}

// The shared family models (random weights, BF16 checkpoints, each family's layers: q/k/v biases,
// q/k norm, tied head, GQA): bf16 is their own type, so it changes no bit; int8 is measured.
// Measured on 2026-12-02, int8 vs f32 (positions: each model's references as one text each):
//   tiny-llama3  807 positions: logit error max 0.246 mean 0.034; KL mean 7.4e-4 max 5.5e-3; 98.51%
//   tiny-llama32  80 positions: logit error max 4.134 mean 0.221; KL mean 2.1e-2 max 0.170; 90.00%
//   tiny-qwen2    81 positions: logit error max 2.707 mean 0.204; KL mean 1.7e-2 max 0.067; 93.83%
//   tiny-qwen3   149 positions: logit error max 1.533 mean 0.149; KL mean 9.8e-3 max 0.075; 93.96%
// (random weights: flat next-token distributions with small top-2 margins, so int8's error shows
// more than on stories260K's trained ones). Bounds, one set for all four: about 3x the largest
// error measured; agreement >= 80% (the lowest measured is 90% of only 80 positions).
TEST(WeightDtype, FamilyModelsBf16IsExactInt8IsMeasured) {
  for (const char* name : {"tiny-llama3", "tiny-llama32", "tiny-qwen2", "tiny-qwen3"}) {
    const std::string dir = testing::SharedModel(name);
    LLMQ_SKIP_WITHOUT_SHARED(dir, name);
    const Accuracy bf16 = MeasureOn(dir, WeightType::kBf16);
    EXPECT_EQ(bf16.max_abs, 0.0) << name;
    EXPECT_EQ(bf16.agree, bf16.positions) << name;
    const Accuracy int8 = MeasureOn(dir, WeightType::kInt8);
    ExpectWithin(
        int8, {.max_abs = 12, .mean_abs = 0.7, .mean_kl = 0.07, .max_kl = 0.5, .share = 0.8}, name);
  }
}

// llmq plan shows each choice's bytes and KV room (the chosen one's as the plan); run says the
// type it loaded at start-up; an unknown value is refused naming the flag or the key.
TEST(WeightDtype, PlanRunAndRefusals) {
  const std::string dir = testing::CurrentTestDir(), model = dir + "/m";
  ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model, "--dtype", "bf16"})
                .exit_code,
            0);
  const auto plan = testing::RunLlmq({"plan", "--model", model, "--memory", "1G", "--backend",
                                      "cpu", "--weight-dtype", "int8", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const json j = json::parse(plan.out);
  EXPECT_EQ(j["weight_dtype"], "int8");
  const json& c = j["weight_choices"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["weight_dtype"], "f32");
  EXPECT_EQ(c[1]["weight_dtype"], "bf16");
  EXPECT_EQ(c[2]["weight_dtype"], "int8");
  EXPECT_EQ(j["weights_bytes_resident"], c[2]["weights_bytes_resident"]);
  EXPECT_EQ(j["kv_tokens"], c[2]["kv_tokens"]);
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(c[i]["weights_bytes_resident"], c[i + 1]["weights_bytes_resident"]);
    EXPECT_LE(c[i]["kv_cache_bytes"], c[i + 1]["kv_cache_bytes"]);
  }
  // auto on a BF16 checkpoint: bf16.
  const auto auto_plan =
      testing::RunLlmq({"plan", "--model", model, "--memory", "1G", "--backend", "cpu", "--json"});
  ASSERT_EQ(auto_plan.exit_code, 0) << auto_plan.err;
  EXPECT_EQ(json::parse(auto_plan.out)["weight_dtype"], "bf16");

  const std::string in = dir + "/in.jsonl";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 3}})"
                    << "\n";
  const auto run =
      testing::RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model, "--backend", "cpu",
                        "--weight-dtype", "int8", "--no-progress"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("; weights int8"), std::string::npos) << run.err;

  const auto bad =
      testing::RunLlmq({"generate", "--model", model, "--prompt", "hi", "--weight-dtype", "q4"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--weight-dtype"), std::string::npos) << bad.err;
  const std::string config = dir + "/llmq.yaml";
  std::ofstream(config) << "engine:\n  weight_dtype: fp8\n";
  const auto bad_key = testing::RunLlmq({"run", in, "-o", dir + "/out2.jsonl", "--model", model,
                                         "--config", config, "--no-progress"});
  EXPECT_NE(bad_key.exit_code, 0);
  EXPECT_NE(bad_key.err.find("engine.weight_dtype: must be one of auto, f32, bf16, int8"),
            std::string::npos)
      << bad_key.err;
}

// A bf16 KV cache against the fp32 one, weights in fp32, over the same positions as above.
// Measured on 2026-12-03 (every ISA path gives the same bits):
//   stories260K  671 positions: logit error max 0.291 mean 0.0191; KL mean 4.2e-5
//   max 1.7e-3; 99.85% tiny-llama3  807 positions: logit error max 0.022 mean 0.0016; KL
//   mean 1.6e-6 max 2.7e-5; 100% tiny-llama32  80 positions: logit error max 0.782 mean 0.0391; KL
//   mean 9.5e-4 max 8.6e-3; 98.75% tiny-qwen2    81 positions: logit error max 0.622 mean 0.0385;
//   KL mean 8.0e-4 max 3.9e-3; 98.77% tiny-qwen3   149 positions: logit error max 0.287 mean
//   0.0200; KL mean 1.9e-4 max 1.2e-3; 99.33%
// Bounds: about 3x the errors measured; agreement >= 99% on stories260K (as bf16 weights) and
// >= 95% on the random-weight family models (one position of 80 is 1.25%).
TEST(KvDtype, Bf16CacheAccuracyAgainstF32) {
  const std::string stories = testing::SharedModel("stories260K");
  LLMQ_SKIP_WITHOUT_SHARED(stories, "stories260K");
  ExpectWithin(MeasureOn(stories, WeightType::kF32, KvDtype::kBf16),
               {.max_abs = 0.9, .mean_abs = 0.06, .mean_kl = 1.5e-4, .max_kl = 6e-3, .share = 0.99},
               "stories260K");
  for (const char* name : {"tiny-llama3", "tiny-llama32", "tiny-qwen2", "tiny-qwen3"}) {
    const std::string dir = testing::SharedModel(name);
    LLMQ_SKIP_WITHOUT_SHARED(dir, name);
    ExpectWithin(MeasureOn(dir, WeightType::kF32, KvDtype::kBf16),
                 {.max_abs = 2.5, .mean_abs = 0.12, .mean_kl = 3e-3, .max_kl = 0.03, .share = 0.95},
                 name);
  }
}

// The same kv_cache_memory holds twice the tokens in bf16 (the start-up line says the pool and the
// type); llmq plan counts 2 bytes per element; the cuda backend's cache follows --precision; an
// unknown value is refused naming the flag or the key.
TEST(KvDtype, PoolPlanAndRefusals) {
  const std::string dir = testing::CurrentTestDir(), model = dir + "/m";
  ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model}).exit_code, 0);
  const std::string in = dir + "/in.jsonl";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 3}})"
                    << "\n";
  // "KV cache N blocks of 16 = T tokens (...)" of a run with `kv` (empty: the default).
  auto pool_blocks = [&](const std::string& kv, const std::string& out) -> long {
    std::vector<std::string> args = {
        "run",          in,          "-o",  dir + "/" + out,     "--model",
        model,          "--backend", "cpu", "--kv-cache-memory", "4MiB",
        "--no-progress"};
    if (!kv.empty()) args.insert(args.end(), {"--kv-dtype", kv});
    const auto run = testing::RunLlmqWith({}, args);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_NE(run.err.find("; KV cache " + (kv.empty() ? std::string("f32") : kv)),
              std::string::npos)
        << run.err;
    const size_t at = run.err.find("KV cache ");
    return at == std::string::npos ? -1 : std::atol(run.err.c_str() + at + 9);
  };
  const long f32 = pool_blocks("", "default.jsonl"), bf16 = pool_blocks("bf16", "bf16.jsonl");
  EXPECT_GT(f32, 0);
  EXPECT_EQ(pool_blocks("f32", "f32.jsonl"), f32);
  EXPECT_EQ(bf16, 2 * f32);

  auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "--model", model, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::RunLlmqWith({}, args);
  };
  const auto p32 = plan({"--backend", "cpu", "--memory", "1G"}),
             p16 = plan({"--backend", "cpu", "--memory", "1G", "--kv-dtype", "bf16"});
  ASSERT_EQ(p32.exit_code, 0) << p32.err;
  ASSERT_EQ(p16.exit_code, 0) << p16.err;
  EXPECT_EQ(json::parse(p32.out)["kv_dtype"], "f32");
  EXPECT_EQ(json::parse(p16.out)["kv_dtype"], "bf16");
  EXPECT_EQ(2 * json::parse(p16.out)["kv_bytes_per_token"].get<int64_t>(),
            json::parse(p32.out)["kv_bytes_per_token"].get<int64_t>());
  const auto gpu = plan({"--backend", "cuda", "--memory", "80G", "--kv-dtype", "f32"});
  EXPECT_NE(gpu.exit_code, 0);
  EXPECT_NE(gpu.err.find("follows --precision bf16"), std::string::npos) << gpu.err;
  EXPECT_EQ(plan({"--backend", "cuda", "--memory", "80G", "--kv-dtype", "bf16"}).exit_code, 0);

  const auto bad =
      testing::RunLlmq({"generate", "--model", model, "--prompt", "hi", "--kv-dtype", "fp8"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--kv-dtype"), std::string::npos) << bad.err;
  const std::string config = dir + "/llmq.yaml";
  std::ofstream(config) << "engine:\n  kv_dtype: q8\n";
  const auto bad_key = testing::RunLlmq({"run", in, "-o", dir + "/out2.jsonl", "--model", model,
                                         "--config", config, "--no-progress"});
  EXPECT_NE(bad_key.exit_code, 0);
  EXPECT_NE(bad_key.err.find("engine.kv_dtype: must be one of auto, f32, bf16"), std::string::npos)
      << bad_key.err;
}

}  // namespace
}  // namespace llmq
