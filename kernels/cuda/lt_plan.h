// A cuBLASLt product in the layout of kernels/cuda/gemm.h, shared by the FP8 products
// (gemm_fp8.h) and the tuned bf16 ones (gemm_tuned.h): y [t, n] float = x [t, k] · Wᵀ, with W a
// Hugging Face Linear weight ([n, k] row-major). In cuBLASLt's column-major view:
// yᵀ [n, t] = op(W) [n, k] · xᵀ [k, t], W's storage a column-major [k, n] matrix taken
// transposed and x's not (the "TN" layout FP8 products require).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "base/status.h"

namespace llmq::kernels::cuda {

// Loads cuBLASLt and creates a handle: Unsupported, saying why, when the library cannot be loaded.
[[nodiscard]] Status CreateLtHandle(cublasLtHandle_t* out);

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // W, x, y (and C = y)
  cublasLtMatmulAlgo_t algo{};
};

// The descriptors of a (t, k, n) product with inputs of `in` (CUDA_R_8F_E4M3, CUDA_R_16BF),
// float accumulation and output; p->algo is left unset. On failure nothing is left to destroy.
// Requires LoadCublasLt().
[[nodiscard]] Status CreateLtPlan(cudaDataType_t in, int64_t t, int k, int n, LtPlan* p);
// Destroys what CreateLtPlan made (null members skipped) and clears *p.
void DestroyLtPlan(LtPlan* p);
// Up to `count` algorithms cuBLASLt's heuristic proposes for `p` within `workspace_bytes`, best
// first; Unsupported when it proposes none.
[[nodiscard]] Status LtCandidates(cublasLtHandle_t lt, const LtPlan& p, size_t workspace_bytes,
                                  int count, std::vector<cublasLtMatmulAlgo_t>* out);
// y = x · Wᵀ (+ y when accumulate) with p->algo, enqueued on `stream`.
[[nodiscard]] Status RunLtPlan(cublasLtHandle_t lt, const LtPlan& p, const void* x, const void* w,
                               float* y, bool accumulate, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

// What a class of cuBLASLt products keeps (Fp8Gemm, TunedGemm): the handle, the workspace it
// shares with a cuBLAS handle on the same stream, and the plans by shape (t, k, n), destroyed with
// it. Thread-safety: none; one per backend, used on its stream.
class LtPlans {
 public:
  LtPlans() = default;
  ~LtPlans();
  LtPlans(const LtPlans&) = delete;
  LtPlans& operator=(const LtPlans&) = delete;

  // Loads cuBLASLt (Unsupported, saying why, when it cannot) and creates the handle. `workspace`
  // (device, `bytes`) may be shared with a cuBLAS handle on the same stream.
  [[nodiscard]] Status Init(void* workspace, size_t bytes);

 protected:
  cublasLtHandle_t lt_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  std::map<std::tuple<int64_t, int, int>, LtPlan> plans_;  // by (t, k, n)
};

}  // namespace llmq::kernels::cuda
