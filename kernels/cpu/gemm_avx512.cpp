// AVX-512 micro-kernel of Gemm (see gemm.h for the numerical contract and gemm.cpp for the
// blocking). This translation unit is compiled with -mavx512f/bw/dq/vl and is only called after a
// run-time CPU check. It deliberately includes no standard-library header with code (<cstdint> is
// typedefs only): an inline function instantiated here would be compiled with AVX-512 and could be
// the copy the linker keeps for the whole program, breaking non-AVX-512 machines. Everything but
// the entry point has internal linkage.
#include <immintrin.h>

#include <cstdint>

namespace llmq::kernels::internal {
namespace {

constexpr int kPanel = 16;  // PackedWeight::kPanel: one zmm of output columns
constexpr int kRows = 8;    // rows of a packed A block (the ap[k][8] layout)
// Software prefetch distance, in K steps (= cache lines) ahead within each panel stream: 2 KiB per
// stream covers DRAM latency at the decode tiles' consumption rate (the hardware prefetchers alone
// leave the FMA-busy 8-row decode tile at ~60% of bandwidth). Past a panel's end it prefetches the
// next panel (panels are contiguous); prefetches never fault.
constexpr int kPrefetch = 32;

// One register tile: C[0:MR, 0:NR*16] (+)= A_blk[0:MR, 0:kc] · W_blk[0:NR*16, 0:kc]ᵀ.
//   ap:        packed A, [kc][kRows] fp32; A row r at step k is ap[k*kRows + r] (r < MR used).
//   w:         panel 0 of the tile at this k offset, [kc][16] fp32, 64-byte aligned; panel j
//              starts at w + j*wstride (wstride = K*16 floats, a multiple of 16).
//   c:         C[row 0][column 0 of panel 0]; row r at c + r*ldc.
//   last_mask: which of the 16 columns of panel NR-1 exist (columns past N are never touched).
//   load_c:    start each chain from C (continuing a chain split over K blocks: the fp32 partial
//              sum round-trips through memory exactly) instead of from +0.
//   pf, pf_lines: W the caller will need next (not this tile's): pf_lines 64-byte lines per K step
//              are prefetched from pf on (pf_lines = 0: none), so it arrives while this tile
//              computes from cache.
// Invariant: accumulator (r, j) sees exactly fma(A[r][k], W[col][k], acc) for k = 0..kc-1 in
// order, one lane per column, so the result equals the scalar std::fma chain bit for bit.
template <int MR, int NR>
void Tile(const float* __restrict ap, const float* __restrict w, int64_t wstride, int kc,
          float* __restrict c, int64_t ldc, __mmask16 last_mask, bool load_c, const char* pf,
          int pf_lines) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __mmask16 m = j == NR - 1 ? last_mask : static_cast<__mmask16>(0xFFFF);
      acc[r][j] = load_c ? _mm512_maskz_loadu_ps(m, c + r * ldc + j * kPanel) : _mm512_setzero_ps();
    }
  const float* w0 = w;
  const float* w1 = w + (NR > 1 ? wstride : 0);
  const float* w2 = w + (NR > 2 ? 2 * wstride : 0);
#pragma GCC unroll 2
  for (int k = 0; k < kc; ++k) {
    for (int l = 0; l < pf_lines; ++l) _mm_prefetch(pf + l * 64, _MM_HINT_T1);
    pf += pf_lines * 64;
    _mm_prefetch(reinterpret_cast<const char*>(w0 + (k + kPrefetch) * kPanel), _MM_HINT_T0);
    if constexpr (NR > 1)
      _mm_prefetch(reinterpret_cast<const char*>(w1 + (k + kPrefetch) * kPanel), _MM_HINT_T0);
    if constexpr (NR > 2)
      _mm_prefetch(reinterpret_cast<const char*>(w2 + (k + kPrefetch) * kPanel), _MM_HINT_T0);
    __m512 wv[NR];
    wv[0] = _mm512_load_ps(w0 + k * kPanel);
    if constexpr (NR > 1) wv[1] = _mm512_load_ps(w1 + k * kPanel);
    if constexpr (NR > 2) wv[2] = _mm512_load_ps(w2 + k * kPanel);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[k * kRows + r]);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_fmadd_ps(av, wv[j], acc[r][j]);
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

using TileFn = void (*)(const float*, const float*, int64_t, int, float*, int64_t, __mmask16, bool,
                        const char*, int);

template <int MR>
constexpr TileFn kByNr[3] = {&Tile<MR, 1>, &Tile<MR, 2>, &Tile<MR, 3>};
constexpr const TileFn* kTiles[kRows] = {kByNr<1>, kByNr<2>, kByNr<3>, kByNr<4>,
                                         kByNr<5>, kByNr<6>, kByNr<7>, kByNr<8>};

}  // namespace

// Entry point (declared in gemm.cpp). mr in 1..8 rows, np in 1..3 panels, last_cols in 1..16 valid
// columns of the last panel; other arguments as in Tile.
void GemmTileAvx512(const float* ap, int mr, const float* w, int64_t wstride, int np, int kc,
                    float* c, int64_t ldc, int last_cols, bool load_c, const char* pf,
                    int pf_lines) {
  const __mmask16 mask = static_cast<__mmask16>((1u << last_cols) - 1u);
  kTiles[mr - 1][np - 1](ap, w, wstride, kc, c, ldc, mask, load_c, pf, pf_lines);
}

}  // namespace llmq::kernels::internal
