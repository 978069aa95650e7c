// Paged attention on the CPU: the KV cache layout, writing a step's K/V rows, and causal GQA
// attention over the paged cache for a whole step's batch (prefill chunks, decode rows, prefix
// groups) in one call.
//
// The arithmetic (what every path computes, bit for bit). For one query row at position p of a
// sequence and one query head (q: [D]), over the ctx = p + 1 keys j of its sequence:
//   s[j]  = fl(c_j * scale),  c_j = the FMA chain c = fma(q[i], K[j][i], c) for i = 0..D-1 from +0
//   m     = max_j s[j]                                     (exact whatever the order)
//   e[j]  = AttentionExp(s[j] - m)                         (kernels/cpu/exp.h, r*r rounded first)
//   L[l]  = the sum of e[j] over j = l (mod 16), in order of j, from +0;  l = 0..15
//   sum   = L folded by halves: L[l] += L[l + w] for w = 8, 4, 2, 1 (l < w); sum = L[0]
//   o[i]  = the FMA chain o = fma(e[j], V[j][i], o) for j = 0..ctx-1 from +0
//   out[i] = o[i] * (1 / sum)
// Each output depends only on its own query, its sequence's keys and values and ctx: never on the
// other rows of the step, on how rows are grouped or chunked, on the vector width or on the
// thread that ran it. So a request's outputs are the same alone or batched, with prefix groups
// or without, and on the AVX-512, AVX2 and scalar paths (kernels/cpu/attention_tile.h;
// tests/paged_attention_test.cpp checks all three against each other bit for bit and against a
// double-precision softmax). The ISA is the GEMM's (kernels/cpu/gemm.h ActiveGemmIsa).
#pragma once

#include <cstdint>

namespace llmq::kernels {

// Paged KV cache of one layer, head-major: each kv head's tiles are one region of num_blocks
// tiles, and each (kv head, block) tile is contiguous:
//   k: [kv_heads, num_blocks, head_dim, block_size]  (transposed: a block's keys are the lanes of
//      one vector per head dimension, so scores of 16 keys come out of one vector FMA chain)
//   v: [kv_heads, num_blocks, block_size, head_dim]
// A head's keys of consecutive blocks (a prefix's, a sequence's blocks taken together) are one
// stream in memory, which the hardware prefetchers follow; block-major, each 2-4 KiB tile was
// followed by the other heads' and every tile began a new stream (prefill attention on AVX2 ran
// about 17% slower).
// in fp32 (k, v) or in bf16 (k16, v16; k and v null): a bf16 cache holds each value rounded to
// the nearest bf16 when written (kernels::FloatToBf16, kernels/cpu/gemm.h), and attention reads it
// widened to fp32 exactly, so the arithmetic above is unchanged, with K and V the stored values:
// half the bytes read, the same batch invariance and the same bits on every path.
struct PagedKv {
  float* k = nullptr;
  float* v = nullptr;
  int block_size = 16;
  int kv_heads = 0;
  int head_dim = 0;
  int num_blocks = 0;  // blocks of the layer's cache (each head's region holds this many tiles)
  uint16_t* k16 = nullptr;
  uint16_t* v16 = nullptr;
  bool bf16() const { return k16 != nullptr; }
  // Element offset of the (block, head) tile.
  int64_t TileOffset(int64_t block, int head) const {
    return (static_cast<int64_t>(head) * num_blocks + block) * block_size * head_dim;
  }
};

// Writes the K and V rows of T tokens into their slots (rounded to bf16 in a bf16 cache).
//   k_src, v_src: [T, src_stride] with head h at +h*head_dim;  slots: [T]
void WriteKv(const PagedKv& kv, const float* k_src, const float* v_src, int64_t src_stride,
             const int32_t* slots, int64_t t);

// Sequences [first_seq, first_seq + num_seqs) of a step whose block tables begin with the same
// num_blocks physical blocks, each wholly before every member's first query row (the engine's
// PrefixGroup, engine/backends/backend.h).
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

// Causal GQA attention over the paged cache, the arithmetic above. For query row t of seq s at
// position p and head h:
//   out[t, h, :] = softmax_j≤p(q[t,h]·K[j, h/group] · scale) · V[j, h/group]
//   q:   [T, q_stride], head h at +h*head_dim;   out: [T, num_heads*head_dim]
// Keys/values of positions 0..p must already be in the cache (the step's own are written first).
// The work is cut into tasks of (kv head, up to kAttentionGroupRows rows): the rows of a prefill
// chunk of one sequence, of a prefix group's sequences, or one decode row. A task's rows meet
// the keys they have in common together, as register tiles (many query heads x 16 keys for the
// scores, many query heads x head dims for the values), so each K and V tile is read once per
// task rather than once per row. Each thread holds the scores of kAttentionGroupRows rows x the
// query heads of a kv head x the context (the scratch a caller sizing memory counts).
constexpr int kAttentionGroupRows = 64;
void PagedAttention(const AttentionBatch& b, const PagedKv& kv, const float* q, int64_t q_stride,
                    int num_heads, float scale, float* out);

}  // namespace llmq::kernels
