// Warp and block reductions shared by the CUDA kernels (device code only).
#pragma once

#include <cuda_runtime.h>

namespace llmq::kernels::cuda {

// Sum over the 32 lanes; every lane gets the result.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a 1-D block of at most 1024 threads (a multiple of 32); every thread gets the result.
// Contains __syncthreads: call from every thread of the block.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // `part` may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : 0.f;
  return WarpSum(v);
}

// Max over a 1-D block, as BlockSum. Contains __syncthreads.
__device__ __forceinline__ float BlockMax(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : -INFINITY;
  return WarpMax(v);
}

// (best, arg) over the 32 lanes: the largest value, the lowest id among equals; every lane gets it.
__device__ __forceinline__ void WarpArgmax(float* best, int* arg) {
  float b = *best;
  int a = *arg;
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, b, o);
    const int oa = __shfl_xor_sync(0xffffffffu, a, o);
    if (ob > b || (ob == b && oa < a)) {
      b = ob;
      a = oa;
    }
  }
  *best = b;
  *arg = a;
}

// (best, arg) over a 1-D block (multiple of 32 threads): the largest value, the lowest id among
// equals. Every thread gets the result. Contains __syncthreads.
__device__ __forceinline__ void BlockArgmax(float* best, int* arg) {
  __shared__ float pv[32];
  __shared__ int pi[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float b = *best;
  int a = *arg;
  WarpArgmax(&b, &a);
  __syncthreads();
  if (lane == 0) {
    pv[warp] = b;
    pi[warp] = a;
  }
  __syncthreads();
  b = lane < nw ? pv[lane] : -INFINITY;
  a = lane < nw ? pi[lane] : 0x7fffffff;
  WarpArgmax(&b, &a);
  *best = b;
  *arg = a;
}

// The greedy pick of one row over a 1-D block: the largest value's id, NaN as -inf, ties to the
// lowest id, 0 when nothing is above -inf (the CPU sampler's Argmax). Every thread gets it.
// Contains __syncthreads.
__device__ __forceinline__ int BlockRowArgmax(const float* row, int n) {
  float best = -INFINITY;
  int arg = 0x7fffffff;
  for (int v = threadIdx.x; v < n; v += blockDim.x) {
    float x = row[v];
    if (isnan(x)) x = -INFINITY;
    if (x > best || (x == best && v < arg)) {
      best = x;
      arg = v;
    }
  }
  BlockArgmax(&best, &arg);
  return (arg == 0x7fffffff || best == -INFINITY) ? 0 : arg;
}

}  // namespace llmq::kernels::cuda
