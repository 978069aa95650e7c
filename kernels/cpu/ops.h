// The CPU ops of the decoder forward (Llama, Mistral, Qwen2, Qwen3) other than GEMM
// (kernels/cpu/gemm.h). Each op states its shapes; every op computes each output row from its own
// input row(s) only, in a fixed order, so results never depend on batch composition (the engine's
// batch-invariance rests on this).
// Ops big enough to pay for a barrier run on the CPU pool (kernels/cpu/thread_pool.h); called from
// inside a pool region they run on the calling thread.
#pragma once

#include <cstdint>

namespace llmq::kernels {

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w.   x, y: [T, H] (may alias); w: [H].
void RmsNorm(const float* x, const float* w, int64_t t, int h, float eps, float* y);

// Per-head RMSNorm in place (Qwen3's q_norm / k_norm): for each token t and head h < num_heads,
// v = x[t*row_stride + h*head_dim, + head_dim) becomes v / sqrt(mean(v^2) + eps) * w.
//   x: [T, row_stride] floats;  w: [head_dim]
void HeadRmsNorm(float* x, int64_t t, int64_t row_stride, int num_heads, int head_dim,
                 const float* w, float eps);

// x[t*row_stride + i] += bias[i] for t < T, i < n (Qwen2's q/k/v projection biases).
//   x: [T, row_stride] floats, n <= row_stride;  bias: [n]
void AddBias(float* x, int64_t t, int64_t row_stride, const float* bias, int n);

// Rotary embedding, Hugging Face rotate-half layout, in place on each head of each token:
// for i < D/2:  (a, b) = (v[i], v[i + D/2]);  v[i] = a·cos − b·sin;  v[i + D/2] = b·cos + a·sin
// with cos/sin = cos_sin[pos * D + i] / cos_sin[pos * D + D/2 + i].
//   x:        [T, row_stride] floats; heads are at x[t*row_stride + h*D], h < num_heads
//   positions:[T]
//   cos_sin:  [max_pos, D] (first half cos, second half sin)
void Rope(float* x, int64_t t, int64_t row_stride, int num_heads, int head_dim,
          const int32_t* positions, const float* cos_sin);

// out[t, i] = silu(gu[t, i]) * gu[t, I + i]   gu: [T, 2I] (gate then up), out: [T, I].
void SiluMul(const float* gu, int64_t t, int inter, float* out);

// x[i] += y[i] for i < n.
void AddInPlace(float* x, const float* y, int64_t n);

// Paged KV cache of one layer. Each (block, kv head) tile is contiguous:
//   k: [num_blocks, kv_heads, head_dim, block_size]  (transposed: a block's keys are the lanes of
//      one vector per head dimension, so scores of a whole block come out of plain FMAs)
//   v: [num_blocks, kv_heads, block_size, head_dim]
struct PagedKv {
  float* k = nullptr;
  float* v = nullptr;
  int block_size = 16;
  int kv_heads = 0;
  int head_dim = 0;
  int64_t TileOffset(int64_t block, int head) const {  // float offset of the (block, head) tile
    return (block * kv_heads + head) * static_cast<int64_t>(block_size) * head_dim;
  }
};

// Writes the K and V rows of T tokens into their slots.
//   k_src, v_src: [T, src_stride] with head h at +h*head_dim;  slots: [T]
void WriteKv(const PagedKv& kv, const float* k_src, const float* v_src, int64_t src_stride,
             const int32_t* slots, int64_t t);

// Sequences [first_seq, first_seq + num_seqs) of a step whose block tables begin with the same
// num_blocks physical blocks, each wholly before every member's first query row (the engine's
// PrefixGroup, engine/backend.h).
struct SharedPrefix {
  int first_seq = 0;
  int num_seqs = 0;    // >= 1
  int num_blocks = 0;  // >= 1
};

// The whole step's batch as attention sees it.
struct AttentionBatch {
  int num_seqs = 0;
  const int32_t* query_start = nullptr;   // [S+1] the query rows of seq s
  const int32_t* positions = nullptr;     // [T] a query at position p attends to keys 0..p
  const int32_t* block_tables = nullptr;  // [S, max_blocks] physical block of each logical block
  int max_blocks = 0;
  // Disjoint, ascending by first_seq; may be empty. Only how the cache is read depends on them.
  const SharedPrefix* groups = nullptr;
  int num_groups = 0;
};

// Causal GQA attention over the paged cache. For query row t of seq s at position p and head h:
//   out[t, h, :] = softmax_j≤p(q[t,h]·K[j, h/group] · scale) · V[j, h/group]
//   q:   [T, q_stride], head h at +h*head_dim;   out: [T, num_heads*head_dim]
// Keys/values of positions 0..p must already be in the cache (the step's own are written first).
// Shared-prefix attention: the rows of a group meet its shared blocks together, each K and V tile
// of them read once per kv head for up to 64 rows instead of once per row; each row's own blocks
// follow. It is a loop interchange, not a log-sum-exp merge of two partial softmaxes: every
// (row, head) keeps its whole score vector, so its scores, softmax and weighted sum of values are
// the same operations in the same key order as without groups, and the output is BIT-IDENTICAL
// with and without b.groups. Each thread holds the scores of kAttentionGroupRows rows x the heads
// of a kv head x the context (the scratch a caller sizing memory counts).
constexpr int kAttentionGroupRows = 64;
void PagedAttention(const AttentionBatch& b, const PagedKv& kv, const float* q, int64_t q_stride,
                    int num_heads, float scale, float* out);

// Embedding gather: out[t, :] = table[ids[t], :]   table: [V, H], out: [T, H].
void Embed(const float* table, int h, const int32_t* ids, int64_t t, float* out);

}  // namespace llmq::kernels
