// Elementwise math written as plain arithmetic, so loops over it vectorize and every lane computes
// exactly what the scalar code computes (results never depend on the vector width or the batch).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace llmq::kernels {

// exp(x) for float, within 2 ulp over [-87, 88] (Cephes polynomial on a ln2-reduced argument);
// inputs outside are clamped (exp(-87) ~ 1.6e-38 stands in for 0).
inline float Exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

}  // namespace llmq::kernels
