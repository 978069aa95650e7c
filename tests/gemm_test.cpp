#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
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
    SetGemmNcPanelsForTesting(0);
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

constexpr WeightType kTypes[] = {WeightType::kF32, WeightType::kBf16, WeightType::kInt8};

// Against the fp32 weights before packing: bf16 moves each weight by at most 2^-8 of itself
// (round to nearest), int8 by at most half its column's scale (max |W[j][:]| / 254), so the product
// moves by at most that times sum |a|, plus fp32 rounding.
TEST(GemmTest, ErrorAgainstTheFloatWeightsIsBoundedByTheType) {
  GemmEnv env;
  for (const Shape& s : kShapes) {
    const int64_t lda = s.k, ldc = s.n;
    const auto a = Random(s.m * lda, 61 + s.m), w = Random(static_cast<size_t>(s.n) * s.k, 62);
    for (WeightType type : {WeightType::kBf16, WeightType::kInt8}) {
      const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k, type);
      std::vector<float> c(s.m * ldc);
      Gemm(a.data(), lda, s.m, pw, c.data(), ldc);
      for (int i = 0; i < s.m; ++i)
        for (int j = 0; j < s.n; ++j) {
          double ref = 0, bound = 0, amax = 0;
          for (int k = 0; k < s.k; ++k) amax = std::max(amax, std::fabs(double{w[j * s.k + k]}));
          for (int k = 0; k < s.k; ++k) {
            const double x = a[i * lda + k], y = w[static_cast<size_t>(j) * s.k + k];
            ref += x * y;
            const double moved = type == WeightType::kBf16 ? std::fabs(y) * 0x1p-8 : amax / 254;
            bound += std::fabs(x) * (moved + std::fabs(y) * 1e-5);
          }
          ASSERT_NEAR(c[i * ldc + j], ref, bound * 1.001 + 1e-30)
              << WeightTypeName(type) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " at ("
              << i << "," << j << ")";
        }
    }
  }
}

TEST(GemmTest, Bf16RoundsToNearestEvenAndWidensExactly) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(FloatToBf16(-2.5f), 0xC020);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1); just above rounds up.
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3F82);  // tie, odd below: up to even
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-0.0f)), 0.0f);
  EXPECT_TRUE(std::signbit(Bf16ToFloat(FloatToBf16(-0.0f))));
  // Every bf16 value round-trips: a BF16 checkpoint packs as bf16 without change.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float x = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBf16(x), b);
  }
}

TEST(GemmTest, Int8IsSymmetricPerOutputChannel) {
  const int n = 20, k = 9;
  auto w = Random(static_cast<size_t>(n) * k, 71);
  for (int kk = 0; kk < k; ++kk) w[3 * k + kk] = 0.0f;  // an all-zero row: scale 0
  w[5 * k + 2] = -4.0f;                                 // row 5's largest magnitude, negative
  const PackedWeight pw = PackedWeight::Pack(w.data(), n, k, WeightType::kInt8);
  ASSERT_NE(pw.scales(), nullptr);
  EXPECT_EQ(pw.bytes(), 2u * 16 * k + 2 * 16 * sizeof(float));
  for (int j = 0; j < 32; ++j) {
    if (j >= n) {
      EXPECT_EQ(pw.scales()[j], 0.0f);
      continue;
    }
    float amax = 0;
    for (int kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(w[j * k + kk]));
    EXPECT_EQ(pw.scales()[j], amax / 127.0f) << j;
    for (int kk = 0; kk < k; ++kk) {
      const float q = pw.Widened(j, kk);
      EXPECT_LE(std::fabs(q), 127.0f);
      EXPECT_EQ(q, amax > 0 ? std::nearbyint(w[j * k + kk] * (127.0f / amax)) : 0.0f);
    }
  }
  EXPECT_EQ(pw.Widened(5, 2), -127.0f);
  EXPECT_EQ(pw.Dequantized(5, 2), -127.0 * (4.0f / 127.0f));
}

// Against the float64 product of the weights as packed (Dequantized: the fp32 weights themselves,
// the bf16 values, or int8 times its scale): only fp32 accumulation error, for every type.
// Row(j) reads one row of the packed table (the CPU backend's embedding lookup): the weights as the
// product uses them, int8's times its scale in fp32; fp32's exactly the weights packed.
TEST(GemmTest, RowIsTheRowAsTheProductUsesIt) {
  const int n = 37, k = 21;
  const auto w = Random(static_cast<size_t>(n) * k, 91);
  for (WeightType type : kTypes) {
    const PackedWeight pw = PackedWeight::Pack(w.data(), n, k, type);
    std::vector<float> row(k);
    for (int j = 0; j < n; ++j) {
      pw.Row(j, row.data());
      for (int kk = 0; kk < k; ++kk) {
        const float scale = type == WeightType::kInt8 ? pw.scales()[j] : 1.0f;
        ASSERT_EQ(row[kk], pw.Widened(j, kk) * scale) << WeightTypeName(type) << " " << j;
        if (type == WeightType::kF32) {
          ASSERT_EQ(row[kk], w[j * k + kk]);
        }
      }
    }
  }
}

TEST(GemmTest, MatchesDoublePrecisionOnOddShapes) {
  GemmEnv env;
  for (WeightType type : kTypes)
    for (const Shape& s : kShapes) {
      const int64_t lda = s.k + 3, ldc = s.n + 5;  // strides larger than needed
      const auto a = Random(s.m * lda, 1 + s.m),
                 w = Random(static_cast<size_t>(s.n) * s.k, 2 + s.n);
      const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k, type);
      ASSERT_EQ(pw.n(), s.n);
      ASSERT_EQ(pw.k(), s.k);
      ASSERT_EQ(pw.type(), type);
      ASSERT_EQ(pw.panels(), (s.n + 15) / 16);
      ASSERT_EQ(pw.bytes(), PackedWeight::BytesFor(s.n, s.k, type));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(pw.panel_data(0)) % 64, 0u);
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
            const double p = static_cast<double>(a[i * lda + k]) * pw.Dequantized(j, k);
            ref += p;
            mag += std::fabs(p);
          }
          ASSERT_NEAR(c[i * ldc + j], ref, 1e-5 * mag + 1e-30)
              << WeightTypeName(type) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " at ("
              << i << "," << j << ")";
        }
    }
}

// The contract of gemm.h written out from the fp32 W: each weight as the type holds it (bf16
// rounded to nearest even; int8 as round(w * 127 / max |row|) with scale max |row| / 127), the fp32
// fma chain in K order from +0, and int8's one multiply by the scale.
//   a: [m, lda]; w: [n, k]; returns c: [m, ldc] (zero between rows).
std::vector<float> ContractReference(const std::vector<float>& a, int64_t lda, const Shape& s,
                                     const std::vector<float>& w, WeightType type, int64_t ldc) {
  std::vector<float> c(s.m * ldc, 0.0f);
  for (int j = 0; j < s.n; ++j) {
    const float* row = w.data() + static_cast<size_t>(j) * s.k;
    float amax = 0.0f;
    for (int k = 0; k < s.k; ++k) amax = std::max(amax, std::fabs(row[k]));
    std::vector<float> widened(s.k);
    for (int k = 0; k < s.k; ++k)
      widened[k] = type == WeightType::kF32    ? row[k]
                   : type == WeightType::kBf16 ? Bf16ToFloat(FloatToBf16(row[k]))
                   : amax > 0                  ? std::nearbyint(row[k] * (127.0f / amax))
                                               : 0.0f;
    for (int i = 0; i < s.m; ++i) {
      float acc = 0.0f;
      for (int k = 0; k < s.k; ++k) acc = std::fma(a[i * lda + k], widened[k], acc);
      c[i * ldc + j] = type == WeightType::kInt8 ? acc * (amax / 127.0f) : acc;
    }
  }
  return c;
}

TEST(GemmTest, AllIsaPathsAndThreadCountsBitExactWithReference) {
  GemmEnv env;
  const auto isas = SupportedIsas();
  ASSERT_FALSE(isas.empty());
  for (WeightType type : kTypes)
    for (const Shape& s : kShapes) {
      const int64_t lda = s.k + 1, ldc = s.n + 2;
      const auto a = Random(s.m * lda, 11 + s.k), w = Random(static_cast<size_t>(s.n) * s.k, 12);
      const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k, type);
      std::vector<float> ref(s.m * ldc, 0.0f);
      GemmReference(a.data(), lda, s.m, pw, ref.data(), ldc);
      const std::vector<float> contract = ContractReference(a, lda, s, w, type, ldc);
      ASSERT_EQ(std::memcmp(contract.data(), ref.data(), ref.size() * sizeof(float)), 0)
          << WeightTypeName(type) << " m=" << s.m << " n=" << s.n << " k=" << s.k;
      for (GemmIsa isa : isas) {
        ASSERT_TRUE(SetGemmIsaForTesting(isa));
        ASSERT_EQ(ActiveGemmIsa(), isa);
        for (int threads : {1, 2}) {
          SetCpuThreads(threads);
          std::vector<float> c(s.m * ldc, 0.0f);
          Gemm(a.data(), lda, s.m, pw, c.data(), ldc);
          ASSERT_EQ(std::memcmp(c.data(), ref.data(), c.size() * sizeof(float)), 0)
              << WeightTypeName(type) << " " << GemmIsaName(isa) << " threads=" << threads
              << " m=" << s.m << " n=" << s.n << " k=" << s.k;
        }
      }
    }
}

// Each vector path alone against the scalar one, per weight type (the test above covers the paths
// the CPU has; these say by name which one was not run here).
void ExpectIsaMatchesScalar(GemmIsa isa) {
  GemmEnv env;
  if (!SetGemmIsaForTesting(isa))
    GTEST_SKIP() << "this CPU lacks " << GemmIsaName(isa) << " (avx2: AVX2+FMA; avx512: "
                 << "avx512f/bw/dq/vl): its path is checked on a CPU that has it";
  for (WeightType type : kTypes)
    for (const Shape& s : kShapes) {
      const auto a = Random(s.m * s.k, 81 + s.k), w = Random(static_cast<size_t>(s.n) * s.k, 82);
      const PackedWeight pw = PackedWeight::Pack(w.data(), s.n, s.k, type);
      std::vector<float> ref(s.m * s.n), c(s.m * s.n);
      GemmReference(a.data(), s.k, s.m, pw, ref.data(), s.n);
      ASSERT_TRUE(SetGemmIsaForTesting(isa));
      Gemm(a.data(), s.k, s.m, pw, c.data(), s.n);
      ASSERT_EQ(std::memcmp(c.data(), ref.data(), c.size() * sizeof(float)), 0)
          << WeightTypeName(type) << " " << GemmIsaName(isa) << " m=" << s.m << " n=" << s.n
          << " k=" << s.k;
    }
}

TEST(GemmTest, Avx2PathMatchesScalarForEveryWeightType) {
  ExpectIsaMatchesScalar(GemmIsa::kAvx2);
}

TEST(GemmTest, Avx512PathMatchesScalarForEveryWeightType) {
  ExpectIsaMatchesScalar(GemmIsa::kAvx512);
}

TEST(GemmTest, BatchInvariantRowsEqualSingleRowCalls) {
  GemmEnv env;
  const int n = 2304 / 8 + 5, k = 768 + 1;  // 23 panels (one partial), 4 K blocks on prefill path
  const auto w = Random(static_cast<size_t>(n) * k, 21);
  const auto a = Random(static_cast<size_t>(512) * k, 22);
  for (WeightType type : kTypes)
    for (GemmIsa isa : SupportedIsas()) {
      const PackedWeight pw = PackedWeight::Pack(w.data(), n, k, type);
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
                << WeightTypeName(type) << " " << GemmIsaName(isa) << " threads=" << threads
                << " m=" << m << " row " << i;
        }
      }
    }
}

// The prefill path's N block follows the L2 size (gemm.h), and only orders the tiles: every block
// size, including ones that split a thread's panels unevenly and the smallest (one 3-panel group),
// gives the reference's bits, on every path, with 1 and 2 threads.
TEST(GemmTest, NBlockFollowsTheL2AndChangesNoBit) {
  EXPECT_EQ(GemmNcPanelsForL2(1L << 20), 24);
  EXPECT_EQ(GemmNcPanelsForL2(512L << 10), 12);
  EXPECT_EQ(GemmNcPanelsForL2(256L << 10), 6);
  EXPECT_EQ(GemmNcPanelsForL2(2L << 20), 24);  // capped
  EXPECT_EQ(GemmNcPanelsForL2(64L << 10), 3);  // at least one group
  EXPECT_EQ(GemmNcPanelsForL2(0), 12);         // unknown: as 512 KiB
  EXPECT_EQ(GemmNcPanels() % 3, 0);
  GemmEnv env;
  const int m = 70, n = 16 * 29 + 5, k = 600;  // 30 panels (one partial), 3 K blocks
  const auto a = Random(static_cast<size_t>(m) * k, 31), w = Random(static_cast<size_t>(n) * k, 32);
  for (WeightType type : kTypes) {
    const PackedWeight pw = PackedWeight::Pack(w.data(), n, k, type);
    std::vector<float> ref(static_cast<size_t>(m) * n);
    GemmReference(a.data(), k, m, pw, ref.data(), n);
    for (GemmIsa isa : SupportedIsas()) {
      ASSERT_TRUE(SetGemmIsaForTesting(isa));
      for (int nc : {3, 6, 9, 12, 24})
        for (int threads : {1, 2}) {
          SetGemmNcPanelsForTesting(nc);
          SetCpuThreads(threads);
          std::vector<float> c(static_cast<size_t>(m) * n);
          Gemm(a.data(), k, m, pw, c.data(), n);
          SetGemmNcPanelsForTesting(0);
          ASSERT_EQ(std::memcmp(c.data(), ref.data(), c.size() * sizeof(float)), 0)
              << WeightTypeName(type) << " " << GemmIsaName(isa) << " nc=" << nc
              << " threads=" << threads;
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

// Packing from bf16 rows in place (a BF16 checkpoint's mapping) is packing their widened values,
// bit for bit, for every type (int8's scales included), stacked and not.
TEST(GemmTest, PackStackedBf16IsPackStackedOfTheWidenedValues) {
  const int k = 70;
  const std::vector<int> ns = {20, 5, 38};
  std::vector<std::vector<uint16_t>> bits(ns.size());
  std::vector<std::vector<float>> widened(ns.size());
  std::vector<const uint16_t*> b16;
  std::vector<const float*> f32;
  for (size_t s = 0; s < ns.size(); ++s) {
    for (float x : Random(static_cast<size_t>(ns[s]) * k, 50 + s)) {
      bits[s].push_back(FloatToBf16(x * 3));
      widened[s].push_back(Bf16ToFloat(bits[s].back()));
    }
    b16.push_back(bits[s].data());
    f32.push_back(widened[s].data());
  }
  for (WeightType type : {WeightType::kF32, WeightType::kBf16, WeightType::kInt8}) {
    const PackedWeight a = PackedWeight::PackStackedBf16(b16, ns, k, type);
    const PackedWeight b = PackedWeight::PackStacked(f32, ns, k, type);
    ASSERT_EQ(a.bytes(), b.bytes()) << WeightTypeName(type);
    EXPECT_EQ(std::memcmp(a.panel_data(0), b.panel_data(0), b.panels() * k * b.row_bytes()), 0)
        << WeightTypeName(type);
    if (type == WeightType::kInt8) {
      EXPECT_EQ(std::memcmp(a.scales(), b.scales(), b.panels() * 16 * sizeof(float)), 0);
    }
  }
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
