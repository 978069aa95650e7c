// Gemm: packing, ISA dispatch, cache blocking and threading. The AVX-512 micro-kernel lives in
// gemm_avx512.cpp; the AVX2 and scalar micro-kernels are here (this file is built for x86-64-v3).
//
// Every path computes each C[i][j] as the sequential fp32 FMA chain of gemm.h (over the widened
// packed elements; an int8 chain is multiplied by its column's scale once, when its last K block is
// stored):
//   * threads split N (whole panels), never K, so no chain is ever split between threads;
//   * K blocks of one chain run in order, the fp32 partial sum stored to C and reloaded exactly;
//   * a row's chain never depends on the other rows of its tile (one accumulator per element),
//     so tile shapes, row blocking and M don't change any bit.
#include "kernels/cpu/gemm.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#include "kernels/cpu/thread_pool.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

namespace llmq::kernels {
namespace internal {
// gemm_avx512.cpp, one per WeightType; same arguments as TileFn below.
#define LLMQ_GEMM_AVX512_TILE(name)                                                               \
  void name(const float* ap, int mr, const uint8_t* w, int64_t wstride, int np, int kc, float* c, \
            int64_t ldc, int last_cols, bool load_c, const float* scale, const char* pf,          \
            int pf_lines);
LLMQ_GEMM_AVX512_TILE(GemmTileAvx512F32)
LLMQ_GEMM_AVX512_TILE(GemmTileAvx512Bf16)
LLMQ_GEMM_AVX512_TILE(GemmTileAvx512Int8)
#undef LLMQ_GEMM_AVX512_TILE
}  // namespace internal

namespace {

constexpr int kPanel = PackedWeight::kPanel;
static_assert(kPanel == 16, "the kernels hold one panel row in one zmm / two ymm");
constexpr int kRows = 8;  // rows per packed A block (MR) of the AVX-512 and scalar micro-kernels
// The AVX2 micro-kernel's A blocks: 6 rows x 16 columns = 12 ymm accumulators (with the panel row's
// two ymm and one broadcast, 15 of the 16 registers), as BLIS's Haswell kernel: enough independent
// FMA chains to cover the FMA latency, which 4 x 16 (8 chains) was not.
constexpr int kRowsAvx2 = 6;
constexpr int kGroup = 3;       // panels per micro-tile (NR): 8 x 48 columns = 24 zmm accumulators
constexpr int kSmallRows = 32;  // M <= 32: decode path, whole-K tiles, W streamed once
constexpr int kKcTarget = 256;  // K block of the prefill path (partial sums through C)
// N block of the prefill path, in panels: a block of W (NC panels x 256 K steps x 64 B of fp32) is
// read from L2 by every row block while the next one is prefetched alongside, so two of them take
// at most 3/4 of the core's L2: 24 panels (384 KiB) on a 1 MiB L2 (Zen 4, Xeon), 12 on Zen 1-3's
// 512 KiB, 6 on 256 KiB; never more than 24 (bigger L2s gain nothing measured from more), a
// multiple of kGroup. The block size only orders the tiles: no chain changes with it.
constexpr int kMaxNcPanels = 24;
}  // namespace

int GemmNcPanelsForL2(long l2_bytes) {
  if (l2_bytes <= 0) l2_bytes = 512 << 10;  // unknown (some VMs): Zen 1-3's, the smallest common
  const long per_panel = 2L * kKcTarget * kPanel * sizeof(float);
  const long fit = l2_bytes * 3 / 4 / per_panel;
  return static_cast<int>(std::clamp(fit / kGroup * kGroup, long{kGroup}, long{kMaxNcPanels}));
}
namespace {

int NcPanelsOfThisCpu() {
  return GemmNcPanelsForL2(sysconf(_SC_LEVEL2_CACHE_SIZE));
}
std::atomic<int>& NcPanelsSlot() {
  static std::atomic<int> nc{NcPanelsOfThisCpu()};
  return nc;
}

// What one core does serially, from bench/RESULTS.md (gemm_bench on the project's machine): the
// micro-kernel at 241 GFLOP/s, W streamed at 41 GB/s, packing at about one byte per 0.1 ns. They
// turn a call's size into its serial time, which the pool weighs against its measured barrier.
constexpr double kFlopsPerNs = 241;
constexpr double kBytesPerNs = 1 / kNsPerStreamedByte;
constexpr double kPackNsPerFloat = 0.4;

// A micro-tile: C[0:mr, 0:np*16] (+)= A_blk · W_blkᵀ over kc steps of K.
//   ap:        packed A, [kc][rows]: A row r (< mr) at step k is ap[k*rows + r], rows the ISA's
//              block height (BlockRows: kRows, or kRowsAvx2 for the AVX2 kernels).
//   mr:        rows, 1..rows.
//   w:         panel 0 of the tile at the current K offset, [kc][16] elements of the tile
//              function's WeightType; panel j at w + j*wstride (bytes).
//   np:        panels, 1..kGroup.
//   c:         C[row 0][first column of panel 0], row stride ldc.
//   last_cols: valid columns (1..16) of panel np-1; columns past N are never read or written.
//   load_c:    continue the chains from C (K block > 0) instead of from +0.
//   scale:     null, or (int8, the chains' last K block) the scales of panel 0's columns, [np*16]:
//              each chain is multiplied by its column's scale once, as it is stored.
//   pf:        W needed after this tile (next panels / next K block), pf_lines 64-byte lines per K
//              step prefetched from pf onwards (a hint: kernels may ignore it).
using TileFn = void (*)(const float* ap, int mr, const uint8_t* w, int64_t wstride, int np, int kc,
                        float* c, int64_t ldc, int last_cols, bool load_c, const float* scale,
                        const char* pf, int pf_lines);

// widen() of gemm.h: the packed element as the fp32 value the chain multiplies.
inline float Widen(float w) {
  return w;
}
inline float Widen(uint16_t w) {
  return Bf16ToFloat(w);
}
inline float Widen(int8_t w) {
  return static_cast<float>(w);
}

template <class T>
void TileScalar(const float* ap, int mr, const uint8_t* w, int64_t wstride, int np, int kc,
                float* c, int64_t ldc, int last_cols, bool load_c, const float* scale, const char*,
                int) {
  for (int j = 0; j < np; ++j) {
    const int cols = j == np - 1 ? last_cols : kPanel;
    const T* wp = reinterpret_cast<const T*>(w + j * wstride);
    for (int r = 0; r < mr; ++r)
      for (int col = 0; col < cols; ++col) {
        float* out = c + r * ldc + j * kPanel + col;
        float acc = load_c ? *out : 0.0f;
        for (int k = 0; k < kc; ++k)
          acc = std::fma(ap[k * kRows + r], Widen(wp[k * kPanel + col]), acc);
        *out = scale ? acc * scale[j * kPanel + col] : acc;
      }
  }
}

// One packed row of 16 elements (a K step of a panel) widened to fp32 in two ymm (columns 0-7,
// 8-15). Exact: bf16 is the high half of its fp32, an int8 converts to fp32 exactly.
inline void LoadRowAvx2(const float* p, __m256* lo, __m256* hi) {
  *lo = _mm256_load_ps(p);
  *hi = _mm256_load_ps(p + 8);
}
// The halves are read as two loads that the widening instructions take as memory operands
// (vpmovzxwd / vpmovsxbd ymm, m128 / m64): no extract or shift on the vector ports.
inline void LoadRowAvx2(const uint16_t* p, __m256* lo, __m256* hi) {
  const __m128i x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i x1 = _mm_load_si128(reinterpret_cast<const __m128i*>(p + 8));
  *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x0), 16));
  *hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x1), 16));
}
inline void LoadRowAvx2(const int8_t* p, __m256* lo, __m256* hi) {
  const __m128i x0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i x1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8));
  *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x0));
  *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x1));
}

// AVX2: one panel = two ymm; R rows x NP panels = 2*R*NP accumulators (R*NP <= 6 fits 16 ymm with
// the R broadcasts and the panel row in use). Each accumulator is one FMA chain, and the FMA's
// latency needs about 8 of them in flight: the 6-row block takes its panels one at a time (12
// chains), a decode row (R = 1, 2) takes the tile's panels together (6 or 12 chains, rather than
// the 2 or 4 of one panel that left batch-1 decode latency-bound on bf16 and int8).
//   ap: the block's packed A, [kc][kRowsAvx2]; w: panel 0 at this K offset, [kc][16] T, panel j at
//   w + j*wstride (bytes); c: C[row 0][panel 0's first column]; last_cols: valid columns of panel
//   NP-1; scale: null or the NP panels' column scales, [NP*16].
template <int R, int NP, class T>
void PanelsAvx2(const float* ap, const uint8_t* w, int64_t wstride, int kc, float* c, int64_t ldc,
                int last_cols, bool load_c, const float* scale) {
  // Prefetch 32 K steps ahead, one prefetch per 64-byte line of each panel's stream.
  constexpr int kStepsPerLine = 64 / static_cast<int>(kPanel * sizeof(T));
  const T* wp[NP];
  for (int j = 0; j < NP; ++j) wp[j] = reinterpret_cast<const T*>(w + j * wstride);
  auto cols = [&](int j) { return j == NP - 1 ? last_cols : kPanel; };
  __m256 acc[R][NP][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      if (load_c && cols(j) == kPanel) {
        acc[r][j][0] = _mm256_loadu_ps(c + r * ldc + j * kPanel);
        acc[r][j][1] = _mm256_loadu_ps(c + r * ldc + j * kPanel + 8);
      } else if (load_c) {  // the last panel's valid columns only
        alignas(32) float tmp[kPanel] = {};
        std::memcpy(tmp, c + r * ldc + j * kPanel, cols(j) * sizeof(float));
        acc[r][j][0] = _mm256_load_ps(tmp);
        acc[r][j][1] = _mm256_load_ps(tmp + 8);
      } else {
        acc[r][j][0] = acc[r][j][1] = _mm256_setzero_ps();
      }
    }
  for (int k = 0; k < kc; ++k) {
    if (kStepsPerLine == 1 || k % kStepsPerLine == 0)
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(wp[j] + (k + 32) * kPanel), _MM_HINT_T0);
    if constexpr (NP == 1) {  // the panel row held, one broadcast at a time: 2R + 3 ymm
      __m256 w0, w1;
      LoadRowAvx2(wp[0] + k * kPanel, &w0, &w1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(ap + k * kRowsAvx2 + r);
        acc[r][0][0] = _mm256_fmadd_ps(av, w0, acc[r][0][0]);
        acc[r][0][1] = _mm256_fmadd_ps(av, w1, acc[r][0][1]);
      }
    } else {  // the R broadcasts held, one panel row at a time: 2*R*NP + R + 2 ymm
      __m256 av[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) av[r] = _mm256_broadcast_ss(ap + k * kRowsAvx2 + r);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        __m256 w0, w1;
        LoadRowAvx2(wp[j] + k * kPanel, &w0, &w1);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          acc[r][j][0] = _mm256_fmadd_ps(av[r], w0, acc[r][j][0]);
          acc[r][j][1] = _mm256_fmadd_ps(av[r], w1, acc[r][j][1]);
        }
      }
    }
  }
  if (scale) {
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      const __m256 s0 = _mm256_loadu_ps(scale + j * kPanel),
                   s1 = _mm256_loadu_ps(scale + j * kPanel + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[r][j][0] = _mm256_mul_ps(acc[r][j][0], s0);
        acc[r][j][1] = _mm256_mul_ps(acc[r][j][1], s1);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      float* out = c + r * ldc + j * kPanel;
      if (cols(j) == kPanel) {
        _mm256_storeu_ps(out, acc[r][j][0]);
        _mm256_storeu_ps(out + 8, acc[r][j][1]);
      } else {
        alignas(32) float tmp[kPanel];
        _mm256_store_ps(tmp, acc[r][j][0]);
        _mm256_store_ps(tmp + 8, acc[r][j][1]);
        std::memcpy(out, tmp, cols(j) * sizeof(float));
      }
    }
}

template <class T>
void TileAvx2(const float* ap, int mr, const uint8_t* w, int64_t wstride, int np, int kc, float* c,
              int64_t ldc, int last_cols, bool load_c, const float* scale, const char*, int) {
  using PanelsFn = void (*)(const float*, const uint8_t*, int64_t, int, float*, int64_t, int, bool,
                            const float*);
  static_assert(kGroup == 3, "a decode row's tile takes up to 3 panels together");
  if (mr <= 2) {  // all np panels at once: [rows - 1][panels - 1]
    constexpr PanelsFn kRowsPanels[2][kGroup] = {
        {&PanelsAvx2<1, 1, T>, &PanelsAvx2<1, 2, T>, &PanelsAvx2<1, 3, T>},
        {&PanelsAvx2<2, 1, T>, &PanelsAvx2<2, 2, T>, &PanelsAvx2<2, 3, T>}};
    kRowsPanels[mr - 1][np - 1](ap, w, wstride, kc, c, ldc, last_cols, load_c, scale);
    return;
  }
  constexpr PanelsFn kByRows[kRowsAvx2] = {&PanelsAvx2<1, 1, T>, &PanelsAvx2<2, 1, T>,
                                           &PanelsAvx2<3, 1, T>, &PanelsAvx2<4, 1, T>,
                                           &PanelsAvx2<5, 1, T>, &PanelsAvx2<6, 1, T>};
  for (int j = 0; j < np; ++j)
    kByRows[mr - 1](ap, w + j * wstride, wstride, kc, c + j * kPanel, ldc,
                    j == np - 1 ? last_cols : kPanel, load_c, scale ? scale + j * kPanel : nullptr);
}

// ---- ISA selection ---------------------------------------------------------------------------

bool CpuHas(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kScalar:
      return true;
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma");
    default:
      return false;
  }
}

GemmIsa BestIsa() {
  if (const char* env = std::getenv("LLMQ_GEMM_ISA")) {
    const std::string_view v(env);
    GemmIsa want = GemmIsa::kAuto;
    if (v == "scalar") want = GemmIsa::kScalar;
    if (v == "avx2") want = GemmIsa::kAvx2;
    if (v == "avx512") want = GemmIsa::kAvx512;
    if (want != GemmIsa::kAuto && CpuHas(want)) return want;
  }
  if (CpuHas(GemmIsa::kAvx512)) return GemmIsa::kAvx512;
  if (CpuHas(GemmIsa::kAvx2)) return GemmIsa::kAvx2;
  return GemmIsa::kScalar;
}

std::atomic<GemmIsa>& IsaSlot() {
  static std::atomic<GemmIsa> isa{BestIsa()};
  return isa;
}

template <class T>
TileFn TileFor(GemmIsa isa, TileFn avx512) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return avx512;
    case GemmIsa::kAvx2:
      return &TileAvx2<T>;
    default:
      return &TileScalar<T>;
  }
}

TileFn TileFor(GemmIsa isa, WeightType type) {
  switch (type) {
    case WeightType::kBf16:
      return TileFor<uint16_t>(isa, &internal::GemmTileAvx512Bf16);
    case WeightType::kInt8:
      return TileFor<int8_t>(isa, &internal::GemmTileAvx512Int8);
    default:
      return TileFor<float>(isa, &internal::GemmTileAvx512F32);
  }
}

// Rows of a packed A block for `isa`'s micro-kernels.
int BlockRows(GemmIsa isa) {
  return isa == GemmIsa::kAvx2 ? kRowsAvx2 : kRows;
}

// ---- Packing ---------------------------------------------------------------------------------

// Fills a PackedWeight's storage: out[p][k][c] = convert(widen(row(p*16 + c)[k]), p*16 + c), zero
// past n. out: [panels][k][16] T; row(j) returns a pointer to W row j (length k, elements S: float,
// or uint16_t bf16 bits widened exactly), j < n.
template <class T, class S, class RowFn, class ConvertFn>
void PackPanels(T* out, int n, int k, RowFn row, ConvertFn convert) {
  const int panels = (n + kPanel - 1) / kPanel;
  ParallelFor(panels, kPackNsPerFloat * k * kPanel, [&](int64_t pb, int64_t pe) {
    for (int p = static_cast<int>(pb); p < pe; ++p) {
      T* dst = out + static_cast<int64_t>(p) * k * kPanel;
      const S* src[kPanel];
      for (int c = 0; c < kPanel; ++c) src[c] = p * kPanel + c < n ? row(p * kPanel + c) : nullptr;
      for (int k0 = 0; k0 < k; k0 += 64) {  // 64-step strips: the 16 source rows stay in L1
        const int k1 = std::min(k, k0 + 64);
        for (int kk = k0; kk < k1; ++kk)
          for (int c = 0; c < kPanel; ++c)
            dst[static_cast<int64_t>(kk) * kPanel + c] =
                src[c] ? convert(Widen(src[c][kk]), p * kPanel + c) : T{0};
      }
    }
  });
}

// Packs a row block of A: ap[k][r] = a[r*lda + k] for r < rows (rows >= `rows` unset).
//   a: [rows, lda] (the block's first row); ap: [k][block_rows].
// Written in order (the block's rows read as `rows` sequential streams): the transposing order,
// each row's K walk writing one float per block_rows, was about 2% of a prefill's time.
void PackABlock(const float* a, int64_t lda, int rows, int block_rows, int k, float* ap) {
  const float* src[kRows];
  for (int r = 0; r < rows; ++r) src[r] = a + r * lda;
  for (int kk = 0; kk < k; ++kk, ap += block_rows)
    for (int r = 0; r < rows; ++r) ap[r] = src[r][kk];
}

// Per-calling-thread scratch for packed A (grows, never shrinks).
float* PackedAScratch(int64_t floats) {
  thread_local std::vector<float, AlignedAllocator<float, 64>> buf;
  if (static_cast<int64_t>(buf.size()) < floats) buf.resize(floats);
  return buf.data();
}

struct GemmArgs {
  const float* ap;  // packed A: [row blocks][K][rows]
  int rows;         // rows of a packed A block (BlockRows of the tiles' ISA)
  int m;
  const PackedWeight* w;
  float* c;
  int64_t ldc;
  TileFn tile;      // for w's type
  TileFn tile_f32;  // for fp32 panels (the prefill path's widened blocks of a bf16 / int8 w)
};

// Per-thread fp32 copy of one prefill block of a bf16 / int8 W (grows, never shrinks).
float* WideBlockScratch(int64_t floats) {
  thread_local std::vector<float, AlignedAllocator<float, 64>> buf;
  if (static_cast<int64_t>(buf.size()) < floats) buf.resize(floats);
  return buf.data();
}

// Widens panels [p0, p1) of a bf16 or int8 w, K steps [k0, k0 + kc), into out:
// [p1 - p0][kc][16] fp32, each element exactly widen() of gemm.h (no scale: that stays at the end).
template <class T>
void WidenBlock(const PackedWeight& w, int p0, int p1, int k0, int kc, float* out) {
  const int64_t count = static_cast<int64_t>(kc) * kPanel;
  for (int p = p0; p < p1; ++p) {
    const T* src = reinterpret_cast<const T*>(w.panel_data(p)) + static_cast<int64_t>(k0) * kPanel;
    float* dst = out + (p - p0) * count;
    for (int64_t i = 0; i < count; ++i) dst[i] = Widen(src[i]);
  }
}

// Computes C[:, p0*16 : p1*16) (clipped to N) on the calling thread.
void RunPanels(const GemmArgs& g, int p0, int p1) {
  const PackedWeight& w = *g.w;
  const int n = w.n(), k = w.k();
  const int64_t row_bytes = w.row_bytes();
  const int64_t wstride = k * row_bytes;  // bytes of a panel
  const int br = g.rows;
  const int row_blocks = (g.m + br - 1) / br;
  // Tile (row block rb) x (panels p .. p+np-1) x (K steps k0 .. k0+kc-1); prefetches pf_lines
  // lines per K step from pf. The block that ends the chains applies int8's scales.
  // The tile reads W from wp (panel p at K step k0), panels wp_stride bytes apart, with fn.
  auto tile_from = [&](TileFn fn, const uint8_t* wp, int64_t wp_stride, int rb, int p, int np,
                       int k0, int kc, const uint8_t* pf, int pf_lines) {
    const int mr = std::min(br, g.m - rb * br);
    const int last_cols = std::min(kPanel, n - (p + np - 1) * kPanel);
    const float* scale = w.scales() && k0 + kc == k ? w.scales() + p * kPanel : nullptr;
    fn(g.ap + static_cast<int64_t>(rb) * k * br + static_cast<int64_t>(k0) * br, mr, wp, wp_stride,
       np, kc, g.c + static_cast<int64_t>(rb) * br * g.ldc + p * kPanel, g.ldc, last_cols, k0 > 0,
       scale, reinterpret_cast<const char*>(pf), pf_lines);
  };
  auto tile = [&](int rb, int p, int np, int k0, int kc, const uint8_t* pf, int pf_lines) {
    tile_from(g.tile, w.panel_data(p) + k0 * row_bytes, wstride, rb, p, np, k0, kc, pf, pf_lines);
  };
  if (g.m <= kSmallRows) {
    // Decode: W is the traffic. Each 3-panel group is streamed from memory once (whole K, the
    // in-kernel prefetch running ahead in each panel) and re-read from L2 by the other (<= 5)
    // row blocks; those passes also prefetch the next group (contiguous: panels follow each
    // other), spread evenly over their K steps, so its first pass finds it in cache.
    for (int p = p0; p < p1; p += kGroup) {
      const int np = std::min(kGroup, p1 - p);
      const int64_t next_lines =
          (static_cast<int64_t>(std::min(kGroup, p1 - p - np)) * wstride + 63) / 64;
      const int lines_per_step =
          row_blocks > 1
              ? static_cast<int>((next_lines + static_cast<int64_t>(row_blocks - 1) * k - 1) /
                                 (static_cast<int64_t>(row_blocks - 1) * k))
              : 0;
      for (int rb = 0; rb < row_blocks; ++rb) {
        const int64_t first_line = static_cast<int64_t>(rb - 1) * k * lines_per_step;
        const bool pf = rb > 0 && first_line < next_lines;
        tile(rb, p, np, 0, k, pf ? w.panel_data(p + np) + first_line * 64 : nullptr,
             pf ? lines_per_step : 0);
      }
    }
    return;
  }
  // Prefill: a [nc_panels*16, KC] block of W stays in L2 while all row blocks stream over it.
  // Row blocks after the first also prefetch the thread's next W block, one panel's K chunk per
  // tile (one line per K step), so the first pass over it doesn't wait on DRAM. A bf16 / int8
  // block is widened to fp32 once (exactly) and all row blocks run the fp32 tiles over that copy:
  // the same chains, the conversion paid once per block rather than once per row block.
  const int k_blocks = (k + kKcTarget - 1) / kKcTarget;
  const int kc_step = (k + k_blocks - 1) / k_blocks;
  const bool widen = w.type() != WeightType::kF32;
  const int nc_panels = NcPanelsSlot().load(std::memory_order_relaxed);
  float* wide =
      widen ? WideBlockScratch(static_cast<int64_t>(nc_panels) * kc_step * kPanel) : nullptr;
  for (int pb = p0; pb < p1; pb += nc_panels) {
    const int pe = std::min(p1, pb + nc_panels);
    for (int k0 = 0; k0 < k; k0 += kc_step) {
      const int kc = std::min(kc_step, k - k0);
      if (w.type() == WeightType::kBf16) WidenBlock<uint16_t>(w, pb, pe, k0, kc, wide);
      if (w.type() == WeightType::kInt8) WidenBlock<int8_t>(w, pb, pe, k0, kc, wide);
      const int64_t wide_stride = static_cast<int64_t>(kc) * kPanel * sizeof(float);
      // The next block: the same panels' next K chunk, else the next panels' first chunk.
      int next_k0 = k0 + kc, next_pb = pb, next_pe = pe;
      if (next_k0 >= k) next_k0 = 0, next_pb = pe, next_pe = std::min(p1, pe + nc_panels);
      int next_p = next_pb;
      for (int rb = 0; rb < row_blocks; ++rb)
        for (int p = pb; p < pe; p += kGroup) {
          const bool pf = rb > 0 && next_p < next_pe;
          const uint8_t* pf_at = pf ? w.panel_data(next_p) + next_k0 * row_bytes : nullptr;
          const int np = std::min(kGroup, pe - p);
          if (widen)
            tile_from(g.tile_f32, reinterpret_cast<const uint8_t*>(wide) + (p - pb) * wide_stride,
                      wide_stride, rb, p, np, k0, kc, pf_at, pf ? 1 : 0);
          else
            tile(rb, p, np, k0, kc, pf_at, pf ? 1 : 0);
          next_p += pf;
        }
    }
  }
}

}  // namespace

// ---- Public API ------------------------------------------------------------------------------

void* AllocateBuffer(std::size_t bytes, std::size_t align) {
  if (bytes < kPopulateBytes) return ::operator new(bytes, std::align_val_t(align));
  // Mapped at a 2-MiB boundary and advised MADV_HUGEPAGE before its pages are populated, so that
  // where transparent huge pages are "madvise" (Debian's default) the weights and activations
  // stream through 2-MiB pages: a step reads every packed weight, and in 4-KiB pages that is a
  // TLB miss every 4 KiB of each panel. Best effort, like MAP_POPULATE: a kernel that refuses the
  // advice leaves 4-KiB pages and pages faulted in on first touch.
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t len = (bytes + 4095) / 4096 * 4096;
  void* raw =
      mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();  // caught in LlmEngine::Run, as new's (gemm.h)
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHuge - 1) / kHuge * kHuge, end = begin + len + kHuge;
  if (start > begin) munmap(raw, start - begin);
  if (end > start + len) munmap(reinterpret_cast<void*>(start + len), end - (start + len));
  void* p = reinterpret_cast<void*>(start);
  madvise(p, len, MADV_HUGEPAGE);
  // Populated by the pool's threads, 16 MiB (eight huge pages) a piece: the kernel zeroes each new
  // page, and on a virtual machine each is also a trap to the hypervisor (0.3-0.7 GB/s a thread
  // on the project's VM: about a second for bench-110m's fp32 weights from one thread).
  constexpr std::size_t kPiece = 8 * kHuge;
  const int64_t pieces = static_cast<int64_t>((len + kPiece - 1) / kPiece);
  ParallelFor(pieces, kPiece * kPopulateNsPerByte, [&](int64_t b, int64_t e) {
    const std::size_t from = b * kPiece, to = std::min(len, static_cast<std::size_t>(e) * kPiece);
    static_cast<void>(PopulateForWrite(static_cast<char*>(p) + from, to - from));  // best effort
  });
  return p;
}

bool PopulateForWrite(void* p, std::size_t bytes) {
  return madvise(p, bytes, MADV_POPULATE_WRITE) == 0;
}

void FreeBuffer(void* p, std::size_t bytes, std::size_t align) {
  if (bytes < kPopulateBytes) return ::operator delete(p, std::align_val_t(align));
  munmap(p, bytes);
}

const char* WeightTypeName(WeightType t) {
  return t == WeightType::kF32 ? "f32" : t == WeightType::kBf16 ? "bf16" : "int8";
}

PackedWeight PackedWeight::Pack(const float* w, int n, int k, WeightType type) {
  return PackStacked({w}, {n}, k, type);
}

// PackStacked over rows of element type S (float, or bf16 bits).
template <class S>
PackedWeight PackedWeight::PackRows(const std::vector<const S*>& ws, const std::vector<int>& ns,
                                    int k, WeightType type) {
  PackedWeight pw;
  int n = 0;
  for (int ni : ns) n += ni;
  pw.n_ = n;
  pw.k_ = k;
  pw.type_ = type;
  pw.data_.resize(static_cast<size_t>(pw.panels()) * k * pw.row_bytes());
  // Row j of the stacked matrix: source matrix s, row j - (rows of matrices before s).
  std::vector<const S*> rows(n);
  for (size_t s = 0, j = 0; s < ws.size(); ++s)
    for (int r = 0; r < ns[s]; ++r, ++j) rows[j] = ws[s] + static_cast<int64_t>(r) * k;
  auto row = [&](int j) { return rows[j]; };
  uint8_t* out = pw.data_.data();
  switch (type) {
    case WeightType::kF32:
      PackPanels<float, S>(reinterpret_cast<float*>(out), n, k, row,
                           [](float x, int) { return x; });
      break;
    case WeightType::kBf16:
      PackPanels<uint16_t, S>(reinterpret_cast<uint16_t*>(out), n, k, row,
                              [](float x, int) { return FloatToBf16(x); });
      break;
    case WeightType::kInt8: {
      // Symmetric per output channel: scale = max |W[j][:]| / 127, q = round(W / scale) (to
      // nearest even), |q| <= 127; an all-zero row has scale 0 and q 0.
      pw.scales_.assign(static_cast<size_t>(pw.panels()) * kPanel, 0.0f);
      std::vector<float> inv(n, 0.0f);  // 127 / max |W[j][:]|, 0 for an all-zero row
      ParallelFor(n, kPackNsPerFloat * k, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          float amax = 0.0f;
          for (int kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(Widen(rows[j][kk])));
          pw.scales_[j] = amax / 127.0f;
          inv[j] = amax > 0 ? 127.0f / amax : 0.0f;
        }
      });
      PackPanels<int8_t, S>(reinterpret_cast<int8_t*>(out), n, k, row, [&](float x, int j) {
        const float q = std::nearbyint(x * inv[j]);
        return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
      });
      break;
    }
  }
  return pw;
}

PackedWeight PackedWeight::PackStacked(const std::vector<const float*>& ws,
                                       const std::vector<int>& ns, int k, WeightType type) {
  return PackRows(ws, ns, k, type);
}

PackedWeight PackedWeight::PackStackedBf16(const std::vector<const uint16_t*>& ws,
                                           const std::vector<int>& ns, int k, WeightType type) {
  return PackRows(ws, ns, k, type);
}

float PackedWeight::Widened(int j, int kk) const {
  const int64_t at = static_cast<int64_t>(kk) * kPanel + j % kPanel;  // within panel j / 16
  const uint8_t* p = panel_data(j / kPanel);
  switch (type_) {
    case WeightType::kBf16:
      return Bf16ToFloat(reinterpret_cast<const uint16_t*>(p)[at]);
    case WeightType::kInt8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(p)[at]);
    default:
      return reinterpret_cast<const float*>(p)[at];
  }
}

void PackedWeight::Row(int j, float* out) const {
  const int64_t at = j % kPanel;  // column within panel j / 16; step kk at at + kk * 16
  const uint8_t* p = panel_data(j / kPanel);
  switch (type_) {
    case WeightType::kBf16:
      for (int kk = 0; kk < k_; ++kk)
        out[kk] = Bf16ToFloat(reinterpret_cast<const uint16_t*>(p)[at + kk * kPanel]);
      break;
    case WeightType::kInt8:
      for (int kk = 0; kk < k_; ++kk)
        out[kk] =
            static_cast<float>(reinterpret_cast<const int8_t*>(p)[at + kk * kPanel]) * scales_[j];
      break;
    default:
      for (int kk = 0; kk < k_; ++kk) out[kk] = reinterpret_cast<const float*>(p)[at + kk * kPanel];
  }
}

double PackedWeight::Dequantized(int j, int kk) const {
  const double x = Widened(j, kk);
  return type_ == WeightType::kInt8 ? x * scales_[j] : x;
}

bool SetGemmIsaForTesting(GemmIsa isa) {
  if (isa == GemmIsa::kAuto) {
    IsaSlot().store(BestIsa());
    return true;
  }
  if (!CpuHas(isa)) return false;
  IsaSlot().store(isa);
  return true;
}

int GemmNcPanels() {
  return NcPanelsSlot().load(std::memory_order_relaxed);
}

void SetGemmNcPanelsForTesting(int panels) {
  NcPanelsSlot().store(panels > 0 ? panels : NcPanelsOfThisCpu());
}

GemmIsa ActiveGemmIsa() {
  return IsaSlot().load(std::memory_order_relaxed);
}

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kScalar:
      return "scalar";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
    default:
      return "auto";
  }
}

void Gemm(const float* a, int64_t lda, int m, const PackedWeight& w, float* c, int64_t ldc) {
  const int n = w.n(), k = w.k();
  if (m <= 0 || n <= 0) return;
  if (k == 0) {  // empty chains: +0
    for (int i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  const GemmIsa isa = ActiveGemmIsa();
  const int br = BlockRows(isa);
  const int row_blocks = (m + br - 1) / br;
  const int64_t block_floats = static_cast<int64_t>(k) * br;
  float* ap = PackedAScratch(row_blocks * block_floats);
  const GemmArgs args{
      ap, br, m, &w, c, ldc, TileFor(isa, w.type()), TileFor(isa, WeightType::kF32)};
  const int groups = (w.panels() + kGroup - 1) / kGroup;
  ParallelFor(row_blocks, kPackNsPerFloat * k * br, [&](int64_t rb0, int64_t rb1) {
    for (int64_t rb = rb0; rb < rb1; ++rb) {
      const int r = static_cast<int>(rb);
      PackABlock(a + rb * br * lda, lda, std::min(br, m - r * br), br, k, ap + rb * block_floats);
    }
  });
  // Pieces are contiguous ranges of 3-panel groups, taken by whichever thread is free.
  const double flops = 2.0 * row_blocks * br * w.panels() * kPanel * k;
  const double serial_ns =
      std::max(flops / kFlopsPerNs, static_cast<double>(w.bytes()) / kBytesPerNs);
  ParallelFor(groups, serial_ns / groups, [&](int64_t g0, int64_t g1) {
    RunPanels(args, static_cast<int>(g0) * kGroup,
              std::min(w.panels(), static_cast<int>(g1) * kGroup));
  });
}

void GemmReference(const float* a, int64_t lda, int m, const PackedWeight& w, float* c,
                   int64_t ldc) {
  const int n = w.n(), k = w.k();
  const float* scales = w.scales();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int kk = 0; kk < k; ++kk) acc = std::fma(a[i * lda + kk], w.Widened(j, kk), acc);
      c[i * ldc + j] = scales ? acc * scales[j] : acc;
    }
}

}  // namespace llmq::kernels
