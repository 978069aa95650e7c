// Each CUDA kernel against its CPU counterpart (kernels/cpu) on fresh random inputs of several
// shapes, in float and bf16, with outputs poisoned (NaN) before the run. Skipped without a GPU.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <type_traits>

#include "engine/sampling/sampler.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_tuned.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/prefill_attention.h"
#include "tests/gpu/gpu_test_util.h"

namespace llmq {
namespace {

namespace kc = kernels::cuda;
using gputest::DevArray;
using gputest::DevInts;
using gputest::Random;
using gputest::RelErr;
using gputest::RoundBf16;
using kc::bf16;

// What the device sees of float inputs stored as T.
template <class T>
std::vector<float> AsStored(std::vector<float> v) {
  return std::is_same_v<T, float> ? v : RoundBf16(std::move(v));
}

// y[r, c] = (y0[r, c] +) sum_i x[r, i] * w[c, i], in double.   x: [t, k]; w: [n, k]
std::vector<float> Product(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>* y0, int t, int k, int n) {
  std::vector<float> y(size_t(t) * n);
  for (int r = 0; r < t; ++r)
    for (int c = 0; c < n; ++c) {
      double sum = y0 ? (*y0)[size_t(r) * n + c] : 0.0;
      for (int i = 0; i < k; ++i) sum += double(x[size_t(r) * k + i]) * w[size_t(c) * k + i];
      y[size_t(r) * n + c] = float(sum);
    }
  return y;
}

template <class T>
class CudaKernels : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaKernels, Types);

TYPED_TEST(CudaKernels, EmbedGathersRows) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  for (int h : {8, 40, 4096}) {
    const int V = 97, n = 13;
    const auto table = AsStored<T>(Random(size_t(V) * h, 1 + h));
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = (i * 37 + 5) % V;
    DevArray<T> dt(table);
    DevInts di(ids);
    DevArray<float> out(size_t(n) * h);
    ASSERT_EQ(kc::Embed<T>(dt.p, h, di.p, n, out.p, nullptr), cudaSuccess);
    std::vector<float> want(size_t(n) * h);
    kernels::Embed(table.data(), h, ids.data(), n, want.data());
    EXPECT_EQ(out.Get(), want) << "h " << h;
  }
}

TYPED_TEST(CudaKernels, RmsNormMatchesCpu) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  // The register kernel at 256, 512 and 1,024 threads (h a multiple of 4, up to 16,384), the
  // plain one elsewhere (6, 16,388).
  for (int h : {6, 8, 40, 1000, 4096, 5120, 12288, 16388}) {
    const int n = 9;
    const auto x = Random(size_t(n) * h, 10 + h, -3.f, 3.f);
    const auto w = Random(h, 20 + h, 0.5f, 1.5f);
    DevArray<float> dx(x), dw(w);
    DevArray<T> y(size_t(n) * h);
    ASSERT_EQ(kc::RmsNorm<T>(dx.p, dw.p, n, h, 1e-5f, y.p, nullptr), cudaSuccess);
    std::vector<float> want(size_t(n) * h);
    kernels::RmsNorm(x.data(), w.data(), n, h, 1e-5f, want.data());
    EXPECT_LE(RelErr(y.Get(), want), gputest::Tol<T>()) << "h " << h;
  }
}

TYPED_TEST(CudaKernels, SiluMulMatchesCpu) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  for (int inter : {1, 172, 14336}) {
    const int n = 5;
    const auto gu = Random(size_t(n) * 2 * inter, 30 + inter, -6.f, 6.f);
    DevArray<float> dgu(gu);
    DevArray<T> out(size_t(n) * inter);
    ASSERT_EQ(kc::SiluMul<T>(dgu.p, n, inter, out.p, nullptr), cudaSuccess);
    std::vector<float> want(size_t(n) * inter);
    kernels::SiluMul(gu.data(), n, inter, want.data());
    EXPECT_LE(RelErr(out.Get(), want), gputest::Tol<T>()) << "inter " << inter;
  }
}

struct QkvShape {
  int nh, nkv, d;
  bool bias, norm;
};

// Bias, per-head norms and rotary on q (in place) and k, and the K/V writes to their slots, against
// the CPU's AddBias, HeadRmsNorm, Rope and the rows it would write.
TYPED_TEST(CudaKernels, QkvRopeWriteKvMatchesCpu) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  for (const QkvShape s : {QkvShape{8, 4, 8, false, false}, QkvShape{4, 1, 64, true, true},
                           QkvShape{32, 8, 128, false, false}, QkvShape{16, 8, 256, true, false},
                           QkvShape{16, 2, 128, false, true}}) {
    const int n = 11, bs = 16, blocks = 8, max_pos = 300, D = s.d;
    const int qd = s.nh * D, kvd = s.nkv * D, row = qd + 2 * kvd + 3;  // padded row stride
    const auto qkv = Random(size_t(n) * row, 40 + D);
    const auto bias = Random(qd + 2 * kvd, 41 + D);
    const auto qn = Random(D, 42, 0.5f, 1.5f), kn = Random(D, 43, 0.5f, 1.5f);
    std::vector<float> cs(size_t(max_pos) * D);
    for (int p = 0; p < max_pos; ++p)
      for (int i = 0; i < D / 2; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / D);
        cs[size_t(p) * D + i] = float(std::cos(a));
        cs[size_t(p) * D + D / 2 + i] = float(std::sin(a));
      }
    std::vector<int32_t> pos(n), slots(n);
    for (int t = 0; t < n; ++t) {
      pos[t] = (t * 53 + 7) % max_pos;
      slots[t] = t == 4 ? -1 : (t * 29 + 3) % (bs * blocks);  // distinct; one writes nothing
    }
    // CPU: the same steps on a copy.
    std::vector<float> want = qkv;
    if (s.bias) kernels::AddBias(want.data(), n, row, bias.data(), qd + 2 * kvd);
    if (s.norm) {
      kernels::HeadRmsNorm(want.data(), n, row, s.nh, D, qn.data(), 1e-6f);
      kernels::HeadRmsNorm(want.data() + qd, n, row, s.nkv, D, kn.data(), 1e-6f);
    }
    kernels::Rope(want.data(), n, row, s.nh, D, pos.data(), cs.data());
    kernels::Rope(want.data() + qd, n, row, s.nkv, D, pos.data(), cs.data());

    const int layers = 2, layer = 1;
    kc::KvCache<T> cache;
    cache.num_blocks = blocks;
    cache.block_size = bs;
    cache.kv_heads = s.nkv;
    cache.head_dim = D;
    DevArray<T> k(layers * cache.LayerElems()), v(layers * cache.LayerElems());
    cache.k = k.p;
    cache.v = v.p;
    DevArray<float> dqkv(qkv), dbias(bias), dqn(qn), dkn(kn), dcs(cs);
    DevInts dpos(pos), dslots(slots);
    ASSERT_EQ(kc::QkvRopeWriteKv<T>(dqkv.p, n, row, s.nh, s.bias ? dbias.p : nullptr,
                                    s.norm ? dqn.p : nullptr, s.norm ? dkn.p : nullptr, 1e-6f,
                                    dpos.p, dcs.p, dslots.p, cache, layer, nullptr),
              cudaSuccess);
    const std::vector<float> got = dqkv.Get(), gk = k.Get(), gv = v.Get();
    std::vector<float> q_got, q_want, k_got, k_want, v_got, v_want;
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < qd; ++i) {
        q_got.push_back(got[size_t(t) * row + i]);
        q_want.push_back(want[size_t(t) * row + i]);
      }
      if (slots[t] < 0) continue;
      for (int h = 0; h < s.nkv; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t at = cache.Index(layer, slots[t] / bs, h, slots[t] % bs) + d;
          k_got.push_back(gk[at]);
          v_got.push_back(gv[at]);
          k_want.push_back(want[size_t(t) * row + qd + h * D + d]);
          v_want.push_back(want[size_t(t) * row + qd + kvd + h * D + d]);
        }
    }
    EXPECT_LE(RelErr(q_got, q_want), gputest::kF32Tol) << "q, head_dim " << D;
    EXPECT_LE(RelErr(k_got, k_want), gputest::Tol<T>()) << "k, head_dim " << D;
    EXPECT_LE(RelErr(v_got, v_want), gputest::Tol<T>()) << "v, head_dim " << D;
    // Layer 0 and the unwritten slots stay poisoned: the kernel wrote nothing else.
    const std::vector<float> k0(gk.begin(), gk.begin() + cache.LayerElems());
    EXPECT_TRUE(std::all_of(k0.begin(), k0.end(), [](float f) { return std::isnan(f); }));
  }
}

struct AttnShape {
  int nh, nkv, d;
};

// Paged causal attention over shuffled physical blocks: a decode row, prefill chunks with cached
// prefixes and a fresh prompt, at several context splits, against kernels::PagedAttention.
TYPED_TEST(CudaKernels, PagedAttentionMatchesCpu) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  for (const AttnShape s :
       {AttnShape{8, 4, 8}, AttnShape{32, 8, 128}, AttnShape{12, 1, 64}, AttnShape{4, 4, 256},
        AttnShape{6, 2, 40}, AttnShape{4, 2, 64}, AttnShape{8, 8, 128}}) {
    const int bs = 16, D = s.d, kvd = s.nkv * D;
    // Per sequence: context length after the step, and query rows (the last q of the context).
    const std::vector<int> ctx = {1, 17, 300, 129, 1000}, qlen = {1, 17, 5, 1, 2};
    const int S = static_cast<int>(ctx.size());
    int max_blocks = 0, total_blocks = 0;
    for (int c : ctx) {
      max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
      total_blocks += (c + bs - 1) / bs;
    }
    const int num_blocks = total_blocks + 3;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(7 + D));
    std::vector<int32_t> tables(size_t(S) * max_blocks, -1), positions, row_seq, query_start{0};
    int next = 0;
    for (int sq = 0; sq < S; ++sq) {
      for (int b = 0; b < (ctx[sq] + bs - 1) / bs; ++b) tables[sq * max_blocks + b] = perm[next++];
      for (int p = ctx[sq] - qlen[sq]; p < ctx[sq]; ++p) {
        positions.push_back(p);
        row_seq.push_back(sq);
      }
      query_start.push_back(static_cast<int>(positions.size()));
    }
    const int T_rows = static_cast<int>(positions.size());
    const int64_t q_stride = int64_t{s.nh} * D + 5;
    const auto q = Random(size_t(T_rows) * q_stride, 50 + D);
    // K/V of every token of every sequence, as stored (T), in both layouts.
    kc::KvCache<T> cache;
    cache.num_blocks = num_blocks;
    cache.block_size = bs;
    cache.kv_heads = s.nkv;
    cache.head_dim = D;
    std::vector<float> gk(cache.LayerElems()), gv(cache.LayerElems());
    std::vector<float> ck(cache.LayerElems()), cv(cache.LayerElems());
    kernels::PagedKv cpu{ck.data(), cv.data(), bs, s.nkv, D, num_blocks};
    for (int sq = 0; sq < S; ++sq) {
      const auto kr = AsStored<T>(Random(size_t(ctx[sq]) * kvd, 60 + sq * 7 + D));
      const auto vr = AsStored<T>(Random(size_t(ctx[sq]) * kvd, 61 + sq * 7 + D));
      std::vector<int32_t> slot(ctx[sq]);
      for (int p = 0; p < ctx[sq]; ++p) {
        slot[p] = tables[sq * max_blocks + p / bs] * bs + p % bs;
        for (int h = 0; h < s.nkv; ++h)
          for (int d = 0; d < D; ++d) {
            const int64_t at = cache.Index(0, slot[p] / bs, h, slot[p] % bs) + d;
            gk[at] = kr[size_t(p) * kvd + h * D + d];
            gv[at] = vr[size_t(p) * kvd + h * D + d];
          }
      }
      kernels::WriteKv(cpu, kr.data(), vr.data(), kvd, slot.data(), ctx[sq]);
    }
    std::vector<float> want(size_t(T_rows) * s.nh * D);
    kernels::AttentionBatch ab;
    ab.num_seqs = S;
    ab.query_start = query_start.data();
    ab.positions = positions.data();
    ab.block_tables = tables.data();
    ab.max_blocks = max_blocks;
    const float scale = 1.f / std::sqrt(float(D));
    kernels::PagedAttention(ab, cpu, q.data(), q_stride, s.nh, scale, want.data());

    DevArray<T> dk(gk), dv(gv);
    cache.k = dk.p;
    cache.v = dv.p;
    DevArray<float> dq(q);
    DevInts dpos(positions), dseq(row_seq), dtab(tables);
    auto make_args = [&](int num_tokens, int splits) {
      kc::AttentionArgs a;
      a.q = dq.p;
      a.q_stride = q_stride;
      a.num_tokens = num_tokens;
      a.num_heads = s.nh;
      a.row_seq = dseq.p;
      a.positions = dpos.p;
      a.block_tables = dtab.p;
      a.max_blocks = max_blocks;
      a.max_context = 1000;
      a.scale = scale;
      a.num_splits = splits;
      return a;
    };
    // Sequence sq's query rows as one prefill chunk.
    auto chunk = [&](int sq) {
      kc::PrefillChunk c;
      c.q = dq.p;
      c.q_stride = q_stride;
      c.row0 = query_start[sq];
      c.q_len = qlen[sq];
      c.p0 = ctx[sq] - qlen[sq];
      c.num_heads = s.nh;
      c.block_table = dtab.p + sq * max_blocks;
      c.scale = scale;
      return c;
    };
    // Every kernel variant at several splits; the partition kernel where it applies.
    const bool part = kc::PartitionFits(D, 1000, 2);
    for (auto [splits, variant] : {std::pair{1, kc::kVariantOnline},
                                   std::pair{3, kc::kVariantOnline},
                                   std::pair{8, kc::kVariantOnline},
                                   std::pair{1, kc::kVariantOnlineSingleKey},
                                   std::pair{3, kc::kVariantOnlineSingleKey},
                                   std::pair{2, kc::kVariantPartition},
                                   std::pair{5, kc::kVariantPartition},
                                   std::pair{2, kc::kVariantPartitionWide},
                                   std::pair{5, kc::kVariantPartitionWide},
                                   std::pair{2, kc::kVariantPartitionAsync},
                                   std::pair{5, kc::kVariantPartitionAsync},
                                   std::pair{16, kc::kVariantPartitionAsync},
                                   std::pair{2, kc::kVariantPartitionAsyncDeep},
                                   std::pair{7, kc::kVariantPartitionAsyncDeep},
                                   std::pair{2, kc::kVariantPartitionAsyncHalf},
                                   std::pair{5, kc::kVariantPartitionAsyncHalf},
                                   std::pair{2, kc::kVariantPartitionMma},
                                   std::pair{5, kc::kVariantPartitionMma},
                                   std::pair{16, kc::kVariantPartitionMma},
                                   std::pair{3, kc::kVariantPartitionMmaStream},
                                   std::pair{2, kc::kVariantPartitionMmaStream},
                                   std::pair{16, kc::kVariantPartitionMmaStream},
                                   std::pair{2, kc::kVariantPartitionMmaDeep},
                                   std::pair{5, kc::kVariantPartitionMmaDeep},
                                   std::pair{9, kc::kVariantAuto}}) {
      if (variant >= kc::kVariantPartition && !part) continue;
      kc::AttentionArgs a = make_args(T_rows, splits);
      a.variant = variant;
      DevArray<float> ws(kc::AttentionWorkspaceFloats(T_rows, s.nh, D, splits));
      a.workspace = ws.p;
      DevArray<T> out(want.size());
      ASSERT_EQ(kc::PagedAttention<T>(a, cache, 0, out.p, nullptr), cudaSuccess);
      EXPECT_LE(RelErr(out.Get(), want), gputest::Tol<T>())
          << "heads " << s.nh << "/" << s.nkv << ", head_dim " << D << ", splits " << splits
          << ", variant " << variant;
    }
    // The matrix-product path for the sequences with several query rows, the per-row kernel
    // (restricted to a row list) for the rest, into one output.
    {
      std::vector<int32_t> rest;
      DevArray<T> out(want.size());
      cublasHandle_t h;
      ASSERT_EQ(kc::Cublas()->create(&h), CUBLAS_STATUS_SUCCESS);
      for (int sq = 0; sq < S; ++sq) {
        if (qlen[sq] < 2) {
          for (int r = query_start[sq]; r < query_start[sq + 1]; ++r) rest.push_back(r);
          continue;
        }
        const kc::PrefillChunk c = chunk(sq);
        DevArray<char> scratch(
            kc::PrefillScratchBytes(c.q_len, ctx[sq], s.nh, s.nkv, D, sizeof(T)));
        const kc::KernelStatus ks =
            kc::PrefillAttention<T>(h, c, cache, 0, scratch.p, out.p, nullptr);
        ASSERT_TRUE(ks.ok()) << ks.where;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
      kc::Cublas()->destroy(h);
      DevInts drest(rest);
      kc::AttentionArgs a = make_args(static_cast<int>(rest.size()), 3);
      a.rows = drest.p;
      DevArray<float> ws(kc::AttentionWorkspaceFloats(a.num_tokens, s.nh, D, 3));
      a.workspace = ws.p;
      ASSERT_EQ(kc::PagedAttention<T>(a, cache, 0, out.p, nullptr), cudaSuccess);
      EXPECT_LE(RelErr(out.Get(), want), gputest::Tol<T>())
          << "prefill path: heads " << s.nh << "/" << s.nkv << ", head_dim " << D;
    }
    // The fused prefill kernel (a bf16 cache, head_dim 64 or 128) for every chunk, the one-row
    // ones included (a chunk of one row is a decode row), into one output.
    if constexpr (std::is_same_v<T, kc::bf16>) {
      if (!kc::FlashPrefillFits(D, sizeof(T))) continue;
      DevArray<T> out(want.size());
      for (int sq = 0; sq < S; ++sq) {
        const kc::PrefillChunk c = chunk(sq);
        ASSERT_EQ(kc::FlashPrefillAttention(c, cache, 0, out.p, nullptr), cudaSuccess);
      }
      EXPECT_LE(RelErr(out.Get(), want), gputest::Tol<T>())
          << "fused prefill: heads " << s.nh << "/" << s.nkv << ", head_dim " << D;
    }
  }
}

// The shared half of cascade attention: a group of decode rows over one shared prefix (shuffled
// blocks, a partial last key tile, a row count that leaves partial row tiles) writes each row's
// partial (O, M, L) into its cascade slot of a larger launch's workspace: O / L is the attention
// over the shared keys alone and M + log L their log-sum-exp (in the scores' natural units, which
// the merge assumes), against a double reference; every other slot stays as it was. Through the
// matrix products (float and bf16) and the fused kernel (bf16, head_dim 64 and 128).
TYPED_TEST(CudaKernels, CascadePartialsMatchDoubleReference) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  for (const AttnShape s : {AttnShape{8, 2, 64}, AttnShape{32, 8, 128}, AttnShape{4, 4, 128}}) {
    const int bs = 16, D = s.d, kvd = s.nkv * D, G = s.nh / s.nkv;
    const int shared_blocks = 19, shared = shared_blocks * bs;  // 304 keys: 9.5 tiles of 32
    const int n = 37, row0 = 2, ws_rows = n + 5, splits = 3, slots = splits + 1;
    const int num_blocks = shared_blocks + 4;
    std::vector<int32_t> table(num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(11 + D));
    kc::KvCache<T> cache;
    cache.num_blocks = num_blocks;
    cache.block_size = bs;
    cache.kv_heads = s.nkv;
    cache.head_dim = D;
    const auto kr = AsStored<T>(Random(size_t(shared) * kvd, 80 + D));
    const auto vr = AsStored<T>(Random(size_t(shared) * kvd, 81 + D));
    std::vector<float> gk(cache.LayerElems(), 0.f), gv(cache.LayerElems(), 0.f);
    for (int p = 0; p < shared; ++p)
      for (int h = 0; h < s.nkv; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t at = cache.Index(0, table[p / bs], h, p % bs) + d;
          gk[at] = kr[size_t(p) * kvd + h * D + d];
          gv[at] = vr[size_t(p) * kvd + h * D + d];
        }
    const int64_t q_stride = int64_t{s.nh} * D + 3;
    const auto q = Random(size_t(ws_rows) * q_stride, 82 + D);
    const float scale = 1.f / std::sqrt(float(D));
    // The reference per (row, head): O / L and the log-sum-exp of the scores.
    std::vector<float> want_o(size_t(n) * s.nh * D), want_lse(size_t(n) * s.nh);
    for (int r = 0; r < n; ++r)
      for (int h = 0; h < s.nh; ++h) {
        const float* qr = q.data() + (row0 + r) * q_stride + h * D;
        std::vector<double> sc(shared);
        double mx = -INFINITY;
        for (int j = 0; j < shared; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(qr[d]) * kr[size_t(j) * kvd + (h / G) * D + d];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double l = 0;
        std::vector<double> o(D, 0.0);
        for (int j = 0; j < shared; ++j) {
          const double e = std::exp(sc[j] - mx);
          l += e;
          for (int d = 0; d < D; ++d) o[d] += e * vr[size_t(j) * kvd + (h / G) * D + d];
        }
        for (int d = 0; d < D; ++d) want_o[(size_t(r) * s.nh + h) * D + d] = float(o[d] / l);
        want_lse[size_t(r) * s.nh + h] = float(mx + std::log(l));
      }
    DevArray<T> dk(gk), dv(gv);
    cache.k = dk.p;
    cache.v = dv.p;
    DevArray<float> dq(q);
    DevInts dtab(table);
    // Each path writes into a poisoned workspace; the slots read back: O / L, M + log L.
    auto check = [&](const char* path, auto run) {
      SCOPED_TRACE(std::string(path) + ", heads " + std::to_string(s.nh) + "/" +
                   std::to_string(s.nkv) + ", head_dim " + std::to_string(D));
      DevArray<float> ws(kc::AttentionWorkspaceFloats(ws_rows, s.nh, D, slots));
      kc::CascadeGroup g;
      g.rows.q = dq.p;
      g.rows.q_stride = q_stride;
      g.rows.row0 = row0;
      g.rows.q_len = n;
      g.rows.num_heads = s.nh;
      g.rows.block_table = dtab.p;
      g.rows.scale = scale;
      g.shared_len = shared;
      g.workspace = ws.p;
      g.ws_rows = ws_rows;
      g.num_splits = splits;
      run(g);
      const std::vector<float> w = ws.Get();
      const int64_t stats = int64_t{ws_rows} * s.nh * slots * D;
      std::vector<float> got_o, want_o_rows, got_lse;
      int64_t written = 0;
      for (int i = 0; i < ws_rows; ++i)
        for (int h = 0; h < s.nh; ++h)
          for (int sl = 0; sl < slots; ++sl) {
            const int64_t part = (int64_t{i} * s.nh + h) * slots + sl;
            const bool mine = sl == splits && i >= row0 && i < row0 + n;
            bool any = !std::isnan(w[stats + 2 * part]) || !std::isnan(w[stats + 2 * part + 1]);
            for (int d = 0; d < D; ++d) any = any || !std::isnan(w[part * D + d]);
            if (!mine) {
              written += any;
              continue;
            }
            const float M = w[stats + 2 * part], L = w[stats + 2 * part + 1];
            ASSERT_GT(L, 0.f) << "row " << i << " head " << h;
            for (int d = 0; d < D; ++d) got_o.push_back(w[part * D + d] / L);
            got_lse.push_back(M + std::log(L));
          }
      EXPECT_EQ(written, 0) << "slots outside the group's cascade slots were written";
      EXPECT_LE(RelErr(got_o, want_o), gputest::Tol<T>());
      double worst = 0;
      for (size_t k = 0; k < want_lse.size(); ++k)
        worst = std::max(worst, std::abs(double(got_lse[k]) - want_lse[k]));
      const double lse_tol = std::is_same_v<T, float> ? 1e-4 : 2e-2;
      EXPECT_LE(worst, lse_tol) << "log-sum-exp";
    };
    check("matrix products", [&](const kc::CascadeGroup& g) {
      cublasHandle_t h;
      ASSERT_EQ(kc::Cublas()->create(&h), CUBLAS_STATUS_SUCCESS);
      DevArray<char> scratch(kc::CascadeScratchBytes(n, shared, s.nh, s.nkv, D, sizeof(T)));
      const kc::KernelStatus ks = kc::CascadePrefixAttention<T>(h, g, cache, 0, scratch.p, nullptr);
      ASSERT_TRUE(ks.ok()) << ks.where;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      kc::Cublas()->destroy(h);
    });
    if constexpr (std::is_same_v<T, kc::bf16>)
      if (kc::FlashPrefillFits(D, sizeof(T)))
        check("fused", [&](const kc::CascadeGroup& g) {
          ASSERT_EQ(kc::FlashCascadeAttention(g, cache, 0, nullptr), cudaSuccess);
        });
  }
}

TYPED_TEST(CudaKernels, GemmMatchesDoubleReference) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  cublasHandle_t h;
  ASSERT_EQ(kc::Cublas()->create(&h), CUBLAS_STATUS_SUCCESS);
  for (auto [t, k, n] : {std::array<int, 3>{1, 64, 96}, std::array<int, 3>{37, 300, 172},
                         std::array<int, 3>{256, 1024, 3072}}) {
    const auto x = AsStored<T>(Random(size_t(t) * k, 70 + k));
    const auto w = AsStored<T>(Random(size_t(n) * k, 71 + k));
    const auto y0 = Random(size_t(t) * n, 72 + k);
    for (bool acc : {false, true}) {
      const std::vector<float> want = Product(x, w, acc ? &y0 : nullptr, t, k, n);
      DevArray<T> dx(x), dw(w);
      DevArray<float> y(acc ? y0 : std::vector<float>(size_t(t) * n, NAN));
      ASSERT_EQ(kc::Gemm<T>(h, dx.p, t, k, dw.p, n, y.p, acc), CUBLAS_STATUS_SUCCESS);
      // Inputs are exact in T; the products accumulate in float either way.
      EXPECT_LE(RelErr(y.Get(), want), 1e-5) << t << "x" << k << "x" << n << " acc " << acc;
    }
  }
  kc::Cublas()->destroy(h);
}

// The tuned bf16 products (cuBLASLt's fastest candidate, timed): every candidate's time is
// reported, the kept one gives the reference's product with and without accumulation, and an
// untuned shape is refused rather than run with some other shape's algorithm.
TEST(CudaKernelsTuned, TunedGemmMatchesDoubleReference) {
  LLMQ_REQUIRE_GPU();
  ASSERT_TRUE(kc::LoadCublasLt().ok());
  DevArray<float> ws(size_t{8} << 20);  // 32 MB
  kc::TunedGemm g;
  ASSERT_TRUE(g.Init(ws.p, size_t{32} << 20).ok());
  for (auto [t, k, n] : {std::array<int, 3>{17, 256, 104}, std::array<int, 3>{256, 1024, 3072}}) {
    const auto x = AsStored<kc::bf16>(Random(size_t(t) * k, 80 + k));
    const auto w = AsStored<kc::bf16>(Random(size_t(n) * k, 81 + k));
    const auto y0 = Random(size_t(t) * n, 82 + k);
    DevArray<kc::bf16> dx(x), dw(w);
    DevArray<float> scratch(size_t(t) * n);
    std::vector<double> us;
    ASSERT_TRUE(g.Tune(dx.p, t, k, dw.p, n, scratch.p, nullptr, 8, 3, &us).ok());
    ASSERT_FALSE(us.empty());
    EXPECT_TRUE(g.tuned(t, k, n));
    EXPECT_FALSE(g.tuned(t + 1, k, n));
    for (bool acc : {false, true}) {
      const std::vector<float> want = Product(x, w, acc ? &y0 : nullptr, t, k, n);
      DevArray<float> y(acc ? y0 : std::vector<float>(size_t(t) * n, NAN));
      ASSERT_TRUE(g.Run(dx.p, t, k, dw.p, n, y.p, acc, nullptr).ok());
      EXPECT_LE(RelErr(y.Get(), want), 1e-5) << t << "x" << k << "x" << n << " acc " << acc;
    }
    DevArray<float> y(size_t(t + 1) * n);
    EXPECT_FALSE(g.Run(dx.p, t + 1, k, dw.p, n, y.p, false, nullptr).ok());
  }
}

// The few-rows kernel on odd feature counts and long rows, both with and without accumulation,
// with each number of chunks in flight (row lengths that leave a remainder for each).
TYPED_TEST(CudaKernels, GemvMatchesDoubleReference) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  for (auto [k, n] :
       {std::array<int, 2>{64, 7}, std::array<int, 2>{4096, 1000}, std::array<int, 2>{14336, 33},
        std::array<int, 2>{40, 3}, std::array<int, 2>{4000, 9}}) {
    for (int t : {1, 2, 5, 8}) {
      ASSERT_TRUE(kc::GemvFits<T>(t, k));
      const auto x = AsStored<T>(Random(size_t(t) * k, 100 + k + t));
      const auto w = AsStored<T>(Random(size_t(n) * k, 101 + k));
      const auto y0 = Random(size_t(t) * n, 102 + k);
      for (bool acc : {false, true})
        for (int in_flight : {2, 4, 8}) {
          const std::vector<float> want = Product(x, w, acc ? &y0 : nullptr, t, k, n);
          DevArray<T> dx(x), dw(w);
          DevArray<float> y(acc ? y0 : std::vector<float>(size_t(t) * n, NAN));
          ASSERT_EQ(kc::Gemv<T>(dx.p, t, k, dw.p, n, y.p, acc, nullptr, in_flight), cudaSuccess);
          EXPECT_LE(RelErr(y.Get(), want), 1e-5)
              << t << "x" << k << "x" << n << " acc " << acc << " in flight " << in_flight;
        }
    }
  }
  EXPECT_FALSE(kc::GemvFits<T>(9, 64));
  EXPECT_FALSE(kc::GemvFits<T>(1, 170));  // 340 or 680 bytes: not a multiple of 16
}

TEST(CudaKernelsArgmax, MatchesCpuGreedyWithTiesAndNaN) {
  LLMQ_REQUIRE_GPU();
  const int n = 6, vocab = 50000;
  auto logits = Random(size_t(n) * vocab, 80, -10.f, 10.f);
  logits[size_t(1) * vocab + 123] = 50.f;  // a tie: the lower id wins
  logits[size_t(1) * vocab + 40000] = 50.f;
  logits[size_t(2) * vocab + 7] = NAN;                                        // NaN is -inf
  for (int v = 0; v < vocab; ++v) logits[size_t(3) * vocab + v] = -INFINITY;  // all -inf: id 0
  logits[size_t(4) * vocab + vocab - 1] = 1e30f;
  DevArray<float> d(logits);
  std::vector<int32_t> zero(n, -5);
  DevInts ids(zero);
  ASSERT_EQ(kc::ArgmaxRows(d.p, n, vocab, ids.p, nullptr), cudaSuccess);
  std::vector<int32_t> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), ids.p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(got[r], SampleToken(&logits[size_t(r) * vocab], vocab, greedy, nullptr)) << r;
}

// The token-mask kernel against the CPU reference, exactly: rows of all ones, all zeros and random
// densities; vocabularies that are and are not multiples of 32 (a last word shared with the
// padding), rows wider than the vocabulary needs, random bits past the vocabulary (ignored: a
// write past a row shows up in the next row, or as an out-of-bounds access under
// compute-sanitizer), more rows than a grid's second dimension holds. Too narrow rows are refused.
TEST(CudaKernelsMask, ApplyTokenBitmaskMatchesCpu) {
  LLMQ_REQUIRE_GPU();
  const std::vector<double> density = {1.0, 0.0, 0.01, 0.5, 0.97};
  struct Shape {
    int n, vocab, extra_words;
  };
  int seed = 100;
  for (const Shape& s :
       {Shape{5, 1, 0}, Shape{5, 31, 0}, Shape{5, 32, 0}, Shape{7, 33, 1}, Shape{10, 500, 0},
        Shape{6, 4097, 3}, Shape{5, 151936, 0}, Shape{3, 128256, 2}, Shape{70000, 40, 0}}) {
    SCOPED_TRACE("n " + std::to_string(s.n) + " vocab " + std::to_string(s.vocab));
    const int wpr = (s.vocab + 31) / 32 + s.extra_words;
    const std::vector<uint32_t> words =
        gputest::RandomMasks(s.n, s.vocab, wpr, density, ++seed, /*tail_garbage=*/true);
    const std::vector<float> logits = Random(size_t(s.n) * s.vocab, ++seed, -20.f, 20.f);
    std::vector<float> want = logits;
    kernels::ApplyTokenBitmask(want.data(), s.n, s.vocab, words.data(), wpr);
    DevArray<float> d(logits);
    DevInts w(std::vector<int32_t>(words.begin(), words.end()));
    const auto* dw = reinterpret_cast<const uint32_t*>(w.p);
    ASSERT_EQ(kc::ApplyTokenBitmask(d.p, s.n, s.vocab, dw, wpr, nullptr), cudaSuccess);
    const std::vector<float> got = d.Get();
    int64_t masked = 0, differ = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      masked += std::isinf(want[i]);
      differ += !(got[i] == want[i]);
    }
    EXPECT_EQ(differ, 0);
    EXPECT_GT(masked, 0);
    EXPECT_LT(masked, int64_t(want.size()));
    EXPECT_EQ(kc::ApplyTokenBitmask(d.p, s.n, s.vocab, dw, (s.vocab + 31) / 32 - 1, nullptr),
              cudaErrorInvalidValue);
  }
  // Nothing to do: no launch, no error.
  EXPECT_EQ(kc::ApplyTokenBitmask(nullptr, 0, 100, nullptr, 4, nullptr), cudaSuccess);
}

TYPED_TEST(CudaKernels, CopyKvBlocksCopiesWholeTilesInEveryLayer) {
  LLMQ_REQUIRE_GPU();
  using T = TypeParam;
  kc::KvCache<T> c;
  c.num_blocks = 6;
  c.block_size = 16;
  c.kv_heads = 2;
  c.head_dim = 8;
  const int layers = 3;
  const auto k0 = AsStored<T>(Random(layers * c.LayerElems(), 90));
  const auto v0 = AsStored<T>(Random(layers * c.LayerElems(), 91));
  DevArray<T> k(k0), v(v0);
  c.k = k.p;
  c.v = v.p;
  DevInts pairs(std::vector<int32_t>{1, 4, 2, 5});
  ASSERT_EQ(kc::CopyKvBlocks<T>(c, layers, pairs.p, 2, nullptr), cudaSuccess);
  std::vector<float> wk = k0, wv = v0;
  const int64_t tile = int64_t{c.kv_heads} * c.block_size * c.head_dim;
  for (int l = 0; l < layers; ++l)
    for (auto [s, d] : {std::pair{1, 4}, std::pair{2, 5}}) {
      std::copy_n(k0.begin() + c.Index(l, s, 0, 0), tile, wk.begin() + c.Index(l, d, 0, 0));
      std::copy_n(v0.begin() + c.Index(l, s, 0, 0), tile, wv.begin() + c.Index(l, d, 0, 0));
    }
  EXPECT_EQ(k.Get(), wk);
  EXPECT_EQ(v.Get(), wv);
}

}  // namespace
}  // namespace llmq
