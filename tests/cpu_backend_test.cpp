// The CPU backend against the plain reference forward, and its batch invariance.
#include "engine/backends/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>

#include "engine/sampling/sampler.h"
#include "engine/tools/model_maker.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/reference_forward.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using testing::ReferenceLogits;
using testing::RelativeError;

struct Case {
  const char* name;
  int heads, kv_heads, head_dim, hidden, layers;
  bool tied;
  RopeScaling::Type scaling;
  DType dtype;
  const char* arch = "LlamaForCausalLM";  // the family: its q/k/v biases or q/k norm
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}  // readable test names

ModelConfig ConfigFor(const Case& c) {
  ModelConfig cfg;
  DType unused;
  EXPECT_TRUE(ShapeConfig("tiny", &cfg, &unused).ok());
  EXPECT_TRUE(SetArchitecture(c.arch, "test", &cfg).ok());
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.hidden_size = c.hidden;
  cfg.num_layers = c.layers;
  cfg.tie_word_embeddings = c.tied;
  cfg.intermediate_size = 96;
  cfg.vocab_size = 300;
  cfg.max_position_embeddings = 256;
  cfg.rope_scaling.type = c.scaling;
  if (c.scaling == RopeScaling::Type::kLinear) cfg.rope_scaling.factor = 2.0;
  if (c.scaling == RopeScaling::Type::kLlama3) {
    cfg.rope_theta = 500000.0;
    cfg.rope_scaling = {RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 32};
  }
  return cfg;
}

// One sequence's prompt laid out in `num_blocks` shuffled physical blocks.
struct Layout {
  std::vector<int32_t> table;
};

Layout ShuffledBlocks(int tokens, int block_size, int pool, uint64_t seed) {
  std::vector<int32_t> all(pool);
  std::iota(all.begin(), all.end(), 0);
  Rng rng(seed);
  for (int i = pool - 1; i > 0; --i) std::swap(all[i], all[rng.NextU64() % (i + 1)]);
  all.resize((tokens + block_size - 1) / block_size);
  return {all};
}

std::vector<int> RandomTokens(int n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> t(n);
  for (int& x : t) x = static_cast<int>(rng.NextU64() % vocab);
  return t;
}

class CpuBackendVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CpuBackendVsReference, LogitsMatchPlainForwardAtEveryPosition) {
  const Case& c = GetParam();
  const ModelConfig cfg = ConfigFor(c);
  const std::string dir = testing::TmpDir(std::string("ref_") + c.name);
  ASSERT_TRUE(WriteRandomModel(cfg, c.dtype, 7, dir).ok());
  ModelConfig loaded;
  ASSERT_TRUE(LoadModelConfig(dir, &loaded).ok());
  std::unique_ptr<Weights> w;
  ASSERT_TRUE(Weights::Load(dir, loaded, &w).ok());
  CpuBackend be(loaded, *w);
  const int bs = 16, n = 83;  // spans 6 blocks, the last one partial
  ASSERT_TRUE(be.AllocateKv(32, bs).ok());
  const std::vector<int> toks = RandomTokens(n, cfg.vocab_size, 11);
  const std::vector<float> got = testing::ForwardOneSequence(
      be, toks, 0, n, ShuffledBlocks(n, bs, 32, 3).table, bs, cfg.vocab_size);
  const auto ref = ReferenceLogits(loaded, *w, toks);
  double worst = 0;
  for (int p = 0; p < n; ++p)
    worst = std::max(worst, RelativeError(&got[p * cfg.vocab_size], ref[p]));
  EXPECT_LT(worst, 1e-4) << c.name;
  RecordProperty("worst_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuBackendVsReference,
    ::testing::Values(
        Case{"gqa_untied", 4, 2, 16, 64, 3, false, RopeScaling::Type::kNone, DType::kF32},
        Case{"mha_tied_linear", 4, 4, 16, 64, 2, true, RopeScaling::Type::kLinear, DType::kF32},
        Case{"mqa_llama3_bf16", 8, 1, 8, 48, 3, false, RopeScaling::Type::kLlama3, DType::kBF16},
        Case{"gqa_headdim_llama3", 8, 2, 16, 96, 3, false, RopeScaling::Type::kLlama3, DType::kF16},
        // Llama 3.2's shape: tied head, llama3 scaling.
        Case{"llama32_tied", 4, 2, 16, 64, 2, true, RopeScaling::Type::kLlama3, DType::kBF16},
        Case{"mistral_gqa", 8, 2, 8, 64, 2, false, RopeScaling::Type::kNone, DType::kF32,
             "MistralForCausalLM"},
        // q/k/v biases, MQA, tied and untied.
        Case{"qwen2_bias_tied", 4, 1, 16, 64, 2, true, RopeScaling::Type::kNone, DType::kBF16,
             "Qwen2ForCausalLM"},
        Case{"qwen2_bias_untied", 8, 2, 8, 64, 2, false, RopeScaling::Type::kNone, DType::kF32,
             "Qwen2ForCausalLM"},
        // q/k norm, head_dim 32 so q_dim 128 != hidden 64.
        Case{"qwen3_qknorm_headdim", 4, 2, 32, 64, 2, true, RopeScaling::Type::kNone, DType::kBF16,
             "Qwen3ForCausalLM"}),
    [](const auto& info) { return std::string(info.param.name); });

// The working-memory estimate that sizes the default KV pool: past kMlpRows (and once the attention
// block's packed A outgrows the down projection's), a row adds only the activations every row
// keeps ([2H + qkv + q_dim]) and its packed A (max(H, q_dim)), not the MLP's 3I.
TEST(CpuBackendMemory, WorkingBytesGrowPastTheMlpSliceByTheRowsThatStay) {
  ModelConfig c;
  DType unused;
  ASSERT_TRUE(ShapeConfig("bench-110m", &c, &unused).ok());
  const int64_t H = c.hidden_size, I = c.intermediate_size, qd = c.q_dim();
  const int64_t kept = 2 * H + (qd + 2 * c.kv_dim()) + qd;
  const int n = CpuBackend::kMlpRows;
  ASSERT_GT(4 * n * std::max(H, qd), n * I);
  EXPECT_EQ(CpuBackend::WorkingBytesFor(c, 8 * n, 8) - CpuBackend::WorkingBytesFor(c, 4 * n, 8),
            int64_t{4} * n * (kept + std::max(H, qd)) * 4);
  // Below the slice height the MLP's rows count as well (and the down projection's packed A).
  ASSERT_GT(I, std::max(H, qd));
  EXPECT_EQ(CpuBackend::WorkingBytesFor(c, 64, 8) - CpuBackend::WorkingBytesFor(c, 32, 8),
            32 * (kept + 3 * I + I) * 4);
}

// Over every family: the q/k/v biases and the per-head q/k norm are per-row ops too; over every
// weight type (engine.weight_dtype): the GEMM's contract holds for each; and over both KV caches
// (engine.kv_dtype): a bf16 cache rounds each value when written, whatever the batch or chunk.
class CpuBackendInvariance
    : public ::testing::TestWithParam<std::tuple<const char*, kernels::WeightType, KvDtype>> {
 protected:
  void SetUp() override {
    const char* arch = std::get<0>(GetParam());
    type_ = std::get<1>(GetParam());
    kv_ = std::get<2>(GetParam());
    cfg_ =
        ConfigFor({"inv", 8, 2, 16, 96, 3, false, RopeScaling::Type::kLlama3, DType::kF32, arch});
    dir_ = testing::TmpDir(std::string("invariance_") + arch);
    ASSERT_TRUE(WriteRandomModel(cfg_, DType::kF32, 5, dir_).ok());
    ASSERT_TRUE(Weights::Load(dir_, cfg_, &w_).ok());
  }
  ModelConfig cfg_;
  kernels::WeightType type_ = kernels::WeightType::kF32;
  KvDtype kv_ = KvDtype::kF32;
  std::string dir_;
  std::unique_ptr<Weights> w_;
};

TEST_P(CpuBackendInvariance, ChunkedPrefillGivesBitIdenticalLogits) {
  CpuBackend whole(cfg_, *w_, type_, kv_), chunked(cfg_, *w_, type_, kv_);
  const int bs = 16, n = 77, V = cfg_.vocab_size;
  ASSERT_TRUE(whole.AllocateKv(16, bs).ok());
  ASSERT_TRUE(chunked.AllocateKv(16, bs).ok());
  const Layout lay = ShuffledBlocks(n, bs, 16, 9);
  const std::vector<int> toks = RandomTokens(n, V, 21);
  const int threads = kernels::CpuThreads();
  kernels::SetCpuThreads(2);  // the whole prompt on two threads, the chunks on one: same bits
  kernels::SetAlwaysSplitForTesting(true);  // even this small model's ops run threaded
  const std::vector<float> all = testing::ForwardOneSequence(whole, toks, 0, n, lay.table, bs, V);
  kernels::SetAlwaysSplitForTesting(false);
  kernels::SetCpuThreads(1);
  for (int chunk : {1, 5, 16, 33}) {
    ASSERT_TRUE(chunked.AllocateKv(16, bs).ok());
    for (int begin = 0; begin < n; begin += chunk) {
      const int end = std::min(n, begin + chunk);
      const std::vector<float> part =
          testing::ForwardOneSequence(chunked, toks, begin, end, lay.table, bs, V);
      ASSERT_EQ(0, std::memcmp(part.data(), &all[static_cast<size_t>(begin) * V], part.size() * 4))
          << "chunk " << chunk << " rows " << begin << ".." << end;
    }
  }
  kernels::SetCpuThreads(threads);
}

// The pool's pages are populated ahead of a step's writes (PopulateKv), up to the highest block
// written and no further: a big pool costs the memory of the blocks used, not more.
TEST_P(CpuBackendInvariance, KvPagesArePopulatedUpToTheBlocksWrittenOnly) {
  CpuBackend be(cfg_, *w_, type_, kv_);
  const int bs = 16, pool = 512, n = 40;  // blocks 0, 1, 2
  ASSERT_TRUE(be.AllocateKv(pool, bs).ok());
  const std::vector<bool> before = be.ResidentKBlocksForTesting();
  EXPECT_EQ(std::count(before.begin(), before.end(), true), 0);
  testing::ForwardOneSequence(be, RandomTokens(n, cfg_.vocab_size, 3), 0, n, {0, 1, 2}, bs,
                              cfg_.vocab_size);
  const std::vector<bool> resident = be.ResidentKBlocksForTesting();
  // Each kv head's tiles are a region of their own (kernels::PagedKv): blocks 0..2 are the first
  // pages of every region.
  const size_t tile_bytes =
      static_cast<size_t>(cfg_.head_dim) * bs * CpuBackend::KvElementBytes(kv_);
  const size_t written_end = (3 * tile_bytes + 4095) / 4096 * 4096;  // pages of blocks 0..2
  for (int b = 0; b < pool; ++b) {
    if (b <= 2) {
      EXPECT_TRUE(resident[b]) << "block " << b;
    } else if (b * tile_bytes >= written_end) {
      EXPECT_FALSE(resident[b]) << "block " << b << " populated but never written";
    }
  }
}

// The MLP runs over a step's rows in slices (CpuBackend::kMlpRows); wherever the slice boundaries
// fall, the logits are those of one pass over all rows, bit for bit.
TEST_P(CpuBackendInvariance, MlpRowSlicesGiveBitIdenticalLogits) {
  CpuBackend one_pass(cfg_, *w_, type_, kv_), sliced(cfg_, *w_, type_, kv_);
  const int bs = 16, n = 77, V = cfg_.vocab_size;
  ASSERT_GT(CpuBackend::kMlpRows, n);  // the default: one slice here
  ASSERT_TRUE(one_pass.AllocateKv(16, bs).ok());
  const Layout lay = ShuffledBlocks(n, bs, 16, 9);
  const std::vector<int> toks = RandomTokens(n, V, 21);
  const std::vector<float> all =
      testing::ForwardOneSequence(one_pass, toks, 0, n, lay.table, bs, V);
  for (int rows : {1, 5, 16, 38, 76}) {
    sliced.set_mlp_rows_for_testing(rows);
    ASSERT_TRUE(sliced.AllocateKv(16, bs).ok());
    const std::vector<float> got =
        testing::ForwardOneSequence(sliced, toks, 0, n, lay.table, bs, V);
    ASSERT_EQ(got.size(), all.size());
    EXPECT_EQ(0, std::memcmp(got.data(), all.data(), all.size() * 4)) << "slices of " << rows;
  }
}

// Logits of some rows only (the rows that sample) are those rows of the logits of every row; rows
// that do not ascend are refused.
TEST_P(CpuBackendInvariance, LogitsOfSomeRowsAreThoseRowsOfAll) {
  CpuBackend be(cfg_, *w_, type_, kv_);
  const int bs = 16, n = 40, V = cfg_.vocab_size;
  ASSERT_TRUE(be.AllocateKv(16, bs).ok());
  const Layout lay = ShuffledBlocks(n, bs, 16, 9);
  const std::vector<int> toks = RandomTokens(n, V, 21);
  const std::vector<float> all = testing::ForwardOneSequence(be, toks, 0, n, lay.table, bs, V);
  StepBatch b;
  b.Clear();
  for (int p = 0; p < n; ++p) {
    b.token_ids.push_back(toks[p]);
    b.positions.push_back(p);
    b.slot_mapping.push_back(lay.table[p / bs] * bs + p % bs);
  }
  b.query_start.push_back(n);
  b.context_lens.push_back(n);
  b.block_tables = lay.table;
  b.max_blocks = static_cast<int32_t>(lay.table.size());
  b.logits_rows = {0, 3, 4, 17, 39};
  std::vector<float> some(b.logits_rows.size() * V);
  ASSERT_TRUE(be.Forward(b, some.data()).ok());
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&some[i * V], &all[static_cast<size_t>(b.logits_rows[i]) * V], V * 4))
        << "row " << b.logits_rows[i];
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{3, 2}, {4, 4}, {n}, {-1}}) {
    b.logits_rows = bad;
    EXPECT_EQ(be.Forward(b, some.data()).code(), Status::Code::kInvalidArgument);
  }
}

// Only the rows that sample go past the last layer's K/V (CpuBackend::GatherLogitsRows). A step of
// three sequences, two in a prefix group, one of them with no row that samples: the logits of the
// rows that sample are those of every row, bit for bit, and the last layer's K/V of the rows that
// do not are in the cache all the same (the decode row after each sequence gives the same bits).
TEST_P(CpuBackendInvariance, RowsThatDoNotSampleStillLeaveTheirLastLayerKv) {
  const int bs = 16, V = cfg_.vocab_size, shared = 32;  // two shared blocks
  const std::vector<int> n = {70, 45, 38};              // prompt lengths
  std::vector<std::vector<int>> toks;
  for (int s = 0; s < 3; ++s) toks.push_back(RandomTokens(n[s] + 1, V, 40 + s));
  toks[1] = std::vector<int>(toks[0].begin(), toks[0].begin() + shared);
  const std::vector<int> own1 = RandomTokens(n[1] + 1 - shared, V, 44);
  toks[1].insert(toks[1].end(), own1.begin(), own1.end());
  // Physical blocks: 0, 1 shared; then each sequence's own.
  const std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3, 4}, {0, 1, 5, 6}, {7, 8, 9}};
  CpuBackend whole(cfg_, *w_, type_, kv_), pruned(cfg_, *w_, type_, kv_);
  ASSERT_TRUE(whole.AllocateKv(16, bs).ok());
  ASSERT_TRUE(pruned.AllocateKv(16, bs).ok());
  std::vector<std::vector<float>> all(3);
  for (int s = 0; s < 3; ++s)
    all[s] = testing::ForwardOneSequence(whole, toks[s], 0, n[s], tables[s], bs, V);

  // The shared blocks first, then the rest of all three prompts in one step.
  testing::ForwardOneSequence(pruned, toks[0], 0, shared, tables[0], bs, V);
  StepBatch b;
  b.Clear();
  const int first[3] = {shared, shared, 0};
  b.max_blocks = 5;
  std::vector<std::pair<int, int>> want;  // (sequence, position) of each logits row
  for (int s = 0; s < 3; ++s) {
    for (int p = first[s]; p < n[s]; ++p) {
      const int row = b.num_tokens();
      b.token_ids.push_back(toks[s][p]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(tables[s][p / bs] * bs + p % bs);
      const bool samples =
          (s == 0 && p == n[s] - 1) || (s == 2 && (p == 0 || p == 20 || p == n[s] - 1));
      if (samples) {
        b.logits_rows.push_back(row);
        want.push_back({s, p});
      }
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(n[s]);
    std::vector<int32_t> t = tables[s];
    t.resize(b.max_blocks, -1);
    b.block_tables.insert(b.block_tables.end(), t.begin(), t.end());
  }
  b.prefix_groups.push_back({0, 2, 2});
  std::vector<float> some(want.size() * V);
  ASSERT_TRUE(pruned.Forward(b, some.data()).ok());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto [s, p] = want[i];
    EXPECT_EQ(0, std::memcmp(&some[i * V], &all[s][static_cast<size_t>(p) * V], V * 4))
        << "sequence " << s << " position " << p;
  }
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> a =
        testing::ForwardOneSequence(whole, toks[s], n[s], n[s] + 1, tables[s], bs, V);
    const std::vector<float> c =
        testing::ForwardOneSequence(pruned, toks[s], n[s], n[s] + 1, tables[s], bs, V);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), V * 4)) << "decode row of sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, CpuBackendInvariance,
    ::testing::Combine(::testing::Values("LlamaForCausalLM", "Qwen2ForCausalLM",
                                         "Qwen3ForCausalLM"),
                       ::testing::Values(kernels::WeightType::kF32, kernels::WeightType::kBf16,
                                         kernels::WeightType::kInt8),
                       ::testing::Values(KvDtype::kF32, KvDtype::kBf16)),
    [](const auto& info) {  // Llama_f32_kvf32, Qwen2_int8_kvbf16, ...
      return std::string(std::get<0>(info.param)).substr(0, 5) + "_" +
             kernels::WeightTypeName(std::get<1>(info.param)) + "_kv" +
             KvDtypeName(std::get<2>(info.param));
    });

}  // namespace
}  // namespace llmq
