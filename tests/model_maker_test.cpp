// The model maker's weights are one Rng stream in tensor order, whatever the threads that draw
// them (engine/tools/model_maker.cpp cuts each tensor among the pool's threads with Rng::Skip).
#include "engine/tools/model_maker.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "engine/model/safetensors.h"
#include "engine/sampling/sampler.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

// The tensor `name` of dir/model.safetensors, as its bytes.
std::vector<uint8_t> TensorBytes(const std::string& dir, const std::string& name) {
  std::unique_ptr<MappedFile> f;
  EXPECT_TRUE(MappedFile::Open(dir + "/model.safetensors", &f).ok());
  if (!f) return {};
  std::vector<TensorInfo> ts;
  EXPECT_TRUE(ParseSafetensors(f->data(), f->size(), dir, &ts).ok());
  for (const TensorInfo& t : ts)
    if (t.name == name) return std::vector<uint8_t>(f->data() + t.begin, f->data() + t.end);
  ADD_FAILURE() << name << " is not in " << dir;
  return {};
}

TEST(ModelMaker, WeightsAreOneStreamWhateverTheThreads) {
  ModelConfig cfg;
  DType dtype;
  ASSERT_TRUE(ShapeConfig("tiny", &cfg, &dtype).ok());
  const std::string dir = testing::CurrentTestDir();
  const int threads = kernels::CpuThreads();
  for (DType d : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(DTypeName(d));
    const std::string one = dir + "/one-" + DTypeName(d), many = dir + "/many-" + DTypeName(d);
    kernels::SetCpuThreads(1);
    ASSERT_TRUE(WriteRandomModel(cfg, d, 42, one).ok());
    kernels::SetCpuThreads(3);
    kernels::SetAlwaysSplitForTesting(true);  // every tensor cut into the most pieces
    ASSERT_TRUE(WriteRandomModel(cfg, d, 42, many).ok());
    kernels::SetAlwaysSplitForTesting(false);
    kernels::SetCpuThreads(threads);
    EXPECT_EQ(testing::ReadText(one + "/model.safetensors"),
              testing::ReadText(many + "/model.safetensors"));

    // The first two tensors drawn, by one plain pass over the stream: the embedding (uniform in
    // +-sqrt(3)), then layer 0's input norm (1 +- 0.2), which starts where the embedding ended.
    Rng rng(42);
    auto expect = [&](const std::string& name, int64_t n, float a, float center) {
      const std::vector<uint8_t> got = TensorBytes(many, name);
      ASSERT_EQ(got.size(), static_cast<size_t>(n) * DTypeSize(d)) << name;
      for (int64_t i = 0; i < n; ++i) {
        // a * x rounded, then + center (the maker's TU does not fuse them; this one might).
        const volatile float ax = a * static_cast<float>(2.0 * rng.NextDouble() - 1.0);
        const float v = center + ax;
        if (d == DType::kF32) {
          float g;
          std::memcpy(&g, &got[i * 4], 4);
          ASSERT_EQ(g, v) << name << " " << i;
        } else {
          uint16_t g;
          std::memcpy(&g, &got[i * 2], 2);
          ASSERT_EQ(g, FloatToBf16(v)) << name << " " << i;
        }
      }
    };
    expect("model.embed_tokens.weight", int64_t{cfg.vocab_size} * cfg.hidden_size, std::sqrt(3.0f),
           0.f);
    expect("model.layers.0.input_layernorm.weight", cfg.hidden_size, 0.2f, 1.0f);
  }
}

}  // namespace
}  // namespace llmq
