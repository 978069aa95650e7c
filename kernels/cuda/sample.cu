// One block per row. Every filter and the draw are "the first candidate, in order, at which a
// running sum crosses a threshold" (top-k: a count; top-p and the draw: a weight), found without
// sorting by a radix descent over a 64-bit order key: at each of 8 levels a 256-bin histogram of
// the candidates that share the key's already chosen high bytes, then the bin where the sum
// crosses. Sums are integers (weights in fixed point), so they are exact and the same in any order.
#include <cmath>

#include "kernels/cuda/pdl.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/sample.h"

namespace llmq::kernels::cuda {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr float kMinTemperature = 1e-5f;       // the CPU sampler's: below it, greedy
constexpr float kFixedOne = 17592186044416.f;  // 2^44: a weight of 1 in fixed point

// A float's bits mapped so that unsigned order is float order (-inf lowest, +inf highest).
__device__ __forceinline__ uint32_t Ordered(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// The order every filter and the draw walk: a larger key comes first (logit descending, then id
// ascending). Unique per token.
__device__ __forceinline__ uint64_t OrderKey(float logit, int id) {
  if (logit == 0.f) logit = 0.f;  // -0 ranks with +0 (by id), as on the CPU
  return (static_cast<uint64_t>(Ordered(logit)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int IdOf(uint64_t key) {
  return static_cast<int>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

// One row and the weights of its tokens relative to the most likely: w = exp((l - max) / T) in
// (0, 1] (1 for the max), 0 for NaN and -inf; with a +inf max, 1 for the +inf tokens, else 0.
struct Row {
  const float* logits;
  int vocab;
  float max_l, inv_t, min_w;
  __device__ float Weight(float l) const {
    if (isnan(l)) return 0.f;
    if (isinf(max_l)) return l == INFINITY ? 1.f : 0.f;
    return expf((l - max_l) * inv_t);
  }
};

// The candidates a pass looks at: fixed-point weight > 0, key >= lo, and w >= min_w when min_p.
struct Set {
  uint64_t lo = 0;
  bool min_p = false;
};

__device__ __forceinline__ bool Member(const Row& r, const Set& s, float l, int v, float* w,
                                       uint64_t* fixed, uint64_t* key) {
  *w = r.Weight(l);
  *fixed = static_cast<uint64_t>(*w * kFixedOne);
  if (*fixed == 0) return false;
  *key = OrderKey(l, v);
  return *key >= s.lo && (!s.min_p || *w >= r.min_w);
}

__device__ uint64_t BlockSumU64(uint64_t v) {
  __shared__ uint64_t part[kWarps];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  uint64_t total = 0;
  for (int w = 0; w < kWarps; ++w) total += part[w];
  return total;
}

// The summed fixed-point weight of the set's members.
__device__ uint64_t SumSet(const Row& r, const Set& s) {
  uint64_t sum = 0;
  for (int v = threadIdx.x; v < r.vocab; v += kThreads) {
    float w;
    uint64_t fixed, key;
    if (Member(r, s, r.logits[v], v, &w, &fixed, &key)) sum += fixed;
  }
  return BlockSumU64(sum);
}

// The key of the first member of `s` (in key-descending order) at which the running sum (1 per
// member with `count`, else its fixed-point weight) reaches `target` (inclusive: >=) or exceeds
// it (>). A target the members' total cannot cross (rounding) is lowered to cross at the last
// member. The set must not be empty. Every thread gets the key. Contains __syncthreads.
__device__ uint64_t Select(const Row& r, const Set& s, bool count, uint64_t target,
                           bool inclusive) {
  __shared__ unsigned long long hist[kWarps][256];
  __shared__ unsigned long long chosen_base, clamped;
  __shared__ int chosen;
  uint64_t prefix = 0, mask = 0, base = 0;
  for (int level = 7; level >= 0; --level) {
    const int shift = level * 8;
    for (int i = threadIdx.x; i < kWarps * 256; i += kThreads) (&hist[0][0])[i] = 0;
    __syncthreads();
    unsigned long long* mine = hist[threadIdx.x >> 5];
    for (int v = threadIdx.x; v < r.vocab; v += kThreads) {
      float w;
      uint64_t fixed, key;
      if (!Member(r, s, r.logits[v], v, &w, &fixed, &key) || (key & mask) != prefix) continue;
      atomicAdd(&mine[(key >> shift) & 255], count ? 1ull : static_cast<unsigned long long>(fixed));
    }
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += kThreads) {
      unsigned long long sum = 0;
      for (int w = 0; w < kWarps; ++w) sum += hist[w][d];
      hist[0][d] = sum;  // only this thread reads or writes column d
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (level == 7) {
        unsigned long long total = 0;
        for (int d = 0; d < 256; ++d) total += hist[0][d];
        unsigned long long t = target;
        if (inclusive ? total < t : total <= t) t = inclusive ? total : total - 1;
        clamped = t;
      }
      // Digits from the highest (earliest in order) down; the one where the sum crosses.
      unsigned long long b = base;
      int pick = 0;
      for (int d = 255; d >= 0; --d) {
        const unsigned long long h = hist[0][d];
        if (h == 0) continue;
        pick = d;
        if (inclusive ? b + h >= clamped : b + h > clamped) break;
        b += h;
      }
      chosen = pick;
      chosen_base = b;
    }
    __syncthreads();
    prefix |= static_cast<uint64_t>(chosen) << shift;
    mask |= uint64_t{0xFF} << shift;
    base = chosen_base;
    __syncthreads();  // `chosen` is read by all before thread 0 writes it again
  }
  return prefix;
}

// grid: n rows; block: kThreads.
__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* logits, int vocab, const SampleParams* params, int32_t* ids) {
  PdlWait();
  const int row = blockIdx.x;
  const SampleParams p = params[row];
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  if (!(p.temperature >= kMinTemperature)) {  // greedy (NaN too): ArgmaxRows' rule
    const int id = BlockRowArgmax(x, vocab);
    if (threadIdx.x == 0) ids[row] = id;
    return;
  }
  float m = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += kThreads) m = fmaxf(m, x[v]);  // NaN is skipped
  m = BlockMax(m);
  if (m == -INFINITY) {  // nothing finite or +inf: the CPU's id 0
    if (threadIdx.x == 0) ids[row] = 0;
    return;
  }
  const float min_w = p.min_p > 0.f ? fminf(p.min_p, 1.f) : 0.f;
  const Row r{x, vocab, m, 1.f / p.temperature, min_w};
  // top-k: the k-th candidate bounds the keys kept (the most likely token always is one).
  uint64_t lo = 0;
  if (p.top_k > 0 && p.top_k < vocab)
    lo = Select(r, Set{0, false}, true, static_cast<uint64_t>(p.top_k), true);
  // top-p over the min-p survivors, measured against the top-k set's weight z.
  uint64_t cut = lo;
  if (p.top_p < 1.f) {
    const uint64_t z = SumSet(r, Set{lo, false});
    const double target = ceil(static_cast<double>(p.top_p) * static_cast<double>(z));
    cut = Select(r, Set{lo, min_w > 0.f}, false, static_cast<uint64_t>(fmax(target, 0.0)), true);
  }
  // The draw: the first kept token whose running weight exceeds u x the kept weight (an integer
  // sum exceeds x exactly when it exceeds floor(x)).
  const Set kept{cut, min_w > 0.f};
  const uint64_t total = SumSet(r, kept);
  const uint64_t target = static_cast<uint64_t>(floor(p.u * static_cast<double>(total)));
  const uint64_t key = Select(r, kept, false, target, false);
  if (threadIdx.x == 0) ids[row] = IdOf(key);
}

}  // namespace

cudaError_t SampleRows(const float* logits, int n, int vocab, const SampleParams* params,
                       int32_t* ids, cudaStream_t stream) {
  // Fixed-point sums reach vocab x 2^44: exact below 2^20 tokens.
  if (vocab >= (1 << 20)) return cudaErrorInvalidValue;
  if (n > 0)
    return LaunchPdl(SampleKernel, dim3(n), dim3(kThreads), 0, stream, logits, vocab, params, ids);
  return cudaGetLastError();
}

}  // namespace llmq::kernels::cuda
