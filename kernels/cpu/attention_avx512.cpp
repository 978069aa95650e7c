// The AVX-512 instance of PagedAttention's vector kernel (attention_tile.h): a 16-float vector is
// one zmm, and the 32 registers hold larger tiles (12 pairs x 32 keys of scores, 6 pairs x 64
// head dims of values). Compiled with -mavx512f/bw/dq/vl and -ffp-contract=off, called only after
// the run-time CPU check (ActiveGemmIsa). Like gemm_avx512.cpp it includes no standard-library
// header with code, and everything but the entry point has internal linkage.
// GCC 12 warns that the _mm512_undefined_ps() inside _mm512_max_ps and friends "may be used
// uninitialized" (its self-initialization idiom); it is the intrinsics' own don't-care operand.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_task.h"
#include "kernels/cpu/exp.h"

namespace llmq::kernels::internal {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int kRegs = 32, kWidth = 1;
  static constexpr int kQkMaxM = 12;             // score tile: 12 pairs x 32 keys = 24 zmm
  static constexpr int kPvDV = 4, kPvMaxM = 12;  // value tile: 6 pairs x 64 dims = 24 zmm
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec LoadBf16(const uint16_t* p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static void Store(float* p, Vec a) { _mm512_storeu_ps(p, a); }
  static Vec Bcast(float x) { return _mm512_set1_ps(x); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm512_min_ps(a, b); }
  static Vec Pow2(Vec n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
};

#include "kernels/cpu/attention_tile.h"

}  // namespace

void AttendAvx512(const AttendTask& t) {
  AttendOn<Avx512>(t);
}

}  // namespace llmq::kernels::internal
