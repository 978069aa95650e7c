// Device pieces shared by the tensor-core kernels (attention.cu's PartitionMmaKernel,
// prefill_attention.cu's FlashKernel): cp.async copies to shared memory, ldmatrix, mma.sync
// on bf16, and the XOR swizzle of shared-memory rows. sm_80 and later; on older devices cp.async
// copies synchronously and the tensor-core pieces trap (their kernels are not launched there by
// default).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llmq::kernels::cuda {

// cp.async (sm_80 and later): 16 bytes from global to shared memory without passing through
// registers, committed in groups and waited for by group. Older devices copy synchronously.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void CpAsyncCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Tensor cores: mma.sync m16n8k16 with bf16 inputs and float accumulators, and
// ldmatrix loads of 8 x 8 bf16 matrices from shared memory. Fragment layouts (PTX ISA, "Matrix
// fragments for mma.m16n8k16"), with g = lane / 4 and c = lane % 4:
//   A (16 x 16, row-major): reg 0 = A[g][2c, 2c + 1], 1 = A[g + 8][2c..], 2 = A[g][2c + 8..],
//                           3 = A[g + 8][2c + 8..]
//   B (16 x 8, column n contiguous in k): reg 0 = B[2c, 2c + 1][g], 1 = B[2c + 8, 2c + 9][g]
//   C (16 x 8, float): c0, c1 = C[g][2c, 2c + 1], c2, c3 = C[g + 8][2c, 2c + 1]
// A register holds two bf16, the lower index in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Four 8 x 8 matrices; lanes 8i .. 8i + 7 give the addresses of matrix i's 8 rows (16 bytes
// each). Plain: lane l gets row l / 4, elements 2 (l % 4) and + 1 of each; Trans: of each
// matrix's transpose.
template <bool Trans>
__device__ __forceinline__ void LdMatrixX4(const void* row, uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#else
  __trap();
#endif
}
// acc += A B (m16n8k16, bf16 in, float accumulators).
__device__ __forceinline__ void MmaBf16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                        float (&acc)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// Where 16-byte piece `piece` of a shared-memory row `row` is stored: an XOR swizzle over 8
// pieces, so that the 8 rows one ldmatrix phase reads (a multiple of 128 bytes apart) fall on
// different banks. Rows need at least 8 pieces (128 bytes).
__device__ __forceinline__ int Swz8(int row, int piece) {
  return piece ^ (row & 7);
}

}  // namespace llmq::kernels::cuda
