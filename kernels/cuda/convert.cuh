// Element conversions of the CUDA kernels (device code): T (float or bf16) to and from float.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

namespace llmq::kernels::cuda {

__device__ __forceinline__ float ToF(float v) {
  return v;
}
__device__ __forceinline__ float ToF(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round to nearest even for bf16.
template <class T>
__device__ __forceinline__ T FromF(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return __float2bfloat16_rn(v);
}

template <class T>
__device__ __forceinline__ void Store(T* p, float v) {
  *p = FromF<T>(v);
}

}  // namespace llmq::kernels::cuda
