// FillStaged (engine/backends/weight_staging.h) against the path it replaced: each part widened by
// ConvertToF32 on its own, concatenated, then narrowed value by value (FloatToBf16).
#include "engine/backends/weight_staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/bf16.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq {
namespace {

// A part's bytes, of a dtype, from random floats (F16 made by hand: sign, 5-bit exponent, 10 bits).
std::vector<uint8_t> RandomBytes(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<uint8_t> b(n * DTypeSize(t) + 1);  // +1: the data starts at an odd address
  for (int64_t i = 0; i < n; ++i) {
    const float f = u(rng);
    uint8_t* at = b.data() + 1 + i * DTypeSize(t);
    if (t == DType::kF32) {
      std::memcpy(at, &f, 4);
    } else if (t == DType::kBF16) {
      const uint16_t h = FloatToBf16(f);
      std::memcpy(at, &h, 2);
    } else {  // kF16: a normal half from the draw's bits
      const uint16_t h =
          static_cast<uint16_t>((rng() & 0x8000u) | (((rng() % 20) + 5) << 10) | (rng() & 0x3FFu));
      std::memcpy(at, &h, 2);
    }
  }
  return b;
}

std::vector<float> Widened(const std::vector<StagedPart>& parts) {
  std::vector<float> all;
  for (const StagedPart& p : parts) {
    std::vector<float> f(p.numel);
    ConvertToF32(p.dtype, p.data, p.numel, f.data());
    all.insert(all.end(), f.begin(), f.end());
  }
  return all;
}

class WeightStaging : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { kernels::SetAlwaysSplitForTesting(GetParam()); }
  void TearDown() override { kernels::SetAlwaysSplitForTesting(false); }
};

TEST_P(WeightStaging, EveryRangeOfTheStackIsWhatTheOldPathMade) {
  // q, k, v as a checkpoint might mix them: bf16, f32, f16, of uneven sizes.
  const std::vector<std::pair<DType, int64_t>> shapes = {
      {DType::kBF16, 3001}, {DType::kF32, 517}, {DType::kF16, 1290}, {DType::kBF16, 7}};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<StagedPart> parts;
  for (size_t i = 0; i < shapes.size(); ++i) {
    bytes.push_back(RandomBytes(shapes[i].first, shapes[i].second, 11 + i));
    parts.push_back({shapes[i].first, bytes.back().data() + 1, shapes[i].second});
  }
  ASSERT_EQ(StagedNumel(parts), 3001 + 517 + 1290 + 7);
  const std::vector<float> want = Widened(parts);
  const int64_t total = StagedNumel(parts);
  // Whole, and in ranges that start and end inside parts and across their edges.
  for (const auto& [begin, count] : std::vector<std::pair<int64_t, int64_t>>{
           {0, total}, {0, 3001}, {2999, 5}, {3000, 1808}, {4517, total - 4517}, {total - 1, 1}}) {
    SCOPED_TRACE(std::to_string(begin) + " + " + std::to_string(count));
    std::vector<float> f32(count + 1, -7.f);
    FillStaged(parts, StageType::kF32, begin, count, f32.data());
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(f32[i], want[begin + i]) << i;
    EXPECT_EQ(f32[count], -7.f);  // nothing past the range
    std::vector<uint16_t> b16(count + 1, 0xABCD);
    FillStaged(parts, StageType::kBf16, begin, count, b16.data());
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(b16[i], FloatToBf16(want[begin + i])) << i;
    EXPECT_EQ(b16[count], 0xABCD);
  }
}

TEST_P(WeightStaging, Bf16IntoBf16IsTheBytesAsTheyLie) {
  // Every bit pattern, NaNs and infinities included, comes through unchanged.
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> out(all.size());
  FillStaged({{DType::kBF16, all.data(), 65536}}, StageType::kBf16, 0, 65536, out.data());
  EXPECT_EQ(out, all);
}

INSTANTIATE_TEST_SUITE_P(Threads, WeightStaging, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Split" : "AsCosted"; });

}  // namespace
}  // namespace llmq
