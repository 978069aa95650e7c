#include "kernels/cuda/fp8.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/vec.cuh"

#include <algorithm>

namespace llmq::kernels::cuda {
namespace {

__device__ __forceinline__ float ToFloat(float v) {
  return v;
}
__device__ __forceinline__ float ToFloat(bf16 v) {
  return __bfloat162float(v);
}

constexpr int kQuantThreads = 256;

// One block per row: the row's absolute maximum, then every element divided by its scale.
template <class T>
__global__ void __launch_bounds__(kQuantThreads)
    QuantizeRowsKernel(const T* __restrict__ x, int k, fp8* __restrict__ q,
                       float* __restrict__ scale) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * k;
  float m = 0.f;
  for (int c = threadIdx.x; c < k; c += blockDim.x) m = fmaxf(m, fabsf(ToFloat(xr[c])));
  m = BlockMax(m);
  const float s = m > 0.f ? m / kFp8Max : 1.f;
  if (threadIdx.x == 0) scale[r] = s;
  const float inv = 1.f / s;
  fp8* qr = q + r * k;
  // The conversion rounds to nearest even and saturates (__NV_SATFINITE in the constructor).
  for (int c = threadIdx.x; c < k; c += blockDim.x) qr[c] = fp8(ToFloat(xr[c]) * inv);
}

constexpr int kWarpsPerBlock = 8;

// 16 fp8 weights (one 16-byte load) widened to float.
__device__ __forceinline__ void LoadFp8x16(const fp8* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_fp8x2_e4m3* h = reinterpret_cast<const __nv_fp8x2_e4m3*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 f = static_cast<float2>(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// As kernels/cuda/gemv.cu's GemvKernel: warp w of block b computes output feature
// n = b * kWarpsPerBlock + w for all R rows; lane l reads the 16-weight chunks l, l + 32, ... of
// row n (two in flight per iteration) and the same 16 activations of each row.
template <int R>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    GemvFp8Kernel(const bf16* __restrict__ x, int k, const fp8* __restrict__ w,
                  const float* __restrict__ w_scale, int n, float* __restrict__ y,
                  bool accumulate) {
  const int lane = threadIdx.x;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.y;
  if (row >= n) return;
  const fp8* wr = w + static_cast<int64_t>(row) * k;
  float sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) sum[r] = 0.f;
  const int chunks = k / 16;
  int c = lane;
  for (; c + 32 < chunks; c += 64) {
    float w0[16], w1[16];
    LoadFp8x16(wr + c * 16, w0);
    LoadFp8x16(wr + (c + 32) * 16, w1);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x0[16], x1[16];
      LoadN<bf16, 16>(x + static_cast<int64_t>(r) * k + c * 16, x0);
      LoadN<bf16, 16>(x + static_cast<int64_t>(r) * k + (c + 32) * 16, x1);
#pragma unroll
      for (int i = 0; i < 16; ++i) sum[r] += w0[i] * x0[i] + w1[i] * x1[i];
    }
  }
  for (; c < chunks; c += 32) {
    float w0[16];
    LoadFp8x16(wr + c * 16, w0);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x0[16];
      LoadN<bf16, 16>(x + static_cast<int64_t>(r) * k + c * 16, x0);
#pragma unroll
      for (int i = 0; i < 16; ++i) sum[r] += w0[i] * x0[i];
    }
  }
  const float s = w_scale[row];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = WarpSum(sum[r]) * s;
    if (lane == 0) {
      float* out = y + static_cast<int64_t>(r) * n + row;
      *out = accumulate ? *out + v : v;
    }
  }
}

template <int R>
cudaError_t LaunchRows(const bf16* x, int k, const fp8* w, const float* ws, int n, float* y,
                       bool acc, cudaStream_t s) {
  const int blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  GemvFp8Kernel<R><<<blocks, dim3(32, kWarpsPerBlock), 0, s>>>(x, k, w, ws, n, y, acc);
  return cudaGetLastError();
}

__global__ void ScaleRowsColsKernel(const float* raw, const float* __restrict__ xs,
                                    const float* __restrict__ ws, int64_t total, int n, float* y,
                                    bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = raw[i] * xs[i / n] * ws[i % n];
    y[i] = accumulate ? y[i] + v : v;
  }
}

}  // namespace

template <class T>
cudaError_t QuantizeRowsFp8(const T* x, int64_t rows, int k, fp8* q, float* scale,
                            cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffff || k <= 0) return cudaErrorInvalidValue;
  QuantizeRowsKernel<T><<<static_cast<unsigned>(rows), kQuantThreads, 0, stream>>>(x, k, q, scale);
  return cudaGetLastError();
}

bool GemvFp8Fits(int64_t t, int k) {
  return t >= 1 && t <= kGemvMaxRows && k > 0 && k % 16 == 0;
}

cudaError_t GemvFp8(const bf16* x, int64_t t, int k, const fp8* w, const float* w_scale, int n,
                    float* y, bool accumulate, cudaStream_t stream) {
  if (!GemvFp8Fits(t, k) || n <= 0) return cudaErrorInvalidValue;
  switch (t) {
    case 1:
      return LaunchRows<1>(x, k, w, w_scale, n, y, accumulate, stream);
    case 2:
      return LaunchRows<2>(x, k, w, w_scale, n, y, accumulate, stream);
    case 3:
      return LaunchRows<3>(x, k, w, w_scale, n, y, accumulate, stream);
    case 4:
      return LaunchRows<4>(x, k, w, w_scale, n, y, accumulate, stream);
    case 5:
      return LaunchRows<5>(x, k, w, w_scale, n, y, accumulate, stream);
    case 6:
      return LaunchRows<6>(x, k, w, w_scale, n, y, accumulate, stream);
    case 7:
      return LaunchRows<7>(x, k, w, w_scale, n, y, accumulate, stream);
    default:
      return LaunchRows<8>(x, k, w, w_scale, n, y, accumulate, stream);
  }
}

cudaError_t ScaleRowsCols(const float* raw, const float* x_scale, const float* w_scale, int64_t t,
                          int n, float* y, bool accumulate, cudaStream_t stream) {
  const int64_t total = t * n;
  if (total <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  ScaleRowsColsKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(raw, x_scale, w_scale,
                                                                         total, n, y, accumulate);
  return cudaGetLastError();
}

template cudaError_t QuantizeRowsFp8<float>(const float*, int64_t, int, fp8*, float*, cudaStream_t);
template cudaError_t QuantizeRowsFp8<bf16>(const bf16*, int64_t, int, fp8*, float*, cudaStream_t);

}  // namespace llmq::kernels::cuda
