#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

// BlockScores<BS> for P (query, block) pairs at once: scores[p] from q[p] and kt[p]. Each score is
// still its own sequential FMA chain over i, exactly as in BlockScores (so the same bits); the P
// chains are interleaved so that the FMA latency is hidden (one chain pair alone waits on it).
template <int BS, int P>
inline void BlockScoresN(const float* const* q, const float* const* kt, int d, float scale,
                         float* const* scores) {
  float acc[P][BS] = {};
  for (int i = 0; i < d; ++i)
    for (int p = 0; p < P; ++p) {
      const float qi = q[p][i];
      const float* row = kt[p] + static_cast<int64_t>(i) * BS;
#pragma omp simd
      for (int j = 0; j < BS; ++j) acc[p][j] += qi * row[j];
    }
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < BS; ++j) scores[p][j] = acc[p][j] * scale;
}

inline void BlockScoresAny(const float* q, const float* kt, int d, int bs, float scale,
                           float* scores) {
  for (int j = 0; j < bs; ++j) scores[j] = 0.f;
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < bs; ++j) scores[j] += q[i] * kt[static_cast<int64_t>(i) * bs + j];
  for (int j = 0; j < bs; ++j) scores[j] *= scale;
}

// The three pieces of one query head's attention (AttendOne), shared by the grouped path so that
// both run the very same arithmetic in the same order:
// scores of one block of keys (ScoreBlock), the softmax over a row's whole score vector
// (Softmax) and the probability-weighted sum of one block of values (AccumulateBlock).
inline void ScoreBlock(const PagedKv& kv, int head, int32_t block, const float* q, float scale,
                       float* scores) {
  const float* kt = kv.k + kv.TileOffset(block, head);
  if (kv.block_size == 16)
    BlockScores<16>(q, kt, kv.head_dim, scale, scores);
  else
    BlockScoresAny(q, kt, kv.head_dim, kv.block_size, scale, scores);
}

// ScoreBlock for n (query, block) pairs: q[p] against block[p], into scores[p]; four at a time
// when the block size is 16.
inline void ScoreBlocks(const PagedKv& kv, int head, int n, const float* const* q,
                        const int32_t* block, float scale, float* const* scores) {
  int p = 0;
  if (kv.block_size == 16)
    for (; p + 4 <= n; p += 4) {
      const float* kt[4];
      for (int t = 0; t < 4; ++t) kt[t] = kv.k + kv.TileOffset(block[p + t], head);
      BlockScoresN<16, 4>(q + p, kt, kv.head_dim, scale, scores + p);
    }
  for (; p < n; ++p) ScoreBlock(kv, head, block[p], q[p], scale, scores[p]);
}

// scores[j] = exp(scores[j] - max) for j < ctx; returns their sum (summed in order of j).
inline float Softmax(float* scores, int ctx) {
  float m = -INFINITY;
  for (int j = 0; j < ctx; ++j) m = std::max(m, scores[j]);
#pragma omp simd
  for (int j = 0; j < ctx; ++j) scores[j] = Exp(scores[j] - m);
  float sum = 0.f;
  for (int j = 0; j < ctx; ++j) sum += scores[j];
  return sum;
}

// out[i] += p[j] * V[j][i] for the first n keys of one block, in order of j. Head dims of 64 and
// 128 keep out in registers over the block (the same operations in the same order).
template <int D>
inline void AccumulateRows(const float* vb, int n, const float* p, float* out) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (D == 64) {  // the loop below with its accumulators pinned to registers
    __m256 acc[8];
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_loadu_ps(out + 8 * k);
    for (int j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* vr = vb + static_cast<int64_t>(j) * D;
      for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8 * k), acc[k]);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + 8 * k, acc[k]);
    return;
  }
#endif
  float acc[D];
  for (int i = 0; i < D; ++i) acc[i] = out[i];
  for (int j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vr = vb + static_cast<int64_t>(j) * D;
#pragma omp simd
    for (int i = 0; i < D; ++i) acc[i] += pj * vr[i];
  }
  for (int i = 0; i < D; ++i) out[i] = acc[i];
}

inline void AccumulateBlock(const PagedKv& kv, int head, int32_t block, int n, const float* p,
                            float* out) {
  const int d = kv.head_dim;
  const float* vb = kv.v + kv.TileOffset(block, head);
  if (d == 64) return AccumulateRows<64>(vb, n, p, out);
  if (d == 128) return AccumulateRows<128>(vb, n, p, out);
  for (int j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vr = vb + static_cast<int64_t>(j) * d;
#pragma omp simd
    for (int i = 0; i < d; ++i) out[i] += pj * vr[i];
  }
}

inline void Scale(float* out, int d, float sum) {
  const float inv = 1.0f / sum;
  for (int i = 0; i < d; ++i) out[i] *= inv;
}

// Scores of one query against blocks [from, to) of its table, into scores + b * block_size.
inline void OwnScores(const PagedKv& kv, int head, const int32_t* table, int from, int to,
                      const float* q, float scale, float* scores) {
  const float* qs[4] = {q, q, q, q};
  for (int b = from; b < to; b += 4) {
    const int n = std::min(4, to - b);
    float* out[4];
    for (int t = 0; t < n; ++t) out[t] = scores + (b + t) * kv.block_size;
    ScoreBlocks(kv, head, n, qs, table + b, scale, out);
  }
}

// One query head against keys 0..ctx-1 of its sequence: out[d] = softmax(scores) · V.
//   q: [d]  table: the sequence's block table  scores: scratch [ceil(ctx/bs)*bs]  out: [d]
void AttendOne(const PagedKv& kv, int head, const int32_t* table, int ctx, const float* q,
               float scale, float* scores, float* out) {
  const int d = kv.head_dim, bs = kv.block_size;
  const int nblocks = (ctx + bs - 1) / bs;
  OwnScores(kv, head, table, 0, nblocks, q, scale, scores);
  const float sum = Softmax(scores, ctx);
  for (int i = 0; i < d; ++i) out[i] = 0.f;
  for (int b = 0; b < nblocks; ++b)
    AccumulateBlock(kv, head, table[b], std::min(bs, ctx - b * bs), scores + b * bs, out);
  Scale(out, d, sum);
}

// AttendOne for every query head of kv head `head` and every row of `rows` (rows of the sequences
// of one prefix group, all of which begin with the same `shared` blocks `table0[0, shared)`), as a
// loop interchange: each shared block's K tile, then its V tile, is read once for all of them,
// and each (row, head) pair's own blocks follow. Every pair's scores, softmax and sum over values
// are the same operations in the same order as AttendOne's, so the outputs are bit-identical.
//   scores: scratch [rows.size() * group * stride]
struct GroupRow {
  const int32_t* table;  // the row's sequence's block table
  int row;               // query row in the step
};
void AttendGroup(const PagedKv& kv, int head, int group, const int32_t* table0, int shared,
                 const std::vector<GroupRow>& rows, const int32_t* positions, const float* q,
                 int64_t q_stride, int num_heads, float scale, int64_t stride, float* scores,
                 float* out) {
  const int d = kv.head_dim, bs = kv.block_size;
  const int n = static_cast<int>(rows.size()) * group;
  auto pair = [&](int k, const float** qp, float** op, float** sp, int* ctx) {
    const int r = rows[k / group].row, hq = head * group + k % group;
    *qp = q + static_cast<int64_t>(r) * q_stride + static_cast<int64_t>(hq) * d;
    *op = out + (static_cast<int64_t>(r) * num_heads + hq) * d;
    *sp = scores + k * stride;
    *ctx = positions[r] + 1;
  };
  const float* qp;
  float *op, *sp;
  int ctx;
  for (int b = 0; b < shared; ++b)  // the shared keys: one K tile for all pairs, 4 at a time
    for (int k0 = 0; k0 < n; k0 += 4) {
      const int m = std::min(4, n - k0);
      const float* qs[4];
      float* outs[4];
      const int32_t blocks[4] = {table0[b], table0[b], table0[b], table0[b]};
      for (int t = 0; t < m; ++t) {
        pair(k0 + t, &qp, &op, &sp, &ctx);
        qs[t] = qp;
        outs[t] = sp + b * bs;
      }
      ScoreBlocks(kv, head, m, qs, blocks, scale, outs);
    }
  thread_local std::vector<float> sums;
  sums.resize(n);
  for (int k = 0; k < n; ++k) {  // each pair's own keys, then its softmax
    pair(k, &qp, &op, &sp, &ctx);
    OwnScores(kv, head, rows[k / group].table, shared, (ctx + bs - 1) / bs, qp, scale, sp);
    sums[k] = Softmax(sp, ctx);
    for (int i = 0; i < d; ++i) op[i] = 0.f;
  }
  for (int b = 0; b < shared; ++b)  // the shared values: one V tile for all pairs
    for (int k = 0; k < n; ++k) {
      pair(k, &qp, &op, &sp, &ctx);
      AccumulateBlock(kv, head, table0[b], bs, sp + b * bs, op);
    }
  for (int k = 0; k < n; ++k) {  // each pair's own values
    pair(k, &qp, &op, &sp, &ctx);
    const int32_t* table = rows[k / group].table;
    for (int b = shared; b < (ctx + bs - 1) / bs; ++b)
      AccumulateBlock(kv, head, table[b], std::min(bs, ctx - b * bs), sp + b * bs, op);
    Scale(op, d, sums[k]);
  }
}

}  // namespace

void PagedAttention(const AttentionBatch& b, const PagedKv& kv, const float* q, int64_t q_stride,
                    int num_heads, float scale, float* out) {
  const int d = kv.head_dim, bs = kv.block_size;
  const int group = num_heads / kv.kv_heads;
  constexpr int kQueryChunk = 32;  // splits long prefills across threads; results are unaffected
  // Rows of a prefix group per task: the group's shared blocks are read once per this many rows
  // (and kv head); more rows save more reads, fewer give the pool more pieces.
  constexpr int kGroupRows = kAttentionGroupRows;
  // Tasks: (kv head, rows [row_begin, row_end)) of one sequence or of the sequences of one prefix
  // group; shared > 0: the blocks all of them begin with, wholly before their first row (the
  // group's, or a prefill chunk's own earlier blocks), from the table of sequence `seq`.
  struct Task {
    int seq, head, row_begin, row_end, shared;
  };
  std::vector<Task> tasks;
  int64_t work = 0;  // query-key products of the step
  int max_ctx = 0;
  for (int r = 0; r < b.query_start[b.num_seqs]; ++r) {
    work += int64_t{b.positions[r] + 1} * num_heads * d;
    max_ctx = std::max(max_ctx, b.positions[r] + 1);
  }
  std::vector<int32_t> row_seq(b.query_start[b.num_seqs]);  // the sequence of each row
  for (int s = 0; s < b.num_seqs; ++s)
    for (int r = b.query_start[s]; r < b.query_start[s + 1]; ++r) row_seq[r] = s;
  int max_group_rows = 0;
  for (int s = 0, gi = 0; s < b.num_seqs;) {
    if (gi < b.num_groups && b.groups[gi].first_seq == s) {
      const SharedPrefix& g = b.groups[gi++];
      const int r0 = b.query_start[s], r1 = b.query_start[s + g.num_seqs];
      for (int h = 0; h < kv.kv_heads; ++h)
        for (int r = r0; r < r1; r += kGroupRows)
          tasks.push_back({s, h, r, std::min(r + kGroupRows, r1), g.num_blocks});
      max_group_rows = std::max(max_group_rows, std::min(kGroupRows, r1 - r0));
      s += g.num_seqs;
      continue;
    }
    // A chunk of several prefill rows shares the blocks wholly before its first row: the same
    // loop interchange reads each of them once for the chunk.
    for (int h = 0; h < kv.kv_heads; ++h)
      for (int r = b.query_start[s]; r < b.query_start[s + 1]; r += kQueryChunk) {
        const int end = std::min(r + kQueryChunk, b.query_start[s + 1]);
        const int before = end - r > 1 ? b.positions[r] / bs : 0;
        tasks.push_back({s, h, r, end, before});
        if (before > 0) max_group_rows = std::max(max_group_rows, end - r);
      }
    ++s;
  }

  // One piece per task (tasks differ in size: whoever is free takes the next), when the step's
  // attention pays for the barrier at all.
  const bool parallel = CpuPool().ChunksFor(static_cast<double>(work) * kAttentionNsPerProduct) > 1;
  const int64_t stride = (max_ctx + bs - 1) / bs * bs;  // one (row, head) pair's scores
  const size_t scratch = static_cast<size_t>(stride) * std::max(1, max_group_rows * group);
  auto run = [&](int64_t ti) {
    thread_local std::vector<float> scores;
    thread_local std::vector<GroupRow> rows;
    if (scores.size() < scratch) scores.resize(scratch);
    const Task& task = tasks[ti];
    const int32_t* table = b.block_tables + static_cast<int64_t>(task.seq) * b.max_blocks;
    if (task.shared > 0) {
      rows.clear();
      for (int r = task.row_begin; r < task.row_end; ++r)
        rows.push_back({b.block_tables + static_cast<int64_t>(row_seq[r]) * b.max_blocks, r});
      AttendGroup(kv, task.head, group, table, task.shared, rows, b.positions, q, q_stride,
                  num_heads, scale, stride, scores.data(), out);
      return;
    }
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
