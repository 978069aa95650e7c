#include "kernels/cuda/lt_plan.h"

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

Status CreateLtHandle(cublasLtHandle_t* out) {
  if (Status st = LoadCublasLt(); !st.ok()) return Status::Unsupported("cuBLASLt: " + st.message());
  if (const cublasStatus_t st = CublasLt()->create(out); st != CUBLAS_STATUS_SUCCESS)
    return Fail("cublasLtCreate", st);
  return Status::Ok();
}

LtPlans::~LtPlans() {
  for (auto& [shape, p] : plans_) DestroyLtPlan(&p);
  if (lt_) CublasLt()->destroy(lt_);
}

Status LtPlans::Init(void* workspace, size_t bytes) {
  LLMQ_RETURN_IF_ERROR(CreateLtHandle(&lt_));
  ws_ = workspace;
  ws_bytes_ = bytes;
  return Status::Ok();
}

Status CreateLtPlan(cudaDataType_t in, int64_t t, int k, int n, LtPlan* p) {
  const CublasLtApi* api = CublasLt();
  if (!api) return Status::Internal("CreateLtPlan before LoadCublasLt");
  *p = LtPlan{};
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasStatus_t st = api->desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == CUBLAS_STATUS_SUCCESS) st = api->layout_create(&p->a, in, k, n, k);
  if (st == CUBLAS_STATUS_SUCCESS) st = api->layout_create(&p->b, in, k, t, k);
  if (st == CUBLAS_STATUS_SUCCESS) st = api->layout_create(&p->d, CUDA_R_32F, n, t, n);
  if (st != CUBLAS_STATUS_SUCCESS) {
    DestroyLtPlan(p);
    return Fail("descriptors", st);
  }
  return Status::Ok();
}

void DestroyLtPlan(LtPlan* p) {
  const CublasLtApi* api = CublasLt();
  if (api) {
    if (p->a) api->layout_destroy(p->a);
    if (p->b) api->layout_destroy(p->b);
    if (p->d) api->layout_destroy(p->d);
    if (p->desc) api->desc_destroy(p->desc);
  }
  *p = LtPlan{};
}

Status LtCandidates(cublasLtHandle_t lt, const LtPlan& p, size_t workspace_bytes, int count,
                    std::vector<cublasLtMatmulAlgo_t>* out) {
  const CublasLtApi* api = CublasLt();
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = api->pref_create(&pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                       sizeof workspace_bytes);
  std::vector<cublasLtMatmulHeuristicResult_t> found(static_cast<size_t>(count));
  int n = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = api->heuristic(lt, p.desc, p.a, p.b, p.d, p.d, pref, count, found.data(), &n);
  if (pref) api->pref_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return Fail("cublasLtMatmulAlgoGetHeuristic", st);
  if (n == 0) return Status::Unsupported("cuBLASLt proposes no algorithm for this product");
  out->clear();
  for (int i = 0; i < n; ++i) out->push_back(found[static_cast<size_t>(i)].algo);
  return Status::Ok();
}

Status RunLtPlan(cublasLtHandle_t lt, const LtPlan& p, const void* x, const void* w, float* y,
                 bool accumulate, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  if (const cublasStatus_t st =
          CublasLt()->matmul(lt, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo,
                             workspace, workspace_bytes, stream);
      st != CUBLAS_STATUS_SUCCESS)
    return Fail("cublasLtMatmul", st);
  return Status::Ok();
}

}  // namespace llmq::kernels::cuda
