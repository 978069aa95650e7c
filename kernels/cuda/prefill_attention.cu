#include <type_traits>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cublas_api.h"
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
