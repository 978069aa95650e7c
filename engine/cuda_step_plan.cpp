#include "engine/cuda_step_plan.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/prefill_attention.h"

namespace llmq {

Status PlanCudaStep(const StepBatch& b, const ModelConfig& cfg, int elem_size, int min_rows,
                    int64_t max_scratch, CudaStepPlan* out) {
  CudaStepPlan plan;
  for (int32_t p : b.positions) {
    if (p < 0 || p >= cfg.max_position_embeddings)
      return Status::InvalidArgument("position " + std::to_string(p) + " is outside the context");
    plan.max_context = std::max(plan.max_context, p + 1);
  }
  for (int s = 0; s < b.num_seqs(); ++s) {
    const int r0 = b.query_start[s], ql = b.query_start[s + 1] - r0;
    // The prefill path reads the chunk as one block of rows at p0, p0 + 1, ...: a chunk whose
    // positions are not consecutive (never from the engine) stays on the per-row kernels.
    bool prefill = ql > 0 && ql >= min_rows;
    for (int r = 1; prefill && r < ql; ++r) prefill = b.positions[r0 + r] == b.positions[r0] + r;
    const int64_t bytes =
        prefill ? kernels::cuda::PrefillScratchBytes(ql, b.positions[r0] + ql, cfg.num_heads,
                                                     cfg.num_kv_heads, cfg.head_dim, elem_size)
                : 0;
    if (prefill && bytes <= max_scratch) {
      plan.prefill_seqs.push_back(s);
      plan.prefill_scratch = std::max(plan.prefill_scratch, bytes);
    } else {
      for (int r = r0; r < r0 + ql; ++r) plan.rest_rows.push_back(r);
    }
  }
  *out = std::move(plan);
  return Status::Ok();
}

}  // namespace llmq
