// Paged causal GQA attention on the GPU, for prefill chunks and decode tokens in one launch.
// CPU counterpart: kernels::PagedAttention (kernels/cpu/ops.h).
//
// For query row t of sequence s = row_seq[t] at position p = positions[t] and query head h:
//   out[t, h, :] = softmax_{j <= p}(q[t, h] · K[s, j, h / G] · scale) · V[s, j, h / G]
// with G = num_heads / kv_heads, K/V read through s's block table. One block serves every query
// head of a KV group, so each K/V element is read once per query row, not once per head.
// The context is split into `num_splits` ranges when there are too few rows to fill the device
// (decode at small batch); partial results (max, sum, weighted V) are then merged by log-sum-exp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace llmq::kernels::cuda {

struct AttentionArgs {
  const float* q = nullptr;               // [T, q_stride] float, head h at +h*head_dim
  int64_t q_stride = 0;                   //
  int num_tokens = 0;                     // T
  int num_heads = 0;                      // query heads; a multiple of the cache's kv_heads
  const int32_t* row_seq = nullptr;       // [T] the sequence of each query row
  const int32_t* positions = nullptr;     // [T]
  const int32_t* block_tables = nullptr;  // [S, max_blocks] physical block ids
  int max_blocks = 0;
  int max_context = 0;  // the longest context (positions + 1) in the batch
  float scale = 1.f;
  int num_splits = 1;          // from AttentionSplits
  float* workspace = nullptr;  // AttentionWorkspaceFloats(...) floats when num_splits > 1
  // Keys a warp loads before using them: 0 = the default (4, or 2 for wide heads), 1 = one at a
  // time (kept to compare the two).
  int key_tile = 0;
};

// How many context splits a launch of `num_tokens` rows should use on a device with `num_sms`
// multiprocessors (plain arithmetic: enough blocks to fill the device, no split under 128 keys).
int AttentionSplits(int num_tokens, int kv_heads, int max_context, int num_sms);
// Floats of workspace a launch needs: T * heads * splits * (head_dim + 2).
int64_t AttentionWorkspaceFloats(int num_tokens, int num_heads, int head_dim, int num_splits);

// out: [T, num_heads * head_dim] in T.
template <class T>
cudaError_t PagedAttention(const AttentionArgs& a, const KvCache<T>& cache, int layer, T* out,
                           cudaStream_t stream);

}  // namespace llmq::kernels::cuda
