// Gemm benchmark over the bench-110m shapes (hidden 768, intermediate 2048, vocab 32000).
//
//   gemm_bench [--hot] [--quick] [--only=SHAPE] [--m=M] [--dtype=f32|bf16|int8] [--nc=PANELS]
//
// Prints the machine's measured FMA peak and memory read bandwidth, then a table per GEMM shape,
// weight type (f32, bf16, int8: kernels::WeightType; --dtype=T for one), M in {1, 8, 32, 128, 512}
// (--m=M: M alone) and 1 / 2 threads: ms per call, GFLOP/s, GB/s of W streamed (the packed W's
// bytes / time: bf16 streams half the bytes of f32 and int8 a quarter) and percentages of the
// measured peak and bandwidth. By default each timed call uses the next of several copies of W (>=
// 128 MiB together, 4x the L3), so W comes from DRAM as in the engine, where a step streams every
// layer's weights; --hot reuses one copy (L3-resident for all shapes but the vocab projection).
// LLMQ_GEMM_ISA=scalar|avx2|avx512 forces a kernel; --nc=PANELS the prefill path's N block
// (default: from the L2 size, kernels::GemmNcPanels).
#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using llmq::kernels::Gemm;
using llmq::kernels::PackedWeight;
using llmq::kernels::WeightType;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Peak fp32 FMA throughput of one core, in GFLOP/s, at one vector width: 12 independent FMA chains
// (> 2 pipes x 4-cycle latency), so the loop runs at the FMA issue rate. Measured at the active
// kernel's width: on an AVX2-only machine (or with LLMQ_GEMM_ISA=avx2) the kernels issue ymm FMAs,
// and their peak is the ymm one. And a clock estimate: one dependent FMA chain, assuming the
// 4-cycle FMA latency of Zen 3/4/5. PEAK_AND_CLOCK(suffix, vector type, set1, fmadd, target).
#define PEAK_AND_CLOCK(W, V, SET1, FMA, TARGET)                                                \
  __attribute__((target(TARGET), noinline)) double Peak##W(long iters) {                       \
    const V x = SET1(0.999999f), y = SET1(1e-7f);                                              \
    V a0 = x, a1 = y, a2 = x, a3 = y, a4 = x, a5 = y, a6 = x, a7 = y, a8 = x, a9 = y, a10 = x, \
      a11 = y;                                                                                 \
    const auto t0 = Clock::now();                                                              \
    for (long it = 0; it < iters; ++it) {                                                      \
      a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);          \
      a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);          \
      a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y);      \
      /* Keeps all 12 chains live in registers and every FMA executed. */                      \
      asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));           \
      asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));         \
    }                                                                                          \
    const double s = Seconds(t0, Clock::now());                                                \
    asm volatile("" ::"v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5));                   \
    asm volatile("" ::"v"(a6), "v"(a7), "v"(a8), "v"(a9), "v"(a10), "v"(a11));                 \
    return iters * 12.0 * (sizeof(V) / 4) * 2 / s * 1e-9;                                      \
  }                                                                                            \
  __attribute__((target(TARGET), noinline)) double ClockGhz##W(long iters) {                   \
    V acc = SET1(1.0f);                                                                        \
    const V x = SET1(0.999999f), y = SET1(1e-7f);                                              \
    const auto t0 = Clock::now();                                                              \
    for (long it = 0; it < iters; ++it) {                                                      \
      acc = FMA(acc, x, y);                                                                    \
      asm volatile("" : "+v"(acc));                                                            \
    }                                                                                          \
    const double s = Seconds(t0, Clock::now());                                                \
    asm volatile("" ::"v"(acc));                                                               \
    return iters * 4.0 / s * 1e-9;                                                             \
  }
PEAK_AND_CLOCK(Zmm, __m512, _mm512_set1_ps, _mm512_fmadd_ps, "avx512f")
PEAK_AND_CLOCK(Ymm, __m256, _mm256_set1_ps, _mm256_fmadd_ps, "avx2,fma")
#undef PEAK_AND_CLOCK

// Best-of-3 streaming read bandwidth (GB/s) of a 1 GiB buffer summed by `threads` threads; each
// thread reads its contiguous share as `streams` interleaved sequential streams (1 = the plain sum;
// more streams, with software prefetch 2 KiB ahead as the GEMM kernel does, keep more cache misses
// in flight).
double ReadBandwidth(const std::vector<float, llmq::kernels::AlignedAllocator<float, 64>>& buf,
                     int threads, int streams, bool prefetch) {
  const int64_t n = static_cast<int64_t>(buf.size());
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    float total = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t share = n / nt / (64 * streams) * (64 * streams);  // floats per thread
      const int64_t per_stream = share / streams;
      const float* base = buf.data() + share * t;
      __m256 s[8];
      for (auto& v : s) v = _mm256_setzero_ps();
      for (int64_t i = 0; i < per_stream; i += 64)
        for (int st = 0; st < streams; ++st) {
          const float* p = base + st * per_stream + i;
          if (prefetch) {
            _mm_prefetch(reinterpret_cast<const char*>(p + 512), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 16), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 32), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 48), _MM_HINT_T0);
          }
          for (int u = 0; u < 8; ++u) s[u] = _mm256_add_ps(s[u], _mm256_load_ps(p + 8 * u));
        }
      alignas(32) float lanes[8];
      for (int u = 1; u < 8; ++u) s[0] = _mm256_add_ps(s[0], s[u]);
      _mm256_store_ps(lanes, s[0]);
      for (float l : lanes) total += l;
    }
    const double secs = Seconds(t0, Clock::now());
    asm volatile("" ::"x"(total));
    best = std::max(best, n / threads * threads * sizeof(float) / secs * 1e-9);
  }
  return best;
}

struct GemmShape {
  const char* name;
  int n, k;
};

}  // namespace

int main(int argc, char** argv) {
  bool hot = false, quick = false;
  const char* only = nullptr;        // --only=NAME: one shape
  int only_m = 0;                    // --m=M: one M
  const char* only_dtype = nullptr;  // --dtype=T: one weight type
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--hot")) hot = true;
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strncmp(argv[i], "--only=", 7)) only = argv[i] + 7;
    if (!std::strncmp(argv[i], "--m=", 4)) only_m = std::atoi(argv[i] + 4);
    if (!std::strncmp(argv[i], "--dtype=", 8)) only_dtype = argv[i] + 8;
    if (!std::strncmp(argv[i], "--nc=", 5))
      llmq::kernels::SetGemmNcPanelsForTesting(std::atoi(argv[i] + 5));
  }
  const int max_threads = std::min(2, omp_get_max_threads());

  // Peak and clock, at the width of the active kernel's FMAs (zmm on the AVX-512 path, ymm on the
  // AVX2 path; none for the scalar one).
  double peak_core = 0, ghz = 0;
  const llmq::kernels::GemmIsa isa = llmq::kernels::ActiveGemmIsa();
  const int lanes = isa == llmq::kernels::GemmIsa::kAvx512 ? 16 : 8;
  const char* reg = lanes == 16 ? "zmm" : "ymm";
  if (isa == llmq::kernels::GemmIsa::kAvx512) {
    PeakZmm(10'000'000);
    peak_core = std::max(PeakZmm(50'000'000), PeakZmm(50'000'000));
    ghz = std::max(ClockGhzZmm(100'000'000), ClockGhzZmm(100'000'000));
  } else if (isa == llmq::kernels::GemmIsa::kAvx2) {
    PeakYmm(10'000'000);
    peak_core = std::max(PeakYmm(50'000'000), PeakYmm(50'000'000));
    ghz = std::max(ClockGhzYmm(100'000'000), ClockGhzYmm(100'000'000));
  }
  std::printf("gemm kernel: %s, prefill N block %d panels (L2 %ld KiB)\n",
              llmq::kernels::GemmIsaName(isa), llmq::kernels::GemmNcPanels(),
              sysconf(_SC_LEVEL2_CACHE_SIZE) / 1024);
  std::printf("clock (dependent %s FMA chain, 4-cycle latency assumed): %.2f GHz\n", reg, ghz);
  std::printf(
      "FMA peak, measured on 1 core: %.1f GFLOP/s (= %.2f GHz x 2 FMA pipes x %d lanes x 2, %s); "
      "the %%peak column uses threads x this\n",
      peak_core, peak_core / (4.0 * lanes), lanes, reg);

  // Memory read bandwidth: the plain 1-stream sum and a 4-stream prefetching sum; %bw uses the
  // larger.
  double bw[3] = {0, 0, 0};
  {
    std::vector<float, llmq::kernels::AlignedAllocator<float, 64>> buf((1ull << 30) / 4);
#pragma omp parallel for num_threads(max_threads) schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(buf.size()); ++i) buf[i] = 1.0f;
    for (int t = 1; t <= max_threads; ++t) {
      const double one = ReadBandwidth(buf, t, 1, false), four = ReadBandwidth(buf, t, 4, true);
      bw[t] = std::max(one, four);
      std::printf(
          "memory read bandwidth (1 GiB streaming sum), %d thread%s: %.1f GB/s "
          "(1 stream/thread), %.1f GB/s (4 streams/thread + prefetch)\n",
          t, t > 1 ? "s" : " ", one, four);
    }
  }

  const GemmShape shapes[] = {{"qkv", 2304, 768},
                              {"o", 768, 768},
                              {"gate_up", 4096, 768},
                              {"down", 768, 2048},
                              {"lm_head", 32000, 768}};
  // --m=M: that M alone (any M: a prefill step of the engine has up to 2,048 rows).
  const std::vector<int> ms =
      only_m > 0 ? std::vector<int>{only_m} : std::vector<int>{1, 8, 32, 128, 512};
  const int max_m = *std::max_element(ms.begin(), ms.end());
  std::printf("\nW %s\n", hot ? "hot (one copy, reused)" : "cold (rotating copies >= 128 MiB)");
  std::printf("%-8s %-5s %5s %6s %5s %3s %9s %9s %8s %6s %6s\n", "shape", "dtype", "M", "N", "K",
              "thr", "ms", "GFLOP/s", "W GB/s", "%peak", "%bw");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const auto start = Clock::now();
  for (const GemmShape& s : shapes)
    for (WeightType type : {WeightType::kF32, WeightType::kBf16, WeightType::kInt8}) {
      if (only && std::strcmp(only, s.name)) continue;
      const char* dtype = llmq::kernels::WeightTypeName(type);
      if (only_dtype && std::strcmp(only_dtype, dtype)) continue;
      std::vector<float> w(static_cast<size_t>(s.n) * s.k);
      for (float& x : w) x = u(rng);
      std::vector<PackedWeight> copies(1, PackedWeight::Pack(w.data(), s.n, s.k, type));
      const uint64_t wbytes = copies[0].bytes();
      if (!hot)
        while (copies.size() * wbytes < (128ull << 20)) copies.push_back(copies[0]);
      std::vector<float> a(static_cast<size_t>(max_m) * s.k);
      for (float& x : a) x = u(rng);
      std::vector<float> c(static_cast<size_t>(max_m) * s.n);
      for (int m : ms) {
        const double flop = 2.0 * m * s.n * s.k;
        for (int t = 1; t <= max_threads; ++t) {
          llmq::kernels::SetCpuThreads(t);  // Gemm runs on the kernels' pool
          size_t next = 0;
          auto call = [&] {
            Gemm(a.data(), s.k, m, copies[next], c.data(), s.n);
            next = (next + 1) % copies.size();
          };
          for (size_t i = 0; i < std::min<size_t>(copies.size(), 4); ++i) call();  // warm-up
          // Best of 3 batches; each batch runs >= 40 ms (>= 10 ms with --quick) and >= 2 calls.
          const double min_batch = quick ? 0.01 : 0.04;
          double best = 1e30;
          for (int batch = 0; batch < 3; ++batch) {
            int calls = 0;
            const auto t0 = Clock::now();
            double secs = 0;
            do {
              call();
              ++calls;
              secs = Seconds(t0, Clock::now());
            } while (secs < min_batch || calls < 2);
            best = std::min(best, secs / calls);
          }
          const double gflops = flop / best * 1e-9, gbs = wbytes / best * 1e-9;
          std::printf("%-8s %-5s %5d %6d %5d %3d %9.3f %9.1f %8.1f %5.1f%% %5.1f%%\n", s.name,
                      dtype, m, s.n, s.k, t, best * 1e3, gflops, gbs,
                      peak_core > 0 ? 100 * gflops / (t * peak_core) : 0.0, 100 * gbs / bw[t]);
        }
      }
    }
  std::printf("\ntable time %.1f s\n", Seconds(start, Clock::now()));
  return 0;
}
