#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace llmq::kernels {
namespace {

struct Shape {
  int m, n, k;
};

std::vector<float> Random(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = u(rng);
  // A few exact zeros of both signs: the chain must start from +0 on every path.
  for (size_t i = 0; i < count; i += 97) v[i] = (i / 97) % 2 ? -0.0f : 0.0f;
  return v;
}

// Restores the CPU pool's thread count and the automatic ISA choice when a test ends.
class GemmEnv {
 public:
  GemmEnv() : threads_(CpuThreads()) { SetAlwaysSplitForTesting(true); }
  ~GemmEnv() {
    SetAlwaysSplitForTesting(false);
    SetCpuThreads(threads_);
    SetGemmIsaForTesting(GemmIsa::kAuto);
  }

 private:
  int threads_;
};

std::vector<GemmIsa> SupportedIsas() {
  std::vector<GemmIsa> out;
  for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512})
    if (SetGemmIsaForTesting(isa)) out.push_back(isa);
  SetGemmIsaForTesting(GemmIsa::kAuto);
  return out;
}

// Shapes that hit every code path: single rows, partial row blocks, the decode path (M <= 32),
// the prefill path (M > 32: K blocks of ~256 with partial sums through C, N blocks of 24 panels,
// next-block prefetch), N not a multiple of 16 (masked last panel), odd K.
const Shape kShapes[] = {{1, 1, 1},     {1, 17, 3},    {3, 16, 1},     {5, 47, 17},
                         {8, 48, 64},   {9, 49, 257},  {13, 100, 33},  {32, 768, 96},
                         {33, 33, 513}, {37, 511, 77}, {64, 500, 600}, {77, 1001, 300}};

TEST(GemmTest, MatchesDoublePrecisionOnOddShapes) {
  GemmEnv env;
  for (const Shape& s : kShapes) {
    const int64_t lda = s.k + 3, ldc = s.n + 5;  // strides larger than needed
    const auto a = Random(s.m * lda, 1 + s.m), w = Random(static_cast<size_t>(s.n) * s.k, 2 + s.n);
    const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k);
    ASSERT_EQ(pw.n(), s.n);
    ASSERT_EQ(pw.k(), s.k);
    ASSERT_EQ(pw.panels(), (s.n + 15) / 16);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(pw.panel(0)) % 64, 0u);
    const float kSentinel = 12345.0f;
    std::vector<float> c(s.m * ldc, kSentinel);
    Gemm(a.data(), lda, s.m, pw, c.data(), ldc);
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < ldc; ++j) {
        if (j >= s.n) {  // padding between rows is never written
          ASSERT_EQ(c[i * ldc + j], kSentinel) << "row " << i << " col " << j;
          continue;
        }
        double ref = 0, mag = 0;
        for (int k = 0; k < s.k; ++k) {
          const double p =
              static_cast<double>(a[i * lda + k]) * w[static_cast<size_t>(j) * s.k + k];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(c[i * ldc + j], ref, 1e-5 * mag + 1e-30)
            << "m=" << s.m << " n=" << s.n << " k=" << s.k << " at (" << i << "," << j << ")";
      }
  }
}

TEST(GemmTest, AllIsaPathsAndThreadCountsBitExactWithReference) {
  GemmEnv env;
  const auto isas = SupportedIsas();
  ASSERT_FALSE(isas.empty());
  for (const Shape& s : kShapes) {
    const int64_t lda = s.k + 1, ldc = s.n + 2;
    const auto a = Random(s.m * lda, 11 + s.k), w = Random(static_cast<size_t>(s.n) * s.k, 12);
    const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k);
    std::vector<float> ref(s.m * ldc, 0.0f);
    GemmReference(a.data(), lda, s.m, pw, ref.data(), ldc);
    for (GemmIsa isa : isas) {
      ASSERT_TRUE(SetGemmIsaForTesting(isa));
      ASSERT_EQ(ActiveGemmIsa(), isa);
      for (int threads : {1, 2}) {
        SetCpuThreads(threads);
        std::vector<float> c(s.m * ldc, 0.0f);
        Gemm(a.data(), lda, s.m, pw, c.data(), ldc);
        ASSERT_EQ(std::memcmp(c.data(), ref.data(), c.size() * sizeof(float)), 0)
            << GemmIsaName(isa) << " threads=" << threads << " m=" << s.m << " n=" << s.n
            << " k=" << s.k;
      }
    }
  }
}

TEST(GemmTest, BatchInvariantRowsEqualSingleRowCalls) {
  GemmEnv env;
  const int n = 2304 / 8 + 5, k = 768 + 1;  // 23 panels (one partial), 4 K blocks on prefill path
  const auto w = Random(static_cast<size_t>(n) * k, 21);
  const PackedWeight pw = PackedWeight::Pack(w.data(), n, k);
  const auto a = Random(static_cast<size_t>(512) * k, 22);
  for (GemmIsa isa : SupportedIsas()) {
    if (isa == GemmIsa::kScalar) continue;  // same code for any M; covered by the test above
    ASSERT_TRUE(SetGemmIsaForTesting(isa));
    for (int threads : {1, 2}) {
      SetCpuThreads(threads);
      // Single-row results, each computed alone.
      std::vector<float> alone(static_cast<size_t>(512) * n);
      for (int i = 0; i < 512; ++i) Gemm(a.data() + i * k, k, 1, pw, alone.data() + i * n, n);
      for (int m : {1, 2, 7, 8, 9, 33, 512}) {
        // The batch starts at a different row so that row i of the batch sits at every position
        // of a row block across the M values.
        const int first = (512 - m) / 3;
        std::vector<float> c(static_cast<size_t>(m) * n);
        Gemm(a.data() + static_cast<size_t>(first) * k, k, m, pw, c.data(), n);
        for (int i = 0; i < m; ++i)
          ASSERT_EQ(std::memcmp(&c[static_cast<size_t>(i) * n],
                                &alone[static_cast<size_t>(first + i) * n], n * sizeof(float)),
                    0)
              << GemmIsaName(isa) << " threads=" << threads << " m=" << m << " row " << i;
      }
    }
  }
}

TEST(GemmTest, PackStackedEqualsPackOfConcatenation) {
  const int k = 37;
  const std::vector<int> ns = {20, 5, 5, 33};
  std::vector<std::vector<float>> parts;
  std::vector<float> all;
  std::vector<const float*> ptrs;
  for (size_t s = 0; s < ns.size(); ++s) {
    parts.push_back(Random(static_cast<size_t>(ns[s]) * k, 30 + s));
    all.insert(all.end(), parts.back().begin(), parts.back().end());
  }
  for (const auto& p : parts) ptrs.push_back(p.data());
  const PackedWeight stacked = PackedWeight::PackStacked(ptrs, ns, k);
  const PackedWeight whole = PackedWeight::Pack(all.data(), 63, k);
  ASSERT_EQ(stacked.n(), 63);
  ASSERT_EQ(stacked.k(), k);
  ASSERT_EQ(stacked.bytes(), whole.bytes());
  ASSERT_EQ(stacked.bytes(), 4u * 16 * k * sizeof(float));
  ASSERT_EQ(std::memcmp(stacked.panel(0), whole.panel(0), whole.bytes()), 0);
  // Layout: panel p, step k, column c holds W[p*16 + c][k]; zero past N.
  for (int j = 0; j < 64; ++j)
    for (int kk = 0; kk < k; ++kk)
      ASSERT_EQ(whole.panel(j / 16)[kk * 16 + j % 16], j < 63 ? all[j * k + kk] : 0.0f);
}

TEST(GemmTest, InsideParallelRegionRunsSeriallyAndMatches) {
  GemmEnv env;
  SetCpuThreads(2);
  const Shape s{40, 130, 300};
  const auto a = Random(s.m * s.k, 41), w = Random(static_cast<size_t>(s.n) * s.k, 42);
  const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k);
  std::vector<float> ref(s.m * s.n);
  GemmReference(a.data(), s.k, s.m, pw, ref.data(), s.n);
  std::vector<std::vector<float>> outs(8, std::vector<float>(s.m * s.n));
  // Nested: from inside a pool region.
  CpuPool().Run(4, [&](int64_t t) { Gemm(a.data(), s.k, s.m, pw, outs[t].data(), s.n); });
  // Concurrent: two threads at once (one gets the pool, the other runs on its own).
  std::vector<std::thread> callers;
  for (int t = 4; t < 8; t += 2)
    callers.emplace_back([&, t] {
      for (int i = t; i < t + 2; ++i) Gemm(a.data(), s.k, s.m, pw, outs[i].data(), s.n);
    });
  for (std::thread& c : callers) c.join();
  for (const auto& c : outs)
    ASSERT_EQ(std::memcmp(c.data(), ref.data(), c.size() * sizeof(float)), 0);
}

TEST(GemmTest, EmptyShapes) {
  const auto w = Random(16 * 4, 51);
  const PackedWeight pw = PackedWeight::Pack(w.data(), 16, 4);
  std::vector<float> c(16, 7.0f);
  Gemm(nullptr, 4, 0, pw, c.data(), 16);  // m = 0: nothing written
  for (float x : c) ASSERT_EQ(x, 7.0f);
  const PackedWeight empty_k = PackedWeight::Pack(w.data(), 16, 0);
  std::vector<float> a(3, 1.0f);
  Gemm(a.data(), 1, 1, empty_k, c.data(), 16);  // k = 0: empty chains are +0
  for (float x : c) ASSERT_EQ(std::signbit(x) ? -1.0f : x, 0.0f);
}

}  // namespace
}  // namespace llmq::kernels
