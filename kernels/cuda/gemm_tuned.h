// bf16 products y = x · Wᵀ (+ y) in the layout of kernels/cuda/gemm.h, through cuBLASLt with, per
// shape, the fastest of the algorithms its heuristic proposes (split-K ones among them), timed
// once on the device (Tune). cuBLAS's own pick for decode steps of a few hundred rows underfills
// an H200: o (4,096 x 4,096) at 256 rows ran at 39% of the bf16 peak, its 256 x 4,096 output
// being 64 tiles of 128 x 128 for 132 multiprocessors (bench/RESULTS.md). Once a shape is tuned
// nothing is created, so a CUDA graph's capture and replay allocate nothing.
//
// Thread-safety: none; one per backend, used on its stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/lt_plan.h"
#include "kernels/cuda/ops.h"

namespace llmq::kernels::cuda {

// Init (LtPlans) before the first Run.
class TunedGemm : public LtPlans {
 public:
  // Times each of up to `candidates` algorithms proposed for (t, k, n), `reps` runs after one
  // warm-up, on `stream` (synchronised; not while it is being captured), and keeps the fastest.
  // `scratch` ([t, n] float, device) is overwritten; x ([t, k]) and w ([n, k]) are only read.
  // *mean_us, when given: each candidate's mean time in the heuristic's order (the first is the
  // heuristic's own pick). A shape already tuned is timed again and replaced.
  [[nodiscard]] Status Tune(const bf16* x, int64_t t, int k, const bf16* w, int n, float* scratch,
                            cudaStream_t stream, int candidates = 8, int reps = 5,
                            std::vector<double>* mean_us = nullptr);
  bool tuned(int64_t t, int k, int n) const { return plans_.count({t, k, n}) > 0; }

  // y = x · Wᵀ (+ y when accumulate) with the shape's tuned algorithm, enqueued on `stream`.
  // Internal when (t, k, n) was not tuned.
  [[nodiscard]] Status Run(const bf16* x, int64_t t, int k, const bf16* w, int n, float* y,
                           bool accumulate, cudaStream_t stream) const;
};

}  // namespace llmq::kernels::cuda
