// The CPU ops of the decoder forward (Llama, Mistral, Qwen2, Qwen3) other than GEMM
// (kernels/cpu/gemm.h) and attention (kernels/cpu/attention.h). Each op states its shapes; every op
// computes each output row from its own input row(s) only, in a fixed order, so results never
// depend on batch composition (the engine's batch-invariance rests on this). Ops big enough to pay
// for a barrier run on the CPU pool (kernels/cpu/thread_pool.h); called from inside a pool region
// they run on the calling thread.
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

// Structured outputs' token masks (engine/backends/backend.h StepMasks): logits[r, t] = -inf
// where bit t % 32 of words[r * words_per_row + t / 32] is clear. The CPU reference of the CUDA
// backend's kernel.   logits: [rows, vocab];  words: [rows, words_per_row], words_per_row >=
// (vocab + 31) / 32
void ApplyTokenBitmask(float* logits, int64_t rows, int vocab, const uint32_t* words,
                       int words_per_row);

// x[i] += y[i] for i < n.
void AddInPlace(float* x, const float* y, int64_t n);

// Embedding gather: out[t, :] = table[ids[t], :]   table: [V, H], out: [T, H].
void Embed(const float* table, int h, const int32_t* ids, int64_t t, float* out);

}  // namespace llmq::kernels
