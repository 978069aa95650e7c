#include "kernels/cuda/gemm_fp8.h"

#include <string>

#include "kernels/cuda/cublas_api.h"

namespace llmq::kernels::cuda {

Status Fp8Gemm::PlanFor(int64_t t, int k, int n, const LtPlan** out) {
  const auto key = std::make_tuple(t, k, n);
  if (auto it = plans_.find(key); it != plans_.end()) {
    *out = &it->second;
    return Status::Ok();
  }
  LtPlan p;
  LLMQ_RETURN_IF_ERROR(CreateLtPlan(CUDA_R_8F_E4M3, t, k, n, &p));
  std::vector<cublasLtMatmulAlgo_t> algos;
  if (Status st = LtCandidates(lt_, p, ws_bytes_, 1, &algos); !st.ok()) {
    DestroyLtPlan(&p);
    return st.code() == Status::Code::kUnsupported
               ? Status::Unsupported("cuBLASLt has no FP8 algorithm for " + std::to_string(t) +
                                     " x " + std::to_string(k) + " x " + std::to_string(n))
               : st;
  }
  p.algo = algos[0];
  *out = &plans_.emplace(key, p).first->second;
  return Status::Ok();
}

Status Fp8Gemm::Run(const fp8* xq, int64_t t, int k, const fp8* wq, int n, float* raw,
                    cudaStream_t stream) {
  if (t <= 0) return Status::Ok();
  if (!lt_) return Status::Internal("Fp8Gemm::Run before Init");
  if (k % 16 != 0)
    return Status::InvalidArgument("FP8 product: k " + std::to_string(k) +
                                   " is not a multiple of 16");
  const LtPlan* p = nullptr;
  LLMQ_RETURN_IF_ERROR(PlanFor(t, k, n, &p));
  return RunLtPlan(lt_, *p, xq, wq, raw, /*accumulate=*/false, ws_, ws_bytes_, stream);
}

}  // namespace llmq::kernels::cuda
