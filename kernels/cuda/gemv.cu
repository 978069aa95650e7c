#include "kernels/cuda/gemv.h"
#include "kernels/cuda/pdl.h"
#include "kernels/cuda/reduce.cuh"

namespace llmq::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// 16 bytes of T, widened: 8 bf16 or 4 floats (Load: read and widen; Widen: what Raw read).
template <class T>
struct Vec;
template <>
struct Vec<bf16> {
  static constexpr int kN = 8;
  __device__ static void Load(const bf16* p, float* out) {
    Widen(*reinterpret_cast<const uint4*>(p), out);
  }
  __device__ static void Widen(const uint4& raw, float* out) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};
template <>
struct Vec<float> {
  static constexpr int kN = 4;
  __device__ static void Load(const float* p, float* out) {
    Widen(*reinterpret_cast<const uint4*>(p), out);
  }
  __device__ static void Widen(const uint4& raw, float* out) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  }
};

// grid: ceil(N / kWarpsPerBlock); block: 32 x kWarpsPerBlock. Warp w of block b computes output
// feature n = b * kWarpsPerBlock + w for all R token rows: lane l reads the 16-byte chunks
// l, l + 32, ... of w's row n, U of them in flight per iteration (kept raw until used), and the
// same chunks of each x row. Every warp of a decode projection runs at once, so a warp's chain of
// dependent loads (k / (256 U) for bf16) is the kernel's time: on an H200 qkv (k 4,096) read
// 63% of the bandwidth with U = 2.
template <class T, int R, int U>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    GemvKernel(const T* __restrict__ x, int k, const T* __restrict__ w, int n,
               float* __restrict__ y, bool accumulate) {
  constexpr int V = Vec<T>::kN;
  PdlWait();
  const int lane = threadIdx.x;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.y;
  if (row >= n) return;
  const T* wr = w + static_cast<int64_t>(row) * k;
  float sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) sum[r] = 0.f;
  const int chunks = k / V;
  int c = lane;
  for (; c + 32 * (U - 1) < chunks; c += 32 * U) {
    uint4 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = *reinterpret_cast<const uint4*>(wr + (c + 32 * u) * V);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float w0[V];
      Vec<T>::Widen(raw[u], w0);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float x0[V];
        Vec<T>::Load(x + static_cast<int64_t>(r) * k + (c + 32 * u) * V, x0);
#pragma unroll
        for (int i = 0; i < V; ++i) sum[r] += w0[i] * x0[i];
      }
    }
  }
  for (; c < chunks; c += 32) {
    float w0[V];
    Vec<T>::Load(wr + c * V, w0);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x0[V];
      Vec<T>::Load(x + static_cast<int64_t>(r) * k + c * V, x0);
#pragma unroll
      for (int i = 0; i < V; ++i) sum[r] += w0[i] * x0[i];
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float s = WarpSum(sum[r]);
    if (lane == 0) {
      float* out = y + static_cast<int64_t>(r) * n + row;
      *out = accumulate ? *out + s : s;
    }
  }
}

template <class T, int R>
cudaError_t LaunchRows(const T* x, int k, const T* w, int n, float* y, bool acc, int in_flight,
                       cudaStream_t s) {
  const int blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const dim3 block(32, kWarpsPerBlock);
  const auto kernel = in_flight >= 8   ? GemvKernel<T, R, 8>
                      : in_flight >= 4 ? GemvKernel<T, R, 4>
                                       : GemvKernel<T, R, 2>;
  return LaunchPdl(kernel, dim3(blocks), block, 0, s, x, k, w, n, y, acc);
}

}  // namespace

template <class T>
cudaError_t Gemv(const T* x, int64_t t, int k, const T* w, int n, float* y, bool accumulate,
                 cudaStream_t stream, int in_flight) {
  if (!GemvFits<T>(t, k) || n <= 0) return cudaErrorInvalidValue;
  switch (t) {
    case 1:
      return LaunchRows<T, 1>(x, k, w, n, y, accumulate, in_flight, stream);
    case 2:
      return LaunchRows<T, 2>(x, k, w, n, y, accumulate, in_flight, stream);
    case 3:
      return LaunchRows<T, 3>(x, k, w, n, y, accumulate, in_flight, stream);
    case 4:
      return LaunchRows<T, 4>(x, k, w, n, y, accumulate, in_flight, stream);
    case 5:
      return LaunchRows<T, 5>(x, k, w, n, y, accumulate, in_flight, stream);
    case 6:
      return LaunchRows<T, 6>(x, k, w, n, y, accumulate, in_flight, stream);
    case 7:
      return LaunchRows<T, 7>(x, k, w, n, y, accumulate, in_flight, stream);
    default:
      return LaunchRows<T, 8>(x, k, w, n, y, accumulate, in_flight, stream);
  }
}

template cudaError_t Gemv<float>(const float*, int64_t, int, const float*, int, float*, bool,
                                 cudaStream_t, int);
template cudaError_t Gemv<bf16>(const bf16*, int64_t, int, const bf16*, int, float*, bool,
                                cudaStream_t, int);

}  // namespace llmq::kernels::cuda
