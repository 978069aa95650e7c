// Batch-invariant GEMM against a pre-packed weight: C[M, N] = A[M, K] · Wᵀ, A and C fp32, W given
// as the Hugging Face [out = N, in = K] row-major fp32 matrix and packed as one of three types
// (WeightType): fp32, bf16 (rounded to nearest even at pack time), or int8 (symmetric, per output
// channel: W[j][k] ~ q[j][k] * scale[j] with scale[j] = max_k |W[j][k]| / 127 and
// q[j][k] = round-to-nearest-even(W[j][k] * (127 / max_k |W[j][k]|)) in [-127, 127], all in fp32).
//
// Numerical contract (what makes the engine batch-invariant), with widen(W[j][k]) the packed
// element as an fp32 value (fp32: itself; bf16: its bits << 16, exact; int8: (float)q[j][k],
// exact):
//   every C[i][j] is the sequential fp32 fused-multiply-add chain
//     acc = 0; for k = 0 .. K-1: acc = fma(A[i][k], widen(W[j][k]), acc)
//   followed, for int8 only, by ONE fp32 multiply by the column's scale: C[i][j] = acc * scale[j]
//   (fp32 and bf16: C[i][j] = acc),
//   whatever M is, whichever row of the batch i is, however many threads run, and whichever ISA
//   path (AVX-512, AVX2, scalar) is taken. So a sequence's result never depends on what else is
//   in the batch, and all paths give bit-identical results. A bf16 matrix packed from weights that
//   are already bf16 values (a BF16 checkpoint widened to fp32) gives the same bits as its fp32
//   packing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "base/bf16.h"

namespace llmq::kernels {

// Large buffers (>= kPopulateBytes) come straight from the kernel with their pages populated in
// one call (on a virtual machine each first touch of a page is a trap to the hypervisor: loading
// bench-110m's 0.5 GB of packed weights took ~1 s more page by page); smaller ones from the heap.
// Both are at least 64-byte aligned. Out of memory: std::bad_alloc, from either, as from every
// allocation of the program (an allocator has no Status to return); a step's forward catches it
// (LlmEngine::Run) and fails that step's requests, so the daemon goes on.
constexpr std::size_t kPopulateBytes = std::size_t{4} << 20;
void* AllocateBuffer(std::size_t bytes, std::size_t align);
void FreeBuffer(void* p, std::size_t bytes, std::size_t align);
// Populates the pages of [p, p + bytes) for writing in one call (MADV_POPULATE_WRITE; p
// page-aligned). False where the kernel refuses it (before Linux 5.14): the pages then fault in on
// first touch, as before.
[[nodiscard]] bool PopulateForWrite(void* p, std::size_t bytes);
// A new page populated (zeroed by the kernel): about 10 GB/s on bare metal, far less on a VM. The
// serial cost ParallelFor weighs when the pool's threads populate ranges together.
constexpr double kPopulateNsPerByte = 0.1;

// Minimal allocator giving `Align`-byte aligned storage (PackedWeight panels start on cache lines,
// so every 16-float panel row is one aligned 64-byte vector load), by AllocateBuffer.
template <class T, std::size_t Align>
struct AlignedAllocator {
  static_assert(Align <= 4096, "mapped buffers are page-aligned");
  using value_type = T;
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, Align>;
  };
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, Align>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(AllocateBuffer(n * sizeof(T), Align)); }
  void deallocate(T* p, std::size_t n) { FreeBuffer(p, n * sizeof(T), Align); }
  // Elements are default-initialized (left as they are, not zeroed): every user writes them
  // before reading, and zeroing would first-touch all of a large buffer once more.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U>
  bool operator==(const AlignedAllocator<U, Align>&) const {
    return true;
  }
};

// How a PackedWeight stores W (see the contract above).
enum class WeightType : uint8_t { kF32, kBf16, kInt8 };
const char* WeightTypeName(WeightType t);  // "f32", "bf16", "int8"
// Bytes of one packed element: 4, 2, 1.
constexpr int WeightTypeBytes(WeightType t) {
  return t == WeightType::kF32 ? 4 : t == WeightType::kBf16 ? 2 : 1;
}
// fp32 -> bf16, rounded to nearest even (NaN stays a quiet NaN); and back, exactly (base/bf16.h).
using ::llmq::Bf16ToFloat;
using ::llmq::FloatToBf16;

// W [N, K] repacked into panels of kPanel output columns: data[p][k][c] = W[p*kPanel + c][k]
// (zero for columns past N), each element of type(). A panel is contiguous, so a row of A streams
// it once. Storage is 64-byte aligned: panel_data(p) + k * row_bytes() is a naturally aligned row
// of 16 elements (64, 32 or 16 bytes). int8 also holds scales(): [panels() * 16] fp32, zero past N.
class PackedWeight {
 public:
  static constexpr int kPanel = 16;
  PackedWeight() = default;
  // w: [n, k] row-major fp32, finite (int8 scales come from each row's largest magnitude).
  static PackedWeight Pack(const float* w, int n, int k, WeightType type = WeightType::kF32);
  // Packs several [n_i, k] matrices stacked along N (e.g. q, k, v into one fused projection).
  static PackedWeight PackStacked(const std::vector<const float*>& ws, const std::vector<int>& ns,
                                  int k, WeightType type = WeightType::kF32);
  // The same from bf16 matrices (ws: [n_i, k] row-major bf16 bits, 2-byte aligned), read in place:
  // bit for bit PackStacked of their values widened to fp32 (exact), without an fp32 copy of them.
  static PackedWeight PackStackedBf16(const std::vector<const uint16_t*>& ws,
                                      const std::vector<int>& ns, int k, WeightType type);
  int n() const { return n_; }
  int k() const { return k_; }
  WeightType type() const { return type_; }
  int panels() const { return (n_ + kPanel - 1) / kPanel; }
  int row_bytes() const { return kPanel * WeightTypeBytes(type_); }  // one K step of a panel
  const uint8_t* panel_data(int p) const {
    return data_.data() + static_cast<int64_t>(p) * k_ * row_bytes();
  }
  // panel_data(p) as floats: only for type() == kF32.
  const float* panel(int p) const { return reinterpret_cast<const float*>(panel_data(p)); }
  // int8: the column scales ([panels() * 16], zero past N); nullptr otherwise.
  const float* scales() const { return scales_.empty() ? nullptr : scales_.data(); }
  // widen(W[j][kk]) of the contract (int8: the integer, without its scale). j < n, kk < k.
  float Widened(int j, int kk) const;
  // The value the product uses for W[j][kk]: Widened(j, kk), times the column's scale for int8
  // (in double: the dequantized weight exactly).
  double Dequantized(int j, int kk) const;
  // Row j of W as fp32 (an embedding lookup from a packed table): out[kk] = Widened(j, kk), for
  // int8 times the column's scale rounded to fp32. out: [k]. j < n.
  void Row(int j, float* out) const;
  // Everything held: the panels and, for int8, the scales.
  uint64_t bytes() const { return data_.size() + scales_.size() * sizeof(float); }
  // bytes() of an [n, k] matrix once packed as `type`.
  static uint64_t BytesFor(int n, int k, WeightType type = WeightType::kF32) {
    const uint64_t panels = static_cast<uint64_t>((n + kPanel - 1) / kPanel);
    return panels * k * kPanel * WeightTypeBytes(type) +
           (type == WeightType::kInt8 ? panels * kPanel * sizeof(float) : 0);
  }

 private:
  template <class S>
  static PackedWeight PackRows(const std::vector<const S*>& ws, const std::vector<int>& ns, int k,
                               WeightType type);
  int n_ = 0, k_ = 0;
  WeightType type_ = WeightType::kF32;
  std::vector<uint8_t, AlignedAllocator<uint8_t, 64>> data_;
  std::vector<float, AlignedAllocator<float, 64>> scales_;
};

// c[i*ldc + j] = sum_k a[i*lda + k] * W[j][k] for i < m, j < w.n(), with the contract above.
// Runs on the CPU pool (kernels/cpu/thread_pool.h; split over panels of N) when the call is big
// enough to pay for the pool's barrier; called inside a pool region, or while another thread's
// region runs, it runs serially on the calling thread. lda >= w.k(), ldc >= w.n().
void Gemm(const float* a, int64_t lda, int m, const PackedWeight& w, float* c, int64_t ldc);

// The obviously-right scalar version of the same contract (used by tests and as the fallback).
void GemmReference(const float* a, int64_t lda, int m, const PackedWeight& w, float* c,
                   int64_t ldc);

// Which micro-kernel Gemm uses. kAuto picks the best the CPU supports (AVX-512 if avx512f/bw/dq/vl,
// else AVX2+FMA, else scalar); the environment variable LLMQ_GEMM_ISA=scalar|avx2|avx512 overrides
// the automatic choice at first use. All paths give bit-identical results.
enum class GemmIsa { kAuto, kScalar, kAvx2, kAvx512 };

// Forces a path (tests, benchmarks). Returns false, changing nothing, if the CPU lacks it.
// Not thread-safe against concurrent Gemm calls.
bool SetGemmIsaForTesting(GemmIsa isa);
// The path Gemm takes now (never kAuto).
GemmIsa ActiveGemmIsa();

// The prefill path's N block, in 16-column panels: chosen once from the core's L2 size (two
// blocks of fp32 W, 256 K steps deep, in 3/4 of it; 3..24, a multiple of 3), so that Zen 1's
// 512 KiB L2 gets blocks of half the size of a 1 MiB L2's. It orders the tiles only: results are
// bit-identical for every value.
int GemmNcPanels();
int GemmNcPanelsForL2(long l2_bytes);  // the rule: 1 MiB -> 24, 512 KiB -> 12, 256 KiB -> 6
// Forces the N block (tests, benchmarks); panels <= 0 restores the L2-derived one. Not thread-safe
// against concurrent Gemm calls.
void SetGemmNcPanelsForTesting(int panels);
const char* GemmIsaName(GemmIsa isa);

}  // namespace llmq::kernels
