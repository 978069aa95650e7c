// Loads of N consecutive elements of T (float or bf16) widened to float, in one instruction where
// the size allows (4, 8 or 16 bytes). The address must be aligned to N * sizeof(T) bytes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace llmq::kernels::cuda {

template <class T, int N>
__device__ __forceinline__ void LoadN(const T* p, float* out) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (sizeof(T) == 4 && kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(p)[i];
      out[4 * i] = f.x;
      out[4 * i + 1] = f.y;
      out[4 * i + 2] = f.z;
      out[4 * i + 3] = f.w;
    }
  } else if constexpr (sizeof(T) == 2 && kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const uint4 raw = reinterpret_cast<const uint4*>(p)[i];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(h[j]);
        out[8 * i + 2 * j] = f.x;
        out[8 * i + 2 * j + 1] = f.y;
      }
    }
  } else if constexpr (sizeof(T) == 2 && kBytes == 8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    out[0] = a.x;
    out[1] = a.y;
    out[2] = b.x;
    out[3] = b.y;
  } else if constexpr (sizeof(T) == 2 && kBytes == 4) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
    out[0] = a.x;
    out[1] = a.y;
  } else if constexpr (sizeof(T) == 4 && kBytes == 8) {
    const float2 a = *reinterpret_cast<const float2*>(p);
    out[0] = a.x;
    out[1] = a.y;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = static_cast<float>(p[i]);
  }
}

}  // namespace llmq::kernels::cuda
