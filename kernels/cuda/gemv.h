// Matrix products for a few token rows (decode at small batch), where cuBLAS reads the weights
// well under the memory bandwidth: y = x · Wᵀ (+ y) as kernels/cuda/gemm.h, one warp per output
// feature, the weight row read once in 16-byte loads for every token row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace llmq::kernels::cuda {

constexpr int kGemvMaxRows = 8;
// 16-byte chunks of a weight row each lane has in flight (2, 4 or 8). 2 until 2026-12-04; on an
// H200 the three read within noise of each other (qkv 64-67%, o 56-59% of the bandwidth at one
// row: the loads in flight are not what holds them back; bench/RESULTS.md).
constexpr int kGemvInFlight = 4;

// True when Gemv serves this shape: t <= kGemvMaxRows and rows of 16-byte multiples (k * sizeof(T)
// % 16 == 0, so that every row starts 16-byte aligned in a cudaMalloc'd buffer).
template <class T>
bool GemvFits(int64_t t, int k) {
  return t >= 1 && t <= kGemvMaxRows && (k * sizeof(T)) % 16 == 0;
}

// y[r, n] = sum_k x[r, k] * w[n, k]  (+ y[r, n] when accumulate), accumulated in float.
//   x: [t, K] T;  w: [N, K] T;  y: [t, N] float.  Requires GemvFits<T>(t, k).
// `in_flight`: kGemvInFlight, or another for benchmarks and tests (2, 4, 8; others round down).
template <class T>
cudaError_t Gemv(const T* x, int64_t t, int k, const T* w, int n, float* y, bool accumulate,
                 cudaStream_t stream, int in_flight = kGemvInFlight);

}  // namespace llmq::kernels::cuda
