// Elementwise math written as plain arithmetic, so loops over it vectorize and every lane computes
// exactly what the scalar code computes (results never depend on the vector width or the batch).
#pragma once

#include <algorithm>

#include "kernels/cpu/exp.h"

namespace llmq::kernels {

// exp(x) for float, within 2 ulp over [-87, 88] (exp.h); inputs outside are clamped (exp(-87) ~
// 1.6e-38 stands in for 0), NaN stays NaN.
inline float Exp(float x) {
  x = std::min(std::max(x, kExpLo), kExpHi);
  return ExpInRange<ScalarOps<>, ExpLastStep::kProductPR>(x);
}

}  // namespace llmq::kernels
