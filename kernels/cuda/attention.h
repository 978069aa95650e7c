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
  const float* q = nullptr;  // [T, q_stride] float, head h at +h*head_dim
  int64_t q_stride = 0;      //
  int num_tokens = 0;        // T, or the length of `rows`
  // When set, the launch covers these query rows only ([num_tokens] device ints); the others are
  // left as they are (the rows of chunks that PrefillAttention serves).
  const int32_t* rows = nullptr;
  int num_heads = 0;                      // query heads; a multiple of the cache's kv_heads
  const int32_t* row_seq = nullptr;       // [T] the sequence of each query row
  const int32_t* positions = nullptr;     // [T]
  const int32_t* block_tables = nullptr;  // [S, max_blocks] physical block ids
  int max_blocks = 0;
  int max_context = 0;  // the longest context (positions + 1) in the batch
  float scale = 1.f;
  int num_splits = 1;  // from AttentionSplits
  float* workspace =
      nullptr;      // AttentionWorkspaceFloats(...) floats when num_splits > 1 or cascade
  int variant = 0;  // kVariant*: which kernel
  // Cascade attention (kernels/cuda/prefill_attention.h, CascadePrefixAttention): when set, row t
  // reads only keys [key_begin[t], position]; a row with key_begin[t] > 0 finds the partial result
  // of keys [0, key_begin[t]) in its workspace slot num_splits (written before this launch), and
  // the merge folds it in by log-sum-exp. Every row's result then goes through the workspace,
  // whose slot stride is num_splits + 1.   key_begin: [num_tokens] device ints, indexed like rows
  const int32_t* key_begin = nullptr;
  __host__ __device__ int slot_stride() const { return num_splits + (key_begin ? 1 : 0); }
};

// The kernels: kVariantAuto takes the partition kernel where it applies (head_dim 64 or 128,
// partitions of at most kMaxPartLen keys): on the tensor cores for a bf16 cache
// (kVariantPartitionMma), with cp.async tiles otherwise (kVariantPartitionAsync); the
// online-softmax kernel elsewhere. The others force one (benchmarks and tests compare them).
// On an H200 (2026-12-04, Llama-3-8B shape, context 1,000): decode attention at batch 256 took
// 12.1 ms a step on the tensor cores, 17.0 with the async tiles, 28.4 with kVariantPartition,
// 28.5 Wide, 17.3 AsyncDeep, 25.0 AsyncHalf, 36.4 Online; at batch 1, 0.67 ms against 1.02.
constexpr int kVariantAuto = 0;
constexpr int kVariantOnline = 1;           // a running max per key tile of 4 (2 for wide heads)
constexpr int kVariantOnlineSingleKey = 2;  // the same, one key at a time
// Every variant from kVariantPartition on is a partition kernel (PartitionFits applies).
constexpr int kVariantPartition = 3;      // scores, softmax, then values, per partition
constexpr int kVariantPartitionWide = 4;  // the same with twice the K and V rows in flight
// The same with K and V brought to shared memory by cp.async in tiles of 8 KB, one tile ahead of
// the one in use (two stages), or two ahead (Deep: three stages).
constexpr int kVariantPartitionAsync = 5;
constexpr int kVariantPartitionAsyncDeep = 6;
// kVariantPartitionAsync with 2 query heads a block where a KV group has 4 or more (two blocks
// per group, each reading the group's K/V: half the registers for the queries, so more blocks an
// SM, for twice the reads, which the L2 may serve).
constexpr int kVariantPartitionAsyncHalf = 7;
// The cp.async partition kernel with both products on the tensor cores (mma.sync m16n8k16, bf16
// in, float sums; sm_80 and later): up to 8 query heads of a KV group a block, the query and the
// probabilities rounded to bf16 as FlashInfer's decode with tensor cores. A bf16 cache only;
// a float cache, or more than 48 KB of shared memory, takes kVariantPartitionAsync. kVariantAuto
// takes it where it applies.
constexpr int kVariantPartitionMma = 8;
// kVariantPartitionMma with K's tiles and then V's as one stream through the stages: V's first
// tile is in flight while K's last is used and during the softmax (a one-tile partition, decode
// at batch 1, waits for one round trip instead of two). Not measured yet.
constexpr int kVariantPartitionMmaStream = 10;
// The stream with 4 stages of 64 keys (3 tiles in flight a block, not 1) in up to 80 KB of shared
// memory: 3 blocks an SM on an H200 instead of 5, 9 tiles in flight an SM instead of 5 (batch
// 256's attention read 2.8 TB/s of the H200's 4.8 with 2 stages). Not measured yet.
constexpr int kVariantPartitionMmaDeep = 9;
constexpr int kMaxPartLen = 512;
constexpr int kMinSplitKeys = 64;  // AttentionSplits' default floor

// Readies the kernels that take more than 48 KB of shared memory (kVariantPartitionMmaDeep) on
// the current device (sm_80 and later; nothing on older ones); call once before capturing launches
// in a graph (a first launch readies them otherwise). CudaBackend calls it at creation. An error
// leaves the other variants usable (clear it with cudaGetLastError).
cudaError_t PrepareAttention();

// True when the partition kernel serves head_dim and the partitions are short enough.
bool PartitionFits(int head_dim, int max_context, int num_splits);
// AttentionSplits, raised so that no partition exceeds kMaxPartLen keys.
int AttentionSplitsFor(int num_tokens, int kv_heads, int max_context, int num_sms,
                       int min_split_keys = kMinSplitKeys);

// How many context splits a launch of `num_tokens` rows should use on a device with `num_sms`
// multiprocessors (plain arithmetic: enough blocks to fill the device, no split under
// min_split_keys keys: 64 by default; 128 until 2026-12-04, when one decode row's attention took
// 1.37 ms of a 6.34 ms step on 56 blocks of an H200's 132 SMs, and 1.02 ms with 64).
int AttentionSplits(int num_tokens, int kv_heads, int max_context, int num_sms,
                    int min_split_keys = kMinSplitKeys);
// Floats of workspace a launch needs: T * heads * slots * (head_dim + 2), slots = num_splits, or
// num_splits + 1 with cascade attention (AttentionArgs::slot_stride). The layout, per launch row i
// (the index into `rows`, else the query row) and head h, part = (i * heads + h) * slots + slot:
//   sums   ws[part * D + d]                                    weighted values, unnormalised
//   stats  ws[T * heads * slots * D + 2 * part + {0, 1}]       the running max M and sum L
// A partial with L == 0 saw no key and weighs nothing.
int64_t AttentionWorkspaceFloats(int num_tokens, int num_heads, int head_dim, int num_splits);

// out: [T, num_heads * head_dim] in T.
template <class T>
cudaError_t PagedAttention(const AttentionArgs& a, const KvCache<T>& cache, int layer, T* out,
                           cudaStream_t stream);

}  // namespace llmq::kernels::cuda
