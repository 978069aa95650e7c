// Matrix products through cuBLAS: y = x · Wᵀ (+ y), the layout of every projection in the model.
// Inputs in bf16 or float, accumulation and output in float (CUBLAS_COMPUTE_32F: no TF32, so the
// float mode is exact fp32 arithmetic).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace llmq::kernels::cuda {

// y[t, n] = sum_k x[t, k] * w[n, k]  (+ y[t, n] when accumulate: the residual add for free).
//   x: [T, K] T row-major;  w: [N, K] T row-major (a Hugging Face Linear weight);  y: [T, N] float
template <class T>
cublasStatus_t Gemm(cublasHandle_t handle, const T* x, int64_t t, int k, const T* w, int n,
                    float* y, bool accumulate);

}  // namespace llmq::kernels::cuda
