#include "kernels/cuda/gemm_fp8.h"

#include <string>

#include "kernels/cuda/cublas_api.h"

namespace llmq::kernels::cuda {
namespace {

Status Fail(const char* call, cublasStatus_t st) {
  const CublasApi* api = Cublas();
  return Status::Internal(std::string("cuBLASLt ") + call + ": " +
                          (api ? api->status_string(st) : std::to_string(static_cast<int>(st))));
}

}  // namespace

#define LLMQ_LT_TRY(call)                                                                         \
  do {                                                                                            \
    if (const cublasStatus_t st_ = (call); st_ != CUBLAS_STATUS_SUCCESS) return Fail(#call, st_); \
  } while (0)

Fp8Gemm::~Fp8Gemm() {
  const CublasLtApi* api = CublasLt();
  if (!api) return;
  for (auto& [shape, p] : plans_) {
    if (p.a) api->layout_destroy(p.a);
    if (p.b) api->layout_destroy(p.b);
    if (p.d) api->layout_destroy(p.d);
    if (p.desc) api->desc_destroy(p.desc);
  }
  if (lt_) api->destroy(lt_);
}

Status Fp8Gemm::Init(void* workspace, size_t bytes) {
  if (Status st = LoadCublasLt(); !st.ok()) return Status::Unsupported("cuBLASLt: " + st.message());
  LLMQ_LT_TRY(CublasLt()->create(&lt_));
  ws_ = workspace;
  ws_bytes_ = bytes;
  return Status::Ok();
}

Status Fp8Gemm::PlanFor(int64_t t, int k, int n, const Plan** out) {
  const auto key = std::make_tuple(t, k, n);
  if (auto it = plans_.find(key); it != plans_.end()) {
    *out = &it->second;
    return Status::Ok();
  }
  const CublasLtApi* api = CublasLt();
  Plan p;
  // Column-major view, as kernels/cuda/gemm.cpp: rawᵀ [n, t] = op(W) [n, k] · xqᵀ [k, t], with
  // W's row-major [n, k] storage a column-major [k, n] matrix taken transposed (FP8 products want
  // A transposed and B not: the "TN" layout).
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  // Plans are created once each; a failure part-way leaves what was made in `p`, destroyed here.
  auto fail = [&](Status st) {
    if (p.a) api->layout_destroy(p.a);
    if (p.b) api->layout_destroy(p.b);
    if (p.d) api->layout_destroy(p.d);
    if (p.desc) api->desc_destroy(p.desc);
    return st;
  };
  cublasStatus_t st = api->desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == CUBLAS_STATUS_SUCCESS) st = api->layout_create(&p.a, CUDA_R_8F_E4M3, k, n, k);
  if (st == CUBLAS_STATUS_SUCCESS) st = api->layout_create(&p.b, CUDA_R_8F_E4M3, k, t, k);
  if (st == CUBLAS_STATUS_SUCCESS) st = api->layout_create(&p.d, CUDA_R_32F, n, t, n);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(Fail("descriptors", st));
  cublasLtMatmulPreference_t pref = nullptr;
  st = api->pref_create(&pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    st =
        api->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_, sizeof ws_bytes_);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->heuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &best, &found);
  if (pref) api->pref_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(Fail("cublasLtMatmulAlgoGetHeuristic", st));
  if (found == 0)
    return fail(Status::Unsupported("cuBLASLt has no FP8 algorithm for " + std::to_string(t) +
                                    " x " + std::to_string(k) + " x " + std::to_string(n)));
  p.algo = best.algo;
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
  const Plan* p = nullptr;
  LLMQ_RETURN_IF_ERROR(PlanFor(t, k, n, &p));
  const float alpha = 1.f, beta = 0.f;
  LLMQ_LT_TRY(CublasLt()->matmul(lt_, p->desc, &alpha, wq, p->a, xq, p->b, &beta, raw, p->d, raw,
                                 p->d, &p->algo, ws_, ws_bytes_, stream));
  return Status::Ok();
}

}  // namespace llmq::kernels::cuda
