// kernels::PagedAttention: the arithmetic of attention.h is the same bit for bit with and without
// prefix groups, for each row computed alone, and on every ISA (AVX-512, AVX2, the scalar
// kernel), on random caches, queries and block tables; and it is attention (a plain
// double-precision softmax).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "engine/model/safetensors.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"

namespace llmq::kernels {
namespace {

struct Case {
  int block_size, kv_heads, heads, head_dim;
};

// A step of S sequences: some in groups sharing prefix blocks (decode rows and prefill chunks
// after the shared part), some alone (prefill chunks or decode rows), on a random cache.
struct RandomStep {
  std::vector<float> k, v, q;
  PagedKv kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> block_tables, query_start{0}, positions;
  std::vector<SharedPrefix> groups;
  int max_blocks = 0, T = 0;
  int64_t q_stride = 0;
  float scale = 0;
  AttentionBatch ab;  // without the groups
};

RandomStep MakeStep(const Case& c, uint32_t seed) {
  RandomStep st;
  const int bs = c.block_size, d = c.head_dim;
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::normal_distribution<float> normal(0.f, 1.f);
  auto& k = st.k;
  auto& v = st.v;
  auto& q = st.q;
  auto& tables = st.tables;
  auto& groups = st.groups;
  auto& block_tables = st.block_tables;
  auto& query_start = st.query_start;
  auto& positions = st.positions;
  auto& max_blocks = st.max_blocks;
  const int num_blocks = 400;
  k.resize(static_cast<size_t>(num_blocks) * c.kv_heads * bs * d);
  v.resize(k.size());
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  st.kv = PagedKv{k.data(), v.data(), bs, c.kv_heads, d, num_blocks};

  // Sequences: groups of 2..9 members sharing 1..8 blocks, and loners in between.
  std::vector<std::pair<int, int>> rows;  // per seq: (first position queried, rows)
  int next_block = 0;
  auto fresh = [&] { return next_block++ % num_blocks; };
  const int units = uni(3, 6);
  for (int u = 0; u < units; ++u) {
    if (uni(0, 2) == 0) {  // a loner: a prefill chunk or a decode row
      const int ctx = uni(1, std::max(5 * bs, 192));
      std::vector<int32_t> t;
      for (int b = 0; b < (ctx + bs - 1) / bs; ++b) t.push_back(fresh());
      const int n = uni(1, ctx);
      tables.push_back(t);
      rows.push_back({ctx - n, n});
      continue;
    }
    const int shared = uni(1, 8), members = uni(2, 9);
    std::vector<int32_t> prefix;
    for (int b = 0; b < shared; ++b) prefix.push_back(fresh());
    groups.push_back({static_cast<int>(tables.size()), members, shared});
    for (int m = 0; m < members; ++m) {
      const int own = uni(1, 3 * bs);  // tokens after the shared blocks
      std::vector<int32_t> t = prefix;
      for (int b = 0; b < (own + bs - 1) / bs; ++b) t.push_back(fresh());
      const int n = uni(0, 3) == 0 ? uni(1, own) : 1;  // mostly decode rows
      tables.push_back(t);
      rows.push_back({shared * bs + own - n, n});
    }
  }
  const int S = static_cast<int>(tables.size());
  for (const auto& t : tables) max_blocks = std::max<int>(max_blocks, t.size());
  for (int s = 0; s < S; ++s) {
    std::vector<int32_t> t = tables[s];
    t.resize(max_blocks, -1);
    block_tables.insert(block_tables.end(), t.begin(), t.end());
    for (int i = 0; i < rows[s].second; ++i) positions.push_back(rows[s].first + i);
    query_start.push_back(static_cast<int32_t>(positions.size()));
  }
  const int T = st.T = static_cast<int>(positions.size());
  // Rows wider than q.
  const int64_t q_stride = st.q_stride = static_cast<int64_t>(c.heads) * d + 3;
  q.resize(T * q_stride);
  for (float& x : q) x = normal(rng);

  AttentionBatch& ab = st.ab;
  ab.num_seqs = S;
  ab.query_start = query_start.data();
  ab.positions = positions.data();
  ab.block_tables = block_tables.data();
  ab.max_blocks = max_blocks;
  st.scale = 1.0f / std::sqrt(static_cast<float>(d));
  return st;
}

std::vector<float> Attend(const RandomStep& st, const Case& c, bool with_groups) {
  AttentionBatch ab = st.ab;
  if (with_groups) {
    ab.groups = st.groups.data();
    ab.num_groups = static_cast<int>(st.groups.size());
  }
  std::vector<float> out(static_cast<size_t>(st.T) * c.heads * c.head_dim, NAN);
  PagedAttention(ab, st.kv, st.q.data(), st.q_stride, c.heads, st.scale, out.data());
  return out;
}

class PagedAttentionGroups : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionGroups, GroupedIsBitIdenticalToUngrouped) {
  const Case c = GetParam();
  const int bs = c.block_size, d = c.head_dim;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const RandomStep st = MakeStep(c, seed);
    const std::vector<float> plain = Attend(st, c, false), grouped = Attend(st, c, true);
    ASSERT_EQ(std::memcmp(plain.data(), grouped.data(), plain.size() * sizeof(float)), 0)
        << "seed " << seed << ": " << st.groups.size() << " groups, " << st.ab.num_seqs << " seqs";

    // And each row alone (one row of one sequence: no chunk, no group) gives the same bits.
    const int T = st.T;
    for (int row = 0; row < T; row += 1 + T / 16) {
      int s = 0;
      while (st.query_start[s + 1] <= row) ++s;
      const int32_t one_start[2] = {0, 1};
      AttentionBatch one;
      one.num_seqs = 1;
      one.query_start = one_start;
      one.positions = &st.positions[row];
      one.block_tables = &st.block_tables[static_cast<size_t>(s) * st.max_blocks];
      one.max_blocks = st.max_blocks;
      std::vector<float> alone(static_cast<size_t>(c.heads) * d);
      PagedAttention(one, st.kv, st.q.data() + row * st.q_stride, st.q_stride, c.heads, st.scale,
                     alone.data());
      ASSERT_EQ(std::memcmp(alone.data(), grouped.data() + static_cast<size_t>(row) * c.heads * d,
                            alone.size() * sizeof(float)),
                0)
          << "seed " << seed << " row " << row << " alone";
    }

    // And both are attention: one row against a plain double-precision softmax.
    std::mt19937 rng(seed);
    const int r = std::uniform_int_distribution<int>(0, T - 1)(rng);
    int s = 0;
    while (st.query_start[s + 1] <= r) ++s;
    const int hq = std::uniform_int_distribution<int>(0, c.heads - 1)(rng);
    const int g = hq / (c.heads / c.kv_heads);
    const int ctx = st.positions[r] + 1;
    std::vector<double> sc(ctx);
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < ctx; ++j) {
      const float* kt = st.k.data() + st.kv.TileOffset(st.tables[s][j / bs], g);
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += st.q[r * st.q_stride + hq * d + i] * kt[i * bs + j % bs];
      sc[j] = dot * st.scale;
      m = std::max(m, sc[j]);
    }
    for (double& x : sc) sum += (x = std::exp(x - m));
    for (int i = 0; i < d; ++i) {
      double want = 0;
      for (int j = 0; j < ctx; ++j)
        want += sc[j] / sum * st.v[st.kv.TileOffset(st.tables[s][j / bs], g) + (j % bs) * d + i];
      EXPECT_NEAR(grouped[(static_cast<size_t>(r) * c.heads + hq) * d + i], want, 1e-4)
          << "seed " << seed << " row " << r << " head " << hq;
    }
  }
}

// The vector kernels (register tiles of many pairs and keys, vector exp and lane sums) compute
// exactly the scalar kernel's arithmetic, with and without groups.
TEST_P(PagedAttentionGroups, EveryIsaGivesTheScalarBits) {
  const Case c = GetParam();
  int isas = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const RandomStep st = MakeStep(c, 100 + seed);
    ASSERT_TRUE(SetGemmIsaForTesting(GemmIsa::kScalar));
    const std::vector<float> want = Attend(st, c, seed % 2 == 0);
    for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
      if (!SetGemmIsaForTesting(isa)) continue;
      ++isas;
      const std::vector<float> got = Attend(st, c, seed % 2 == 1);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
            << GemmIsaName(isa) << " seed " << seed << " at " << i << ": " << got[i] << " vs "
            << want[i];
    }
  }
  SetGemmIsaForTesting(GemmIsa::kAuto);
  if (isas == 0) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: only the scalar kernel";
}

// A bf16 cache: attention over it is, bit for bit, attention over an fp32 cache holding the same
// values (each rounded to bf16 by FloatToBf16, base/bf16.h), on every ISA, with and without
// groups; and WriteKv rounds what it writes into a bf16 cache so.
TEST_P(PagedAttentionGroups, Bf16CacheIsTheFp32CacheOfItsValues) {
  const Case c = GetParam();
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    RandomStep st = MakeStep(c, 300 + seed);
    std::vector<uint16_t> k16(st.k.size()), v16(st.v.size());
    for (size_t i = 0; i < st.k.size(); ++i) {
      k16[i] = FloatToBf16(st.k[i]);
      v16[i] = FloatToBf16(st.v[i]);
      st.k[i] = Bf16ToFloat(k16[i]);
      st.v[i] = Bf16ToFloat(v16[i]);
    }
    for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
      if (!SetGemmIsaForTesting(isa)) continue;
      const std::vector<float> want = Attend(st, c, seed % 2 == 0);
      RandomStep half = st;
      half.kv = PagedKv{nullptr,    nullptr,          c.block_size, c.kv_heads,
                        c.head_dim, st.kv.num_blocks, k16.data(),   v16.data()};
      const std::vector<float> got = Attend(half, c, seed % 2 == 1);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << GemmIsaName(isa) << " seed " << seed;
    }
  }
  SetGemmIsaForTesting(GemmIsa::kAuto);

  // WriteKv: T rows into scattered slots of a bf16 cache.
  const int bs = c.block_size, d = c.head_dim, T = 37, blocks = 8;
  const int64_t stride = static_cast<int64_t>(c.kv_heads) * d + 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> ks(T * stride), vs(T * stride);
  for (float& x : ks) x = normal(rng);
  for (float& x : vs) x = normal(rng);
  std::vector<int32_t> slots(blocks * bs);
  for (int i = 0; i < blocks * bs; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(T);
  const size_t n = static_cast<size_t>(blocks) * c.kv_heads * bs * d;
  std::vector<uint16_t> k16(n, 0xffff), v16(n, 0xffff);
  const PagedKv kv{nullptr, nullptr, bs, c.kv_heads, d, blocks, k16.data(), v16.data()};
  WriteKv(kv, ks.data(), vs.data(), stride, slots.data(), T);
  for (int r = 0; r < T; ++r)
    for (int h = 0; h < c.kv_heads; ++h)
      for (int i = 0; i < d; ++i) {
        const int64_t tile = kv.TileOffset(slots[r] / bs, h), off = slots[r] % bs;
        ASSERT_EQ(k16[tile + i * bs + off], FloatToBf16(ks[r * stride + h * d + i])) << r;
        ASSERT_EQ(v16[tile + off * d + i], FloatToBf16(vs[r * stride + h * d + i])) << r;
      }
}

// The layout attention.h documents: each kv head's tiles are one region, block after block, so a
// head's consecutive blocks are one stream in memory.
TEST(PagedKvLayout, HeadMajorTilesOfConsecutiveBlocksAreAdjacent) {
  const PagedKv kv{nullptr, nullptr, 16, 3, 64, 100};
  const int64_t tile = 16 * 64;
  EXPECT_EQ(kv.TileOffset(0, 0), 0);
  EXPECT_EQ(kv.TileOffset(7, 0), 7 * tile);
  EXPECT_EQ(kv.TileOffset(8, 2) - kv.TileOffset(7, 2), tile);
  EXPECT_EQ(kv.TileOffset(0, 1), 100 * tile);
  EXPECT_EQ(kv.TileOffset(99, 2) + tile, 3 * 100 * tile);  // the last tile ends the layer
}

// Shapes: the vector kernels take block sizes and head dims that are multiples of 16 (head dims
// past the 64-wide value tiles: 80, 48); the rest (block 8, head dim 8) is the scalar kernel.
INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionGroups,
                         ::testing::Values(Case{16, 2, 4, 64}, Case{16, 3, 3, 32},
                                           Case{8, 2, 8, 16}, Case{16, 1, 4, 128},
                                           Case{32, 2, 2, 80}, Case{16, 4, 28, 48},
                                           Case{16, 2, 4, 8}));

}  // namespace
}  // namespace llmq::kernels
