// The FP8 (E4M3) kernels of engine.precision fp8 against host references: per-row quantization
// (the scales and every byte as cuda_fp8.h's host conversion gives them), the few-row product
// and cuBLASLt's product (fp32 sums of the dequantized values, in double), and the scaling of the
// sums. Skipped without a device of compute capability 8.9 or later.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/gemm_fp8.h"
#include "tests/gpu/gpu_test_util.h"

namespace llmq::kernels::cuda {
namespace {

#define LLMQ_REQUIRE_FP8_GPU()                                                               \
  do {                                                                                       \
    LLMQ_REQUIRE_GPU();                                                                      \
    const ::llmq::Status fp8_ = ::llmq::CheckFp8Device();                                    \
    if (!fp8_.ok()) GTEST_SKIP() << "no FP8-capable CUDA device (" << fp8_.message() << ")"; \
  } while (0)

// A device array of raw bytes or floats.
template <class U>
struct Dev {
  U* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(U)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xff, n * sizeof(U)), cudaSuccess);  // NaN / 0xff until written
  }
  explicit Dev(const std::vector<U>& host) : Dev(host.size()) {
    EXPECT_EQ(cudaMemcpy(p, host.data(), n * sizeof(U), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<U> Get() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<U> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(U), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

float F(fp8 v) {
  return static_cast<float>(v);
}

// Random FP8 values (every finite code but NaN's) and per-row scales: an exact operand.
std::vector<fp8> RandomFp8(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<fp8> v(n);
  for (fp8& x : v) {
    do x.__x = static_cast<__nv_fp8_storage_t>(g() & 0xff);
    while ((x.__x & 0x7f) == 0x7f);  // E4M3's NaN
  }
  return v;
}

TEST(CudaFp8, QuantizeRowsGivesTheHostConversionsBytesAndScales) {
  LLMQ_REQUIRE_FP8_GPU();
  const int rows = 5, k = 300;
  std::vector<float> x = gputest::Random(size_t(rows) * k, 3, -2.f, 2.f);
  for (int c = 0; c < k; ++c) x[size_t(1) * k + c] = 0.f;  // a row of zeros: scale 1
  x[size_t(2) * k + 17] = 900.f;                           // an outlier sets its row's scale
  x[size_t(3) * k + 5] = -1e-30f;                          // a tiny value in a normal row
  Dev<float> dx(x);
  Dev<fp8> q(size_t(rows) * k);
  Dev<float> s(rows);
  ASSERT_EQ(QuantizeRowsFp8<float>(dx.p, rows, k, q.p, s.p, nullptr), cudaSuccess);
  const std::vector<fp8> got = q.Get();
  const std::vector<float> scale = s.Get();
  for (int r = 0; r < rows; ++r) {
    float m = 0;
    for (int c = 0; c < k; ++c) m = std::max(m, std::fabs(x[size_t(r) * k + c]));
    const float want_s = m > 0 ? m / kFp8Max : 1.f;
    ASSERT_EQ(scale[r], want_s) << "row " << r;
    const float inv = 1.f / want_s;
    for (int c = 0; c < k; ++c) {
      const fp8 want(x[size_t(r) * k + c] * inv);  // round to nearest even, saturating
      ASSERT_EQ(got[size_t(r) * k + c].__x, want.__x) << "row " << r << " col " << c;
    }
    // The largest magnitude lands on ±448 exactly.
    if (m > 0) {
      float qmax = 0;
      for (int c = 0; c < k; ++c) qmax = std::max(qmax, std::fabs(F(got[size_t(r) * k + c])));
      EXPECT_EQ(qmax, kFp8Max) << "row " << r;
    }
  }
}

// y = scale_w ⊙ (x · float(w)ᵀ) in double, x the bf16 values.
std::vector<double> Reference(const std::vector<float>& x, int t, int k, const std::vector<fp8>& w,
                              const std::vector<float>& ws, int n) {
  std::vector<double> y(size_t(t) * n);
  for (int r = 0; r < t; ++r)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int c = 0; c < k; ++c) acc += double(x[size_t(r) * k + c]) * F(w[size_t(j) * k + c]);
      y[size_t(r) * n + j] = acc * ws[j];
    }
  return y;
}

double MaxRelToScale(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / std::max(scale, 1e-30);
}

TEST(CudaFp8, GemvMatchesTheDoubleReferenceForEveryRowCount) {
  LLMQ_REQUIRE_FP8_GPU();
  for (int k : {16, 48, 1024, 4112}) {  // one chunk; a ragged tail of chunks; many
    const int n = 37;
    const std::vector<fp8> w = RandomFp8(size_t(n) * k, k);
    const std::vector<float> ws = gputest::Random(n, k + 1, 1e-3f, 2e-2f);
    Dev<fp8> dw(w);
    Dev<float> dws(ws);
    for (int t = 1; t <= 8; ++t) {
      const std::vector<float> x = gputest::RoundBf16(gputest::Random(size_t(t) * k, t * 7 + k));
      gputest::DevArray<bf16> dx(x);
      const std::vector<double> want = Reference(x, t, k, w, ws, n);
      gputest::DevArray<float> y(size_t(t) * n);
      ASSERT_EQ(GemvFp8(dx.p, t, k, dw.p, dws.p, n, y.p, false, nullptr), cudaSuccess);
      EXPECT_LE(MaxRelToScale(y.Get(), want), 1e-5) << "k " << k << " t " << t;
      // accumulate: y + the same again
      ASSERT_EQ(GemvFp8(dx.p, t, k, dw.p, dws.p, n, y.p, true, nullptr), cudaSuccess);
      std::vector<double> twice = want;
      for (double& v : twice) v *= 2;
      EXPECT_LE(MaxRelToScale(y.Get(), twice), 1e-5) << "k " << k << " t " << t << " accumulate";
    }
  }
  EXPECT_FALSE(GemvFp8Fits(9, 64));
  EXPECT_FALSE(GemvFp8Fits(1, 40));
}

TEST(CudaFp8, CublasLtProductThenScalesMatchTheDoubleReference) {
  LLMQ_REQUIRE_FP8_GPU();
  ASSERT_TRUE(LoadCublasLt().ok());
  void* ws = nullptr;
  const size_t ws_bytes = size_t{32} << 20;
  ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  {
    Fp8Gemm gemm;
    ASSERT_TRUE(gemm.Init(ws, ws_bytes).ok());
    for (auto [t, k, n] :
         {std::tuple{9, 64, 96}, std::tuple{40, 256, 200}, std::tuple{300, 1024, 512}}) {
      SCOPED_TRACE(std::to_string(t) + " x " + std::to_string(k) + " x " + std::to_string(n));
      const std::vector<fp8> xq = RandomFp8(size_t(t) * k, t + k);
      const std::vector<fp8> wq = RandomFp8(size_t(n) * k, n + k);
      Dev<fp8> dxq(xq), dwq(wq);
      Dev<float> raw(size_t(t) * n);
      for (int pass = 0; pass < 2; ++pass)  // the second from the kept plan
        ASSERT_TRUE(gemm.Run(dxq.p, t, k, dwq.p, n, raw.p, nullptr).ok());
      std::vector<float> xf(size_t(t) * k);
      for (size_t i = 0; i < xf.size(); ++i) xf[i] = F(xq[i]);
      const std::vector<double> want = Reference(xf, t, k, wq, std::vector<float>(n, 1.f), n);
      const std::vector<float> got = raw.Get();
      // Not exact: Hopper's FP8 tensor-core products accumulate in a narrower format (about 14
      // bits kept; the DeepSeek-V3 report, section 3.3.2) before cuBLASLt adds the partial sums in
      // fp32. The H200 run of 2026-12-04 measured 2.6e-4 to 3.6e-4 of the scale for k 64 to 1024.
      EXPECT_LE(MaxRelToScale(got, want), 1e-3);
      // Scaled: y = raw * xs[r] * ws[c], then accumulated once more.
      const std::vector<float> xs = gputest::Random(t, 5, 0.01f, 1.f);
      const std::vector<float> wsc = gputest::Random(n, 6, 0.01f, 1.f);
      Dev<float> dxs(xs), dwsc(wsc), y(size_t(t) * n);
      ASSERT_EQ(ScaleRowsCols(raw.p, dxs.p, dwsc.p, t, n, y.p, false, nullptr), cudaSuccess);
      ASSERT_EQ(ScaleRowsCols(raw.p, dxs.p, dwsc.p, t, n, y.p, true, nullptr), cudaSuccess);
      const std::vector<float> yy = y.Get();
      for (int r = 0; r < t; ++r)
        for (int c = 0; c < n; ++c) {
          const double one = double(got[size_t(r) * n + c]) * xs[r] * wsc[c];
          ASSERT_NEAR(yy[size_t(r) * n + c], 2 * one, 1e-6 * std::fabs(2 * one) + 1e-30)
              << r << ", " << c;
        }
    }
  }
  cudaFree(ws);
}

}  // namespace
}  // namespace llmq::kernels::cuda
