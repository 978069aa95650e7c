// CudaStepPlan: the host-side decisions of one CUDA step, plain C++ so that CPU tests check them
// (tests/gpu/cuda_step_plan_test.cpp runs without a GPU): the positions' bounds, the longest
// context, and which sequences' attention goes through the matrix-product prefill path
// (kernels/cuda/prefill_attention.h) rather than the per-row kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/status.h"

namespace llmq {

struct CudaStepPlan {
  int max_context = 0;             // the largest position + 1
  std::vector<int> prefill_seqs;   // sequences whose rows take PrefillAttention, ascending
  std::vector<int32_t> rest_rows;  // every other query row, ascending
  int64_t prefill_scratch = 0;     // bytes: the largest chunk's PrefillScratchBytes
};

// A sequence takes the prefill path when it has at least `min_rows` query rows at consecutive
// positions and its scratch (elements of `elem_size` bytes) is at most `max_scratch` bytes.
// A position outside [0, max_position_embeddings) is an InvalidArgument naming it.
Status PlanCudaStep(const StepBatch& b, const ModelConfig& cfg, int elem_size, int min_rows,
                    int64_t max_scratch, CudaStepPlan* out);

}  // namespace llmq
