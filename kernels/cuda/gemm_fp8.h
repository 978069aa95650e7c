// FP8 (E4M3) matrix products through cuBLASLt (compute capability 8.9 and later):
//   raw[t, n] = sum_c float(xq[t, c]) * float(wq[n, c])
// accumulated in fp32 (no fast accumulation), the layout of kernels/cuda/gemm.h (wq a Hugging Face
// Linear weight's rows). The caller applies the rows' and channels' scales (ScaleRowsCols,
// kernels/cuda/fp8.h). The descriptors and the algorithm cuBLASLt's heuristic picks are kept per
// shape: after a shape's first product nothing is created, so a CUDA graph's capture and replay
// allocate nothing.
//
// Thread-safety: none; one per backend, used on its stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "base/status.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/lt_plan.h"

namespace llmq::kernels::cuda {

// Init (LtPlans) before the first Run.
class Fp8Gemm : public LtPlans {
 public:
  // raw = xq · wqᵀ as above, enqueued on `stream`. k % 16 == 0; pointers 16-byte aligned.
  //   xq: [t, k] fp8;  wq: [n, k] fp8;  raw: [t, n] float
  [[nodiscard]] Status Run(const fp8* xq, int64_t t, int k, const fp8* wq, int n, float* raw,
                           cudaStream_t stream);

 private:
  [[nodiscard]] Status PlanFor(int64_t t, int k, int n, const LtPlan** out);
};

}  // namespace llmq::kernels::cuda
