// The whole CUDA forward against independent references: stories260K's reference completions
// (fp32: every token; bf16: the first 16), tiny-llama3's float64 logits, and the CPU backend's
// logits on every row of chunked prefill and decode steps for each family (Llama, Qwen2 biases,
// Qwen3 q/k norms, untied heads, llama3 rope scaling). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/backends/cpu_backend.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/sampling/sampler.h"
#include "engine/tools/model_maker.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "tests/gpu/gpu_test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Precision = CudaBackendOptions::Precision;

std::string Shared(const std::string& model) {
  return std::string(LLMQ_SHARED_DIR) + "/models/" + model;
}
#define LLMQ_REQUIRE_SHARED(dir)                                                      \
  do {                                                                                \
    if (!fs::exists(fs::path(dir) / "config.json"))                                   \
      GTEST_SKIP() << (dir)                                                           \
                   << " is absent (the shared models are read from ../shared, never " \
                      "copied into the repo)";                                        \
  } while (0)

// In a test body: skips without a GPU or without the shared model `name`; else loads it.
#define LLMQ_GPU_AND_SHARED_MODEL(name, dir, cfg, w) \
  LLMQ_REQUIRE_GPU();                                \
  const std::string dir = Shared(name);              \
  LLMQ_REQUIRE_SHARED(dir);                          \
  ModelConfig cfg;                                   \
  std::unique_ptr<Weights> w;                        \
  ASSERT_NO_FATAL_FAILURE(Load(dir, &cfg, &w))

json ReadJson(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

void Load(const std::string& dir, ModelConfig* cfg, std::unique_ptr<Weights>* w) {
  ASSERT_TRUE(LoadModelConfig(dir, cfg).ok()) << dir;
  ASSERT_TRUE(Weights::Load(dir, *cfg, w).ok()) << dir;
}

std::vector<fs::path> References(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "reference"))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A handful of sequences driven through a backend with a trivial paging: sequence i owns blocks
// [i * per_seq, (i + 1) * per_seq). Each step feeds every sequence the tokens it has not yet fed
// (up to `chunk`) and asks for the logits of every fed row (`all_rows`) or only each sequence's
// last row.
struct Driver {
  int bs = 16, per_seq = 0;
  std::vector<std::vector<int32_t>> tokens;  // per sequence, everything known so far
  std::vector<int> fed;                      // tokens of each sequence already in the cache

  Driver(int block_size, int max_len, int num_seqs) : bs(block_size) {
    per_seq = (max_len + bs - 1) / bs;
    tokens.resize(num_seqs);
    fed.assign(num_seqs, 0);
  }
  int num_blocks() const { return per_seq * static_cast<int>(tokens.size()); }
  StepBatch Step(int chunk, bool all_rows) const {
    StepBatch b;
    b.Clear();
    b.max_blocks = per_seq;
    for (size_t s = 0; s < tokens.size(); ++s) {
      const int from = fed[s], to = std::min<int>(tokens[s].size(), fed[s] + chunk);
      for (int p = from; p < to; ++p) {
        if (all_rows || p == to - 1) b.logits_rows.push_back(b.num_tokens());
        b.token_ids.push_back(tokens[s][p]);
        b.positions.push_back(p);
        b.slot_mapping.push_back((static_cast<int>(s) * per_seq + p / bs) * bs + p % bs);
      }
      b.query_start.push_back(b.num_tokens());
      b.context_lens.push_back(to);
      for (int k = 0; k < per_seq; ++k) b.block_tables.push_back(static_cast<int>(s) * per_seq + k);
    }
    return b;
  }
  void Advance(int chunk) {
    for (size_t s = 0; s < tokens.size(); ++s)
      fed[s] = std::min<int>(tokens[s].size(), fed[s] + chunk);
  }
};

std::unique_ptr<CudaBackend> MakeCuda(const ModelConfig& cfg, const Weights& w, Precision p) {
  CudaBackendOptions opt;
  opt.precision = p;
  std::unique_ptr<CudaBackend> b;
  const Status st = CreateCudaBackendTyped(cfg, w, opt, &b);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return b;
}

// Greedy generation of `n` tokens after each prompt, all prompts in the same steps, with the ids
// picked on the device.
std::vector<std::vector<int32_t>> Greedy(CudaBackend& be, const std::vector<std::vector<int>>& p,
                                         int n, int max_len) {
  Driver d(16, max_len, static_cast<int>(p.size()));
  EXPECT_TRUE(be.AllocateKv(d.num_blocks(), 16).ok());
  for (size_t s = 0; s < p.size(); ++s) d.tokens[s].assign(p[s].begin(), p[s].end());
  std::vector<std::vector<int32_t>> out(p.size());
  for (int step = 0; step < n; ++step) {
    const StepBatch b = d.Step(1 << 20, false);
    std::vector<int32_t> ids(p.size());
    const Status st = be.ForwardArgmax(b, ids.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return out;
    d.Advance(1 << 20);
    for (size_t s = 0; s < p.size(); ++s) {
      out[s].push_back(ids[s]);
      d.tokens[s].push_back(ids[s]);
    }
  }
  return out;
}

void CheckStoriesReferences(Precision precision, int check_tokens) {
  const std::string dir = Shared("stories260K");
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  ASSERT_NO_FATAL_FAILURE(Load(dir, &cfg, &w));
  auto be = MakeCuda(cfg, *w, precision);
  ASSERT_TRUE(be);
  std::vector<std::vector<int>> prompts, want;
  std::vector<std::string> names;
  for (const fs::path& f : References(dir)) {
    const json ref = ReadJson(f);
    prompts.push_back(ref["prompt_ids"].get<std::vector<int>>());
    auto c = ref["completion_ids"].get<std::vector<int>>();
    if (check_tokens > 0 && static_cast<int>(c.size()) > check_tokens) c.resize(check_tokens);
    want.push_back(c);
    names.push_back(f.filename().string());
  }
  ASSERT_GE(prompts.size(), 5u);
  // One sequence at a time, then all of them in the same steps.
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto got =
        Greedy(*be, {prompts[i]}, static_cast<int>(want[i].size()), cfg.max_position_embeddings);
    EXPECT_EQ(std::vector<int>(got[0].begin(), got[0].end()), want[i]) << names[i] << " alone";
  }
  size_t longest = 0;
  for (const auto& c : want) longest = std::max(longest, c.size());
  const auto all = Greedy(*be, prompts, static_cast<int>(longest), cfg.max_position_embeddings);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(std::vector<int>(all[i].begin(), all[i].begin() + want[i].size()), want[i])
        << names[i] << " batched";
}

TEST(CudaBackend, Stories260KFp32ReproducesEveryReferenceCompletion) {
  LLMQ_REQUIRE_GPU();
  LLMQ_REQUIRE_SHARED(Shared("stories260K"));
  CheckStoriesReferences(Precision::kFp32, 0);
}

TEST(CudaBackend, Stories260KBf16MatchesTheFirst16Tokens) {
  LLMQ_REQUIRE_GPU();
  LLMQ_REQUIRE_SHARED(Shared("stories260K"));
  CheckStoriesReferences(Precision::kBf16, 16);
}

// Logits of every row of a prefill, a chunked prefill over a cached prefix and decode steps, CUDA
// vs the CPU backend on the same tokens (teacher-forced, so both see the same inputs).
// With `prefill_gemm_min_rows` 2 the prefill chunks take the matrix-product attention.
void CheckAgainstCpu(const ModelConfig& cfg, const Weights& w, Precision precision, double tol,
                     int prefill_gemm_min_rows = 64) {
  CpuBackend cpu(cfg, w);
  auto gpu = MakeCuda(cfg, w, precision);
  ASSERT_TRUE(gpu);
  CudaTuning tune;
  tune.prefill_gemm_min_rows = prefill_gemm_min_rows;
  gpu->SetTuning(tune);
  const int max_len = 120;
  Driver d(16, max_len, 3);
  ASSERT_TRUE(cpu.AllocateKv(d.num_blocks(), 16).ok());
  ASSERT_TRUE(gpu->AllocateKv(d.num_blocks(), 16).ok());
  const auto r = gputest::Random(3 * max_len, 99, 0.f, 1.f);
  const std::vector<int> lens = {70, 33, 100};
  for (int s = 0; s < 3; ++s)
    for (int p = 0; p < lens[s]; ++p)
      d.tokens[s].push_back(static_cast<int32_t>(r[s * max_len + p] * (cfg.vocab_size - 1)));
  // Chunks: 40 tokens, then 25 (over the cached 40), then single tokens.
  for (int chunk : {40, 25, 1, 1, 1, 1, 1, 1}) {
    const StepBatch b = d.Step(chunk, true);
    const size_t n = b.logits_rows.size() * cfg.vocab_size;
    std::vector<float> want(n), got(n, NAN);
    ASSERT_TRUE(cpu.Forward(b, want.data()).ok());
    const Status st = gpu->Forward(b, got.data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    const double err = gputest::RelErr(got, want);
    EXPECT_LE(err, tol) << cfg.architecture << " chunk " << chunk;
    if (precision == Precision::kFp8)  // measured, for the bound's record (bench/RESULTS.md)
      std::printf("fp8 %s chunk %d: relative logit error %.4f\n", cfg.architecture.c_str(), chunk,
                  err);
    d.Advance(chunk);
  }
}

struct Family {
  const char* arch;
  bool tie;
};

// The tiny shape of family `f` with random F32 weights, written under LLMQ_TEST_TMP/<prefix>... and
// loaded.
void MakeFamilyModel(const Family& f, const std::string& prefix, ModelConfig* cfg,
                     std::unique_ptr<Weights>* w) {
  DType dt;
  ASSERT_TRUE(ShapeConfig("tiny", cfg, &dt).ok());
  ASSERT_TRUE(SetArchitecture(f.arch, "test", cfg).ok());
  cfg->tie_word_embeddings = f.tie;
  cfg->max_position_embeddings = 256;
  const std::string dir =
      std::string(LLMQ_TEST_TMP) + "/" + prefix + f.arch + (f.tie ? "_tied" : "");
  fs::create_directories(dir);
  ASSERT_TRUE(WriteRandomModel(*cfg, DType::kF32, 11, dir).ok());
  ASSERT_TRUE(Weights::Load(dir, *cfg, w).ok());
}

TEST(CudaBackend, LogitsMatchTheCpuBackendForEveryFamily) {
  LLMQ_REQUIRE_GPU();
  for (const Family f : {Family{"LlamaForCausalLM", true}, Family{"LlamaForCausalLM", false},
                         Family{"Qwen2ForCausalLM", true}, Family{"Qwen3ForCausalLM", false}}) {
    ModelConfig cfg;
    std::unique_ptr<Weights> w;
    ASSERT_NO_FATAL_FAILURE(MakeFamilyModel(f, "cuda_family_", &cfg, &w));
    SCOPED_TRACE(std::string(f.arch) + (f.tie ? " tied" : " untied"));
    CheckAgainstCpu(cfg, *w, Precision::kFp32, 1e-4);
    CheckAgainstCpu(cfg, *w, Precision::kBf16, 5e-2);
    CheckAgainstCpu(cfg, *w, Precision::kFp32, 1e-4, /*prefill_gemm_min_rows=*/2);
    CheckAgainstCpu(cfg, *w, Precision::kBf16, 5e-2, /*prefill_gemm_min_rows=*/2);
  }
}

TEST(CudaBackend, SharedModelsLogitsMatchTheCpuBackend) {
  LLMQ_REQUIRE_GPU();
  for (const char* name : {"stories260K", "tiny-llama3"}) {
    const std::string dir = Shared(name);
    if (!fs::exists(dir + "/config.json")) {
      std::printf("skipping %s: absent\n", dir.c_str());
      continue;
    }
    ModelConfig cfg;
    std::unique_ptr<Weights> w;
    ASSERT_NO_FATAL_FAILURE(Load(dir, &cfg, &w));
    SCOPED_TRACE(name);
    CheckAgainstCpu(cfg, *w, Precision::kFp32, 1e-4);
    CheckAgainstCpu(cfg, *w, Precision::kBf16, 5e-2);
    CheckAgainstCpu(cfg, *w, Precision::kFp32, 1e-4, /*prefill_gemm_min_rows=*/2);
  }
}

// FP8 projections (engine.precision fp8) against the CPU backend in fp32 on every row of prefill
// (cuBLASLt's product over per-token quantized activations) and decode (the few-row kernel):
// E4M3 keeps 3 mantissa bits, so each weight, and each activation entering a matrix product, is
// off by up to 1/16 of itself; kFp8Tol bounds the logits' relative error that leaves after a few
// layers (the measured figures are printed). A model whose widths are not multiples of 16
// (stories260K: intermediate 172) is refused, saying so.
constexpr double kFp8Tol = 0.2;

TEST(CudaBackend, Fp8LogitsStayNearTheCpuBackendForEveryFamily) {
  LLMQ_REQUIRE_GPU();
  if (const Status st = CheckFp8Device(); !st.ok()) GTEST_SKIP() << st.message();
  for (const Family f : {Family{"LlamaForCausalLM", true}, Family{"Qwen2ForCausalLM", true},
                         Family{"Qwen3ForCausalLM", false}}) {
    ModelConfig cfg;
    std::unique_ptr<Weights> w;
    ASSERT_NO_FATAL_FAILURE(MakeFamilyModel(f, "cuda_fp8_", &cfg, &w));
    SCOPED_TRACE(f.arch);
    CheckAgainstCpu(cfg, *w, Precision::kFp8, kFp8Tol);
    CheckAgainstCpu(cfg, *w, Precision::kFp8, kFp8Tol, /*prefill_gemm_min_rows=*/2);
    // Half the projections' bytes of bf16 (the embedding and head stay bf16).
    auto fp8 = MakeCuda(cfg, *w, Precision::kFp8);
    auto bf16 = MakeCuda(cfg, *w, Precision::kBf16);
    ASSERT_TRUE(fp8 && bf16);
    EXPECT_EQ(bf16->weight_bytes() - fp8->weight_bytes(),
              static_cast<uint64_t>(cfg.ProjectionParams() - 4 * cfg.ProjectionRows()));
  }
  for (const char* name : {"tiny-llama3", "tiny-qwen3"}) {
    const std::string dir = Shared(name);
    LLMQ_REQUIRE_SHARED(dir);
    ModelConfig cfg;
    std::unique_ptr<Weights> w;
    ASSERT_NO_FATAL_FAILURE(Load(dir, &cfg, &w));
    SCOPED_TRACE(name);
    CheckAgainstCpu(cfg, *w, Precision::kFp8, kFp8Tol);
  }
  const std::string stories = Shared("stories260K");
  LLMQ_REQUIRE_SHARED(stories);
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  ASSERT_NO_FATAL_FAILURE(Load(stories, &cfg, &w));
  CudaBackendOptions opt;
  opt.precision = Precision::kFp8;
  std::unique_ptr<CudaBackend> b;
  const Status st = CreateCudaBackendTyped(cfg, *w, opt, &b);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("multiples of 16"), std::string::npos) << st.ToString();
}

// tiny-llama3 (BF16 checkpoint, explicit head_dim, GQA 4:1, untied, llama3 rope scaling): the last
// prompt position's logits within 1e-4 of the float64 reference, and the greedy ids equal.
TEST(CudaBackend, TinyLlama3Fp32MatchesTheFloat64Reference) {
  LLMQ_GPU_AND_SHARED_MODEL("tiny-llama3", dir, cfg, w);
  auto be = MakeCuda(cfg, *w, Precision::kFp32);
  ASSERT_TRUE(be);
  for (const fs::path& f : References(dir)) {
    const json ref = ReadJson(f);
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    const auto want_ids = ref["completion_ids"].get<std::vector<int>>();
    const int max_len = static_cast<int>(prompt.size() + want_ids.size()) + 1;
    Driver d(16, max_len, 1);
    ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
    d.tokens[0].assign(prompt.begin(), prompt.end());
    const StepBatch b = d.Step(1 << 20, false);
    std::vector<float> logits(cfg.vocab_size);
    ASSERT_TRUE(be->Forward(b, logits.data()).ok());
    const auto want = ref["last_prompt_position_logits"].get<std::vector<double>>();
    ASSERT_EQ(want.size(), logits.size());
    double max_ref = 0;
    for (double v : want) max_ref = std::max(max_ref, std::abs(v));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_LE(std::abs(logits[i] - want[i]), 1e-4 * std::max(std::abs(want[i]), max_ref * 0.01))
          << f << " logit " << i;
    const auto got = Greedy(*be, {prompt}, static_cast<int>(want_ids.size()), max_len);
    EXPECT_EQ(std::vector<int>(got[0].begin(), got[0].end()), want_ids) << f;
  }
}

// Copy-on-write: blocks copied with CopyBlocks serve a second sequence exactly as the originals
// serve the first.
TEST(CudaBackend, CopiedBlocksServeAsTheOriginals) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    auto be = MakeCuda(cfg, *w, p);
    ASSERT_TRUE(be);
    Driver d(16, 64, 2);  // seq 0: blocks 0..3, seq 1: blocks 4..7
    ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
    for (int i = 0; i < 40; ++i) d.tokens[0].push_back(3 + (i * 7) % 400);
    d.tokens[1] = d.tokens[0];
    // Seq 0 computes all 40; seq 1 gets blocks 0, 1 copied to 4, 5 and computes 32..39 only.
    Driver first = d;
    first.tokens[1].clear();
    StepBatch b = first.Step(1 << 20, true);
    std::vector<float> a(b.logits_rows.size() * cfg.vocab_size);
    ASSERT_TRUE(be->Forward(b, a.data()).ok());
    ASSERT_TRUE(be->CopyBlocks({{0, 4}, {1, 5}}).ok());
    Driver second = d;
    second.tokens[0].clear();
    second.fed = {0, 32};
    b = second.Step(1 << 20, true);
    std::vector<float> c(b.logits_rows.size() * cfg.vocab_size);
    ASSERT_TRUE(be->Forward(b, c.data()).ok());
    const std::vector<float> tail(a.end() - c.size(), a.end());
    EXPECT_LE(gputest::RelErr(c, tail), p == Precision::kFp32 ? 1e-5 : 1e-2);
  }
}

// A 2-layer random model with head_dim 64 (4 query heads over 2 KV heads), so that bf16 takes
// the tensor-core kernels (tests/small_model.h's is narrower, and needs the CPU suite's
// test_util.h), written under LLMQ_TEST_TMP/`name`.
void HeadDim64Model(const std::string& name, uint64_t seed, ModelConfig* cfg,
                    std::unique_ptr<Weights>* w) {
  DType dt;
  ASSERT_TRUE(ShapeConfig("tiny", cfg, &dt).ok());
  cfg->hidden_size = 256;
  cfg->intermediate_size = 512;
  cfg->num_layers = 2;
  cfg->num_heads = 4;
  cfg->num_kv_heads = 2;
  cfg->head_dim = 64;
  cfg->max_position_embeddings = 1024;
  const std::string dir = std::string(LLMQ_TEST_TMP) + "/" + name;
  fs::create_directories(dir);
  ASSERT_TRUE(WriteRandomModel(*cfg, DType::kF32, seed, dir).ok());
  ASSERT_TRUE(Weights::Load(dir, *cfg, w).ok());
}

// Cascade attention: sequences whose block tables begin with the same physical blocks (a 512-token
// prefix computed once, by sequence 0), each with its own suffix, then decode steps that carry
// prefix groups. The logits with cascade attention match those without it and the CPU backend's,
// for the whole batch in one group and for a group of some of the sequences, through both per-row
// kernels (head_dim 64: the partition kernel; 4 context splits, 3 of them wholly inside the
// shared prefix, so the cascade's partial is the fifth slot), and in bf16 with the shared halves
// through the fused kernel and through the matrix products.
TEST(CudaBackend, CascadeAttentionMatchesPagedAttentionAndTheCpu) {
  LLMQ_REQUIRE_GPU();
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  ASSERT_NO_FATAL_FAILURE(HeadDim64Model("cuda_cascade", 5, &cfg, &w));
  const int bs = 16, shared_blocks = 32, own = 4, n = 6, shared = shared_blocks * bs;
  const int max_blocks = shared_blocks + own;
  auto table = [&](int s) {
    std::vector<int32_t> t;
    for (int k = 0; k < shared_blocks; ++k) t.push_back(k);
    for (int k = 0; k < own; ++k) t.push_back(shared_blocks + s * own + k);
    return t;
  };
  auto slot = [&](int s, int pos) { return table(s)[pos / bs] * bs + pos % bs; };
  const auto r = gputest::Random(4096, 21, 0.f, 1.f);
  int ri = 0;
  auto tok = [&] { return static_cast<int32_t>(r[ri++ % r.size()] * (cfg.vocab_size - 1)); };
  // Steps: the prefix (sequence 0), every suffix (3 + 5 s tokens), then 4 decode steps.
  std::vector<StepBatch> steps;
  std::vector<int> len(n, shared);
  StepBatch b;
  b.Clear();
  b.max_blocks = max_blocks;
  for (int p = 0; p < shared; ++p) {
    b.token_ids.push_back(tok());
    b.positions.push_back(p);
    b.slot_mapping.push_back(slot(0, p));
  }
  b.logits_rows.push_back(shared - 1);
  b.query_start.push_back(b.num_tokens());
  b.context_lens.push_back(shared);
  const std::vector<int32_t> t0 = table(0);
  b.block_tables.assign(t0.begin(), t0.end());
  steps.push_back(b);
  for (int decode = -1; decode < 4; ++decode) {
    b.Clear();
    b.max_blocks = max_blocks;
    for (int s = 0; s < n; ++s) {
      const int count = decode < 0 ? 3 + 5 * s : 1;
      for (int i = 0; i < count; ++i) {
        b.token_ids.push_back(tok());
        b.positions.push_back(len[s]);
        b.slot_mapping.push_back(slot(s, len[s]++));
      }
      b.logits_rows.push_back(b.num_tokens() - 1);
      b.query_start.push_back(b.num_tokens());
      b.context_lens.push_back(len[s]);
      const std::vector<int32_t> t = table(s);
      b.block_tables.insert(b.block_tables.end(), t.begin(), t.end());
    }
    b.decode_only = decode >= 0;
    steps.push_back(b);
  }
  const std::vector<std::vector<PrefixGroup>> groupings = {{{0, n, shared_blocks}},
                                                           {{1, 4, shared_blocks}}};
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    for (int variant :
         {kernels::cuda::kVariantAuto, kernels::cuda::kVariantOnline,
          kernels::cuda::kVariantPartitionWide, kernels::cuda::kVariantPartitionMma}) {
      for (int k = 0; k < static_cast<int>(groupings.size()) * 2; ++k) {
        const std::vector<PrefixGroup>& groups = groupings[k / 2];
        const bool fused = k % 2 == 0;
        if (!fused && p == Precision::kFp32) continue;  // fp32 has the matrix products only
        SCOPED_TRACE(std::string(p == Precision::kFp32 ? "fp32" : "bf16") + " variant " +
                     std::to_string(variant) + " groups from " +
                     std::to_string(groups[0].first_seq) + (fused ? " fused" : ""));
        CpuBackend cpu(cfg, *w);
        auto gpu = MakeCuda(cfg, *w, p);
        ASSERT_TRUE(gpu);
        const int blocks = shared_blocks + n * own;
        ASSERT_TRUE(cpu.AllocateKv(blocks, bs).ok());
        ASSERT_TRUE(gpu->AllocateKv(blocks, bs).ok());
        for (StepBatch step : steps) {
          if (step.decode_only) step.prefix_groups = groups;
          const size_t sz = step.logits_rows.size() * cfg.vocab_size;
          std::vector<float> want(sz), plain(sz, NAN), cascade(sz, NAN);
          ASSERT_TRUE(cpu.Forward(step, want.data()).ok());
          CudaTuning tune;  // eager both ways: graphs are tested on their own
          tune.attention_variant = variant;
          tune.graphs = false;
          tune.prefill_fused = fused;
          tune.cascade = false;
          gpu->SetTuning(tune);
          Status st = gpu->Forward(step, plain.data());
          ASSERT_TRUE(st.ok()) << st.ToString();
          tune.cascade = true;
          tune.cascade_min_keys = 1;
          gpu->SetTuning(tune);
          st = gpu->Forward(step, cascade.data());  // rewrites the same K/V: idempotent
          ASSERT_TRUE(st.ok()) << st.ToString();
          const double tol = p == Precision::kFp32 ? 1e-4 : 5e-2;
          EXPECT_LE(gputest::RelErr(cascade, want), tol);
          EXPECT_LE(gputest::RelErr(cascade, plain), p == Precision::kFp32 ? 1e-5 : 2e-2);
          EXPECT_LE(gputest::RelErr(plain, want), tol);
        }
      }
    }
  }
}

// ForwardSample (the seam's device sampling): greedy rows give ForwardArgmax's ids; sampled rows
// give the CPU sampler's pick from Forward's logits of the same step wherever that pick is not on a
// rounding boundary (tests/gpu/cuda_sample_test.cpp holds the kernel to the same rule).
TEST(CudaBackend, ForwardSamplePicksTheHostSamplersIds) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  auto be = MakeCuda(cfg, *w, Precision::kFp32);
  ASSERT_TRUE(be);
  ASSERT_TRUE(be->samples_on_device());
  Driver d(16, 64, 4);
  ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < 9 + 5 * s; ++i) d.tokens[s].push_back(1 + (i * 13 + s * 7) % 500);
  const StepBatch b = d.Step(1 << 20, false);
  std::vector<float> logits(4 * cfg.vocab_size);
  ASSERT_TRUE(be->Forward(b, logits.data()).ok());
  std::vector<int32_t> argmax(4);
  ASSERT_TRUE(be->ForwardArgmax(b, argmax.data()).ok());
  int compared = 0;
  for (double u : {0.05, 0.3, 0.62, 0.97}) {
    std::vector<RowSampling> rows(4);
    rows[0].temperature = 0.f;  // greedy
    rows[1] = {1.f, 0, 1.f, 0.f, u};
    rows[2] = {0.8f, 20, 0.9f, 0.f, u};
    rows[3] = {1.3f, 0, 1.f, 0.05f, u};
    std::vector<int32_t> ids(4, -1);
    const Status st = be->ForwardSample(b, rows.data(), ids.data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(ids[0], argmax[0]);
    for (int r = 1; r < 4; ++r) {
      const float* row = &logits[size_t(r) * cfg.vocab_size];
      RowSampling moved = rows[r];
      const int want = SampleRow(row, cfg.vocab_size, moved);
      moved.u = u - 1e-5;
      const bool below = SampleRow(row, cfg.vocab_size, moved) == want;
      moved.u = u + 1e-5;
      if (!below || SampleRow(row, cfg.vocab_size, moved) != want) continue;
      ++compared;
      EXPECT_EQ(ids[r], want) << "row " << r << " u " << u;
    }
  }
  EXPECT_GT(compared, 8);
}

// A StepMasks of given words ([L, words_per_row]) that counts its Compute calls.
class FixedMasks final : public StepMasks {
 public:
  FixedMasks(const std::vector<uint32_t>& words, int words_per_row)
      : words_(words), wpr_(words_per_row) {}
  const uint32_t* Compute() override {
    ++calls;
    return words_.data();
  }
  bool computed() const override { return calls > 0; }
  int words_per_row() const override { return wpr_; }
  int calls = 0;

 private:
  std::vector<uint32_t> words_;
  int wpr_;
};

bool Allowed(const std::vector<uint32_t>& words, int wpr, int row, int token) {
  return (words[size_t(row) * wpr + token / 32] >> (token % 32)) & 1u;
}

// Token masks applied by the backend (StepBatch::masks), on a prefill step (eager) and on decode
// steps replayed from CUDA graphs (3 sequences padded to the bucket of 4): Forward's logits are the
// unmasked logits with the masks applied on the host (ModelRunner's path for a backend that does
// not apply them), ForwardArgmax's ids their argmax, ForwardSample's ids allowed by their rows and
// the host sampler's pick from them wherever that pick is not on a rounding boundary; every call
// computes the masks exactly once. Rows: unconstrained, a few tokens, about half; in one step a
// row of a single token and a row of none (all -inf: greedy gives id 0, as on the host).
TEST(CudaBackend, TokenMasksGiveTheHostMaskedLogitsAndIds) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  auto be = MakeCuda(cfg, *w, Precision::kFp32);
  ASSERT_TRUE(be);
  ASSERT_TRUE(be->applies_masks());
  const int V = cfg.vocab_size, W = (V + 31) / 32;
  Driver d(16, 64, 3);
  ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < 11 + 6 * s; ++i) d.tokens[s].push_back(1 + (i * 17 + s * 5) % 500);
  int compared = 0;
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    StepBatch b = d.Step(1 << 20, false);
    b.decode_only = step > 0;
    const int L = static_cast<int>(b.logits_rows.size());
    ASSERT_EQ(L, 3);
    std::vector<uint32_t> words = gputest::RandomMasks(L, V, W, {1.0, 0.03, 0.5}, 300 + step);
    const bool single_and_none = step == 2;
    if (single_and_none) {
      std::fill_n(words.begin() + W, 2 * W, 0u);
      words[W + 7] |= 1u << 5;  // row 1: token 229 alone; row 2: nothing
    }
    const int64_t replays = be->graph_replays();
    std::vector<float> want(size_t(L) * V), got(want.size(), NAN);
    ASSERT_TRUE(be->Forward(b, want.data()).ok());  // unmasked
    kernels::ApplyTokenBitmask(want.data(), L, V, words.data(), W);

    FixedMasks fm(words, W);
    b.masks = &fm;
    ASSERT_TRUE(be->Forward(b, got.data()).ok());
    EXPECT_EQ(fm.calls, 1);
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      bad += std::isinf(want[i])
                 ? !(got[i] == want[i])
                 : !(std::fabs(got[i] - want[i]) <= 1e-5f * (1 + std::fabs(want[i])));
    EXPECT_EQ(bad, 0);

    FixedMasks am(words, W);
    b.masks = &am;
    std::vector<int32_t> argmax(L, -1);
    ASSERT_TRUE(be->ForwardArgmax(b, argmax.data()).ok());
    EXPECT_EQ(am.calls, 1);
    for (int r = 0; r < L; ++r)
      EXPECT_EQ(argmax[r], SampleRow(&want[size_t(r) * V], V, RowSampling{})) << "row " << r;
    EXPECT_TRUE(Allowed(words, W, 1, argmax[1]));
    if (single_and_none) {
      EXPECT_EQ(argmax[1], 229);
      EXPECT_EQ(argmax[2], 0);
    }

    for (double u : {0.1, 0.45, 0.8}) {
      std::vector<RowSampling> rows(L);
      rows[0] = {1.f, 0, 1.f, 0.f, u};
      rows[1] = {0.8f, 20, 0.9f, 0.f, u};
      if (!single_and_none) rows[2] = {1.3f, 0, 1.f, 0.05f, u};  // else greedy: a row of -inf
      FixedMasks sm(words, W);
      b.masks = &sm;
      std::vector<int32_t> ids(L, -1);
      const Status st = be->ForwardSample(b, rows.data(), ids.data());
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(sm.calls, 1);
      for (int r = 0; r < L; ++r) {
        if (!(single_and_none && r == 2)) {
          EXPECT_TRUE(Allowed(words, W, r, ids[r])) << r;
        }
        const float* row = &want[size_t(r) * V];
        RowSampling moved = rows[r];
        const int pick = SampleRow(row, V, moved);
        moved.u = u - 1e-5;
        const bool below = SampleRow(row, V, moved) == pick;
        moved.u = u + 1e-5;
        if (!below || SampleRow(row, V, moved) != pick) continue;
        ++compared;
        EXPECT_EQ(ids[r], pick) << "row " << r << " u " << u;
      }
    }
    // Decode steps: every call (unmasked, masked Forward, ForwardArgmax, 3 ForwardSample) was a
    // graph's replay, the masks applied after it.
    EXPECT_EQ(be->graph_replays(), replays + (b.decode_only ? 6 : 0));
    d.Advance(1 << 20);
    for (int s = 0; s < 3; ++s) d.tokens[s].push_back(argmax[s]);
  }
  EXPECT_TRUE(be->graph_error().empty()) << be->graph_error();
  EXPECT_GE(be->graph_captures(), 1);
  EXPECT_GT(compared, 20);
}

// CUDA graphs of decode steps: the same logits as eager steps (within the rounding of products
// over a padded row count) as the context crosses a power of two (a new shape) and the batch
// shrinks (a smaller bucket); then a new pool and ForwardSample through a graph.
TEST(CudaBackend, DecodeGraphsGiveTheEagerLogits) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(p == Precision::kFp32 ? "fp32" : "bf16");
    auto graph = MakeCuda(cfg, *w, p);
    auto eager = MakeCuda(cfg, *w, p);
    ASSERT_TRUE(graph && eager);
    CudaTuning off;
    off.graphs = false;
    eager->SetTuning(off);
    const int max_len = 300;
    Driver d(16, max_len, 5);  // tables of 19 blocks: cut to the shape's columns
    for (auto* be : {graph.get(), eager.get()})
      ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
    for (int s = 0; s < 5; ++s)
      for (int i = 0; i < 200 + 11 * s; ++i) d.tokens[s].push_back(1 + (i * 31 + s * 17) % 500);
    // Prefill (eager in both), then decode steps.
    StepBatch b = d.Step(1 << 20, false);
    std::vector<float> a(b.logits_rows.size() * cfg.vocab_size), e(a.size());
    ASSERT_TRUE(graph->Forward(b, a.data()).ok());
    ASSERT_TRUE(eager->Forward(b, e.data()).ok());
    d.Advance(1 << 20);
    EXPECT_EQ(graph->graph_captures(), 0);
    // Sequence s decodes at position 200 + 11 s + step. Shapes (bucket, context): 5 sequences,
    // (8, 256) to step 11, (8, 512) from step 12 (sequence 4 at 256); from step 30 sequences 0-2:
    // (4, 256) to step 33, (4, 512) from step 34 (sequence 2 at 256).
    for (int step = 0; step < 45; ++step) {
      if (step == 30) d.tokens.resize(3);
      for (auto& t : d.tokens) t.push_back(1 + (step * 7 + static_cast<int>(t.size())) % 500);
      b = d.Step(1, true);
      b.decode_only = true;
      a.assign(b.logits_rows.size() * cfg.vocab_size, NAN);
      e.assign(a.size(), NAN);
      ASSERT_TRUE(graph->Forward(b, a.data()).ok()) << "step " << step;
      ASSERT_TRUE(eager->Forward(b, e.data()).ok());
      EXPECT_LE(gputest::RelErr(a, e), p == Precision::kFp32 ? 1e-5 : 1e-2) << "step " << step;
      d.Advance(1);
    }
    EXPECT_TRUE(graph->graph_error().empty()) << graph->graph_error();
    EXPECT_EQ(graph->graph_captures(), 4);
    EXPECT_EQ(graph->graph_replays(), 45);  // every decode step
    EXPECT_EQ(eager->graph_captures(), 0);
    // A new pool (the graphs' cache pointers may move: captured again if so), a new prefill, and
    // a sampled decode step through the (4, 256) graph: greedy rows give the eager argmax.
    for (auto* be : {graph.get(), eager.get()})
      ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
    for (auto& t : d.tokens) t.resize(20);
    d.fed.assign(d.tokens.size(), 0);
    b = d.Step(1 << 20, false);
    ASSERT_TRUE(graph->Forward(b, a.data()).ok());
    ASSERT_TRUE(eager->Forward(b, a.data()).ok());
    d.Advance(1 << 20);
    for (auto& t : d.tokens) t.push_back(5);
    b = d.Step(1, false);
    b.decode_only = true;
    std::vector<RowSampling> rows(b.logits_rows.size());  // greedy
    std::vector<int32_t> ids(rows.size(), -1), want(rows.size(), -2);
    const int64_t replays = graph->graph_replays();
    ASSERT_TRUE(graph->ForwardSample(b, rows.data(), ids.data()).ok());
    EXPECT_EQ(graph->graph_replays(), replays + 1);
    ASSERT_TRUE(eager->ForwardArgmax(b, want.data()).ok());
    EXPECT_EQ(ids, want);
    EXPECT_LE(graph->graph_captures(), 5);
  }
}

// Programmatic dependent launch (CudaTuning::pdl; sm_90): every kernel waits for the one before
// inside, so the logits are those of plain launches bit for bit, through graphs and eagerly, at
// batch 1 (the one-row GEMVs, the tensor-core attention over 16 splits and its merge) and 3. A
// model with head_dim 64, so that bf16 takes the tensor-core attention.
TEST(CudaBackend, ProgrammaticLaunchGivesThePlainLaunchLogitsBitForBit) {
  LLMQ_REQUIRE_GPU();
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  ASSERT_NO_FATAL_FAILURE(HeadDim64Model("cuda_pdl", 9, &cfg, &w));
  for (Precision p : {Precision::kFp32, Precision::kBf16})
    for (bool graphs : {true, false}) {
      SCOPED_TRACE(std::string(p == Precision::kFp32 ? "fp32" : "bf16") +
                   (graphs ? " graphs" : " eager"));
      auto plain = MakeCuda(cfg, *w, p);
      auto pdl = MakeCuda(cfg, *w, p);
      ASSERT_TRUE(plain && pdl);
      CudaTuning t;
      t.graphs = graphs;
      plain->SetTuning(t);
      t.pdl = true;
      pdl->SetTuning(t);
      Driver d(16, 600, 3);
      for (auto* be : {plain.get(), pdl.get()})
        ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
      for (int s = 0; s < 3; ++s)
        for (int i = 0; i < 300 + 40 * s; ++i) d.tokens[s].push_back(1 + (i * 13 + s * 7) % 200);
      StepBatch b = d.Step(1 << 20, false);
      std::vector<float> a(b.logits_rows.size() * cfg.vocab_size), e(a.size());
      ASSERT_TRUE(plain->Forward(b, a.data()).ok());
      ASSERT_TRUE(pdl->Forward(b, e.data()).ok());
      EXPECT_EQ(a, e) << "prefill";
      d.Advance(1 << 20);
      for (int step = 0; step < 12; ++step) {
        if (step == 6) d.tokens.resize(1);  // batch 1 from here
        for (auto& tk : d.tokens) tk.push_back(1 + (step * 5 + static_cast<int>(tk.size())) % 200);
        b = d.Step(1, false);
        b.decode_only = true;
        a.assign(b.logits_rows.size() * cfg.vocab_size, NAN);
        e.assign(a.size(), NAN);
        ASSERT_TRUE(plain->Forward(b, a.data()).ok()) << "step " << step;
        ASSERT_TRUE(pdl->Forward(b, e.data()).ok()) << "step " << step;
        EXPECT_EQ(a, e) << "step " << step;
        d.Advance(1);
      }
      EXPECT_TRUE(pdl->graph_error().empty()) << pdl->graph_error();
    }
}

// With the engine's profile (Backend::set_profile) each step's span on the device is added to
// StepProfile::device_s, eager and graph-replayed steps alike; without it nothing is timed. A span
// lies inside its call, so the sum is at most the calls' time on the host.
TEST(CudaBackend, StepSpansOnTheDeviceGoToTheEngineProfile) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  auto be = MakeCuda(cfg, *w, Precision::kBf16);
  ASSERT_TRUE(be);
  Driver d(16, 64, 3);
  ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < 20 + s; ++i) d.tokens[s].push_back(1 + (i * 13 + s * 5) % 500);
  StepProfile prof;
  StepBatch b = d.Step(1 << 20, false);  // the prefill, not timed
  std::vector<float> logits(b.logits_rows.size() * cfg.vocab_size);
  ASSERT_TRUE(be->Forward(b, logits.data()).ok());
  d.Advance(1 << 20);
  EXPECT_EQ(prof.device_s, 0.0);
  be->set_profile(&prof);
  double host_s = 0, last = 0;
  for (int step = 0; step < 6; ++step) {
    for (auto& t : d.tokens) t.push_back(1 + (step * 7 + static_cast<int>(t.size())) % 500);
    b = d.Step(1, true);
    b.decode_only = true;
    std::vector<int32_t> ids(b.logits_rows.size(), -1);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(step % 2 ? be->ForwardArgmax(b, ids.data()).ok()
                         : be->Forward(b, logits.data()).ok());
    host_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(prof.device_s, last) << "step " << step;  // every step adds its span
    last = prof.device_s;
    d.Advance(1);
  }
  be->set_profile(nullptr);
  EXPECT_GT(be->graph_replays(), 0);  // replayed steps were among the timed ones
  EXPECT_LE(prof.device_s, host_s);
  const auto rows = prof.Rows();
  EXPECT_NE(
      std::find(rows.begin(), rows.end(), std::make_pair(std::string("device"), prof.device_s)),
      rows.end());
}

TEST(CudaBackend, APositionOutsideTheContextIsAStatusNotACrash) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  auto be = MakeCuda(cfg, *w, Precision::kBf16);
  ASSERT_TRUE(be);
  Driver d(16, 32, 1);
  ASSERT_TRUE(be->AllocateKv(d.num_blocks(), 16).ok());
  d.tokens[0] = {1, 2, 3};
  StepBatch b = d.Step(8, false);
  b.positions[1] = cfg.max_position_embeddings;
  std::vector<float> logits(cfg.vocab_size);
  const Status st = be->Forward(b, logits.data());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  b = d.Step(8, false);  // and the backend goes on
  EXPECT_TRUE(be->Forward(b, logits.data()).ok());
}

}  // namespace
}  // namespace llmq

namespace llmq {
namespace {

// The seam's sizing: K/V bytes per token in the backend's element type, and a pool budget that
// leaves the device's used memory and the activation reserve out.
TEST(CudaBackend, ReportsKvBytesPerTokenAndABudgetWithinTheDevice) {
  LLMQ_GPU_AND_SHARED_MODEL("stories260K", dir, cfg, w);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    auto be = MakeCuda(cfg, *w, p);
    ASSERT_TRUE(be);
    EXPECT_EQ(be->kv_bytes_per_token(), cfg.KvBytesPerToken(p == Precision::kFp32 ? 4 : 2));
    uint64_t free_b = 0, total_b = 0;
    ASSERT_TRUE(be->MemoryInfo(&free_b, &total_b).ok());
    const StepLimits step = be->default_step_limits();
    EXPECT_EQ(step.max_num_seqs, 1024);
    EXPECT_EQ(step.max_num_batched_tokens, 8192);
    const std::optional<int64_t> budget =
        be->KvBudgetBytes(0.9, step.max_num_batched_tokens, step.max_num_seqs);
    ASSERT_TRUE(budget.has_value());
    EXPECT_GT(*budget, 0);
    EXPECT_LT(*budget, static_cast<int64_t>(0.9 * total_b));
    EXPECT_LT(*be->KvBudgetBytes(0.5, step.max_num_batched_tokens, step.max_num_seqs), *budget);
    // A larger step keeps more out of the pool: its activations, logits rows and workspace.
    EXPECT_LT(*be->KvBudgetBytes(0.9, 4 * step.max_num_batched_tokens, 4 * step.max_num_seqs),
              *budget);
  }
}

}  // namespace
}  // namespace llmq
