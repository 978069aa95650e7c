// kernels::PagedAttention with shared-prefix groups: a loop interchange of the plain path, so the
// outputs are bit-identical with and without groups, and to each row computed alone, on random
// caches, queries and block tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"

namespace llmq::kernels {
namespace {

struct Case {
  int block_size, kv_heads, heads, head_dim;
};

class PagedAttentionGroups : public ::testing::TestWithParam<Case> {};

// A step of S sequences: some in groups sharing prefix blocks (decode rows and prefill chunks
// after the shared part), some alone; the same step is run with and without the groups.
TEST_P(PagedAttentionGroups, GroupedIsBitIdenticalToUngrouped) {
  const Case c = GetParam();
  const int bs = c.block_size, d = c.head_dim;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::normal_distribution<float> normal(0.f, 1.f);

    const int num_blocks = 400;
    std::vector<float> k(static_cast<size_t>(num_blocks) * c.kv_heads * bs * d), v(k.size());
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    PagedKv kv{k.data(), v.data(), bs, c.kv_heads, d};

    // Sequences: groups of 2..9 members sharing 1..8 blocks, and loners in between.
    std::vector<std::vector<int32_t>> tables;
    std::vector<std::pair<int, int>> rows;  // per seq: (first position queried, rows)
    std::vector<SharedPrefix> groups;
    int next_block = 0;
    auto fresh = [&] { return next_block++ % num_blocks; };
    const int units = uni(3, 6);
    for (int u = 0; u < units; ++u) {
      if (uni(0, 2) == 0) {  // a loner: a prefill chunk or a decode row
        const int ctx = uni(1, 5 * bs);
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
    int max_blocks = 0;
    for (const auto& t : tables) max_blocks = std::max<int>(max_blocks, t.size());
    std::vector<int32_t> block_tables, query_start{0}, positions;
    for (int s = 0; s < S; ++s) {
      std::vector<int32_t> t = tables[s];
      t.resize(max_blocks, -1);
      block_tables.insert(block_tables.end(), t.begin(), t.end());
      for (int i = 0; i < rows[s].second; ++i) positions.push_back(rows[s].first + i);
      query_start.push_back(static_cast<int32_t>(positions.size()));
    }
    const int T = static_cast<int>(positions.size());
    const int64_t q_stride = static_cast<int64_t>(c.heads) * d + 3;  // rows wider than q
    std::vector<float> q(T * q_stride);
    for (float& x : q) x = normal(rng);

    AttentionBatch ab;
    ab.num_seqs = S;
    ab.query_start = query_start.data();
    ab.positions = positions.data();
    ab.block_tables = block_tables.data();
    ab.max_blocks = max_blocks;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> plain(static_cast<size_t>(T) * c.heads * d, NAN), grouped(plain);
    PagedAttention(ab, kv, q.data(), q_stride, c.heads, scale, plain.data());
    ab.groups = groups.data();
    ab.num_groups = static_cast<int>(groups.size());
    PagedAttention(ab, kv, q.data(), q_stride, c.heads, scale, grouped.data());
    ASSERT_GT(groups.size() + S, 0u);
    ASSERT_EQ(std::memcmp(plain.data(), grouped.data(), plain.size() * sizeof(float)), 0)
        << "seed " << seed << ": " << groups.size() << " groups, " << S << " seqs";

    // And each row alone (one row of one sequence: no chunk, no group) gives the same bits: the
    // loop interchange of prefill chunks and groups is exact.
    for (int row = 0; row < T; row += 1 + T / 16) {
      int s = 0;
      while (query_start[s + 1] <= row) ++s;
      const int32_t one_start[2] = {0, 1};
      AttentionBatch one;
      one.num_seqs = 1;
      one.query_start = one_start;
      one.positions = &positions[row];
      one.block_tables = &block_tables[static_cast<size_t>(s) * max_blocks];
      one.max_blocks = max_blocks;
      std::vector<float> alone(static_cast<size_t>(c.heads) * d);
      PagedAttention(one, kv, q.data() + row * q_stride, q_stride, c.heads, scale, alone.data());
      ASSERT_EQ(std::memcmp(alone.data(), grouped.data() + static_cast<size_t>(row) * c.heads * d,
                            alone.size() * sizeof(float)),
                0)
          << "seed " << seed << " row " << row << " alone";
    }

    // And both are attention: one row against a plain double-precision softmax.
    const int r = uni(0, T - 1);
    int s = 0;
    while (query_start[s + 1] <= r) ++s;
    const int hq = uni(0, c.heads - 1), g = hq / (c.heads / c.kv_heads);
    const int ctx = positions[r] + 1;
    std::vector<double> sc(ctx);
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < ctx; ++j) {
      const float* kt = k.data() + kv.TileOffset(tables[s][j / bs], g);
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += q[r * q_stride + hq * d + i] * kt[i * bs + j % bs];
      sc[j] = dot * scale;
      m = std::max(m, sc[j]);
    }
    for (double& x : sc) sum += (x = std::exp(x - m));
    for (int i = 0; i < d; ++i) {
      double want = 0;
      for (int j = 0; j < ctx; ++j)
        want += sc[j] / sum * v[kv.TileOffset(tables[s][j / bs], g) + (j % bs) * d + i];
      EXPECT_NEAR(grouped[(static_cast<size_t>(r) * c.heads + hq) * d + i], want, 1e-4)
          << "seed " << seed << " row " << r << " head " << hq;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionGroups,
                         ::testing::Values(Case{16, 2, 4, 64}, Case{16, 3, 3, 32},
                                           Case{8, 2, 8, 16}, Case{16, 1, 4, 128}));

}  // namespace
}  // namespace llmq::kernels
