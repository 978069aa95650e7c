// Helpers of the GPU tests: skipping without a device, random inputs, device buffers poisoned
// before each run (so an element a kernel fails to write shows up as NaN), error measures.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cuda_backend.h"

namespace llmq::gputest {

// Skips the test, with the reason, when no CUDA device is usable.
#define LLMQ_REQUIRE_GPU()                                                                    \
  do {                                                                                        \
    const ::llmq::Status device_ = ::llmq::CheckCudaDevice();                                 \
    if (!device_.ok()) GTEST_SKIP() << "no usable CUDA device (" << device_.message() << ")"; \
  } while (0)

#define LLMQ_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

inline std::vector<float> Random(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

inline float RoundBf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}
inline std::vector<float> RoundBf16(std::vector<float> v) {
  for (float& x : v) x = RoundBf16(x);
  return v;
}

// ‖a − b‖ / ‖b‖ over all elements; +inf when any element of `a` is NaN (unwritten: poisoned).
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A device array of T (float or bf16) that converts from and to float vectors on the host.
template <class T>
struct DevArray {
  T* p = nullptr;
  size_t n = 0;
  explicit DevArray(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    Poison();
  }
  explicit DevArray(const std::vector<float>& host) : DevArray(host.size()) { Set(host); }
  ~DevArray() { cudaFree(p); }
  DevArray(const DevArray&) = delete;
  DevArray& operator=(const DevArray&) = delete;
  void Poison() { EXPECT_EQ(cudaMemset(p, 0xff, n * sizeof(T)), cudaSuccess); }  // NaN
  void Set(const std::vector<float>& host) {
    std::vector<T> tmp(host.size());
    for (size_t i = 0; i < host.size(); ++i) tmp[i] = static_cast<T>(host[i]);
    EXPECT_EQ(cudaMemcpy(p, tmp.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Get() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> tmp(n);
    EXPECT_EQ(cudaMemcpy(tmp.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(tmp[i]);
    return out;
  }
};

// Token masks of `rows` rows over `vocab` tokens ([rows, words_per_row] uint32, bit t % 32 of word
// t / 32 for token t): row r allows each token with probability density[r % density.size()] (1:
// every token, 0: none). With `tail_garbage` the bits past the vocabulary are random (a mask
// kernel must ignore them), else clear (StepMasks' contract).
inline std::vector<uint32_t> RandomMasks(int rows, int vocab, int words_per_row,
                                         const std::vector<double>& density, uint64_t seed,
                                         bool tail_garbage = false) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint32_t> w(size_t(rows) * words_per_row, 0u);
  for (int r = 0; r < rows; ++r) {
    const double p = density[r % density.size()];
    for (int t = 0; t < words_per_row * 32; ++t) {
      const bool on = t < vocab ? u(g) < p : tail_garbage && (g() & 1);
      if (on) w[size_t(r) * words_per_row + t / 32] |= 1u << (t % 32);
    }
  }
  return w;
}

struct DevInts {
  int32_t* p = nullptr;
  explicit DevInts(const std::vector<int32_t>& host) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.size(), 1) * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevInts() { cudaFree(p); }
  DevInts(const DevInts&) = delete;
  DevInts& operator=(const DevInts&) = delete;
};

// Tolerances (‖out − ref‖ / ‖ref‖): float kernels against the CPU's float kernels, and kernels
// whose output or inputs are bf16.
constexpr double kF32Tol = 1e-4;
constexpr double kBf16Tol = 1e-2;
template <class T>
constexpr double Tol() {
  return std::is_same_v<T, float> ? kF32Tol : kBf16Tol;
}

}  // namespace llmq::gputest
