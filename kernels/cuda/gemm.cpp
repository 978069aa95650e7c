#include "kernels/cuda/gemm.h"

#include "kernels/cuda/cublas_api.h"

#include <type_traits>

namespace llmq::kernels::cuda {

template <class T>
cublasStatus_t Gemm(cublasHandle_t handle, const T* x, int64_t t, int k, const T* w, int n,
                    float* y, bool accumulate) {
  if (t <= 0) return CUBLAS_STATUS_SUCCESS;
  const CublasApi* api = Cublas();
  if (!api) return CUBLAS_STATUS_NOT_INITIALIZED;
  // Column-major view: yᵀ [N, T] = W [N, K] (w's row-major storage, transposed) · xᵀ [K, T].
  const cudaDataType_t type = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  return api->gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, static_cast<int>(t), k, &alpha, w, type,
                      k, x, type, k, &beta, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

template cublasStatus_t Gemm<float>(cublasHandle_t, const float*, int64_t, int, const float*, int,
                                    float*, bool);
template cublasStatus_t Gemm<bf16>(cublasHandle_t, const bf16*, int64_t, int, const bf16*, int,
                                   float*, bool);

}  // namespace llmq::kernels::cuda
