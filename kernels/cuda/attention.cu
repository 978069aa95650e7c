#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/vec.cuh"

namespace llmq::kernels::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block; each takes every kWarps-th key of the range

// One (row, head, dim) result of a block: normalised into `out` when the launch has one split and
// no cascade, else the split's partial (weighted sum A, max M, sum L) into the workspace for
// MergeSplitsKernel (layout: AttentionWorkspaceFloats).
template <class T>
__device__ __forceinline__ void WriteResult(const AttentionArgs& a, int t, int i_row, int h, int d,
                                            int D, int split, float A, float M, float L, T* out,
                                            float* ws) {
  const int slots = a.slot_stride();
  if (slots == 1) {
    Store(out + static_cast<int64_t>(t) * a.num_heads * D + h * D + d, L > 0.f ? A / L : 0.f);
    return;
  }
  const int64_t part = (static_cast<int64_t>(i_row) * a.num_heads + h) * slots + split;
  ws[part * D + d] = A;
  if (d == 0) {
    float* ml = ws + static_cast<int64_t>(a.num_tokens) * a.num_heads * slots * D;
    ml[2 * part] = M;
    ml[2 * part + 1] = L;
  }
}

// grid: x = query row, y = kv head * head chunks + chunk, z = context split; block: 32 x kWarps.
// Lane l of a warp holds dims [l*DPL, l*DPL + DPL) of the GC query heads of its chunk and of each
// key/value it reads, so one K/V row read serves GC heads. Each warp keeps an online softmax
// (running max m, sum l, weighted values acc) per head over its keys; the block's warps are then
// merged through shared memory by log-sum-exp.
template <class T, int DPL, int GC, int KT>
__global__ void __launch_bounds__(32 * kWarps)
    AttentionKernel(AttentionArgs a, KvCache<T> c, int layer, int chunks, T* out, float* ws) {
  // Launch index i (the workspace's row) and query row t (q, positions, out).
  const int i_row = blockIdx.x, t = a.rows ? a.rows[i_row] : i_row;
  const int lane = threadIdx.x, warp = threadIdx.y;
  const int kvh = blockIdx.y / chunks, chunk = blockIdx.y % chunks;
  const int D = c.head_dim, G = a.num_heads / c.kv_heads;
  const int h0 = kvh * G + chunk * GC, nheads = min(GC, G - chunk * GC);
  const int split = blockIdx.z, splits = gridDim.z;
  const int kb = a.key_begin ? a.key_begin[i_row] : 0;  // keys before it: the cascade's

  float q[GC][DPL], acc[GC][DPL], m[GC], l[GC];
#pragma unroll
  for (int i = 0; i < GC; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane * DPL + k;
      acc[i][k] = 0.f;
      q[i][k] = (i < nheads && d < D) ? a.q[t * a.q_stride + (h0 + i) * D + d] * a.scale : 0.f;
    }
  }
  // Keys 0..pos of this row's sequence, the split's share of them.
  const int ctx = a.positions[t] + 1;
  const int split_len = (a.max_context + splits - 1) / splits;
  const int j0 = max(kb, split * split_len), j1 = min(ctx, split * split_len + split_len);
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[t]) * a.max_blocks;
  // Each warp takes tiles of KT consecutive keys (tile r of warp w starts at j0 + (r * kWarps + w)
  // * KT): the tile's K and V rows are loaded before any is used, so KT rows are in flight, and
  // the running max is corrected once per tile rather than once per key.
  for (int j = j0 + warp * KT; j < j1; j += kWarps * KT) {
    float kx[KT][DPL], vx[KT][DPL];
#pragma unroll
    for (int u = 0; u < KT; ++u) {
      const int jj = j + u;
      const int64_t base =
          jj < j1 ? c.Index(layer, table[jj / c.block_size], kvh, jj % c.block_size) : 0;
#pragma unroll
      for (int k = 0; k < DPL; ++k) {
        const int d = lane * DPL + k;
        const bool ok = jj < j1 && d < D;
        kx[u][k] = ok ? ToF(c.k[base + d]) : 0.f;
        vx[u][k] = ok ? ToF(c.v[base + d]) : 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < GC; ++i) {
      float s[KT];
#pragma unroll
      for (int u = 0; u < KT; ++u) {
        s[u] = 0.f;
#pragma unroll
        for (int k = 0; k < DPL; ++k) s[u] += q[i][k] * kx[u][k];
      }
#pragma unroll
      for (int u = 0; u < KT; ++u) s[u] = j + u < j1 ? WarpSum(s[u]) : -INFINITY;
      float mn = m[i];
#pragma unroll
      for (int u = 0; u < KT; ++u) mn = fmaxf(mn, s[u]);  // finite: key j is always in range
      const float corr = expf(m[i] - mn);
      l[i] *= corr;
#pragma unroll
      for (int k = 0; k < DPL; ++k) acc[i][k] *= corr;
#pragma unroll
      for (int u = 0; u < KT; ++u) {
        const float p = expf(s[u] - mn);
        l[i] += p;
#pragma unroll
        for (int k = 0; k < DPL; ++k) acc[i][k] += p * vx[u][k];
      }
      m[i] = mn;
    }
  }

  __shared__ float sm_m[kWarps][GC], sm_l[kWarps][GC], sm_acc[kWarps][GC][32 * DPL];
#pragma unroll
  for (int i = 0; i < GC; ++i) {
    if (lane == 0) {
      sm_m[warp][i] = m[i];
      sm_l[warp][i] = l[i];
    }
#pragma unroll
    for (int k = 0; k < DPL; ++k) sm_acc[warp][i][lane * DPL + k] = acc[i][k];
  }
  __syncthreads();
  // A warp (or a whole split) that saw no key has l == 0 and m == -inf: it weighs nothing.
  for (int idx = warp * 32 + lane; idx < nheads * D; idx += 32 * kWarps) {
    const int i = idx / D, d = idx % D;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w)
      if (sm_l[w][i] > 0.f) M = fmaxf(M, sm_m[w][i]);
    float L = 0.f, A = 0.f;
    for (int w = 0; w < kWarps; ++w)
      if (sm_l[w][i] > 0.f) {
        const float e = expf(sm_m[w][i] - M);
        L += sm_l[w][i] * e;
        A += sm_acc[w][i][d] * e;
      }
    WriteResult(a, t, i_row, h0 + i, d, D, split, A, M, L, out, ws);
  }
}

// What a partition kernel's block serves (grid: x = query row, y = kv head * head chunks + chunk,
// z = context partition): launch index i_row, query row t, KV head kvh and its query heads
// [h0, h0 + nheads) of GC, and keys [k0, k0 + n) of the row's sequence: the partition's range less
// what the cascade covers (n <= part_len), read through `table`.
template <int GC>
struct PartitionBlock {
  int i_row, t, kvh, h0, nheads, part, k0, n;
  const int32_t* table;
  template <class T>
  __device__ PartitionBlock(const AttentionArgs& a, const KvCache<T>& c, int chunks, int part_len) {
    i_row = blockIdx.x;
    t = a.rows ? a.rows[i_row] : i_row;
    kvh = blockIdx.y / chunks;
    const int chunk = blockIdx.y % chunks, G = a.num_heads / c.kv_heads;
    h0 = kvh * G + chunk * GC;
    nheads = min(GC, G - chunk * GC);
    part = blockIdx.z;
    const int ctx = a.positions[t] + 1;
    const int kb = a.key_begin ? a.key_begin[i_row] : 0;  // keys before it: the cascade's
    k0 = max(kb, part * part_len);
    n = max(0, min(ctx, part * part_len + part_len) - k0);
    table = a.block_tables + static_cast<int64_t>(a.row_seq[t]) * a.max_blocks;
  }
};

// Lane group slot gl's dims [gl * DPG, gl * DPG + DPG) of the block's query heads, scaled; zero
// for the heads past pb.nheads.
template <int GC, int DPG>
__device__ __forceinline__ void LoadQueries(const AttentionArgs& a, const PartitionBlock<GC>& pb,
                                            int gl, float (&q)[GC][DPG]) {
  constexpr int D = 8 * DPG;
#pragma unroll
  for (int i = 0; i < GC; ++i)
#pragma unroll
    for (int k = 0; k < DPG; ++k)
      q[i][k] =
          i < pb.nheads ? a.q[pb.t * a.q_stride + (pb.h0 + i) * D + gl * DPG + k] * a.scale : 0.f;
}

// Phase 2 of the partition kernels, by the block's 4 warps: warp i takes head i's n scores in
// shared memory ([rows][part_len], rows <= GC) and replaces them by p = exp(s - max),
// unnormalised; the max and the sum go to stat[2i], stat[2i + 1].
template <int GC>
__device__ __forceinline__ void PartitionSoftmax(float* scores, int part_len, int n, float* stat,
                                                 int rows = GC) {
  const int warp = threadIdx.x >> 5, wl = threadIdx.x & 31;
  for (int i = warp; i < rows; i += 4) {
    float m = -INFINITY;
    for (int j = wl; j < n; j += 32) m = fmaxf(m, scores[i * part_len + j]);
    m = WarpMax(m);
    float l = 0.f;
    for (int j = wl; j < n; j += 32) {
      const float p = expf(scores[i * part_len + j] - m);
      scores[i * part_len + j] = p;
      l += p;
    }
    l = WarpSum(l);
    if (wl == 0) {
      stat[2 * i] = m;
      stat[2 * i + 1] = l;
    }
  }
}

// The end of phase 3: each warp's weighted sums (lane l holds dims [l * D/32, ...) of each head)
// added through shared memory `red` ([4][GC][D]), then the partition's result per head and dim
// (WriteResult). A partition that saw no key (n == 0) weighs nothing.
template <class T, int D, int GC>
__device__ __forceinline__ void PartitionWrite(const float (&acc)[GC][D / 32], float* red,
                                               const float* stat, const AttentionArgs& a,
                                               const PartitionBlock<GC>& pb, T* out, float* ws) {
  constexpr int DPL = D / 32;
  const int tid = threadIdx.x, warp = tid >> 5, wl = tid & 31;
#pragma unroll
  for (int i = 0; i < GC; ++i)
#pragma unroll
    for (int k = 0; k < DPL; ++k) red[(warp * GC + i) * D + wl * DPL + k] = acc[i][k];
  __syncthreads();
  for (int idx = tid; idx < pb.nheads * D; idx += 128) {
    const int i = idx / D, d = idx % D;
    const float A = red[(0 * GC + i) * D + d] + red[(1 * GC + i) * D + d] +
                    red[(2 * GC + i) * D + d] + red[(3 * GC + i) * D + d];
    const float M = stat[2 * i], L = pb.n > 0 ? stat[2 * i + 1] : 0.f;
    WriteResult(a, pb.t, pb.i_row, pb.h0 + i, d, D, pb.part, A, M, L, out, ws);
  }
}

// The two-phase kernel for head_dim 64 and 128 (kVariantPartition). grid: x = query row, y = kv
// head * head chunks + chunk, z = context partition; block: 128 threads (4 warps).
//   1. Scores: groups of 8 lanes take one key each (a warp 4 keys, the block 16 at a time); lane g
//      of a group holds dims [g * DPG, g * DPG + DPG) of the chunk's GC query heads (DPG = D / 8)
//      and loads the same dims of the key in 16-byte loads; 3 shuffles finish each dot product.
//      Scores go to shared memory [GC, part_len].
//   2. Softmax: warp i takes head i's scores (max, exp, sum) in shared memory.
//   3. Values: warp w takes keys w, w + 4, ...; lane l holds dims [l * D/32, ...) of every head's
//      weighted sum; the loads of 4 keys are issued before their use. The 4 warps' sums are then
//      added through shared memory.
// No running max is corrected key by key, so nothing serialises the loads. KPG: keys a group loads
// before it reduces any (phase 1), and 4 x KPG value rows a warp loads before it adds any (phase
// 3): more bytes in flight per SM for more registers (kVariantPartitionWide: KPG = 2).
template <class T, int DPG, int GC, int KPG>
__global__ void __launch_bounds__(128)
    PartitionKernel(AttentionArgs a, KvCache<T> c, int layer, int chunks, int part_len, T* out,
                    float* ws) {
  constexpr int D = 8 * DPG, DPL = D / 32;
  const PartitionBlock<GC> pb(a, c, chunks, part_len);
  const int kvh = pb.kvh, k0 = pb.k0, n = pb.n;
  const int32_t* table = pb.table;
  const int tid = threadIdx.x, warp = tid >> 5, wl = tid & 31;
  const int grp = wl >> 3, gl = wl & 7;

  extern __shared__ float smem[];
  float* scores = smem;               // [GC][part_len]
  float* red = smem + GC * part_len;  // [4][GC][D]
  float* stat = red + 4 * GC * D;     // [GC][2]: max, sum

  float q[GC][DPG];
  LoadQueries<GC, DPG>(a, pb, gl, q);

  // 1. Scores. The loop is uniform across the warp (the shuffles need every lane); a group whose
  // key is past the end computes on zeros and stores nothing. Iteration base jb: warp w takes
  // keys [jb, jb + 4 KPG), group g key jb + 4u + g of them; the block covers 16 KPG keys.
  for (int jb = warp * 4 * KPG; jb < n; jb += 16 * KPG) {
    float kx[KPG][DPG];
#pragma unroll
    for (int u = 0; u < KPG; ++u) {
      const int j = jb + 4 * u + grp;
      if (j < n) {
        const int key = k0 + j;
        LoadN<T, DPG>(
            c.k + c.Index(layer, table[key / c.block_size], kvh, key % c.block_size) + gl * DPG,
            kx[u]);
      } else {
#pragma unroll
        for (int k = 0; k < DPG; ++k) kx[u][k] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < KPG; ++u) {
      const int j = jb + 4 * u + grp;
#pragma unroll
      for (int i = 0; i < GC; ++i) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < DPG; ++k) s += q[i][k] * kx[u][k];
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if (gl == 0 && j < n) scores[i * part_len + j] = s;
      }
    }
  }
  __syncthreads();
  // 2. Softmax of each head's scores.
  PartitionSoftmax<GC>(scores, part_len, n, stat);
  __syncthreads();
  // 3. Values.
  float acc[GC][DPL];
#pragma unroll
  for (int i = 0; i < GC; ++i)
#pragma unroll
    for (int k = 0; k < DPL; ++k) acc[i][k] = 0.f;
  constexpr int U = 4 * KPG;  // keys whose loads are in flight together
  for (int j = warp; j < n; j += 4 * U) {
    float vx[U][DPL];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int jj = j + 4 * u;
      if (jj < n) {
        const int key = k0 + jj;
        LoadN<T, DPL>(
            c.v + c.Index(layer, table[key / c.block_size], kvh, key % c.block_size) + wl * DPL,
            vx[u]);
      } else {
#pragma unroll
        for (int k = 0; k < DPL; ++k) vx[u][k] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int jj = j + 4 * u;
      if (jj >= n) break;
#pragma unroll
      for (int i = 0; i < GC; ++i) {
        const float p = scores[i * part_len + jj];
#pragma unroll
        for (int k = 0; k < DPL; ++k) acc[i][k] += p * vx[u][k];
      }
    }
  }
  PartitionWrite<T, D, GC>(acc, red, stat, a, pb, out, ws);
}

// Bytes of K or V rows in one shared-memory stage of the async partition kernel.
constexpr int kAsyncTileBytes = 8192;

// kVariantPartitionAsync (S = 2 stages) and kVariantPartitionAsyncDeep (S = 3): PartitionKernel's
// three phases, with the K rows (phase 1) and V rows (phase 3) copied into shared memory by
// cp.async in tiles of TILE keys: tiles r + 1 .. r + S - 1 are in flight while tile r is used, so
// a block keeps (S - 1) x kAsyncTileBytes of loads in flight without registers to hold them, and
// the first V tiles' copies run under the softmax. Every iteration commits one group of copies
// (empty past the last tile), so waiting for "all but the newest S - 1" is waiting for tile r.
// grid and block as PartitionKernel. Shared memory: S stages, scores [GC][part_len], reduction
// [4][GC][D], stats [GC][2].
template <class T, int D, int GC, int S>
__global__ void __launch_bounds__(128)
    PartitionAsyncKernel(AttentionArgs a, KvCache<T> c, int layer, int chunks, int part_len, T* out,
                         float* ws) {
  constexpr int ROW = D * static_cast<int>(sizeof(T));   // bytes of one key's row
  constexpr int TILE = kAsyncTileBytes / ROW;            // keys per stage: a multiple of 16
  constexpr int CPR = ROW / 16;                          // 16-byte pieces per row
  constexpr int EPP = 16 / static_cast<int>(sizeof(T));  // elements per piece
  constexpr int DPG = D / 8, DPL = D / 32;
  static_assert(TILE % 16 == 0, "every 8-lane group takes as many keys of a tile");
  const PartitionBlock<GC> pb(a, c, chunks, part_len);
  const int kvh = pb.kvh, k0 = pb.k0, n = pb.n;
  const int ntiles = (n + TILE - 1) / TILE;
  const int32_t* table = pb.table;
  const int tid = threadIdx.x, warp = tid >> 5, wl = tid & 31;
  const int grp = wl >> 3, gl = wl & 7;

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* stages = reinterpret_cast<T*>(smem_bytes);                                // [S][TILE][D]
  float* scores = reinterpret_cast<float*>(smem_bytes + S * kAsyncTileBytes);  // [GC][part_len]
  float* red = scores + GC * part_len;                                         // [4][GC][D]
  float* stat = red + 4 * GC * D;                                              // [GC][2]

  // Copies of tile r of `src` (c.k or c.v) into stage r % S, committed as one group (empty when
  // r is past the last tile). Keys past n are not copied: their rows are never used for a result.
  auto issue = [&](const T* src, int r) {
    if (r < ntiles)
      for (int pc = tid; pc < TILE * CPR; pc += 128) {
        const int u = pc / CPR, piece = pc % CPR, j = r * TILE + u;
        if (j < n) {
          const int key = k0 + j;
          CpAsync16(stages + ((r % S) * TILE + u) * D + piece * EPP,
                    src + c.Index(layer, table[key / c.block_size], kvh, key % c.block_size) +
                        piece * EPP);
        }
      }
    CpAsyncCommit();
  };
  // Issues tile r + S - 1, then waits until tile r is in its stage for every thread.
  auto await = [&](const T* src, int r) {
    issue(src, r + S - 1);
    CpAsyncWait<S - 1>();
    __syncthreads();
  };

  float q[GC][DPG];
  LoadQueries<GC, DPG>(a, pb, gl, q);

  // 1. Scores: group g = 4 * warp + grp of the block takes keys g, g + 16, ... of each tile (the
  // loop is uniform across a warp: TILE is a multiple of 16).
  for (int r = 0; r < S - 1; ++r) issue(c.k, r);
  for (int r = 0; r < ntiles; ++r) {
    await(c.k, r);
    const T* stage = stages + (r % S) * TILE * D;
    for (int u = 4 * warp + grp; u < TILE; u += 16) {
      const int j = r * TILE + u;
      float kx[DPG];
      LoadN<T, DPG>(stage + u * D + gl * DPG, kx);
#pragma unroll
      for (int i = 0; i < GC; ++i) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < DPG; ++k) s += q[i][k] * kx[k];
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if (gl == 0 && j < n) scores[i * part_len + j] = s;
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's issue
  }
  // The first V tiles' copies run under the softmax.
  for (int r = 0; r < S - 1; ++r) issue(c.v, r);
  // 2. Softmax of each head's scores.
  PartitionSoftmax<GC>(scores, part_len, n, stat);
  __syncthreads();
  // 3. Values: warp w takes keys w, w + 4, ... of each tile; lane l dims [l * DPL, ...).
  float acc[GC][DPL];
#pragma unroll
  for (int i = 0; i < GC; ++i)
#pragma unroll
    for (int k = 0; k < DPL; ++k) acc[i][k] = 0.f;
  for (int r = 0; r < ntiles; ++r) {
    await(c.v, r);
    const T* stage = stages + (r % S) * TILE * D;
    for (int u = warp; u < TILE; u += 4) {
      const int j = r * TILE + u;
      if (j >= n) break;
      float vx[DPL];
      LoadN<T, DPL>(stage + u * D + wl * DPL, vx);
#pragma unroll
      for (int i = 0; i < GC; ++i) {
        const float p = scores[i * part_len + j];
#pragma unroll
        for (int k = 0; k < DPL; ++k) acc[i][k] += p * vx[k];
      }
    }
    __syncthreads();
  }
  PartitionWrite<T, D, GC>(acc, red, stat, a, pb, out, ws);
}

// Keys per shared-memory stage of the tensor-core kernel: one 16-key slice per warp in phase 1.
constexpr int kMmaTileKeys = 64;
// Query heads a block of the tensor-core kernel serves: the mma's N.
constexpr int kMmaHeads = 8;

// kVariantPartitionMma, for a bf16 cache (FlashInfer's decode with tensor cores for GQA groups):
// PartitionAsyncKernel's three phases, with both products on the tensor cores, so that the
// multiply-adds no longer compete with the K/V stream. A block serves up to 8 query heads of a KV
// group (the mma's N: 4 of the 8 columns are padding for Llama-3's groups of 4).
//   1. Scores S^T = K Q^T: warp w takes keys [16w, 16w + 16) of each 64-key tile (the mma's M);
//      the dims are the mma's K (D / 16 steps, A by ldmatrix from the stage, Q^T in registers
//      as bf16, scaled). Scores of the real heads go to shared memory [nheads][part_len].
//   2. Softmax per head (PartitionSoftmax).
//   3. O^T = V^T P^T: warp w takes dims [w D/4, (w + 1) D/4) (the mma's M: V^T by ldmatrix.trans
//      from the stage) and every key of the tile (the mma's K, P^T from the scores as bf16).
//      Each warp owns its dims: no reduction between warps.
// K and V rows past the partition are zeros in the stage (a zero probability times a stale
// value could be NaN). Shared memory: S stages of 64 keys, scores [nheads][part_len], stats
// [8][2]. grid as PartitionKernel (chunks of 8 heads); block: 128 threads.
// Stream: K's tiles and then V's are one stream of 2 ntiles tiles through the stages (tile u in
// stage u % S), so that V's first tiles are in flight while K's last are used and the softmax
// runs (a one-tile partition, decode at batch 1, then waits once, not twice); without, V's first
// S - 1 tiles are issued after the K pass.
template <int D, int S, bool Stream>
__global__ void __launch_bounds__(128)
    PartitionMmaKernel(AttentionArgs a, KvCache<bf16> c, int layer, int chunks, int part_len,
                       bf16* out, float* ws) {
  constexpr int TILE = kMmaTileKeys, KS = D / 16, MT = D / 64;  // k-steps; m-tiles per warp
  constexpr int CPR = D * 2 / 16;                               // 16-byte pieces per row
  PdlWait();
  const PartitionBlock<kMmaHeads> pb(a, c, chunks, part_len);
  const int kvh = pb.kvh, k0 = pb.k0, n = pb.n, nheads = pb.nheads;
  const int ntiles = (n + TILE - 1) / TILE;
  const int32_t* table = pb.table;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;

  extern __shared__ __align__(16) unsigned char smem_bytes[];
  bf16* stages = reinterpret_cast<bf16*>(smem_bytes);  // [S][TILE][D]
  float* scores =
      reinterpret_cast<float*>(smem_bytes + S * TILE * D * sizeof(bf16));  // [nheads][part_len]
  float* stat = scores + nheads * part_len;                                // [8][2]: max, sum

  // Tile r of `src` into stage `stage` (r % S but in the stream) as one committed group (empty
  // past the last tile); rows past n are zeroed. Row u's 16-byte piece p is stored at piece
  // p ^ (u % 8) (Swz8): the 8 rows an ldmatrix reads, 2 D bytes apart, then fall on different
  // banks.
  auto issue_to = [&](const bf16* src, int r, int stage) {
    if (r < ntiles)
      for (int pc = tid; pc < TILE * CPR; pc += 128) {
        const int u = pc / CPR, piece = pc % CPR, j = r * TILE + u;
        bf16* dst = stages + (stage * TILE + u) * D + Swz8(u, piece) * 8;
        if (j < n) {
          const int key = k0 + j;
          CpAsync16(dst, src + c.Index(layer, table[key / c.block_size], kvh, key % c.block_size) +
                             piece * 8);
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        }
      }
    CpAsyncCommit();
  };
  auto issue = [&](const bf16* src, int r) { issue_to(src, r, r % S); };
  auto await = [&](const bf16* src, int r) {
    issue(src, r + S - 1);
    CpAsyncWait<S - 1>();
    __syncthreads();
  };
  // Stream: tile u of the K-then-V stream (V's tile u - ntiles) in stage u % S; awaiting tile u
  // issues tile u + S - 1 (an empty group past the stream's end).
  auto issue_u = [&](int u) {
    if (u < ntiles)
      issue_to(c.k, u, u % S);
    else
      issue_to(c.v, u - ntiles, u % S);
  };
  auto await_u = [&](int u) {
    issue_u(u + S - 1);
    CpAsyncWait<S - 1>();
    __syncthreads();
  };

  // Q^T as the B fragments: lane (g, cq) holds head g's dims 16 ks + 2 cq, +1 and + 8, + 9.
  uint32_t qf[KS][2];
  {
    const float* qrow = a.q + pb.t * a.q_stride + (pb.h0 + g) * D;
    const float sc = a.scale;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const int d = 16 * ks + 2 * cq;
      qf[ks][0] = g < nheads ? PackBf16(qrow[d] * sc, qrow[d + 1] * sc) : 0u;  // padding: zeros
      qf[ks][1] = g < nheads ? PackBf16(qrow[d + 8] * sc, qrow[d + 9] * sc) : 0u;
    }
  }

  // 1. Scores. Lane l of warp w gives the address of row (l % 8) + 8 ((l / 8) % 2) of the warp's
  // 16 keys at dims 16 ks + 8 (l / 16): the four 8 x 8 pieces of A in register order.
  for (int r = 0; r < S - 1; ++r) Stream ? issue_u(r) : issue(c.k, r);
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  for (int r = 0; r < ntiles; ++r) {
    Stream ? await_u(r) : await(c.k, r);
    const bf16* stage = stages + (r % S) * TILE * D;
    float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t af[4];
      const int row = 16 * warp + a_row;
      LdMatrixX4<false>(stage + row * D + Swz8(row, 2 * ks + a_col / 8) * 8, af);
      MmaBf16(af, qf[ks][0], qf[ks][1], sc);
    }
    // sc: keys 16 warp + g (+ 8 for sc[2], sc[3]), heads 2 cq and 2 cq + 1.
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = 2 * cq + (e & 1), j = r * TILE + 16 * warp + g + (e >> 1) * 8;
      if (h < nheads && j < n) scores[h * part_len + j] = sc[e];
    }
    __syncthreads();  // the stage is refilled by the next iteration's issue
  }
  if (!Stream)
    for (int r = 0; r < S - 1; ++r) issue(c.v, r);  // under the softmax
  // 2. Softmax of each real head's scores.
  PartitionSoftmax<kMmaHeads>(scores, part_len, n, stat, nheads);
  __syncthreads();
  // 3. Values. ldmatrix.trans pieces of the warp's 16 dims at m0 and 16 keys at kb: lane l gives
  // row (key) kb + (l % 8) + 8 (l / 16) at dims m0 + 8 ((l / 8) % 2).
  float acc[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[m][e] = 0.f;
  const int v_row = (lane & 7) + (lane >> 4) * 8, v_col = ((lane >> 3) & 1) * 8;
  const float* prow = scores + (g < nheads ? g : 0) * part_len;  // P^T's column g
  for (int r = 0; r < ntiles; ++r) {
    Stream ? await_u(ntiles + r) : await(c.v, r);
    const bf16* stage = stages + ((Stream ? ntiles + r : r) % S) * TILE * D;
#pragma unroll
    for (int kk = 0; kk < TILE / 16; ++kk) {
      // B: P[g][keys 2 cq, + 1, + 8, + 9 of the 16], zero past n and for padding heads.
      const int j = r * TILE + 16 * kk + 2 * cq;
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int jj = j + (e & 1) + (e >> 1) * 8;
        p[e] = g < nheads && jj < n ? prow[jj] : 0.f;
      }
      const uint32_t b0 = PackBf16(p[0], p[1]), b1 = PackBf16(p[2], p[3]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int m0 = (warp * MT + m) * 16;
        uint32_t af[4];
        const int row = 16 * kk + v_row;
        LdMatrixX4<true>(stage + row * D + Swz8(row, (m0 + v_col) / 8) * 8, af);
        MmaBf16(af, b0, b1, acc[m]);
      }
    }
    __syncthreads();
  }
  // acc[m]: dims m0 + g (+ 8 for [2], [3]) of heads 2 cq and 2 cq + 1.
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = 2 * cq + (e & 1), d = (warp * MT + m) * 16 + g + (e >> 1) * 8;
      if (h >= nheads) continue;
      const float M = stat[2 * h], L = n > 0 ? stat[2 * h + 1] : 0.f;
      WriteResult(a, pb.t, pb.i_row, pb.h0 + h, d, D, pb.part, acc[m][e], M, L, out, ws);
    }
}

// grid: (T, heads); block: 128 threads over head_dim. Merges the splits' partial results, and the
// cascade's partial (slot `splits`) for rows with key_begin > 0.
template <class T>
__global__ void MergeSplitsKernel(const float* ws, const int32_t* rows, const int32_t* key_begin,
                                  int num_tokens, int num_heads, int D, int splits, T* out) {
  PdlWait();
  const int i_row = blockIdx.x, h = blockIdx.y, t = rows ? rows[i_row] : i_row;
  const int slots = splits + (key_begin ? 1 : 0);
  // The cascade slot of a row outside every group was never written: it is not read.
  const int used = splits + (key_begin && key_begin[i_row] > 0 ? 1 : 0);
  const int64_t part0 = (static_cast<int64_t>(i_row) * num_heads + h) * slots;
  const float* ml = ws + static_cast<int64_t>(num_tokens) * num_heads * slots * D;
  float M = -INFINITY;
  for (int s = 0; s < used; ++s)
    if (ml[2 * (part0 + s) + 1] > 0.f) M = fmaxf(M, ml[2 * (part0 + s)]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float L = 0.f, A = 0.f;
    for (int s = 0; s < used; ++s) {
      const float Ls = ml[2 * (part0 + s) + 1];
      if (Ls > 0.f) {
        const float e = expf(ml[2 * (part0 + s)] - M);
        L += Ls * e;
        A += ws[(part0 + s) * D + d] * e;
      }
    }
    Store(out + static_cast<int64_t>(t) * num_heads * D + h * D + d, L > 0.f ? A / L : 0.f);
  }
}

// After a kernel that wrote partial results (several splits, or cascade rows): their merge.
template <class T>
cudaError_t MergeIfSplit(const AttentionArgs& a, const KvCache<T>& c, T* out, cudaStream_t stream) {
  if (a.slot_stride() > 1)
    return LaunchPdl(MergeSplitsKernel<T>, dim3(a.num_tokens, a.num_heads), dim3(128), 0, stream,
                     a.workspace, a.rows, a.key_begin, a.num_tokens, a.num_heads, c.head_dim,
                     a.num_splits, out);
  return cudaGetLastError();
}

template <class T, int DPL, int GC>
cudaError_t Launch(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                   cudaStream_t stream) {
  const int G = a.num_heads / c.kv_heads, chunks = (G + GC - 1) / GC;
  const dim3 grid(a.num_tokens, c.kv_heads * chunks, a.num_splits);
  // Key tiles of 4 where the registers allow (kVariantOnlineSingleKey: one key at a time).
  constexpr int kTile = (DPL * GC >= 32) ? 2 : 4;
  if (a.variant == kVariantOnlineSingleKey)
    AttentionKernel<T, DPL, GC, 1>
        <<<grid, dim3(32, kWarps), 0, stream>>>(a, c, layer, chunks, out, a.workspace);
  else
    AttentionKernel<T, DPL, GC, kTile>
        <<<grid, dim3(32, kWarps), 0, stream>>>(a, c, layer, chunks, out, a.workspace);
  return MergeIfSplit(a, c, out, stream);
}

// The partition length: the context split into num_splits ranges, rounded up to 32 keys.
int PartLen(const AttentionArgs& a) {
  const int len = (a.max_context + a.num_splits - 1) / a.num_splits;
  return (len + 31) / 32 * 32;
}

// A partition kernel's launch with `gc` query heads a block (PartitionBlock): the KV group's head
// chunks, the partition length, and the grid (rows, kv heads x chunks, partitions).
struct PartitionLaunch {
  int chunks, part_len;
  dim3 grid;
  template <class T>
  PartitionLaunch(const AttentionArgs& a, const KvCache<T>& c, int gc)
      : chunks((a.num_heads / c.kv_heads + gc - 1) / gc),
        part_len(PartLen(a)),
        grid(a.num_tokens, c.kv_heads * chunks, a.num_splits) {}
};

template <class T, int DPG, int GC, int KPG>
cudaError_t LaunchPartitionKpg(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                               cudaStream_t stream) {
  constexpr int D = 8 * DPG;
  const PartitionLaunch pl(a, c, GC);
  const size_t smem = sizeof(float) * (GC * pl.part_len + 4 * GC * D + 2 * GC);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // PartitionFits keeps it under
  PartitionKernel<T, DPG, GC, KPG>
      <<<pl.grid, 128, smem, stream>>>(a, c, layer, pl.chunks, pl.part_len, out, a.workspace);
  return MergeIfSplit(a, c, out, stream);
}

template <class T, int DPG, int GC, int S>
cudaError_t LaunchPartitionAsync(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                                 cudaStream_t stream) {
  constexpr int D = 8 * DPG;
  const PartitionLaunch pl(a, c, GC);
  const size_t smem =
      S * kAsyncTileBytes + sizeof(float) * (GC * pl.part_len + 4 * GC * D + 2 * GC);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // 24 + 8 + 8 KB at most (kMaxPartLen)
  PartitionAsyncKernel<T, D, GC, S>
      <<<pl.grid, 128, smem, stream>>>(a, c, layer, pl.chunks, pl.part_len, out, a.workspace);
  return MergeIfSplit(a, c, out, stream);
}

// Shared memory of the tensor-core kernel: S stages of kMmaTileKeys rows, scores of up to 8 heads,
// stats.
template <int D, int S>
size_t MmaSmemBytes(int heads, int part_len) {
  return size_t{S} * kMmaTileKeys * D * sizeof(bf16) + sizeof(float) * (heads * part_len + 16);
}

// The deep tensor-core kernel's stages, and the most shared memory it may take (8 heads, 512-key
// partitions: 80 KB at head_dim 128, within every sm_80+ device's opt-in limit).
constexpr int kMmaDeepStages = 4;
template <int D>
size_t MmaDeepSmemMax() {
  return MmaSmemBytes<D, kMmaDeepStages>(kMmaHeads, kMaxPartLen);
}
// Lets the deep kernel take more than the default 48 KB on the current device; once per device
// (PrepareAttention calls it before any launch can be captured in a graph).
template <int D>
cudaError_t MmaDeepReady() {
  static std::atomic<uint64_t> ready{0};  // bit d: done on device d (devices 0-63)
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (ready.load(std::memory_order_acquire) & bit) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(PartitionMmaKernel<D, kMmaDeepStages, true>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(MmaDeepSmemMax<D>()));
  if (e == cudaSuccess) ready.fetch_or(bit, std::memory_order_acq_rel);
  return e;
}

// kVariantPartitionMma (S = 2 stages) or kVariantPartitionMmaDeep (S = kMmaDeepStages) where it
// applies: a bf16 cache, and for S = 2 at most 48 KB of shared memory (a KV group of 8 heads or
// more at head_dim 128 with 512-key partitions needs 48 KB and 64 bytes); false when it does not,
// for the caller to take the cp.async kernel.
template <class T, int D, int S, bool Stream>
bool LaunchPartitionMma(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                        cudaStream_t stream, cudaError_t* err) {
  if constexpr (!std::is_same_v<T, bf16>) {
    return false;
  } else {
    const PartitionLaunch pl(a, c, kMmaHeads);
    const size_t smem =
        MmaSmemBytes<D, S>(std::min(a.num_heads / c.kv_heads, kMmaHeads), pl.part_len);
    if (smem > (S == kMmaDeepStages ? MmaDeepSmemMax<D>() : 48 * 1024)) return false;
    if constexpr (S == kMmaDeepStages) {
      if (const cudaError_t e = MmaDeepReady<D>(); e != cudaSuccess) {
        *err = e;
        return true;
      }
    }
    if ((*err = LaunchPdl(PartitionMmaKernel<D, S, Stream>, pl.grid, dim3(128), smem, stream, a, c,
                          layer, pl.chunks, pl.part_len, out, a.workspace)) != cudaSuccess)
      return true;
    *err = MergeIfSplit(a, c, out, stream);
    return true;
  }
}

template <class T, int DPG, int GC>
cudaError_t LaunchPartition(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                            cudaStream_t stream) {
  if (a.variant == kVariantPartitionAsync || a.variant == kVariantAuto ||
      a.variant == kVariantPartitionAsyncHalf || a.variant == kVariantPartitionMma ||
      a.variant == kVariantPartitionMmaStream || a.variant == kVariantPartitionMmaDeep)
    return LaunchPartitionAsync<T, DPG, GC, 2>(a, c, layer, out, stream);
  if (a.variant == kVariantPartitionAsyncDeep)
    return LaunchPartitionAsync<T, DPG, GC, 3>(a, c, layer, out, stream);
  return a.variant == kVariantPartitionWide
             ? LaunchPartitionKpg<T, DPG, GC, 2>(a, c, layer, out, stream)
             : LaunchPartitionKpg<T, DPG, GC, 1>(a, c, layer, out, stream);
}

template <class T, int DPG>
cudaError_t LaunchPartitionDpg(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                               cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  if ((a.variant == kVariantPartitionMma || a.variant == kVariantAuto) &&
      LaunchPartitionMma<T, 8 * DPG, 2, false>(a, c, layer, out, stream, &err))
    return err;
  if (a.variant == kVariantPartitionMmaStream &&
      LaunchPartitionMma<T, 8 * DPG, 2, true>(a, c, layer, out, stream, &err))
    return err;
  if (a.variant == kVariantPartitionMmaDeep &&
      LaunchPartitionMma<T, 8 * DPG, kMmaDeepStages, true>(a, c, layer, out, stream, &err))
    return err;
  const int G = a.num_heads / c.kv_heads;
  if (G >= 4 && a.variant != kVariantPartitionAsyncHalf)
    return LaunchPartition<T, DPG, 4>(a, c, layer, out, stream);
  if (G >= 2) return LaunchPartition<T, DPG, 2>(a, c, layer, out, stream);
  return LaunchPartition<T, DPG, 1>(a, c, layer, out, stream);
}

template <class T, int DPL>
cudaError_t LaunchDpl(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                      cudaStream_t stream) {
  const int G = a.num_heads / c.kv_heads;
  if (G >= 8) return Launch<T, DPL, 8>(a, c, layer, out, stream);
  if (G >= 4) return Launch<T, DPL, 4>(a, c, layer, out, stream);
  if (G >= 2) return Launch<T, DPL, 2>(a, c, layer, out, stream);
  return Launch<T, DPL, 1>(a, c, layer, out, stream);
}

}  // namespace

int AttentionSplits(int num_tokens, int kv_heads, int max_context, int num_sms,
                    int min_split_keys) {
  const int64_t blocks = int64_t{num_tokens} * kv_heads, target = 2 * int64_t{num_sms};
  if (blocks <= 0 || blocks >= target) return 1;
  const int64_t want = (target + blocks - 1) / blocks;
  return static_cast<int>(
      std::clamp<int64_t>(want, 1, std::max(1, max_context / std::max(1, min_split_keys))));
}

int AttentionSplitsFor(int num_tokens, int kv_heads, int max_context, int num_sms,
                       int min_split_keys) {
  // At least enough partitions that a partition's scores fit the shared memory.
  const int min_parts = (max_context + kMaxPartLen - 1) / kMaxPartLen;
  return std::max(AttentionSplits(num_tokens, kv_heads, max_context, num_sms, min_split_keys),
                  min_parts);
}

bool PartitionFits(int head_dim, int max_context, int num_splits) {
  if (head_dim != 64 && head_dim != 128) return false;
  return (max_context + num_splits - 1) / num_splits <= kMaxPartLen;
}

cudaError_t PrepareAttention() {
  int device = 0, major = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e =
          cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      e != cudaSuccess)
    return e;
  if (major < 8) return cudaSuccess;  // no tensor-core kernels there
  if (const cudaError_t e = MmaDeepReady<64>(); e != cudaSuccess) return e;
  return MmaDeepReady<128>();
}

int64_t AttentionWorkspaceFloats(int num_tokens, int num_heads, int head_dim, int num_splits) {
  return int64_t{num_tokens} * num_heads * num_splits * (head_dim + 2);
}

template <class T>
cudaError_t PagedAttention(const AttentionArgs& a, const KvCache<T>& c, int layer, T* out,
                           cudaStream_t stream) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (c.kv_heads <= 0 || a.num_heads % c.kv_heads || a.num_splits < 1 ||
      (a.slot_stride() > 1 && !a.workspace))
    return cudaErrorInvalidValue;
  const int D = c.head_dim;
  const bool partition =
      a.variant >= kVariantPartition ||
      (a.variant == kVariantAuto && PartitionFits(D, a.max_context, a.num_splits));
  if (partition) {
    if (!PartitionFits(D, a.max_context, a.num_splits)) return cudaErrorInvalidValue;
    return D == 64 ? LaunchPartitionDpg<T, 8>(a, c, layer, out, stream)
                   : LaunchPartitionDpg<T, 16>(a, c, layer, out, stream);
  }
  if (D <= 32) return LaunchDpl<T, 1>(a, c, layer, out, stream);
  if (D <= 64) return LaunchDpl<T, 2>(a, c, layer, out, stream);
  if (D <= 128) return LaunchDpl<T, 4>(a, c, layer, out, stream);
  if (D <= 256) return LaunchDpl<T, 8>(a, c, layer, out, stream);
  return cudaErrorInvalidValue;
}

template cudaError_t PagedAttention<float>(const AttentionArgs&, const KvCache<float>&, int, float*,
                                           cudaStream_t);
template cudaError_t PagedAttention<bf16>(const AttentionArgs&, const KvCache<bf16>&, int, bf16*,
                                          cudaStream_t);

}  // namespace llmq::kernels::cuda
