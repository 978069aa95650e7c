#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_math.h"

namespace llmq::kernels {
namespace {

// Fixed-order dot product: 8 independent lane sums combined in a fixed tree, then the tail. The
// order depends only on n, never on alignment or the batch, so a query's scores are batch-invariant
// (an `omp simd reduction` could peel for alignment and change the order with the address).
inline float Dot(const float* a, const float* b, int n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[i + l] * b[i + l];
  float s =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Serial cost of the ops, for the pool to weigh against its measured barrier (ParallelFor): they
// stream their rows, so a row costs the bytes it reads and writes at one core's read rate.
constexpr double kNsPerByte = kNsPerStreamedByte;

// y = x / sqrt(mean(x^2) + eps) * w over one row.   x, y: [n] (may alias); w: [n].
inline void RmsNormRow(const float* x, const float* w, int n, float eps, float* y) {
  const float ss = Dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] = w[i] * (x[i] * inv);
}

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t t, int h, float eps, float* y) {
  ParallelFor(t, 12.0 * h * kNsPerByte, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) RmsNormRow(x + r * h, w, h, eps, y + r * h);
  });
}

void HeadRmsNorm(float* x, int64_t t, int64_t row_stride, int num_heads, int head_dim,
                 const float* w, float eps) {
  ParallelFor(t, 12.0 * num_heads * head_dim * kNsPerByte, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
        RmsNormRow(v, w, head_dim, eps, v);
      }
  });
}

void AddBias(float* x, int64_t t, int64_t row_stride, const float* bias, int n) {
  ParallelFor(t, 12.0 * n * kNsPerByte, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * row_stride;
#pragma omp simd
      for (int i = 0; i < n; ++i) xr[i] += bias[i];
    }
  });
}

void Rope(float* x, int64_t t, int64_t row_stride, int num_heads, int head_dim,
          const int32_t* positions, const float* cos_sin) {
  const int half = head_dim / 2;
  ParallelFor(t, 12.0 * num_heads * head_dim * kNsPerByte, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* cs = cos_sin + static_cast<int64_t>(positions[r]) * head_dim;
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half], c = cs[i], s = cs[half + i];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  });
}

void SiluMul(const float* gu, int64_t t, int inter, float* out) {
  ParallelFor(t, 12.0 * inter * kNsPerByte, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = gu + r * 2 * inter;
      const float* u = g + inter;
      float* o = out + r * inter;
#pragma omp simd
      for (int i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + Exp(-g[i])) * u[i];
    }
  });
}

void AddInPlace(float* x, const float* y, int64_t n) {
  ParallelFor(n, 12.0 * kNsPerByte, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

void ApplyTokenBitmask(float* logits, int64_t rows, int vocab, const uint32_t* words,
                       int words_per_row) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  ParallelFor(rows, vocab * 4.0 * kNsPerByte, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = logits + r * vocab;
      const uint32_t* w = words + r * words_per_row;
      for (int t = 0; t < vocab; t += 32) {
        const uint32_t bits = w[t >> 5];
        if (bits == ~0u) continue;
        const int end = std::min(vocab, t + 32);
        if (bits == 0) {  // most words of a mask between JSON values: a plain fill
          std::fill(row + t, row + end, kNegInf);
          continue;
        }
        for (int i = t; i < end; ++i) row[i] = (bits >> (i - t)) & 1u ? row[i] : kNegInf;
      }
    }
  });
}

void Embed(const float* table, int h, const int32_t* ids, int64_t t, float* out) {
  for (int64_t r = 0; r < t; ++r)
    std::memcpy(out + r * h, table + static_cast<int64_t>(ids[r]) * h, sizeof(float) * h);
}

}  // namespace llmq::kernels
