// Tests for engine/model_config: the shared models' configs, required fields, rope scaling.
#include "engine/model/model_config.h"
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

#define SKIP_IF_NO_CONFIG(dir) LLMQ_SKIP_WITHOUT_FILE(std::string(dir) + "/config.json")

// A minimal valid config of `arch`; `extra` is spliced in as more top-level fields.
std::string ConfigOf(const std::string& arch, const std::string& extra) {
  return R"({"architectures": [")" + arch + R"("], "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
             "max_position_embeddings": 256)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

// A minimal valid Llama config; `extra` is spliced in as more top-level fields.
std::string Config(const std::string& extra = "") {
  return ConfigOf("LlamaForCausalLM", extra);
}

// Parses `text` and expects kUnsupported with every needle in the message.
void ExpectUnsupported(const std::string& text, const std::vector<std::string>& needles) {
  SCOPED_TRACE(text);
  ModelConfig c;
  Status s = ParseModelConfig(text, "/m/config.json", &c);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.message();
  for (const std::string& n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
}

TEST(ModelConfigTest, LoadsStories260K) {
  const std::string dir = testing::SharedModelDir("stories260K");
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
  const std::string dir = testing::SharedModelDir("tiny-llama3");
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

TEST(ModelConfigTest, LoadsTinyQwen3) {
  const std::string dir = testing::SharedModelDir("tiny-qwen3");
  SKIP_IF_NO_CONFIG(dir);
  ModelConfig c;
  Status s = LoadModelConfig(dir, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 32);  // explicit: q_dim 128 is twice hidden_size
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.kv_dim(), 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);  // "rope_scaling": null
  // config.json says 151645; generation_config.json's list wins: both stop.
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{151645, 151643}));
  EXPECT_EQ(c.vocab_size, 151936);
}

TEST(ModelConfigTest, LoadsTinyQwen2) {
  const std::string dir = testing::SharedModelDir("tiny-qwen2");
  SKIP_IF_NO_CONFIG(dir);
  ModelConfig c;
  Status s = LoadModelConfig(dir, &c);
  ASSERT_TRUE(s.ok()) << s.message();  // sliding_window 4096 with use_sliding_window false
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{151645, 151643}));
  // Biases count: 2 layers x (64 + 16 + 16).
  ModelConfig no_bias = c;
  no_bias.qkv_bias = false;
  EXPECT_EQ(c.NumParams() - no_bias.NumParams(), 2 * (64 + 16 + 16));
}

TEST(ModelConfigTest, LoadsTinyLlama32) {
  const std::string dir = testing::SharedModelDir("tiny-llama32");
  SKIP_IF_NO_CONFIG(dir);
  ModelConfig c;
  Status s = LoadModelConfig(dir, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c.bos_token_id, 128000);
}

TEST(ModelConfigTest, FamiliesSetTheirFlags) {
  struct Want {
    const char* arch;
    bool qkv_bias, qk_norm;
  };
  for (const Want& w :
       {Want{"LlamaForCausalLM", false, false}, Want{"MistralForCausalLM", false, false},
        Want{"Qwen2ForCausalLM", true, false}, Want{"Qwen3ForCausalLM", false, true}}) {
    ModelConfig c;
    Status s = ParseModelConfig(ConfigOf(w.arch, ""), "/m/config.json", &c);
    ASSERT_TRUE(s.ok()) << w.arch << ": " << s.message();
    EXPECT_EQ(c.architecture, w.arch);
    EXPECT_EQ(c.qkv_bias, w.qkv_bias) << w.arch;
    EXPECT_EQ(c.qk_norm, w.qk_norm) << w.arch;
  }
}

TEST(ModelConfigTest, UnknownArchitectureIsNamedWithTheSupportedList) {
  ExpectUnsupported(ConfigOf("GemmaForCausalLM", ""),
                    {"/m/config.json", "'architectures'", "'GemmaForCausalLM'",
                     "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"});
  ExpectUnsupported(ConfigOf("Qwen2MoeForCausalLM", ""), {"'Qwen2MoeForCausalLM'"});
}

TEST(ModelConfigTest, MistralSlidingWindowThatMattersIsRefused) {
  const std::string mistral = "MistralForCausalLM";
  ExpectUnsupported(
      ConfigOf(mistral, R"("sliding_window": 128)"),
      {"/m/config.json", "'sliding_window' is 128", "narrower than max_position_embeddings 256",
       "not implemented", "MistralForCausalLM"});
  // Absent means Hugging Face's default, 4096: it matters once the context is longer.
  std::string long_context = ConfigOf(mistral, "");
  long_context.replace(long_context.find("256"), 3, "32768");  // max_position_embeddings
  ExpectUnsupported(long_context, {"'sliding_window' is 4096 (the default when absent)",
                                   "narrower than max_position_embeddings 32768"});
  ModelConfig c;
  for (const char* fine :
       {R"("sliding_window": null)", R"("sliding_window": 256)", R"("sliding_window": 4096)", ""}) {
    Status s = ParseModelConfig(ConfigOf(mistral, fine), "/m/config.json", &c);
    EXPECT_TRUE(s.ok()) << fine << ": " << s.message();
  }
  // Llama has no sliding window: the field is not its.
  EXPECT_TRUE(ParseModelConfig(Config(R"("sliding_window": 16)"), "c", &c).ok());
  Status s = ParseModelConfig(ConfigOf(mistral, R"("sliding_window": "wide")"), "c", &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
}

TEST(ModelConfigTest, QwenSlidingWindowMattersOnlyWhenUsed) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    // Layers max_window_layers and up slide when use_sliding_window is true.
    ExpectUnsupported(
        ConfigOf(arch, R"("sliding_window": 128, "use_sliding_window": true,
                          "max_window_layers": 1)"),
        {"'sliding_window' is 128", "layers 1 and up", "use_sliding_window is true", arch});
    ModelConfig c;
    for (const char* fine :
         {R"("sliding_window": 128, "use_sliding_window": false, "max_window_layers": 1)",
          R"("sliding_window": 128, "use_sliding_window": true, "max_window_layers": 2)",
          R"("sliding_window": 128, "use_sliding_window": true)",  // default 28 layers: none
          R"("sliding_window": 256, "use_sliding_window": true, "max_window_layers": 0)",
          R"("sliding_window": null, "use_sliding_window": true, "max_window_layers": 0)"}) {
      Status s = ParseModelConfig(ConfigOf(arch, fine), "/m/config.json", &c);
      EXPECT_TRUE(s.ok()) << fine << ": " << s.message();
    }
  }
}

TEST(ModelConfigTest, BiasesOutsideQwen2AreRefused) {
  ExpectUnsupported(Config(R"("attention_bias": true)"),
                    {"'attention_bias' true is not supported for LlamaForCausalLM"});
  ExpectUnsupported(ConfigOf("Qwen3ForCausalLM", R"("attention_bias": true)"),
                    {"'attention_bias'", "Qwen3ForCausalLM"});
  ExpectUnsupported(ConfigOf("Qwen2ForCausalLM", R"("mlp_bias": true)"), {"'mlp_bias'"});
  // Qwen2 has its q/k/v biases whatever the field says.
  ModelConfig c;
  ASSERT_TRUE(
      ParseModelConfig(ConfigOf("Qwen2ForCausalLM", R"("attention_bias": true)"), "c", &c).ok());
  EXPECT_TRUE(c.qkv_bias);
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
  const std::string dir = testing::CurrentTestDir();
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
