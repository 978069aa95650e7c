// Tests for engine/model_config: the shared models' configs, required fields, rope scaling.
#include "engine/model_config.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>

namespace llmq {
namespace {

namespace fs = std::filesystem;

std::string TestDir() {
  return llmq::testing::CurrentTestDir();
}

std::string ModelDir(const char* name) {
  return std::string(LLMQ_SHARED_DIR) + "/models/" + name;
}

#define SKIP_IF_NO_CONFIG(dir)                                                                  \
  if (!fs::exists(std::string(dir) + "/config.json"))                                           \
  GTEST_SKIP() << "shared model " << dir << " not present (LLMQ_SHARED_DIR=" << LLMQ_SHARED_DIR \
               << ")"

// A minimal valid Llama config; `extra` is spliced in as more top-level fields.
std::string Config(const std::string& extra = "") {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
             "max_position_embeddings": 256)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(ModelConfigTest, LoadsStories260K) {
  const std::string dir = ModelDir("stories260K");
  SKIP_IF_NO_CONFIG(dir);
  ModelConfig c;
  Status s = LoadModelConfig(dir, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c.bos_token_id, 1);
  // config.json says 2; generation_config.json's list [1, 2] wins.
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 2}));
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.KvBytesPerToken(4), 2 * 5 * 4 * 8 * 4);
}

TEST(ModelConfigTest, LoadsTinyLlama3) {
  const std::string dir = ModelDir("tiny-llama3");
  SKIP_IF_NO_CONFIG(dir);
  ModelConfig c;
  Status s = LoadModelConfig(dir, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.hidden_size, 96);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);  // explicit, not 96 / 8
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.RopeInvFreq().size(), 8u);
}

TEST(ModelConfigTest, DefaultsAndDerivedFields) {
  ModelConfig c;
  Status s = ParseModelConfig(Config(R"("eos_token_id": 7)"), "/m/config.json", &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.num_kv_heads, 4);  // MHA when absent
  EXPECT_EQ(c.head_dim, 16);     // hidden / heads when absent
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{7}));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfigTest, MissingRequiredFieldIsNamed) {
  ModelConfig c;
  const std::string text = R"({"architectures": ["LlamaForCausalLM"], "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "max_position_embeddings": 256})";
  Status s = ParseModelConfig(text, "/m/config.json", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/m/config.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("hidden_size"), std::string::npos) << s.message();
}

TEST(ModelConfigTest, BadValuesAreErrors) {
  ModelConfig c;
  for (const std::string& bad :
       {std::string("{not json"), std::string("[1]"), Config(R"("num_key_value_heads": 3)"),
        Config(R"("hidden_size": -1)"), Config(R"("tie_word_embeddings": "yes")")}) {
    SCOPED_TRACE(bad);
    Status s = ParseModelConfig(bad, "/m/config.json", &c);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("/m/config.json"), std::string::npos) << s.message();
  }
  Status s = ParseModelConfig(R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 64})",
                              "/m/config.json", &c);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
}

TEST(ModelConfigTest, UnsupportedRopeScalingType) {
  ModelConfig c;
  for (const char* type : {"yarn", "dynamic", "longrope"}) {
    Status s = ParseModelConfig(
        Config(std::string(R"("rope_scaling": {"rope_type": ")") + type + R"(", "factor": 2.0})"),
        "/m/config.json", &c);
    EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.message();
    EXPECT_NE(s.message().find("rope_scaling"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(type), std::string::npos) << s.message();
  }
  // "type" is the older spelling of "rope_type"; null means none.
  ASSERT_TRUE(
      ParseModelConfig(Config(R"("rope_scaling": {"type": "linear", "factor": 2})"), "c", &c).ok());
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  ASSERT_TRUE(ParseModelConfig(Config(R"("rope_scaling": null)"), "c", &c).ok());
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfigTest, RopeInvFreqUnscaledAndLinear) {
  ModelConfig c;
  ASSERT_TRUE(ParseModelConfig(Config(R"("rope_theta": 10000.0)"), "c", &c).ok());
  const std::vector<double> base = c.RopeInvFreq();
  ASSERT_EQ(base.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(base[i], std::pow(10000.0, -2.0 * i / 16));
  ASSERT_TRUE(
      ParseModelConfig(Config(R"("rope_theta": 10000.0, "rope_scaling": {"rope_type": "linear",
                                                                   "factor": 4.0})"),
                       "c", &c)
          .ok());
  const std::vector<double> lin = c.RopeInvFreq();
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(lin[i], base[i] / 4.0);
}

// The Hugging Face llama3 rule (_compute_llama3_parameters), by hand for tiny-llama3's numbers:
// head_dim 16, theta 5e5, factor 8, low 1, high 4, original context 64. Wavelength bounds: low
// 64 / 1 = 64, high 64 / 4 = 16. Wavelength 2*pi / f: index 0 -> 6.28 (high-frequency band: kept),
// index 1 -> 2*pi * 5e5^(1/8) = 32.4 (smoothed), index 2 -> 167 (low-frequency band: f / 8).
TEST(ModelConfigTest, RopeInvFreqLlama3MatchesHuggingFaceRule) {
  ModelConfig c;
  ASSERT_TRUE(ParseModelConfig(Config(R"("head_dim": 16, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64})"),
                               "c", &c)
                  .ok());
  const std::vector<double> inv = c.RopeInvFreq();
  ASSERT_EQ(inv.size(), 8u);
  const double pi = std::numbers::pi;
  // Index 0: f = 1, wavelength 2*pi < 16: unchanged.
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  // Index 1: f = 5e5^(-1/8); smooth = (64 / wavelength - 1) / (4 - 1); blend of f/8 and f.
  const double f1 = std::pow(500000.0, -0.125);
  const double w1 = 2 * pi / f1;
  ASSERT_GT(w1, 16.0);
  ASSERT_LT(w1, 64.0);
  const double smooth = (64.0 / w1 - 1.0) / 3.0;
  EXPECT_NEAR(inv[1], (1 - smooth) * f1 / 8 + smooth * f1, 1e-15);
  EXPECT_NEAR(inv[1], 0.0794, 1e-4);  // smooth ~ 0.325: between f/8 = 0.0242 and f = 0.194
  // Indices 2..7: wavelength > 64: divided by the factor.
  for (int i = 2; i < 8; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 16);
    ASSERT_GT(2 * pi / f, 64.0);
    EXPECT_NEAR(inv[i], f / 8, 1e-18) << i;
  }
}

TEST(ModelConfigTest, LoadModelConfigFiles) {
  const std::string dir = TestDir();
  ModelConfig c;
  Status s = LoadModelConfig(dir, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/config.json"), std::string::npos) << s.message();
  std::ofstream(dir + "/config.json") << Config(R"("eos_token_id": 2, "bos_token_id": 1)");
  ASSERT_TRUE(LoadModelConfig(dir, &c).ok());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2}));
  std::ofstream(dir + "/generation_config.json")
      << R"({"eos_token_id": [5, 6], "bos_token_id": 3})";
  ASSERT_TRUE(LoadModelConfig(dir, &c).ok());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{5, 6}));
  EXPECT_EQ(c.bos_token_id, 3);
  std::ofstream(dir + "/generation_config.json") << "{broken";
  s = LoadModelConfig(dir, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("generation_config.json"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace llmq
