#include "kernels/cuda/gemm_tuned.h"

#include <algorithm>
#include <limits>
#include <string>

#include "kernels/cuda/cublas_api.h"

namespace llmq::kernels::cuda {
namespace {

Status CudaFail(const char* what, cudaError_t e) {
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

Status TunedGemm::Tune(const bf16* x, int64_t t, int k, const bf16* w, int n, float* scratch,
                       cudaStream_t stream, int candidates, int reps,
                       std::vector<double>* mean_us) {
  if (!lt_) return Status::Internal("TunedGemm::Tune before Init");
  if (t <= 0 || k <= 0 || n <= 0 || reps < 1) return Status::InvalidArgument("TunedGemm::Tune");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (const cudaError_t e = cudaStreamIsCapturing(stream, &capturing); e != cudaSuccess)
    return CudaFail("cudaStreamIsCapturing", e);
  if (capturing != cudaStreamCaptureStatusNone)
    return Status::Internal("TunedGemm::Tune while the stream is being captured");
  LtPlan p;
  LLMQ_RETURN_IF_ERROR(CreateLtPlan(CUDA_R_16BF, t, k, n, &p));
  std::vector<cublasLtMatmulAlgo_t> algos;
  Status st = LtCandidates(lt_, p, ws_bytes_, std::max(1, candidates), &algos);
  cudaEvent_t begin = nullptr, end = nullptr;
  if (st.ok()) {
    cudaError_t e = cudaEventCreate(&begin);
    if (e == cudaSuccess) e = cudaEventCreate(&end);
    if (e != cudaSuccess) st = CudaFail("cudaEventCreate", e);
  }
  double best = std::numeric_limits<double>::infinity();
  cublasLtMatmulAlgo_t best_algo{};
  if (mean_us) mean_us->clear();
  for (size_t i = 0; st.ok() && i < algos.size(); ++i) {
    p.algo = algos[i];
    // A candidate the library refuses at run time (some need more alignment) is skipped.
    if (!RunLtPlan(lt_, p, x, w, scratch, false, ws_, ws_bytes_, stream).ok()) {
      if (mean_us) mean_us->push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    cudaError_t e = cudaEventRecord(begin, stream);
    bool ran = true;  // every rep enqueued (cuBLASLt refuses on the host, before any launch)
    for (int r = 0; e == cudaSuccess && ran && r < reps; ++r)
      ran = RunLtPlan(lt_, p, x, w, scratch, false, ws_, ws_bytes_, stream).ok();
    if (e == cudaSuccess) e = cudaEventRecord(end, stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(end);
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, begin, end);
    if (e != cudaSuccess) {
      st = CudaFail("timing a cuBLASLt candidate", e);
      break;
    }
    const double us = ran ? 1000.0 * ms / reps : std::numeric_limits<double>::infinity();
    if (mean_us) mean_us->push_back(us);
    if (us < best) {
      best = us;
      best_algo = algos[i];
    }
  }
  if (begin) cudaEventDestroy(begin);
  if (end) cudaEventDestroy(end);
  if (st.ok() && best == std::numeric_limits<double>::infinity())
    st = Status::Unsupported("no cuBLASLt candidate ran for " + std::to_string(t) + " x " +
                             std::to_string(k) + " x " + std::to_string(n));
  if (!st.ok()) {
    DestroyLtPlan(&p);
    return st;
  }
  p.algo = best_algo;
  const auto key = std::make_tuple(t, k, n);
  if (auto it = plans_.find(key); it != plans_.end()) {
    DestroyLtPlan(&it->second);
    it->second = p;
  } else {
    plans_.emplace(key, p);
  }
  return Status::Ok();
}

Status TunedGemm::Run(const bf16* x, int64_t t, int k, const bf16* w, int n, float* y,
                      bool accumulate, cudaStream_t stream) const {
  const auto it = plans_.find(std::make_tuple(t, k, n));
  if (it == plans_.end())
    return Status::Internal("TunedGemm::Run: " + std::to_string(t) + " x " + std::to_string(k) +
                            " x " + std::to_string(n) + " was not tuned");
  return RunLtPlan(lt_, it->second, x, w, y, accumulate, ws_, ws_bytes_, stream);
}

}  // namespace llmq::kernels::cuda
