#include <cfloat>
#include <cmath>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.h"
#include "kernels/cuda/reduce.cuh"

namespace llmq::kernels::cuda {
namespace {

int Blocks(int64_t n, int threads) {
  return static_cast<int>((n + threads - 1) / threads);
}

// grid: T rows; block: 128 threads over H.
template <class T>
__global__ void EmbedKernel(const T* table, int h, const int32_t* ids, float* out) {
  PdlWait();
  const int64_t t = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[t]) * h;
  for (int i = threadIdx.x; i < h; i += blockDim.x) out[t * h + i] = ToF(src[i]);
}

// grid: T rows; block: 256 threads; the sum of squares in float, reduced over the block.
template <class T>
__global__ void RmsNormKernel(const float* x, const float* w, int h, float eps, T* y) {
  PdlWait();
  const int64_t t = blockIdx.x;
  const float* row = x + t * h;
  float ss = 0.f;
  for (int i = threadIdx.x; i < h; i += blockDim.x) ss += row[i] * row[i];
  ss = BlockSum(ss);
  const float r = 1.0f / sqrtf(ss / h + eps);
  for (int i = threadIdx.x; i < h; i += blockDim.x) y[t * h + i] = FromF<T>(row[i] * r * w[i]);
}

// RmsNormKernel for rows of a multiple of 4 floats that fit the block 16 floats a thread
// (h <= 16 x blockDim.x): the row is read once, in 16-byte loads all issued before the sum, and
// kept in registers for the scaling, rather than read twice one float at a time (a decode row's
// norm is a chain of latencies, not of bytes).
template <class T>
__global__ void RmsNormRegsKernel(const float* x, const float* w, int h, float eps, T* y) {
  constexpr int kChunks = 4;  // float4s a thread
  PdlWait();
  const int64_t t = blockIdx.x;
  const float* row = x + t * h;
  float4 v[kChunks];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = (i * blockDim.x + threadIdx.x) * 4;
    v[i] = c < h ? *reinterpret_cast<const float4*>(row + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int i = 0; i < kChunks; ++i)
    ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
  ss = BlockSum(ss);
  const float r = 1.0f / sqrtf(ss / h + eps);
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = (i * blockDim.x + threadIdx.x) * 4;
    if (c >= h) break;
    const float4 g = *reinterpret_cast<const float4*>(w + c);
    T* out = y + t * h + c;
    out[0] = FromF<T>(v[i].x * r * g.x);
    out[1] = FromF<T>(v[i].y * r * g.y);
    out[2] = FromF<T>(v[i].z * r * g.z);
    out[3] = FromF<T>(v[i].w * r * g.w);
  }
}

// grid: T tokens x ceil(heads / 4); block: 32 x 4 (a warp per head: one decode row's 48 heads of
// Llama-3-8B on 12 blocks, rather than one block walking them 12 deep).
// Heads 0..nh-1 are q, nh..nh+nkv-1 are k, then nkv v heads. Lane i of a warp owns the rotary
// pairs (j, j + D/2) for j = i, i + 32, ...
template <class T>
__global__ void QkvRopeKernel(float* qkv, int64_t row_stride, int nh, const float* bias,
                              const float* q_norm, const float* k_norm, float eps,
                              const int32_t* positions, const float* cos_sin, const int32_t* slots,
                              KvCache<T> cache, int layer) {
  PdlWait();
  const int64_t t = blockIdx.x;
  const int D = cache.head_dim, half = D / 2, nkv = cache.kv_heads;
  float* row = qkv + t * row_stride;
  const int pos = positions[t];
  const int slot = slots[t];
  for (int head = blockIdx.y * blockDim.y + threadIdx.y; head < nh + 2 * nkv;
       head += gridDim.y * blockDim.y) {
    const bool is_q = head < nh, is_v = head >= nh + nkv;
    float* v = row + static_cast<int64_t>(head) * D;  // q, k, v heads are contiguous in the row
    const float* b = bias ? bias + static_cast<int64_t>(head) * D : nullptr;
    const float* nw = is_q ? q_norm : (is_v ? nullptr : k_norm);
    // Up to 8 pairs per lane (D <= 512).
    float a[8], c[8];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = threadIdx.x + 32 * k;
      a[k] = c[k] = 0.f;
      if (j < half) {
        a[k] = v[j] + (b ? b[j] : 0.f);
        c[k] = v[j + half] + (b ? b[j + half] : 0.f);
        ss += a[k] * a[k] + c[k] * c[k];
      }
    }
    if (nw) {
      ss = WarpSum(ss);
      const float r = 1.0f / sqrtf(ss / D + eps);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int j = threadIdx.x + 32 * k;
        if (j < half) {
          a[k] = a[k] * r * nw[j];
          c[k] = c[k] * r * nw[j + half];
        }
      }
    }
    if (!is_v) {
      const float* cs = cos_sin + static_cast<int64_t>(pos) * D;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int j = threadIdx.x + 32 * k;
        if (j < half) {
          const float co = cs[j], si = cs[half + j];
          const float x0 = a[k], x1 = c[k];
          a[k] = x0 * co - x1 * si;
          c[k] = x1 * co + x0 * si;
        }
      }
    }
    if (is_q) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int j = threadIdx.x + 32 * k;
        if (j < half) {
          v[j] = a[k];
          v[j + half] = c[k];
        }
      }
    } else if (slot >= 0) {
      const int kvh = is_v ? head - nh - nkv : head - nh;
      T* dst = (is_v ? cache.v : cache.k) +
               cache.Index(layer, slot / cache.block_size, kvh, slot % cache.block_size);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int j = threadIdx.x + 32 * k;
        if (j < half) {
          dst[j] = FromF<T>(a[k]);
          dst[j + half] = FromF<T>(c[k]);
        }
      }
    }
  }
}

template <class T>
__global__ void SiluMulKernel(const float* gu, int64_t t, int inter, T* out) {
  PdlWait();
  const int64_t n = t * inter;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const float g = gu[r * 2 * inter + c], u = gu[r * 2 * inter + inter + c];
    out[i] = FromF<T>(g / (1.0f + expf(-g)) * u);
  }
}

__global__ void GatherRowsKernel(const float* x, int h, const int32_t* rows, float* out) {
  PdlWait();
  const int64_t i = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[i]) * h;
  for (int c = threadIdx.x; c < h; c += blockDim.x) out[i * h + c] = src[c];
}

// grid: n rows; block: 256 threads. Each thread keeps its best (value, id), then the block
// reduces; equal values prefer the lower id, NaN is -inf, so the result is the CPU's.
__global__ void ArgmaxKernel(const float* logits, int vocab, int32_t* ids) {
  PdlWait();
  const int id = BlockRowArgmax(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab);
  if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

// grid: (word groups, rows); block: 256 threads, 8 warps. Warp w of block x handles the words
// [(x * 8 + w) * kMaskWordsPerWarp, + kMaskWordsPerWarp) of each of its rows (rows strided by
// gridDim.y); lane i owns token 32 k + i of word k.
constexpr int kMaskThreads = 256, kMaskWordsPerWarp = 4;
__global__ void ApplyTokenBitmaskKernel(float* logits, int n, int vocab, const uint32_t* words,
                                        int words_per_row) {
  const int lane = threadIdx.x & 31;
  const int used = (vocab + 31) / 32;  // words that hold tokens
  const int w0 = (blockIdx.x * (kMaskThreads / 32) + threadIdx.x / 32) * kMaskWordsPerWarp;
  for (int r = blockIdx.y; r < n; r += gridDim.y) {
    float* row = logits + static_cast<int64_t>(r) * vocab;
    const uint32_t* w = words + static_cast<int64_t>(r) * words_per_row;
#pragma unroll
    for (int k = 0; k < kMaskWordsPerWarp; ++k) {
      const int word = w0 + k;
      if (word >= used) break;
      const uint32_t bits = w[word];  // the same address in every lane: one read
      const int t = word * 32 + lane;
      if (!((bits >> lane) & 1u) && t < vocab) row[t] = -INFINITY;
    }
  }
}

// grid: (pairs, layers, 2 caches); block: 256 threads over the tile.
template <class T>
__global__ void CopyKvBlocksKernel(KvCache<T> cache, const int32_t* src_dst) {
  const int p = blockIdx.x, layer = blockIdx.y;
  T* base = blockIdx.z ? cache.v : cache.k;
  const int64_t tile = int64_t{cache.kv_heads} * cache.block_size * cache.head_dim;
  const T* src = base + cache.Index(layer, src_dst[2 * p], 0, 0);
  T* dst = base + cache.Index(layer, src_dst[2 * p + 1], 0, 0);
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) dst[i] = src[i];
}

__device__ __forceinline__ uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <class T>
__global__ void FillUniformKernel(T* p, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(Mix(seed * 0x9e3779b97f4a7c15ULL + i) >> 40) * 0x1p-24f;
    p[i] = FromF<T>((2.f * u - 1.f) * scale);
  }
}

template <class T>
__global__ void FillConstantKernel(T* p, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = FromF<T>(value);
}

constexpr int kGridStrideBlocks = 132 * 8;  // enough to fill an H100/H200; loops cover the rest

}  // namespace

template <class T>
cudaError_t Embed(const T* table, int h, const int32_t* ids, int64_t t, float* out,
                  cudaStream_t stream) {
  if (t > 0)
    return LaunchPdl(EmbedKernel<T>, dim3(static_cast<unsigned>(t)), dim3(128), 0, stream, table, h,
                     ids, out);
  return cudaGetLastError();
}

template <class T>
cudaError_t RmsNorm(const float* x, const float* w, int64_t t, int h, float eps, T* y,
                    cudaStream_t stream) {
  if (t <= 0) return cudaGetLastError();
  // 16 floats a thread in registers: 256 threads up to h = 4,096, 512 to 8,192, 1,024 to 16,384.
  const int threads = h <= 4096 ? 256 : h <= 8192 ? 512 : 1024;
  const bool regs = h % 4 == 0 && h <= 16 * threads;
  return LaunchPdl(regs ? RmsNormRegsKernel<T> : RmsNormKernel<T>, dim3(static_cast<unsigned>(t)),
                   dim3(regs ? threads : 256), 0, stream, x, w, h, eps, y);
}

template <class T>
cudaError_t QkvRopeWriteKv(float* qkv, int64_t t, int64_t row_stride, int num_heads,
                           const float* bias, const float* q_norm, const float* k_norm, float eps,
                           const int32_t* positions, const float* cos_sin, const int32_t* slots,
                           const KvCache<T>& cache, int layer, cudaStream_t stream) {
  if (cache.head_dim % 2 || cache.head_dim > 512) return cudaErrorInvalidValue;
  const unsigned head_blocks = static_cast<unsigned>((num_heads + 2 * cache.kv_heads + 3) / 4);
  if (t > 0)
    return LaunchPdl(QkvRopeKernel<T>, dim3(static_cast<unsigned>(t), head_blocks), dim3(32, 4), 0,
                     stream, qkv, row_stride, num_heads, bias, q_norm, k_norm, eps, positions,
                     cos_sin, slots, cache, layer);
  return cudaGetLastError();
}

template <class T>
cudaError_t SiluMul(const float* gu, int64_t t, int inter, T* out, cudaStream_t stream) {
  const int64_t n = t * inter;
  if (n > 0)
    return LaunchPdl(
        SiluMulKernel<T>,
        dim3(static_cast<unsigned>(std::min<int64_t>(Blocks(n, 256), kGridStrideBlocks))),
        dim3(256), 0, stream, gu, t, inter, out);
  return cudaGetLastError();
}

cudaError_t GatherRows(const float* x, int h, const int32_t* rows, int n, float* out,
                       cudaStream_t stream) {
  if (n > 0) return LaunchPdl(GatherRowsKernel, dim3(n), dim3(128), 0, stream, x, h, rows, out);
  return cudaGetLastError();
}

cudaError_t ArgmaxRows(const float* logits, int n, int vocab, int32_t* ids, cudaStream_t stream) {
  if (n > 0) return LaunchPdl(ArgmaxKernel, dim3(n), dim3(256), 0, stream, logits, vocab, ids);
  return cudaGetLastError();
}

cudaError_t ApplyTokenBitmask(float* logits, int n, int vocab, const uint32_t* words,
                              int words_per_row, cudaStream_t stream) {
  const int used = (vocab + 31) / 32;
  if (n < 0 || vocab < 0 || words_per_row < used) return cudaErrorInvalidValue;
  if (n > 0 && vocab > 0) {
    const int per_block = (kMaskThreads / 32) * kMaskWordsPerWarp;
    const dim3 grid((used + per_block - 1) / per_block, std::min(n, 65535));
    ApplyTokenBitmaskKernel<<<grid, kMaskThreads, 0, stream>>>(logits, n, vocab, words,
                                                               words_per_row);
  }
  return cudaGetLastError();
}

template <class T>
cudaError_t CopyKvBlocks(const KvCache<T>& cache, int layers, const int32_t* src_dst, int num_pairs,
                         cudaStream_t stream) {
  if (num_pairs > 0)
    CopyKvBlocksKernel<T><<<dim3(num_pairs, layers, 2), 256, 0, stream>>>(cache, src_dst);
  return cudaGetLastError();
}

template <class T>
cudaError_t FillUniform(T* p, int64_t n, float scale, uint64_t seed, cudaStream_t stream) {
  if (n > 0)
    FillUniformKernel<T><<<std::min<int64_t>(Blocks(n, 256), kGridStrideBlocks), 256, 0, stream>>>(
        p, n, scale, seed);
  return cudaGetLastError();
}

template <class T>
cudaError_t FillConstant(T* p, int64_t n, float value, cudaStream_t stream) {
  if (n > 0)
    FillConstantKernel<T>
        <<<std::min<int64_t>(Blocks(n, 256), kGridStrideBlocks), 256, 0, stream>>>(p, n, value);
  return cudaGetLastError();
}

#define LLMQ_INSTANTIATE(T)                                                                        \
  template cudaError_t Embed<T>(const T*, int, const int32_t*, int64_t, float*, cudaStream_t);     \
  template cudaError_t RmsNorm<T>(const float*, const float*, int64_t, int, float, T*,             \
                                  cudaStream_t);                                                   \
  template cudaError_t QkvRopeWriteKv<T>(                                                          \
      float*, int64_t, int64_t, int, const float*, const float*, const float*, float,              \
      const int32_t*, const float*, const int32_t*, const KvCache<T>&, int, cudaStream_t);         \
  template cudaError_t SiluMul<T>(const float*, int64_t, int, T*, cudaStream_t);                   \
  template cudaError_t CopyKvBlocks<T>(const KvCache<T>&, int, const int32_t*, int, cudaStream_t); \
  template cudaError_t FillUniform<T>(T*, int64_t, float, uint64_t, cudaStream_t);                 \
  template cudaError_t FillConstant<T>(T*, int64_t, float, cudaStream_t);
LLMQ_INSTANTIATE(float)
LLMQ_INSTANTIATE(bf16)
#undef LLMQ_INSTANTIATE

}  // namespace llmq::kernels::cuda
