// PagedAttention: the step cut into tasks, the ISA chosen once per call, the AVX2 instance of the
// vector kernel (attention_tile.h) and the scalar one. Built with -ffp-contract=off (see
// cmake/llmq_numerics.cmake): every fused multiply-add is written out.
#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_task.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq::kernels {
namespace internal {
namespace {

// AVX2: a 16-float vector is two ymm.
struct Avx2 {
  struct Vec {
    __m256 lo, hi;
  };
  static constexpr int kRegs = 16, kWidth = 2;
  static constexpr int kQkMaxM = 6;  // score tile: 6 pairs x 16 keys = 12 ymm accumulators
  static constexpr int kPvDV = 1, kPvMaxM = 6;  // value tile: 6 pairs x 16 dims
  static Vec Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec Load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static __m256 Widen(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static Vec LoadBf16(const uint16_t* p) {
    return {Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static void Store(float* p, Vec a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
  static Vec Bcast(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static Vec Fma(Vec a, Vec b, Vec c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec Mul(Vec a, Vec b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static Vec Add(Vec a, Vec b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static Vec Sub(Vec a, Vec b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  static Vec Max(Vec a, Vec b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  static Vec Min(Vec a, Vec b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
  static __m256 Pow2(__m256 n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static Vec Pow2(Vec n) { return {Pow2(n.lo), Pow2(n.hi)}; }
};

#include "kernels/cpu/attention_tile.h"

}  // namespace

void AttendAvx2(const AttendTask& t) {
  AttendOn<Avx2>(t);
}

// The arithmetic of attention.h written plainly, one pair at a time (any block size and head
// dim; the vector kernels must match it bit for bit).
void AttendScalar(const AttendTask& t) {
  const int d = t.head_dim, bs = t.block_size;
  for (int k = 0; k < t.num_rows * t.group; ++k) {
    const int32_t* table = t.tables[k / t.group];
    const int ctx = t.ctx[k / t.group];
    const float* q = PairQ(t, k);
    float* s = PairScores(t, k);
    float* o = PairOut(t, k);
    auto tile = [&](int j) { return static_cast<int64_t>(table[j / bs]) * bs * d; };
    // The cache's element e of the tile at `at`, as fp32 (a bf16 one widened, exactly).
    auto k_at = [&](int64_t at) { return t.k16 ? Bf16ToFloat(t.k16[at]) : t.k[at]; };
    auto v_at = [&](int64_t at) { return t.v16 ? Bf16ToFloat(t.v16[at]) : t.v[at]; };
    for (int j = 0; j < ctx; ++j) {
      const int64_t kt = tile(j) + j % bs;  // K[j][i] at kt + i * bs
      float c = 0.0f;
      for (int i = 0; i < d; ++i) c = std::fma(q[i], k_at(kt + static_cast<int64_t>(i) * bs), c);
      s[j] = c * t.scale;
    }
    float m = -INFINITY;
    for (int j = 0; j < ctx; ++j) m = s[j] > m ? s[j] : m;
    float lanes[16] = {};
    for (int j = 0; j < ctx; ++j) {
      s[j] = ExpScalar(s[j] - m);
      lanes[j % 16] += s[j];
    }
    for (int w = 8; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
    std::fill(o, o + d, 0.0f);
    for (int j = 0; j < ctx; ++j) {
      const int64_t vr = tile(j) + static_cast<int64_t>(j % bs) * d;
      for (int i = 0; i < d; ++i) o[i] = std::fma(s[j], v_at(vr + i), o[i]);
    }
    const float inv = 1.0f / lanes[0];
    for (int i = 0; i < d; ++i) o[i] *= inv;
  }
}

}  // namespace internal

namespace {

// One query-key pair of one head dimension, for the pool's choice to split a step at all: about
// 8 bytes of K and V streamed.
constexpr double kAttentionNsPerProduct = 8 * kNsPerStreamedByte;
// One K float scattered to its own cache line and one V float streamed, per row and head dim.
constexpr double kWriteNsPerFloat = 1.0;
// Rows of one sequence's prefill per task: its keys are read once per this many rows.
constexpr int kPrefillRows = kAttentionGroupRows;

}  // namespace

void WriteKv(const PagedKv& kv, const float* k_src, const float* v_src, int64_t src_stride,
             const int32_t* slots, int64_t t) {
  const int d = kv.head_dim, bs = kv.block_size;
  // Rows write disjoint slots; a row's K is a scatter (one float per 64-byte line of its tile).
  ParallelFor(t, kv.kv_heads * d * kWriteNsPerFloat, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t block = slots[r] / bs, off = slots[r] % bs;
      for (int h = 0; h < kv.kv_heads; ++h) {
        const float* ks = k_src + r * src_stride + h * d;
        const float* vs = v_src + r * src_stride + h * d;
        if (kv.bf16()) {
          uint16_t* kt = kv.k16 + kv.TileOffset(block, h) + off;
          uint16_t* vt = kv.v16 + kv.TileOffset(block, h) + off * d;
          for (int i = 0; i < d; ++i) kt[static_cast<int64_t>(i) * bs] = FloatToBf16(ks[i]);
          for (int i = 0; i < d; ++i) vt[i] = FloatToBf16(vs[i]);
          continue;
        }
        float* kt = kv.k + kv.TileOffset(block, h) + off;
        for (int i = 0; i < d; ++i) kt[static_cast<int64_t>(i) * bs] = ks[i];
        std::memcpy(kv.v + kv.TileOffset(block, h) + off * d, vs, sizeof(float) * d);
      }
    }
  });
}

void PagedAttention(const AttentionBatch& b, const PagedKv& kv, const float* q, int64_t q_stride,
                    int num_heads, float scale, float* out) {
  using internal::AttendTask;
  const int d = kv.head_dim, bs = kv.block_size;
  const int group = num_heads / kv.kv_heads;
  const int num_rows = b.query_start[b.num_seqs];
  if (num_rows == 0) return;
  // Tasks: (kv head, rows [row_begin, row_end)) of one sequence, or of the sequences of one
  // prefix group whose tables begin with `common` shared blocks.
  struct Task {
    int head, row_begin, row_end, common;
  };
  std::vector<Task> tasks;
  int64_t work = 0;  // query-key products of the step
  int max_ctx = 0;
  for (int r = 0; r < num_rows; ++r) {
    work += int64_t{b.positions[r] + 1} * num_heads * d;
    max_ctx = std::max(max_ctx, b.positions[r] + 1);
  }
  std::vector<int32_t> row_seq(num_rows);  // the sequence of each row
  for (int s = 0; s < b.num_seqs; ++s)
    for (int r = b.query_start[s]; r < b.query_start[s + 1]; ++r) row_seq[r] = s;
  int max_task_rows = 1;
  auto add = [&](int r0, int r1, int rows_per_task, int common) {
    for (int h = 0; h < kv.kv_heads; ++h)
      for (int r = r0; r < r1; r += rows_per_task)
        tasks.push_back({h, r, std::min(r + rows_per_task, r1), common});
    max_task_rows = std::max(max_task_rows, std::min(rows_per_task, r1 - r0));
  };
  for (int s = 0, gi = 0; s < b.num_seqs;) {
    if (gi < b.num_groups && b.groups[gi].first_seq == s) {
      const SharedPrefix& g = b.groups[gi++];
      add(b.query_start[s], b.query_start[s + g.num_seqs], kAttentionGroupRows, g.num_blocks);
      s += g.num_seqs;
    } else {
      add(b.query_start[s], b.query_start[s + 1], kPrefillRows, 0);
      ++s;
    }
  }

  // The kernel, once for the call: the vector kernels take 16-key chunks and 16-dim slices.
  void (*attend)(const AttendTask&) = &internal::AttendScalar;
  if (bs % 16 == 0 && d % 16 == 0) {
    if (ActiveGemmIsa() == GemmIsa::kAvx512) attend = &internal::AttendAvx512;
    if (ActiveGemmIsa() == GemmIsa::kAvx2) attend = &internal::AttendAvx2;
  }
  const int64_t unit = std::max(16, bs);
  const int64_t stride = (max_ctx + unit - 1) / unit * unit;  // one pair's scores
  const size_t pairs = static_cast<size_t>(max_task_rows) * group;
  auto run = [&](int64_t ti) {
    thread_local std::vector<float> scratch;
    thread_local std::vector<int32_t> rows, ctx;
    thread_local std::vector<const int32_t*> tables;
    if (scratch.size() < pairs * (stride + 1)) scratch.resize(pairs * (stride + 1));
    const Task& task = tasks[ti];
    rows.clear();
    ctx.clear();
    tables.clear();
    for (int r = task.row_begin; r < task.row_end; ++r) {
      rows.push_back(r);
      ctx.push_back(b.positions[r] + 1);
      tables.push_back(b.block_tables + static_cast<int64_t>(row_seq[r]) * b.max_blocks);
    }
    const int64_t head_at = kv.TileOffset(0, task.head);  // the head's tiles in the layer's cache
    const AttendTask t{kv.k ? kv.k + head_at : nullptr,
                       kv.v ? kv.v + head_at : nullptr,
                       kv.k16 ? kv.k16 + head_at : nullptr,
                       kv.v16 ? kv.v16 + head_at : nullptr,
                       bs,
                       d,
                       task.head,
                       group,
                       q,
                       q_stride,
                       out,
                       num_heads,
                       scale,
                       static_cast<int>(rows.size()),
                       rows.data(),
                       tables.data(),
                       ctx.data(),
                       task.common,
                       scratch.data(),
                       stride,
                       scratch.data() + pairs * stride};
    attend(t);
  };
  // One piece per task (tasks differ in size: whoever is free takes the next), when the step's
  // attention pays for the barrier at all.
  if (CpuPool().ChunksFor(static_cast<double>(work) * kAttentionNsPerProduct) > 1) {
    CpuPool().Run(static_cast<int64_t>(tasks.size()), run);
  } else {
    for (size_t ti = 0; ti < tasks.size(); ++ti) run(static_cast<int64_t>(ti));
  }
}

}  // namespace llmq::kernels
