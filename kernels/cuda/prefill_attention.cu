#include <type_traits>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/reduce.cuh"

namespace llmq::kernels::cuda {
namespace {

int64_t Align(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// grid: (ctx, kv_heads); block: 128 threads over D.   kc, vc: [kv_heads, ctx, D]
template <class T>
__global__ void GatherKernel(KvCache<T> c, int layer, const int32_t* table, int ctx, T* kc, T* vc) {
  const int j = blockIdx.x, g = blockIdx.y, D = c.head_dim;
  const int64_t src = c.Index(layer, table[j / c.block_size], g, j % c.block_size);
  const int64_t dst = (static_cast<int64_t>(g) * ctx + j) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    kc[dst + d] = c.k[src + d];
    vc[dst + d] = c.v[src + d];
  }
}

// grid: (q_len, heads); block: 128 over D.   qc: [heads, q_len, D] = [kv_heads, G * q_len, D]
template <class T>
__global__ void PackQKernel(PrefillChunk p, int D, T* qc) {
  const int r = blockIdx.x, h = blockIdx.y;
  const float* src = p.q + (p.row0 + r) * p.q_stride + h * D;
  T* dst = qc + (static_cast<int64_t>(h) * p.q_len + r) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) dst[d] = FromF<T>(src[d] * p.scale);
}

// grid: heads * q_len rows; block: 256. Row R = h * q_len + r holds the scores of the query at
// position p0 + r; keys after it get probability 0.
template <class T>
__global__ void CausalSoftmaxKernel(const float* s, int q_len, int p0, int ctx, T* p) {
  const int64_t R = blockIdx.x;
  const int last = p0 + static_cast<int>(R % q_len);  // the last key this row sees
  const float* row = s + R * ctx;
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, row[j]);
  __shared__ float sm;
  m = WarpMax(m);
  __shared__ float part[32];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : -INFINITY;
    v = WarpMax(v);
    if (threadIdx.x == 0) sm = v;
  }
  __syncthreads();
  m = sm;
  float l = 0.f;
  for (int j = threadIdx.x; j <= last; j += blockDim.x) l += expf(row[j] - m);
  l = BlockSum(l);
  const float inv = 1.f / l;
  T* out = p + R * ctx;
  for (int j = threadIdx.x; j < ctx; j += blockDim.x)
    out[j] = FromF<T>(j <= last ? expf(row[j] - m) * inv : 0.f);
}

// grid: (q_len, heads); block: 128 over D.   o: [heads, q_len, D] float -> out rows row0 + r.
template <class T>
__global__ void ScatterKernel(const float* o, int row0, int q_len, int heads, int D, T* out) {
  const int r = blockIdx.x, h = blockIdx.y;
  const float* src = o + (static_cast<int64_t>(h) * q_len + r) * D;
  T* dst = out + static_cast<int64_t>(row0 + r) * heads * D + h * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) dst[d] = FromF<T>(src[d]);
}

// Where (row, head)'s cascade slot lies in the paged kernel's workspace (AttentionWorkspaceFloats).
__device__ __forceinline__ int64_t CascadePart(const CascadeGroup& g, int r, int h) {
  const int slots = g.num_splits + 1;
  return (static_cast<int64_t>(g.rows.row0 + r) * g.rows.num_heads + h) * slots + g.num_splits;
}

// grid: heads * n rows; block: 256. Row R = h * n + r of S [heads, n, ctx]: P = exp(S - M) in T;
// M and L (the sum of P as stored, so that L matches the P the product uses) go to the row's
// cascade slot of the workspace stats.
template <class T>
__global__ void PartialSoftmaxKernel(const float* s, int ctx, CascadeGroup g, int D, T* p) {
  const int n = g.rows.q_len;
  const int64_t R = blockIdx.x;
  const int h = static_cast<int>(R / n), r = static_cast<int>(R % n);
  const float* row = s + R * ctx;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < ctx; j += blockDim.x) m = fmaxf(m, row[j]);
  m = BlockMax(m);
  float l = 0.f;
  T* out = p + R * ctx;
  for (int j = threadIdx.x; j < ctx; j += blockDim.x) {
    const T e = FromF<T>(expf(row[j] - m));
    out[j] = e;
    l += ToF(e);
  }
  l = BlockSum(l);
  if (threadIdx.x == 0) {
    const int64_t slots = g.num_splits + 1;
    float* ml = g.workspace + static_cast<int64_t>(g.ws_rows) * g.rows.num_heads * slots * D;
    const int64_t part = CascadePart(g, r, h);
    ml[2 * part] = m;
    ml[2 * part + 1] = l;
  }
}

// grid: (n, heads); block: 128 over D.   o: [heads, n, D] float -> the rows' cascade slot sums.
__global__ void ScatterPartialKernel(const float* o, CascadeGroup g, int D) {
  const int r = blockIdx.x, h = blockIdx.y;
  const float* src = o + (static_cast<int64_t>(h) * g.rows.q_len + r) * D;
  float* dst = g.workspace + CascadePart(g, r, h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) dst[d] = src[d];
}

}  // namespace

int64_t PrefillScratchBytes(int q_len, int ctx, int num_heads, int kv_heads, int head_dim,
                            int elem_size) {
  const int64_t kv = int64_t{kv_heads} * ctx * head_dim * elem_size;
  const int64_t q = int64_t{num_heads} * q_len * head_dim * elem_size;
  const int64_t s = int64_t{num_heads} * q_len * ctx * 4;
  const int64_t p = int64_t{num_heads} * q_len * ctx * elem_size;
  const int64_t o = int64_t{num_heads} * q_len * head_dim * 4;
  return 2 * Align(kv) + Align(q) + Align(s) + Align(p) + Align(o);
}

int64_t CascadeScratchBytes(int num_rows, int shared_len, int num_heads, int kv_heads, int head_dim,
                            int elem_size) {
  return PrefillScratchBytes(num_rows, shared_len, num_heads, kv_heads, head_dim, elem_size);
}

namespace {

// Steps 1-5 of PrefillAttention for the chunk `c` over ctx keys, with `softmax(s, p)` launching
// step 4 (S [heads, q_len, ctx] float -> P in T); O [heads, q_len, D] float is left in *o.
template <class T, class Softmax>
KernelStatus Attend(cublasHandle_t handle, const PrefillChunk& c, int ctx, const KvCache<T>& cache,
                    int layer, void* scratch, cudaStream_t stream, Softmax softmax, float** o) {
  KernelStatus st;
  const CublasApi* api = Cublas();
  if (!api) {
    st.blas = CUBLAS_STATUS_NOT_INITIALIZED;
    st.where = "loading cuBLAS";
    return st;
  }
  const int D = cache.head_dim, nkv = cache.kv_heads, G = c.num_heads / nkv;
  const int rows = G * c.q_len;
  const int64_t es = sizeof(T);
  // The buffers of PrefillScratchBytes, in its order.
  char* at = static_cast<char*>(scratch);
  T* kc = reinterpret_cast<T*>(at);
  at += Align(int64_t{nkv} * ctx * D * es);
  T* vc = reinterpret_cast<T*>(at);
  at += Align(int64_t{nkv} * ctx * D * es);
  T* qc = reinterpret_cast<T*>(at);
  at += Align(int64_t{c.num_heads} * c.q_len * D * es);
  float* s = reinterpret_cast<float*>(at);
  at += Align(int64_t{c.num_heads} * c.q_len * ctx * 4);
  T* p = reinterpret_cast<T*>(at);
  at += Align(int64_t{c.num_heads} * c.q_len * ctx * es);
  *o = reinterpret_cast<float*>(at);

  auto launched = [&](const char* where) {
    st.cuda = cudaGetLastError();
    st.where = where;
    return st.ok();
  };
  const cudaDataType_t type = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
  const float one = 1.f, zero = 0.f;

  GatherKernel<T><<<dim3(ctx, nkv), 128, 0, stream>>>(cache, layer, c.block_table, ctx, kc, vc);
  if (!launched("gather K/V")) return st;
  PackQKernel<T><<<dim3(c.q_len, c.num_heads), 128, 0, stream>>>(c, D, qc);
  if (!launched("pack Q")) return st;
  // Column-major: Sᵀ [ctx, rows] = Kc [ctx, D] (row-major, transposed) · Qcᵀ [D, rows], per kv
  // head.
  st.blas = api->gemm_strided_batched_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, ctx, rows, D, &one, kc,
                                         type, D, int64_t{ctx} * D, qc, type, D, int64_t{rows} * D,
                                         &zero, s, CUDA_R_32F, ctx, int64_t{rows} * ctx, nkv,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  st.where = "S = Q K^T";
  if (!st.ok()) return st;
  softmax(s, p);
  if (!launched("softmax")) return st;
  // Column-major: Oᵀ [D, rows] = Vcᵀ [D, ctx] · Pᵀ [ctx, rows], per kv head.
  st.blas = api->gemm_strided_batched_ex(
      handle, CUBLAS_OP_N, CUBLAS_OP_N, D, rows, ctx, &one, vc, type, D, int64_t{ctx} * D, p, type,
      ctx, int64_t{rows} * ctx, &zero, *o, CUDA_R_32F, D, int64_t{rows} * D, nkv,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  st.where = "O = P V";
  return st;
}

// Keys per shared-memory tile of the fused prefill kernel, and query rows per block (16 a warp).
constexpr int kFlashKeys = 32, kFlashRows = 64;

// FlashPrefillAttention's kernel (Partial false) and FlashCascadeAttention's (Partial true):
// FlashAttention-2's forward on mma.sync (bf16 in, float sums). The rows are cg.rows; with
// Partial, every row sees the keys [0, cg.shared_len) (no mask: they precede every row) and its
// unnormalised (O, M, L) goes to its cascade slot of cg.workspace, as PartialSoftmaxKernel's and
// ScatterPartialKernel's; without, row r sees the keys [0, p0 + r] and O / L goes to `out`.
// grid: x = tile of 64 of the chunk's rows, longest first, y = KV head; block: 4 warps of 16 rows.
// Row R = r * G + hg stands for the chunk's query row r (position p0 + r) at query head hg of KV
// group y, so a tile covers consecutive positions and one K/V read serves the group's G heads.
// K and V of keys [0, the tile's last position] come in 32-key tiles through cp.async (the next
// tile's copies in flight while one is used; rows swizzled as Swz8; rows past the context zeroed).
// Per warp and tile, with the mma's fragment layouts (kernels/cuda/mma.cuh):
//   S = Q K^T (16 x 32): Q's A fragments stay in registers (scaled by scale * log2 e, so that the
//     softmax runs in base 2), K^T's B fragments by ldmatrix from the tile;
//   keys after a row's position get -inf; the online softmax works on the fragments: a row's
//     max is exchanged among the 4 lanes holding it, its sum is kept per lane and added at the end;
//   O (16 x D) += P V: the C fragments of S are P's A fragments once rounded to bf16; V's B
//     fragments by ldmatrix.trans.
template <int D, bool Partial>
__global__ void __launch_bounds__(128)
    FlashKernel(CascadeGroup cg, KvCache<bf16> cache, int layer, bf16* out) {
  const PrefillChunk& c = cg.rows;
  constexpr int KS = D / 16, NT = kFlashKeys / 8, DT = D / 8, CPR = D / 8;
  const int kvh = blockIdx.y, G = c.num_heads / cache.kv_heads, rows = c.q_len * G;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
  const int R0 = (gridDim.x - 1 - blockIdx.x) * kFlashRows;  // the longest tiles start first
  // This lane's two rows (A and C fragments: rows g and g + 8 of the warp's 16) and the last key
  // each sees; a row past the chunk takes the last row's position and writes nothing.
  const int ra = R0 + 16 * warp + g, rb = ra + 8;
  const bool va = ra < rows, vb = rb < rows;
  const int pos_a = Partial ? cg.shared_len - 1 : c.p0 + min(ra, rows - 1) / G;
  const int pos_b = Partial ? cg.shared_len - 1 : c.p0 + min(rb, rows - 1) / G;
  const int nkeys = Partial ? cg.shared_len : c.p0 + (min(R0 + kFlashRows, rows) - 1) / G + 1;
  const int ntiles = (nkeys + kFlashKeys - 1) / kFlashKeys;

  __shared__ __align__(16) bf16 ks[2][kFlashKeys * D], vs[2][kFlashKeys * D];
  auto issue = [&](int t) {  // tile t into stage t % 2, one committed group
    if (t < ntiles)
      for (int pc = tid; pc < kFlashKeys * CPR; pc += 128) {
        const int u = pc / CPR, piece = pc % CPR, j = t * kFlashKeys + u;
        const int at = u * D + Swz8(u, piece) * 8;
        if (j < nkeys) {
          const int64_t src =
              cache.Index(layer, c.block_table[j / cache.block_size], kvh, j % cache.block_size) +
              piece * 8;
          CpAsync16(&ks[t & 1][at], cache.k + src);
          CpAsync16(&vs[t & 1][at], cache.v + src);
        } else {
          *reinterpret_cast<uint4*>(&ks[t & 1][at]) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(&vs[t & 1][at]) = make_uint4(0, 0, 0, 0);
        }
      }
    CpAsyncCommit();
  };
  issue(0);

  // Q's A fragments: reg 0 row a dims 16 ks + 2 cq (+1), 1 row b, 2 row a + 8 dims, 3 row b.
  uint32_t qf[KS][4];
  {
    const float s = c.scale * 1.4426950408889634f;
    auto row = [&](int r) {
      r = min(r, rows - 1);
      return c.q + (c.row0 + r / G) * c.q_stride + (kvh * G + r % G) * D;
    };
    const float *qa = row(ra), *qb = row(rb);
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      const int d = 16 * k + 2 * cq;
      qf[k][0] = va ? PackBf16(qa[d] * s, qa[d + 1] * s) : 0u;
      qf[k][1] = vb ? PackBf16(qb[d] * s, qb[d + 1] * s) : 0u;
      qf[k][2] = va ? PackBf16(qa[d + 8] * s, qa[d + 9] * s) : 0u;
      qf[k][3] = vb ? PackBf16(qb[d + 8] * s, qb[d + 9] * s) : 0u;
    }
  }
  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;
  const int mi = lane >> 3, mr = lane & 7;  // the ldmatrix matrix and row this lane addresses

  for (int t = 0; t < ntiles; ++t) {
    issue(t + 1);
    CpAsyncWait<1>();
    __syncthreads();
    const bf16 *K = ks[t & 1], *V = vs[t & 1];
    // S = Q K^T: matrices (keys 8 (np + mi / 2) .., dims 16 k + 8 (mi % 2) ..) give the B
    // fragments of key tiles np and np + 1.
    float s[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int k = 0; k < KS; ++k)
#pragma unroll
      for (int np = 0; np < NT; np += 2) {
        const int key = 8 * (np + (mi >> 1)) + mr;
        uint32_t b[4];
        LdMatrixX4<false>(K + key * D + Swz8(key, 2 * k + (mi & 1)) * 8, b);
        MmaBf16(qf[k], b[0], b[1], s[np]);
        MmaBf16(qf[k], b[2], b[3], s[np + 1]);
      }
    // The causal mask and the online softmax (s[i][0..1]: row a, keys 8 i + 2 cq (+1); [2..3]:
    // row b).
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = t * kFlashKeys + 8 * i + 2 * cq + (e & 1);
        if (key > (e < 2 ? pos_a : pos_b)) s[i][e] = -INFINITY;
        if (e < 2)
          mx_a = fmaxf(mx_a, s[i][e]);
        else
          mx_b = fmaxf(mx_b, s[i][e]);
      }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    // A row that has seen no key yet keeps max -inf: its base is 0 and its p are 0.
    const float base_a = mx_a == -INFINITY ? 0.f : mx_a, base_b = mx_b == -INFINITY ? 0.f : mx_b;
    const float corr_a = exp2f(m_a - base_a), corr_b = exp2f(m_b - base_b);
    m_a = mx_a;
    m_b = mx_b;
    l_a *= corr_a;
    l_b *= corr_b;
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      o[i][0] *= corr_a;
      o[i][1] *= corr_a;
      o[i][2] *= corr_b;
      o[i][3] *= corr_b;
    }
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      s[i][0] = exp2f(s[i][0] - base_a);
      s[i][1] = exp2f(s[i][1] - base_a);
      s[i][2] = exp2f(s[i][2] - base_b);
      s[i][3] = exp2f(s[i][3] - base_b);
      l_a += s[i][0] + s[i][1];
      l_b += s[i][2] + s[i][3];
    }
    // O += P V over the tile's keys, 16 at a time: P's A fragments are S's C fragments of key
    // tiles 2 kk and 2 kk + 1; matrices (keys 16 kk + 8 (mi % 2) .., dims 8 (dp + mi / 2) ..),
    // transposed, give V's B fragments of dim tiles dp and dp + 1.
#pragma unroll
    for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
      const uint32_t pa[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                              PackBf16(s[2 * kk][2], s[2 * kk][3]),
                              PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int key = 16 * kk + 8 * (mi & 1) + mr;
#pragma unroll
      for (int dp = 0; dp < DT; dp += 2) {
        uint32_t b[4];
        LdMatrixX4<true>(V + key * D + Swz8(key, dp + (mi >> 1)) * 8, b);
        MmaBf16(pa, b[0], b[1], o[dp]);
        MmaBf16(pa, b[2], b[3], o[dp + 1]);
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's issue
  }
  // Each row's sum over its 4 lanes.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  if constexpr (Partial) {
    // (O, M, L) to the row's cascade slot: M in the scores' natural units (the merge takes
    // expf(M - M')), so the base-2 running max times ln 2; a row that saw no key weighs nothing.
    const int64_t slots = cg.num_splits + 1;
    float* ml = cg.workspace + static_cast<int64_t>(cg.ws_rows) * c.num_heads * slots * D;
    auto put = [&](int r, float m, float l, const float(&acc)[DT][4], int e) {
      const int64_t part = CascadePart(cg, r / G, kvh * G + r % G);
#pragma unroll
      for (int i = 0; i < DT; ++i)
        *reinterpret_cast<float2*>(cg.workspace + part * D + 8 * i + 2 * cq) =
            make_float2(acc[i][e], acc[i][e + 1]);
      if (cq == 0) {
        ml[2 * part] = l > 0.f ? m * 0.6931471805599453f : 0.f;
        ml[2 * part + 1] = l;
      }
    };
    if (va) put(ra, m_a, l_a, o, 0);
    if (vb) put(rb, m_b, l_b, o, 2);
    return;
  }
  // O / L to the rows' heads of `out`.
  const int64_t stride = int64_t{c.num_heads} * D;
  auto put = [&](int r, float inv, float x, float y, int d) {
    bf16* at = out + (c.row0 + r / G) * stride + (kvh * G + r % G) * D + d;
    *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(x * inv, y * inv);
  };
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
#pragma unroll
  for (int i = 0; i < DT; ++i) {
    const int d = 8 * i + 2 * cq;
    if (va) put(ra, inv_a, o[i][0], o[i][1], d);
    if (vb) put(rb, inv_b, o[i][2], o[i][3], d);
  }
}

}  // namespace

template <class T>
KernelStatus PrefillAttention(cublasHandle_t handle, const PrefillChunk& c, const KvCache<T>& cache,
                              int layer, void* scratch, T* out, cudaStream_t stream) {
  const int ctx = c.p0 + c.q_len;
  float* o = nullptr;
  KernelStatus st = Attend<T>(
      handle, c, ctx, cache, layer, scratch, stream,
      [&](const float* s, T* p) {
        CausalSoftmaxKernel<T><<<c.num_heads * c.q_len, 256, 0, stream>>>(s, c.q_len, c.p0, ctx, p);
      },
      &o);
  if (!st.ok()) return st;
  ScatterKernel<T><<<dim3(c.q_len, c.num_heads), 128, 0, stream>>>(o, c.row0, c.q_len, c.num_heads,
                                                                   cache.head_dim, out);
  st.cuda = cudaGetLastError();
  st.where = "scatter O";
  return st;
}

template <class T>
KernelStatus CascadePrefixAttention(cublasHandle_t handle, const CascadeGroup& g,
                                    const KvCache<T>& cache, int layer, void* scratch,
                                    cudaStream_t stream) {
  const int D = cache.head_dim, n = g.rows.q_len;
  float* o = nullptr;
  KernelStatus st = Attend<T>(
      handle, g.rows, g.shared_len, cache, layer, scratch, stream,
      [&](const float* s, T* p) {
        PartialSoftmaxKernel<T><<<g.rows.num_heads * n, 256, 0, stream>>>(s, g.shared_len, g, D, p);
      },
      &o);
  if (!st.ok()) return st;
  ScatterPartialKernel<<<dim3(n, g.rows.num_heads), 128, 0, stream>>>(o, g, D);
  st.cuda = cudaGetLastError();
  st.where = "scatter the partial O";
  return st;
}

bool FlashPrefillFits(int head_dim, int elem_size) {
  return elem_size == 2 && (head_dim == 64 || head_dim == 128);
}

namespace {

// FlashKernel's launch over cg.rows: tiles of 64 rows x KV heads.
template <bool Partial>
cudaError_t LaunchFlash(const CascadeGroup& cg, const KvCache<bf16>& cache, int layer, bf16* out,
                        cudaStream_t stream) {
  const PrefillChunk& c = cg.rows;
  if (c.q_len <= 0) return cudaSuccess;
  if (cache.kv_heads <= 0 || c.num_heads % cache.kv_heads ||
      !FlashPrefillFits(cache.head_dim, sizeof(bf16)))
    return cudaErrorInvalidValue;
  const int G = c.num_heads / cache.kv_heads;
  const dim3 grid((c.q_len * G + kFlashRows - 1) / kFlashRows, cache.kv_heads);
  if (cache.head_dim == 64)
    FlashKernel<64, Partial><<<grid, 128, 0, stream>>>(cg, cache, layer, out);
  else
    FlashKernel<128, Partial><<<grid, 128, 0, stream>>>(cg, cache, layer, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t FlashPrefillAttention(const PrefillChunk& c, const KvCache<bf16>& cache, int layer,
                                  bf16* out, cudaStream_t stream) {
  CascadeGroup cg;
  cg.rows = c;
  return LaunchFlash<false>(cg, cache, layer, out, stream);
}

cudaError_t FlashCascadeAttention(const CascadeGroup& g, const KvCache<bf16>& cache, int layer,
                                  cudaStream_t stream) {
  if (g.rows.q_len > 0 && (g.shared_len <= 0 || !g.workspace || g.num_splits < 1))
    return cudaErrorInvalidValue;
  return LaunchFlash<true>(g, cache, layer, nullptr, stream);
}

template KernelStatus PrefillAttention<float>(cublasHandle_t, const PrefillChunk&,
                                              const KvCache<float>&, int, void*, float*,
                                              cudaStream_t);
template KernelStatus PrefillAttention<bf16>(cublasHandle_t, const PrefillChunk&,
                                             const KvCache<bf16>&, int, void*, bf16*, cudaStream_t);
template KernelStatus CascadePrefixAttention<float>(cublasHandle_t, const CascadeGroup&,
                                                    const KvCache<float>&, int, void*,
                                                    cudaStream_t);
template KernelStatus CascadePrefixAttention<bf16>(cublasHandle_t, const CascadeGroup&,
                                                   const KvCache<bf16>&, int, void*, cudaStream_t);

}  // namespace llmq::kernels::cuda
