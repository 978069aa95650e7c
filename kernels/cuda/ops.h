// The CUDA ops of the decoder forward other than GEMM (kernels/cuda/gemm.h) and attention
// (kernels/cuda/attention.h). Each has its CPU counterpart in kernels/cpu/ops.h, the reference the
// GPU tests compare it with. Every launcher enqueues on `stream` and returns the launch's error
// (cudaGetLastError); execution errors surface at the next synchronising call.
//
// Element types: `T` is the storage type of weights, K/V and GEMM inputs — float (the exact mode)
// or bf16. The residual stream, GEMM outputs and norm weights are always float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llmq::kernels::cuda {

using bf16 = __nv_bfloat16;

// out[t, :] = table[ids[t], :]  (widened to float).   table: [V, H];  ids: [T];  out: [T, H]
template <class T>
cudaError_t Embed(const T* table, int h, const int32_t* ids, int64_t t, float* out,
                  cudaStream_t stream);

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w   x: [T, H] float;  w: [H];  y: [T, H] T
template <class T>
cudaError_t RmsNorm(const float* x, const float* w, int64_t t, int h, float eps, T* y,
                    cudaStream_t stream);

// Paged KV cache of all layers, one buffer each for K and V:
//   [layers, num_blocks, kv_heads, block_size, head_dim]
// A (block, kv head) tile is contiguous: a warp reading one token's head_dim values is coalesced.
template <class T>
struct KvCache {
  T* k = nullptr;
  T* v = nullptr;
  int num_blocks = 0, block_size = 16, kv_heads = 0, head_dim = 0;
  int64_t LayerElems() const { return int64_t{num_blocks} * kv_heads * block_size * head_dim; }
  // Offset of (layer, block, head, offset-in-block, 0).
  __host__ __device__ int64_t Index(int layer, int64_t block, int head, int off) const {
    return (((int64_t{layer} * num_blocks + block) * kv_heads + head) * block_size + off) *
           head_dim;
  }
};

// After the QKV projection, per token t (row of `qkv`, float [T, row_stride], q heads at
// +h*D, then k heads at +q_dim, v heads at +q_dim + kv_dim):
//   1. bias (optional, [q_dim + 2 kv_dim]) added to q, k, v;
//   2. per-head RMSNorm of q and k (optional, q_norm/k_norm [D], eps);
//   3. rotary (rotate-half) on q and k at positions[t] from cos_sin [max_pos, D] (cos | sin);
//   4. q written back in place; k and v written to the cache slot slots[t] of `layer` (slot =
//      block * block_size + offset; a negative slot writes nothing).
template <class T>
cudaError_t QkvRopeWriteKv(float* qkv, int64_t t, int64_t row_stride, int num_heads,
                           const float* bias, const float* q_norm, const float* k_norm, float eps,
                           const int32_t* positions, const float* cos_sin, const int32_t* slots,
                           const KvCache<T>& cache, int layer, cudaStream_t stream);

// out[t, i] = silu(gu[t, i]) * gu[t, I + i]   gu: [T, 2I] float (gate | up);  out: [T, I] T
template <class T>
cudaError_t SiluMul(const float* gu, int64_t t, int inter, T* out, cudaStream_t stream);

// out[i, :] = x[rows[i], :]   x: [*, H] float;  rows: [n];  out: [n, H] float
cudaError_t GatherRows(const float* x, int h, const int32_t* rows, int n, float* out,
                       cudaStream_t stream);

// ids[r] = argmax_v logits[r, v]; NaN counts as -inf; ties go to the lowest id (the CPU
// sampler's greedy rule).   logits: [n, V] float;  ids: [n]
cudaError_t ArgmaxRows(const float* logits, int n, int vocab, int32_t* ids, cudaStream_t stream);

// Structured outputs' token masks (engine/backends/backend.h StepMasks), in place: logits[r, t] =
// -inf where bit t % 32 of words[r, t / 32] is clear, the other logits unchanged, the bits past
// the vocabulary ignored (kernels/cpu/ops.h ApplyTokenBitmask, the reference). A warp per 32-token
// word (4 words in turn): its lanes read the word once (a broadcast) and write only the masked
// tokens, coalesced; a word of all ones costs one read.
//   logits: [n, vocab] float;  words: [n, words_per_row] device uint32,
//   words_per_row >= (vocab + 31) / 32 (else cudaErrorInvalidValue)
cudaError_t ApplyTokenBitmask(float* logits, int n, int vocab, const uint32_t* words,
                              int words_per_row, cudaStream_t stream);

// For each pair p and layer: the (block) tile src_dst[2p] is copied to src_dst[2p + 1], in K and V.
//   src_dst: [2 * num_pairs] device int32
template <class T>
cudaError_t CopyKvBlocks(const KvCache<T>& cache, int layers, const int32_t* src_dst, int num_pairs,
                         cudaStream_t stream);

// p[i] = uniform(-scale, scale) from a counter-based hash of (seed, i): random weights made on the
// device (benchmarks), identical for a given seed on every run.
template <class T>
cudaError_t FillUniform(T* p, int64_t n, float scale, uint64_t seed, cudaStream_t stream);
// p[i] = value.
template <class T>
cudaError_t FillConstant(T* p, int64_t n, float value, cudaStream_t stream);

}  // namespace llmq::kernels::cuda
