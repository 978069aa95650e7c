// The device sampler (kernels/cuda/sample.h) against the CPU sampler's SampleTokenWithDraw on the
// same logits and draws: the same ids wherever the CPU's own pick does not change when u and
// top_p move by 1e-5 (the float / fixed-point rounding the device is allowed), and the same ids
// on every run. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/sampling/sampler.h"
#include "kernels/cuda/sample.h"
#include "tests/gpu/gpu_test_util.h"

namespace llmq {
namespace {

namespace kc = kernels::cuda;
using gputest::DevArray;
using gputest::Random;

struct Case {
  float t;
  int k;
  float p, min_p;
};

// The host's view of a device row (the same fields).
RowSampling Host(const kc::SampleParams& d) {
  return {d.temperature, d.top_k, d.top_p, d.min_p, d.u};
}

std::vector<int32_t> RunDevice(const std::vector<float>& logits, int vocab,
                               const std::vector<kc::SampleParams>& params) {
  const int n = static_cast<int>(params.size());
  DevArray<float> d(logits);
  kc::SampleParams* dp = nullptr;
  int32_t* di = nullptr;
  EXPECT_EQ(cudaMalloc(&dp, n * sizeof(kc::SampleParams)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&di, n * sizeof(int32_t)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dp, params.data(), n * sizeof(kc::SampleParams), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cudaMemset(di, 0xff, n * sizeof(int32_t)), cudaSuccess);  // -1: unwritten
  EXPECT_EQ(kc::SampleRows(d.p, n, vocab, dp, di, nullptr), cudaSuccess);
  std::vector<int32_t> ids(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(ids.data(), di, n * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dp);
  cudaFree(di);
  return ids;
}

TEST(CudaSample, MatchesTheCpuSamplerAwayFromRoundingBoundaries) {
  LLMQ_REQUIRE_GPU();
  const std::vector<Case> cases = {
      {0.f, 0, 1.f, 0.f},    {1.f, 0, 1.f, 0.f},      {0.7f, 40, 1.f, 0.f}, {1.2f, 0, 0.9f, 0.f},
      {0.8f, 0, 1.f, 0.05f}, {1.f, 100, 0.8f, 0.02f}, {0.5f, 1, 1.f, 0.f},  {2.f, 5000, 0.95f, 0.f},
      {0.3f, 0, 0.5f, 0.1f}, {1.f, 3, 0.99f, 0.f}};
  const std::vector<double> draws = {0.0, 0.37, 0.5, 0.81, 0.999};
  int compared = 0, skipped = 0;
  for (int vocab : {50, 1000, 32000, 128256}) {
    const std::vector<float> row = Random(vocab, 300 + vocab, -6.f, 6.f);
    std::vector<float> logits;
    std::vector<kc::SampleParams> params;
    std::vector<int32_t> want;
    std::vector<bool> robust;
    for (const Case& c : cases)
      for (double u : draws) {
        logits.insert(logits.end(), row.begin(), row.end());
        params.push_back({c.t, c.k, c.p, c.min_p, u});
        const RowSampling r = Host(params.back());
        const int w = SampleRow(row.data(), vocab, r);
        want.push_back(w);
        // The CPU's pick, moved by rounding-sized changes of u and top_p.
        bool same = true;
        for (double du : {-1e-5, 1e-5}) {
          RowSampling q = r;
          q.u = std::clamp(u + du, 0.0, 0.9999999);
          same = same && SampleRow(row.data(), vocab, q) == w;
          q = r;
          if (q.top_p < 1.f) q.top_p = static_cast<float>(q.top_p + du);
          same = same && SampleRow(row.data(), vocab, q) == w;
        }
        robust.push_back(same);
      }
    const std::vector<int32_t> got = RunDevice(logits, vocab, params);
    const std::vector<int32_t> again = RunDevice(logits, vocab, params);
    EXPECT_EQ(got, again) << "vocab " << vocab << ": the same inputs gave different ids";
    for (size_t i = 0; i < want.size(); ++i) {
      if (!robust[i]) {
        ++skipped;
        continue;
      }
      ++compared;
      const Case& c = cases[i / draws.size()];
      EXPECT_EQ(got[i], want[i]) << "vocab " << vocab << " T " << c.t << " top_k " << c.k
                                 << " top_p " << c.p << " min_p " << c.min_p << " u "
                                 << params[i].u;
    }
  }
  EXPECT_GT(compared, 9 * skipped) << "too many cases sit on a rounding boundary to compare";
}

TEST(CudaSample, NaNInfinitiesAndGreedyRowsFollowTheCpuRules) {
  LLMQ_REQUIRE_GPU();
  const int vocab = 700;
  std::vector<float> logits;
  std::vector<kc::SampleParams> params;
  auto add = [&](std::vector<float> row, kc::SampleParams p) {
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(p);
  };
  std::vector<float> base = Random(vocab, 7, -3.f, 3.f);
  std::vector<float> nan_row = base;
  for (int v = 0; v < vocab; v += 3) nan_row[v] = NAN;
  add(nan_row, {0.9f, 0, 1.f, 0.f, 0.6});
  add(nan_row, {0.f, 0, 1.f, 0.f, 0.0});
  add(std::vector<float>(vocab, -INFINITY), {1.f, 0, 1.f, 0.f, 0.3});  // nothing finite: id 0
  std::vector<float> inf_row = base;
  inf_row[10] = inf_row[500] = INFINITY;  // the +inf tokens share the mass equally
  add(inf_row, {1.f, 0, 1.f, 0.f, 0.2});
  add(inf_row, {1.f, 0, 1.f, 0.f, 0.7});
  std::vector<float> ties = base;
  ties[3] = ties[4] = ties[600] = 9.f;  // ties in the order: lower ids first
  add(ties, {1.f, 2, 1.f, 0.f, 0.99});
  add(ties, {0.f, 0, 1.f, 0.f, 0.0});
  add(base, {NAN, 0, 1.f, 0.f, 0.5});  // NaN temperature: greedy
  const std::vector<int32_t> got = RunDevice(logits, vocab, params);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(got[i], SampleRow(&logits[i * vocab], vocab, Host(params[i]))) << "row " << i;
  }
}

}  // namespace
}  // namespace llmq
