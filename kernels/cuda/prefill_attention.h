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

}  // namespace llmq::kernels::cuda
