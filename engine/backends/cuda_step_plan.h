// CudaStepPlan: the host-side decisions of one CUDA step, plain C++ so that CPU tests check them
// (tests/gpu/cuda_step_plan_test.cpp runs without a GPU): the positions' bounds, the longest
// context, and which sequences' attention goes through the matrix-product prefill path
// (kernels/cuda/prefill_attention.h) rather than the per-row kernels, and which prefix groups take
// cascade attention.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/backends/backend.h"
#include "engine/model/model_config.h"

namespace llmq {

// A prefix group whose shared blocks go through CascadePrefixAttention: decode rows
// [row0, row0 + num_rows) (one per sequence), all beginning with the same shared_len keys, the
// blocks of sequence first_seq's table.
struct CascadePlan {
  int row0 = 0, num_rows = 0, shared_len = 0, first_seq = 0;
  bool operator==(const CascadePlan&) const = default;
};

struct CudaStepPlan {
  int max_context = 0;             // the largest position + 1
  std::vector<int> prefill_seqs;   // sequences whose rows take PrefillAttention, ascending
  std::vector<int32_t> rest_rows;  // every other query row, ascending
  int64_t prefill_scratch = 0;     // bytes: the largest chunk's or cascade group's scratch
  std::vector<CascadePlan> cascade;
  // [T] when cascade is not empty: the first key each row's own attention reads (its group's
  // shared_len; 0 outside the groups). Empty otherwise.
  std::vector<int32_t> key_begin;
};

struct CudaPlanOptions {
  int elem_size = 2;           // bytes per K/V element
  int block_size = 16;         // tokens per KV block
  int min_rows = 64;           // a chunk of at least this many rows takes the prefill path
  int64_t max_scratch = 0;     // bytes of scratch one chunk or group may take
  bool cascade = true;         // cascade attention for decode-only steps' prefix groups
  int cascade_min_keys = 128;  // a group's shared_len x (num_rows - 1) must reach this
  // Chunks and groups take the fused kernels (FlashPrefillAttention, FlashCascadeAttention):
  // they need no scratch, so max_scratch bounds neither and prefill_scratch stays 0.
  bool fused = false;
};

// A sequence takes the prefill path when it has at least `min_rows` query rows at consecutive
// positions and its scratch is at most `max_scratch` bytes (none with `fused`). In a decode-only
// step (every row is its own sequence's), a prefix group takes cascade attention when the key reads
// it saves, shared_len x (num_rows - 1), reach cascade_min_keys and its scratch fits max_scratch.
// A position outside [0, max_position_embeddings) is an InvalidArgument naming it.
Status PlanCudaStep(const StepBatch& b, const ModelConfig& cfg, const CudaPlanOptions& opt,
                    CudaStepPlan* out);

// CUDA graphs of decode steps are captured per shape: `bucket` sequences
// (engine/backends/graph_buckets.h) and a context, the next power of two >= max_context, at least
// 256, at most max_positions.
int GraphContext(int max_context, int max_positions);

// Pads a decode-only step to a graph's shape: `bucket` >= S sequences of one token each, block
// tables of `max_blocks` columns (-1 padded; a wider table is cut, the columns no position of the
// step reaches, position / block_size >= max_blocks, being unread), `bucket` logits rows. The real
// sequences and logits rows come first, unchanged (so logits row i and id i are b's row i). A
// padding sequence has token 0 at position 0, slot -1 (its K/V are written nowhere) and table [0,
// -1, ...] (it reads block 0; its results are never used); the logits rows past b's are rows S, S +
// 1, ... and then row 0 again. False (and *out unspecified) when b does not fit: not decode-only,
// more sequences than `bucket`, or a position past max_blocks x block_size.
bool PadDecodeStep(const StepBatch& b, int bucket, int max_blocks, int block_size, StepBatch* out);

}  // namespace llmq
