// FP8 (E4M3) projections for the bf16 path on Ada and Hopper (compute capability 8.9 and later;
// engine.precision fp8): a matrix is quantized per row — an output channel of a weight, a token of
// an activation — with one fp32 scale each,
//   scale[r] = max_c |x[r, c]| / 448 (1 for a row of zeros),  q[r, c] = e4m3(x[r, c] / scale[r])
// (round to nearest even, saturating at ±448), so x[r, c] ≈ float(q[r, c]) * scale[r]. The
// products over such matrices: y = x · Wᵀ (+ y) as kernels/cuda/gemm.h, W's per-channel scales
// applied to the fp32 sums. Many token rows go through cuBLASLt's FP8 product (kernels/cuda/
// gemm_fp8.h) on quantized activations, then ScaleRowsCols; a few rows (decode) through GemvFp8,
// whose activations stay bf16 (the weights are the bytes that count there).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace llmq::kernels::cuda {

using fp8 = __nv_fp8_e4m3;
constexpr float kFp8Max = 448.f;  // E4M3's largest finite value

// q[r, :] and scale[r] of x[r, :] as above, for every row r < rows. One block per row.
//   x: [rows, k] T (float or bf16);  q: [rows, k] fp8;  scale: [rows] float
template <class T>
cudaError_t QuantizeRowsFp8(const T* x, int64_t rows, int k, fp8* q, float* scale,
                            cudaStream_t stream);

// True when GemvFp8 serves this shape: t <= kGemvMaxRows (kernels/cuda/gemv.h) and k a multiple
// of 16 (16-byte loads of the weight rows).
bool GemvFp8Fits(int64_t t, int k);

// y[r, n] = w_scale[n] * sum_c float(x[r, c]) * float(w[n, c])  (+ y[r, n] when accumulate),
// accumulated in float; one warp per output feature, the weight row read once for every row.
//   x: [t, K] bf16;  w: [N, K] fp8;  w_scale: [N] float;  y: [t, N] float.
// Requires GemvFp8Fits(t, k).
cudaError_t GemvFp8(const bf16* x, int64_t t, int k, const fp8* w, const float* w_scale, int n,
                    float* y, bool accumulate, cudaStream_t stream);

// y[r, n] = (accumulate ? y[r, n] : 0) + raw[r, n] * x_scale[r] * w_scale[n]: the scales of an
// FP8 product's fp32 sums. raw may be y itself when !accumulate.
//   raw, y: [t, N] float;  x_scale: [t];  w_scale: [N]
cudaError_t ScaleRowsCols(const float* raw, const float* x_scale, const float* w_scale, int64_t t,
                          int n, float* y, bool accumulate, cudaStream_t stream);

}  // namespace llmq::kernels::cuda
