#include "engine/backends/cuda_step_plan.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/prefill_attention.h"

namespace llmq {

Status PlanCudaStep(const StepBatch& b, const ModelConfig& cfg, const CudaPlanOptions& opt,
                    CudaStepPlan* out) {
  const int elem_size = opt.elem_size, min_rows = opt.min_rows;
  const int64_t max_scratch = opt.max_scratch;
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
    const int64_t bytes = prefill && !opt.fused ? kernels::cuda::PrefillScratchBytes(
                                                      ql, b.positions[r0] + ql, cfg.num_heads,
                                                      cfg.num_kv_heads, cfg.head_dim, elem_size)
                                                : 0;
    if (prefill && bytes <= max_scratch) {
      plan.prefill_seqs.push_back(s);
      plan.prefill_scratch = std::max(plan.prefill_scratch, bytes);
    } else {
      for (int r = r0; r < r0 + ql; ++r) plan.rest_rows.push_back(r);
    }
  }
  // Cascade: decode-only steps only (row s is sequence s, and no row takes the prefill path). The
  // groups' blocks precede every member's query row (PrefixGroup's contract), so the shared keys
  // [0, shared_len) are in the cache before the step runs and no row's own range is empty.
  if (opt.cascade && b.decode_only && plan.prefill_seqs.empty() && !b.prefix_groups.empty()) {
    for (const PrefixGroup& g : b.prefix_groups) {
      CascadePlan c;
      c.first_seq = g.first_seq;
      c.row0 = b.query_start[g.first_seq];
      c.num_rows = g.num_seqs;
      c.shared_len = g.num_blocks * opt.block_size;
      const int64_t bytes =
          opt.fused ? 0
                    : kernels::cuda::CascadeScratchBytes(c.num_rows, c.shared_len, cfg.num_heads,
                                                         cfg.num_kv_heads, cfg.head_dim, elem_size);
      if (int64_t{c.shared_len} * (c.num_rows - 1) < opt.cascade_min_keys || bytes > max_scratch)
        continue;
      plan.cascade.push_back(c);
      plan.prefill_scratch = std::max(plan.prefill_scratch, bytes);
    }
    if (!plan.cascade.empty()) {
      plan.key_begin.assign(b.num_tokens(), 0);
      for (const CascadePlan& c : plan.cascade)
        for (int r = c.row0; r < c.row0 + c.num_rows; ++r) plan.key_begin[r] = c.shared_len;
    }
  }
  *out = std::move(plan);
  return Status::Ok();
}

int GraphContext(int max_context, int max_positions) {
  int ctx = 256;
  while (ctx < max_context) ctx *= 2;
  return std::max(1, std::min(ctx, max_positions));
}

bool PadDecodeStep(const StepBatch& b, int bucket, int max_blocks, int block_size, StepBatch* out) {
  const int S = b.num_seqs();
  if (!b.decode_only || b.num_tokens() != S || S > bucket) return false;
  // Columns past max_blocks may be cut only where no position reaches them.
  for (int32_t p : b.positions)
    if (p / block_size >= max_blocks) return false;
  const int copy = std::min(b.max_blocks, max_blocks);
  StepBatch& p = *out;
  p.Clear();
  p.token_ids = b.token_ids;
  p.positions = b.positions;
  p.slot_mapping = b.slot_mapping;
  p.context_lens = b.context_lens;
  p.logits_rows = b.logits_rows;
  p.max_blocks = max_blocks;
  p.decode_only = true;
  p.block_tables.assign(static_cast<size_t>(bucket) * max_blocks, -1);
  for (int s = 0; s < S; ++s)
    std::copy_n(b.block_tables.begin() + static_cast<size_t>(s) * b.max_blocks, copy,
                p.block_tables.begin() + static_cast<size_t>(s) * max_blocks);
  for (int s = S; s < bucket; ++s) {
    p.token_ids.push_back(0);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);
    p.context_lens.push_back(1);
    p.block_tables[static_cast<size_t>(s) * max_blocks] = 0;
  }
  p.query_start.resize(bucket + 1);
  for (int s = 0; s <= bucket; ++s) p.query_start[s] = s;
  for (int r = S; static_cast<int>(p.logits_rows.size()) < bucket; ++r)
    p.logits_rows.push_back(r < bucket ? r : 0);
  return true;
}

}  // namespace llmq
