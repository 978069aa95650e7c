// exp(x) in float as plain arithmetic, for the code that must vectorize it (std::exp is a call per
// element): Cephes' expf. x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2, exp(r) by
// Cephes' polynomial (relative error about 1e-7), 2^n built in the exponent bits.
//
// Written once over a number type's operations O, for both kinds of callers: the vector kernels
// of attention (attention_tile.h, O = 16 floats, and its scalar tail) and the scalar loops the
// compiler vectorizes (Exp in vec_math.h, engine/sampling/logprobs.cpp; O = ScalarOps). O provides: Vec;
// Bcast(float); Fma(a, b, c) = a*b + c (fused by hand, or by the compiler: see ScalarOps); Mul,
// Add, Sub; Pow2(n) = 2^n for integral n in [-126, 127].
//
// No standard-library header with code and no inline function with external linkage of its own:
// the AVX-512 translation units include this file (see attention_task.h), and a template takes the
// linkage of its arguments (theirs come from an anonymous namespace).
#pragma once

#include <cstdint>

namespace llmq::kernels {

// The range ExpInRange takes: exp(-87) ~ 1.6e-38 is about the least normal float, exp(88) ~
// 1.7e38 about the largest. Each caller clamps in its own way (NaN, the ends).
constexpr float kExpLo = -87.0f, kExpHi = 88.0f;
constexpr float kExpLog2e = 1.44269504088896341f;
constexpr float kExpRoundMagic = 12582912.0f;  // 1.5 * 2^23: x + it - it rounds x to an integer
constexpr float kExpLn2Hi = 0.693359375f, kExpLn2Lo = 2.12194440e-4f;  // ln2 = hi - lo
constexpr float kExpC[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// The last step of exp(r) ~ 1 + r + p r^2 fuses p r^2 + r after rounding one product: r*r
// (fma(p, r*r, r): attention.h's exp, the same on every attention path) or p*r (fma(p*r, r, r):
// Exp and the log-sum-exp, as the compiler always contracted their p*r*r + r). The two differ in
// the last bit for some inputs, and each is pinned bit for bit by its own tests, so both stay.
enum class ExpLastStep { kSquareR, kProductPR };

// exp(x) for x in [kExpLo, kExpHi] (not checked: the callers clamp).
template <class O, ExpLastStep kLast>
inline typename O::Vec ExpInRange(typename O::Vec x) {
  using Vec = typename O::Vec;
  const Vec n =
      O::Sub(O::Fma(x, O::Bcast(kExpLog2e), O::Bcast(kExpRoundMagic)), O::Bcast(kExpRoundMagic));
  Vec r = O::Fma(n, O::Bcast(-kExpLn2Hi), x);  // r = x - n ln2 in two steps
  r = O::Fma(n, O::Bcast(kExpLn2Lo), r);
  Vec p = O::Bcast(kExpC[0]);
  for (int c = 1; c < 6; ++c) p = O::Fma(p, r, O::Bcast(kExpC[c]));
  if constexpr (kLast == ExpLastStep::kSquareR)
    p = O::Fma(p, O::Mul(r, r), r);
  else
    p = O::Fma(O::Mul(p, r), r, r);
  return O::Mul(O::Add(p, O::Bcast(1.0f)), O::Pow2(n));
}

// The operations of one float, for loops the compiler vectorizes. Fma is a*b + c as written: the
// compiler fuses it where the translation unit contracts (-ffp-contract=fast, GCC's default for
// C++), as Exp and the log-sum-exp always were. Written as a call (fmaf) it would be fused
// everywhere, but GCC 12 then neither if-converts nor vectorizes their loops (the clamps).
// Attention's TUs do not contract: their scalar exp derives its own Fma (attention_tile.h). The
// Tag gives a TU built for another ISA an instance of its own, with internal linkage (a tag from
// its anonymous namespace), never the program's only copy.
template <class Tag = void>
struct ScalarOps {
  using Vec = float;
  static float Bcast(float x) { return x; }
  static float Fma(float a, float b, float c) { return a * b + c; }
  static float Mul(float a, float b) { return a * b; }
  static float Add(float a, float b) { return a + b; }
  static float Sub(float a, float b) { return a - b; }
  static float Pow2(float n) {
    return __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
  }
};

}  // namespace llmq::kernels
