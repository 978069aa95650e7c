// bfloat16 <-> float at the bit level, so that results do not depend on the FPU's rounding mode:
// the one conversion every layer uses (checkpoints, packed weights, the KV cache, tests).
#pragma once

#include <cstdint>
#include <cstring>

namespace llmq {

// Round to nearest, ties to even; a NaN stays a (quiet) NaN; values above the largest bf16 round
// to infinity (the carry runs into the exponent).
inline uint16_t FloatToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Exact: every bf16 value is a float.
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace llmq
