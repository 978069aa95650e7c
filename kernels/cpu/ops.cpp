#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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
// stream their rows at about the 41 GB/s one core reads (bench/RESULTS.md), so a row costs the
// bytes it reads and writes at that rate.
constexpr double kNsPerByte = 1.0 / 41;
// One query-key pair of one head dimension in attention: a K and a V float read, two FMAs.
constexpr double kAttentionNsPerProduct = 8 * kNsPerByte;

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

void WriteKv(const PagedKv& kv, const float* k_src, const float* v_src, int64_t src_stride,
             const int32_t* slots, int64_t t) {
  const int d = kv.head_dim, bs = kv.block_size;
  for (int64_t r = 0; r < t; ++r) {
    const int64_t block = slots[r] / bs, off = slots[r] % bs;
    for (int h = 0; h < kv.kv_heads; ++h) {
      float* kt = kv.k + kv.TileOffset(block, h) + off;
      const float* ks = k_src + r * src_stride + h * d;
      for (int i = 0; i < d; ++i) kt[static_cast<int64_t>(i) * bs] = ks[i];
      std::memcpy(kv.v + kv.TileOffset(block, h) + off * d, v_src + r * src_stride + h * d,
                  sizeof(float) * d);
    }
  }
}

namespace {

// scores[j] = scale * sum_i q[i] * kt[i][j] for the BS keys of one block; each score is one
// sequential FMA chain over i (lanes are keys), so it is the same whatever else is computed.
//   q: [d]   kt: [d, BS]   scores: [BS]
template <int BS>
inline void BlockScores(const float* q, const float* kt, int d, float scale, float* scores) {
  float acc[BS] = {};
  for (int i = 0; i < d; ++i) {
    const float qi = q[i];
    const float* row = kt + static_cast<int64_t>(i) * BS;
#pragma omp simd
    for (int j = 0; j < BS; ++j) acc[j] += qi * row[j];
  }
  for (int j = 0; j < BS; ++j) scores[j] = acc[j] * scale;
}

inline void BlockScoresAny(const float* q, const float* kt, int d, int bs, float scale,
                           float* scores) {
  for (int j = 0; j < bs; ++j) scores[j] = 0.f;
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < bs; ++j) scores[j] += q[i] * kt[static_cast<int64_t>(i) * bs + j];
  for (int j = 0; j < bs; ++j) scores[j] *= scale;
}

// One query head against keys 0..ctx-1 of its sequence: out[d] = softmax(scores) · V.
//   q: [d]  table: the sequence's block table  scores: scratch [ceil(ctx/bs)*bs]  out: [d]
void AttendOne(const PagedKv& kv, int head, const int32_t* table, int ctx, const float* q,
               float scale, float* scores, float* out) {
  const int d = kv.head_dim, bs = kv.block_size;
  const int nblocks = (ctx + bs - 1) / bs;
  for (int b = 0; b < nblocks; ++b) {
    const float* kt = kv.k + kv.TileOffset(table[b], head);
    if (bs == 16)
      BlockScores<16>(q, kt, d, scale, scores + b * bs);
    else
      BlockScoresAny(q, kt, d, bs, scale, scores + b * bs);
  }
  float m = -INFINITY;
  for (int j = 0; j < ctx; ++j) m = std::max(m, scores[j]);
#pragma omp simd
  for (int j = 0; j < ctx; ++j) scores[j] = Exp(scores[j] - m);
  float sum = 0.f;
  for (int j = 0; j < ctx; ++j) sum += scores[j];
  for (int i = 0; i < d; ++i) out[i] = 0.f;
  for (int b = 0; b < nblocks; ++b) {
    const float* vb = kv.v + kv.TileOffset(table[b], head);
    const int n = std::min(bs, ctx - b * bs);
    for (int j = 0; j < n; ++j) {
      const float p = scores[b * bs + j];
      const float* vr = vb + static_cast<int64_t>(j) * d;
#pragma omp simd
      for (int i = 0; i < d; ++i) out[i] += p * vr[i];
    }
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < d; ++i) out[i] *= inv;
}

}  // namespace

void PagedAttention(const AttentionBatch& b, const PagedKv& kv, const float* q, int64_t q_stride,
                    int num_heads, float scale, float* out) {
  const int d = kv.head_dim, bs = kv.block_size;
  const int group = num_heads / kv.kv_heads;
  constexpr int kQueryChunk = 32;  // splits long prefills across threads; results are unaffected
  // Tasks: (seq, kv head, chunk of query rows).
  struct Task {
    int seq, head, row_begin, row_end;
  };
  std::vector<Task> tasks;
  int64_t work = 0;  // query-key products of the step
  int max_ctx = 0;
  for (int r = 0; r < b.query_start[b.num_seqs]; ++r) {
    work += int64_t{b.positions[r] + 1} * num_heads * d;
    max_ctx = std::max(max_ctx, b.positions[r] + 1);
  }
  for (int s = 0; s < b.num_seqs; ++s)
    for (int g = 0; g < kv.kv_heads; ++g)
      for (int r = b.query_start[s]; r < b.query_start[s + 1]; r += kQueryChunk)
        tasks.push_back({s, g, r, std::min(r + kQueryChunk, b.query_start[s + 1])});

  // One piece per task (tasks differ in size: whoever is free takes the next), when the step's
  // attention pays for the barrier at all.
  const bool parallel = CpuPool().ChunksFor(static_cast<double>(work) * kAttentionNsPerProduct) > 1;
  const size_t scratch = static_cast<size_t>((max_ctx + bs - 1) / bs * bs);
  auto run = [&](int64_t ti) {
    thread_local std::vector<float> scores;
    if (scores.size() < scratch) scores.resize(scratch);
    const Task& task = tasks[ti];
    const int32_t* table = b.block_tables + static_cast<int64_t>(task.seq) * b.max_blocks;
    for (int r = task.row_begin; r < task.row_end; ++r)
      for (int hq = task.head * group; hq < (task.head + 1) * group; ++hq)
        AttendOne(kv, task.head, table, b.positions[r] + 1,
                  q + static_cast<int64_t>(r) * q_stride + static_cast<int64_t>(hq) * d, scale,
                  scores.data(),
                  out + static_cast<int64_t>(r) * num_heads * d + static_cast<int64_t>(hq) * d);
  };
  if (parallel) {
    CpuPool().Run(static_cast<int64_t>(tasks.size()), run);
  } else {
    for (size_t ti = 0; ti < tasks.size(); ++ti) run(static_cast<int64_t>(ti));
  }
}

void Embed(const float* table, int h, const int32_t* ids, int64_t t, float* out) {
  for (int64_t r = 0; r < t; ++r)
    std::memcpy(out + r * h, table + static_cast<int64_t>(ids[r]) * h, sizeof(float) * h);
}

}  // namespace llmq::kernels
