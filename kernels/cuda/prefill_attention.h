// Causal attention of one sequence's prefill chunk through tensor-core matrix products (cuBLAS),
// for chunks long enough that the per-row kernels (kernels/cuda/attention.h) would read the
// context once per query row. For a chunk of q_len rows at positions p0 .. p0 + q_len - 1 over a
// context of ctx = p0 + q_len keys, per KV head g (with its G query heads stacked as rows):
//   1. K, V of the context gathered from the paged cache:   Kc, Vc [kv_heads, ctx, D] T
//   2. the chunk's queries, scaled:                         Qc [kv_heads, G * q_len, D] T
//   3. S = Qc · Kcᵀ (batched over kv heads):                 S  [kv_heads, G * q_len, ctx] float
//   4. P = causal softmax of S's rows (key j > position: 0)  P  [kv_heads, G * q_len, ctx] T
//   5. O = P · Vc:                                           O  [kv_heads, G * q_len, D] float
//   6. O scattered to the chunk's rows of out [T, heads * D].
// The CPU reference is kernels::PagedAttention, as for the per-row kernels.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace llmq::kernels::cuda {

struct PrefillChunk {
  const float* q = nullptr;  // [T, q_stride] float; the chunk's rows are row0 .. row0 + q_len - 1
  int64_t q_stride = 0;
  int row0 = 0, q_len = 0, p0 = 0;
  int num_heads = 0;
  const int32_t* block_table = nullptr;  // [>= ceil(ctx / block_size)] device, this sequence's
  float scale = 1.f;
};

// Bytes of scratch a chunk needs (the sum of the buffers above).
int64_t PrefillScratchBytes(int q_len, int ctx, int num_heads, int kv_heads, int head_dim,
                            int elem_size);

struct KernelStatus {
  cudaError_t cuda = cudaSuccess;
  cublasStatus_t blas = CUBLAS_STATUS_SUCCESS;
  const char* where = "";  // the failed step
  bool ok() const { return cuda == cudaSuccess && blas == CUBLAS_STATUS_SUCCESS; }
};

// Writes the chunk's rows of `out` ([T, num_heads * D] T). `scratch` holds PrefillScratchBytes;
// `handle` runs on `stream`.
template <class T>
KernelStatus PrefillAttention(cublasHandle_t handle, const PrefillChunk& c, const KvCache<T>& cache,
                              int layer, void* scratch, T* out, cudaStream_t stream);

// The same attention fused in one kernel for a bf16 cache (FlashAttention-2's forward on the
// tensor cores, kernels/cuda/prefill_attention.cu FlashKernel): S and P never leave the
// multiprocessor, and key tiles past a tile's last position are not read. No scratch. The query
// and the probabilities are rounded to bf16 for the products. Requires FlashPrefillFits.
bool FlashPrefillFits(int head_dim, int elem_size);
cudaError_t FlashPrefillAttention(const PrefillChunk& c, const KvCache<bf16>& cache, int layer,
                                  bf16* out, cudaStream_t stream);

// The shared half of cascade attention. A group of decode rows row0 .. row0 + num_rows - 1 (one
// per sequence) whose sequences all begin with the same shared_len keys meets those keys as one
// matrix product per KV head, so the shared blocks are read once per group per step instead of
// once per row:
//   1-3. as PrefillAttention with the group's rows as the chunk and ctx = shared_len
//   4. P = exp(S - M) unnormalised, M = the row's max, L = the sum of P as stored (no mask: every
//      shared key precedes every row)
//   5. O = P · Vc
//   6. (O, M, L) into each row's cascade slot (slot num_splits) of the paged kernel's workspace,
//      which that kernel's merge folds into the row's own-suffix attention by log-sum-exp
//      (kernels/cuda/attention.h, AttentionArgs::key_begin). Run it before the paged kernel.
struct CascadeGroup {
  PrefillChunk rows;  // q_len = the group's rows; p0 unused; block_table: the shared blocks
  int shared_len = 0;
  float* workspace = nullptr;  // the paged launch's workspace
  int ws_rows = 0;             // the paged launch's num_tokens (row i of the workspace is row i)
  int num_splits = 1;          // the paged launch's; its slot stride is num_splits + 1
};
// Scratch bytes of a group (the same buffers as a prefill chunk of num_rows over shared_len keys).
int64_t CascadeScratchBytes(int num_rows, int shared_len, int num_heads, int kv_heads, int head_dim,
                            int elem_size);
template <class T>
KernelStatus CascadePrefixAttention(cublasHandle_t handle, const CascadeGroup& g,
                                    const KvCache<T>& cache, int layer, void* scratch,
                                    cudaStream_t stream);

// The same partial (O, M, L) from FlashPrefillAttention's fused kernel for a bf16 cache (no
// scratch; the query and the probabilities rounded to bf16 for the products, L the sum of the
// probabilities before rounding). Requires FlashPrefillFits.
cudaError_t FlashCascadeAttention(const CascadeGroup& g, const KvCache<bf16>& cache, int layer,
                                  cudaStream_t stream);

}  // namespace llmq::kernels::cuda
