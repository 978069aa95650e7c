// AVX-512 micro-kernel of Gemm (see gemm.h for the numerical contract and gemm.cpp for the
// blocking). This translation unit is compiled with -mavx512f/bw/dq/vl and is only called after a
// run-time CPU check. It deliberately includes no standard-library header with code (<cstdint> is
// typedefs only): an inline function instantiated here would be compiled with AVX-512 and could be
// the copy the linker keeps for the whole program, breaking non-AVX-512 machines. Everything but
// the entry point has internal linkage.
// GCC 12's AVX-512 conversion intrinsics pass _mm512_undefined_*() as their pass-through operand,
// which -Wmaybe-uninitialized reports falsely (GCC bug 105593) for the widening loads below.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace llmq::kernels::internal {
namespace {

constexpr int kPanel = 16;  // PackedWeight::kPanel: one zmm of output columns
constexpr int kRows = 8;    // rows of a packed A block (the ap[k][8] layout)
// One packed row of 16 elements (a K step of a panel) widened to fp32 in one zmm, exactly: fp32
// as is, bf16 as the high half of its fp32 (<< 16), int8 converted. p: 64-, 32- or 16-byte aligned.
struct F32 {
  static constexpr int kBytes = 4;
  static __m512 Load(const unsigned char* p) { return _mm512_load_ps(p); }
};
struct Bf16 {
  static constexpr int kBytes = 2;
  static __m512 Load(const unsigned char* p) {
    const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  }
};
struct Int8 {
  static constexpr int kBytes = 1;
  static __m512 Load(const unsigned char* p) {
    const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
  }
};

// Software prefetch distance, in K steps (= cache lines) ahead within each panel stream: 2 KiB per
// stream covers DRAM latency at the decode tiles' consumption rate (the hardware prefetchers alone
// leave the FMA-busy 8-row decode tile at ~60% of bandwidth). Past a panel's end it prefetches the
// next panel (panels are contiguous); prefetches never fault.
constexpr int kPrefetch = 32;

// One register tile: C[0:MR, 0:NR*16] (+)= A_blk[0:MR, 0:kc] · W_blk[0:NR*16, 0:kc]ᵀ.
//   ap:        packed A, [kc][kRows] fp32; A row r at step k is ap[k*kRows + r] (r < MR used).
//   w:         panel 0 of the tile at this k offset, [kc][16] elements of type W (F32, Bf16,
//              Int8), rows naturally aligned; panel j starts at w + j*wstride (bytes: K rows).
//   c:         C[row 0][column 0 of panel 0]; row r at c + r*ldc.
//   last_mask: which of the 16 columns of panel NR-1 exist (columns past N are never touched).
//   load_c:    start each chain from C (continuing a chain split over K blocks: the fp32 partial
//              sum round-trips through memory exactly) instead of from +0.
//   scale:     null, or the column scales of panel 0 ([NR*16] fp32, Int8's last K block): each
//              chain is multiplied by its scale once before it is stored.
//   pf, pf_lines: W the caller will need next (not this tile's): pf_lines 64-byte lines per K step
//              are prefetched from pf on (pf_lines = 0: none), so it arrives while this tile
//              computes from cache.
// Invariant: accumulator (r, j) sees exactly fma(A[r][k], widen(W[col][k]), acc) for k = 0..kc-1
// in order, one lane per column (then one multiply by the scale), so the result equals the scalar
// std::fma chain bit for bit.
template <class W, int MR, int NR>
void Tile(const float* __restrict ap, const unsigned char* __restrict w, int64_t wstride, int kc,
          float* __restrict c, int64_t ldc, __mmask16 last_mask, bool load_c, const float* scale,
          const char* pf, int pf_lines) {
  constexpr int kRowBytes = kPanel * W::kBytes;
  constexpr int kStepsPerLine = 64 / kRowBytes;  // one prefetch per 64-byte line of each stream
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __mmask16 m = j == NR - 1 ? last_mask : static_cast<__mmask16>(0xFFFF);
      acc[r][j] = load_c ? _mm512_maskz_loadu_ps(m, c + r * ldc + j * kPanel) : _mm512_setzero_ps();
    }
  const char* w0 = reinterpret_cast<const char*>(w);
  const char* w1 = w0 + (NR > 1 ? wstride : 0);
  const char* w2 = w0 + (NR > 2 ? 2 * wstride : 0);
#pragma GCC unroll 2
  for (int k = 0; k < kc; ++k) {
    for (int l = 0; l < pf_lines; ++l) _mm_prefetch(pf + l * 64, _MM_HINT_T1);
    pf += pf_lines * 64;
    if (kStepsPerLine == 1 || k % kStepsPerLine == 0) {
      const int64_t ahead = static_cast<int64_t>(k + kPrefetch) * kRowBytes;
      _mm_prefetch(w0 + ahead, _MM_HINT_T0);
      if constexpr (NR > 1) _mm_prefetch(w1 + ahead, _MM_HINT_T0);
      if constexpr (NR > 2) _mm_prefetch(w2 + ahead, _MM_HINT_T0);
    }
    const int64_t at = static_cast<int64_t>(k) * kRowBytes;
    __m512 wv[NR];
    wv[0] = W::Load(reinterpret_cast<const unsigned char*>(w0 + at));
    if constexpr (NR > 1) wv[1] = W::Load(reinterpret_cast<const unsigned char*>(w1 + at));
    if constexpr (NR > 2) wv[2] = W::Load(reinterpret_cast<const unsigned char*>(w2 + at));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[k * kRows + r]);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_fmadd_ps(av, wv[j], acc[r][j]);
    }
  }
  if (scale) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512 s = _mm512_loadu_ps(scale + j * kPanel);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm512_mul_ps(acc[r][j], s);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      if (j == NR - 1)
        _mm512_mask_storeu_ps(c + r * ldc + j * kPanel, last_mask, acc[r][j]);
      else
        _mm512_storeu_ps(c + r * ldc + j * kPanel, acc[r][j]);
    }
}

using TileFn = void (*)(const float*, const unsigned char*, int64_t, int, float*, int64_t,
                        __mmask16, bool, const float*, const char*, int);

template <class W, int MR>
constexpr TileFn kByNr[3] = {&Tile<W, MR, 1>, &Tile<W, MR, 2>, &Tile<W, MR, 3>};
template <class W>
constexpr const TileFn* kTiles[kRows] = {kByNr<W, 1>, kByNr<W, 2>, kByNr<W, 3>, kByNr<W, 4>,
                                         kByNr<W, 5>, kByNr<W, 6>, kByNr<W, 7>, kByNr<W, 8>};

template <class W>
void Run(const float* ap, int mr, const unsigned char* w, int64_t wstride, int np, int kc, float* c,
         int64_t ldc, int last_cols, bool load_c, const float* scale, const char* pf,
         int pf_lines) {
  const __mmask16 mask = static_cast<__mmask16>((1u << last_cols) - 1u);
  kTiles<W>[mr - 1][np - 1](ap, w, wstride, kc, c, ldc, mask, load_c, scale, pf, pf_lines);
}

}  // namespace

// Entry points (declared in gemm.cpp), one per weight type. mr in 1..8 rows, np in 1..3 panels,
// last_cols in 1..16 valid columns of the last panel; other arguments as in Tile.
void GemmTileAvx512F32(const float* ap, int mr, const unsigned char* w, int64_t wstride, int np,
                       int kc, float* c, int64_t ldc, int last_cols, bool load_c,
                       const float* scale, const char* pf, int pf_lines) {
  Run<F32>(ap, mr, w, wstride, np, kc, c, ldc, last_cols, load_c, scale, pf, pf_lines);
}
void GemmTileAvx512Bf16(const float* ap, int mr, const unsigned char* w, int64_t wstride, int np,
                        int kc, float* c, int64_t ldc, int last_cols, bool load_c,
                        const float* scale, const char* pf, int pf_lines) {
  Run<Bf16>(ap, mr, w, wstride, np, kc, c, ldc, last_cols, load_c, scale, pf, pf_lines);
}
void GemmTileAvx512Int8(const float* ap, int mr, const unsigned char* w, int64_t wstride, int np,
                        int kc, float* c, int64_t ldc, int last_cols, bool load_c,
                        const float* scale, const char* pf, int pf_lines) {
  Run<Int8>(ap, mr, w, wstride, np, kc, c, ldc, last_cols, load_c, scale, pf, pf_lines);
}

}  // namespace llmq::kernels::internal
