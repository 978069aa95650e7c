// FP8 checkpoints (engine/model/quantization.h): the E4M3 codec against this file's own (values
// from the format's definition, the nearest code by a scan of all codes); quantization_config
// parsed or refused naming the field; checkpoints this test quantizes itself (per tensor, per
// channel, in blocks that do not divide the matrix) load to exactly the weights it dequantizes,
// and the model generates what an f32 checkpoint of those weights generates; malformed ones are
// refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/durable_file.h"
#include "engine/backends/cpu_backend.h"
#include "engine/model/model_config.h"
#include "engine/model/quantization.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/tools/model_maker.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

// E4M3 as the OCP FP8 spec defines it: 2^(e-7) * (1 + m/8), subnormals 2^-6 * m/8, S.1111.111 NaN.
double E4M3Value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::pow(2.0, e - 7) * (1.0 + m / 8.0);
  return code & 0x80 ? -v : v;
}

// The nearest code by a scan of all finite ones (ties to the even code), saturating at 448.
int NearestE4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const int sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  for (int c = 1; c <= 126; ++c) {
    const double d = std::fabs(a - E4M3Value(c)), b = std::fabs(a - E4M3Value(best));
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return sign | best;
}

TEST(Fp8CodecTest, DecodesAndRoundsAsTheFormatSays) {
  for (int c = 0; c < 256; ++c) {
    const float got = F8E4M3ToF32(static_cast<uint8_t>(c));
    if (std::isnan(E4M3Value(c))) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), E4M3Value(c)) << c;
      if ((c & 0x7f) != 0) {  // every finite code but the zeros round-trips
        EXPECT_EQ(F32ToF8E4M3(got), c) << c;
      }
    }
  }
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.f, -9));
  // Between every two neighbours: the midpoint goes to the even code, just off it to the nearer.
  for (int c = 0; c < 126; ++c) {
    const double mid = (E4M3Value(c) + E4M3Value(c + 1)) / 2;
    EXPECT_EQ(F32ToF8E4M3(static_cast<float>(mid)), c % 2 == 0 ? c : c + 1) << c;
    EXPECT_EQ(F32ToF8E4M3(std::nextafter(static_cast<float>(mid), 0.f)), c) << c;
    EXPECT_EQ(F32ToF8E4M3(std::nextafter(static_cast<float>(mid), 1e9f)), c + 1) << c;
  }
  EXPECT_EQ(F32ToF8E4M3(1e9f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-500.f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(INFINITY), 0x7e);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(F32ToF8E4M3(NAN))));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exp(-14.f, 10.f);
  for (int i = 0; i < 20000; ++i) {
    const float f = (rng() % 2 ? -1.f : 1.f) * std::exp2(exp(rng));
    ASSERT_EQ(F32ToF8E4M3(f), NearestE4M3(f)) << f;
  }
}

TEST(QuantizationConfigTest, Fp8SchemesParseAndOthersAreRefusedNamingTheField) {
  const auto compressed = [](const json& weights, const json& extra = json::object()) {
    json qc = {{"quant_method", "compressed-tensors"},
               {"format", "float-quantized"},
               {"ignore", {"lm_head", "re:.*mlp\\.down"}},
               {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}}};
    qc.update(extra);
    return qc;
  };
  const json channel = {
      {"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"}};
  WeightQuantization q;
  ASSERT_TRUE(ParseQuantizationConfig(compressed(channel), "c.json", &q).ok());
  EXPECT_TRUE(q.fp8);
  EXPECT_EQ(q.scale_suffix, "weight_scale");
  EXPECT_TRUE(q.Quantizes("model.layers.0.mlp.up_proj"));
  EXPECT_FALSE(q.Quantizes("lm_head"));
  EXPECT_FALSE(q.Quantizes("model.layers.3.mlp.down_proj"));  // re: matches from the start
  json block = channel;
  block["strategy"] = "block";
  block["block_structure"] = {128, 64};
  ASSERT_TRUE(ParseQuantizationConfig(compressed(block), "c.json", &q).ok());
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 64);
  ASSERT_TRUE(ParseQuantizationConfig(json::parse(R"({"quant_method": "fp8", "fmt": "e4m3",
      "weight_block_size": [128, 128], "modules_to_not_convert": ["mlp.gate"]})"),
                                      "c.json", &q)
                  .ok());
  EXPECT_EQ(q.scale_suffix, "weight_scale_inv");
  EXPECT_FALSE(q.Quantizes("model.layers.1.mlp.gate_proj"));
  EXPECT_TRUE(q.Quantizes("model.layers.1.mlp.up_proj"));
  ASSERT_TRUE(ParseQuantizationConfig(json(), "c.json", &q).ok());
  EXPECT_FALSE(q.fp8);

  json int4 = channel;
  int4["num_bits"] = 4;
  json grouped = channel;
  grouped["group_size"] = 128;
  json tokenwise = channel;
  tokenwise["strategy"] = "token";
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"quant_method", "gptq"}, {"bits", 4}}, "quant_method"},
      {{{"quant_method", "awq"}}, "quant_method"},
      {{{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}, "quant_method"},
      {compressed(channel, {{"format", "pack-quantized"}}), "format"},
      {compressed(channel, {{"format", "int-quantized"}}), "format"},
      {compressed(int4), "config_groups.group_0.weights.num_bits"},
      {compressed(grouped), "config_groups.group_0.weights.group_size"},
      {compressed(tokenwise), "config_groups.group_0.weights.strategy"},
      {compressed(channel, {{"ignore", {"re:(unclosed"}}}), "ignore[0]"},
      {json::parse(R"({"quant_method": "fp8"})"), "weight_block_size"},
      {json::parse(R"({"quant_method": "fp8", "weight_block_size": [128, 0]})"),
       "weight_block_size"},
  };
  for (const auto& [qc, field] : refused) {
    const Status st = ParseQuantizationConfig(qc, "m/config.json", &q);
    ASSERT_FALSE(st.ok()) << qc.dump();
    EXPECT_NE(st.message().find("m/config.json: field 'quantization_config." + field + "'"),
              std::string::npos)
        << st.ToString();
  }
  // Through config.json, with the rest of the config.
  ModelConfig cfg;
  DType dt;
  ASSERT_TRUE(ShapeConfig("tiny", &cfg, &dt).ok());
  json j = json::parse(ConfigJson(cfg, DType::kF32));
  j["quantization_config"] = {{"quant_method", "gptq"}};
  const Status st = ParseModelConfig(j.dump(), "m/config.json", &cfg);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("'quantization_config.quant_method' \"gptq\""), std::string::npos)
      << st.ToString();
}

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Checkpoint = std::map<std::string, Tensor>;

Tensor F32Tensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  Tensor t{DType::kF32, std::move(shape), std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void WriteCheckpoint(const std::string& dir, const json& config, const Checkpoint& ck) {
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileDurably(dir + "/config.json", config.dump(2)).ok());
  std::vector<TensorToWrite> specs;
  for (const auto& [name, t] : ck) specs.push_back({name, t.dtype, t.shape, t.bytes.data()});
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", specs).ok());
}

bool IsProjection(const std::string& name) {
  return name.ends_with("_proj.weight");
}

class Fp8CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DType dt;
    ASSERT_TRUE(ShapeConfig("tiny", &cfg_, &dt).ok());
    dir_ = testing::CurrentTestDir();
    ASSERT_TRUE(WriteRandomModel(cfg_, DType::kF32, 9, dir_ + "/f32").ok());
    ASSERT_TRUE(Weights::Load(dir_ + "/f32", cfg_, &base_).ok());
  }

  // The base model with its projections quantized by this test: scales of tiles [rows, cols]
  // (clipped at the edges), each the tile's largest magnitude / 448; *dequantized gets
  // fp8(code) * scale for each projection. `strategy` and `block` go into quantization_config.
  void Quantize(const std::string& strategy, int64_t rows, int64_t cols, json* config,
                Checkpoint* fp8, std::map<std::string, std::vector<float>>* dequantized) {
    *config = json::parse(ConfigJson(cfg_, DType::kF32));
    json weights = {
        {"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", strategy}};
    if (strategy == "block") weights["block_structure"] = {rows, cols};
    (*config)["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
        {"ignore", {"lm_head"}}};
    for (const char* name : AllNames()) {
      const std::vector<float> w = base_->ToF32(name);
      const std::vector<int64_t> shape = base_->Get(name).shape;
      if (!IsProjection(name)) {
        (*fp8)[name] = F32Tensor(shape, w);
        continue;
      }
      const int64_t n = shape[0], k = shape[1];
      const int64_t tr = std::min(rows, n), tc = std::min(cols, k);
      const int64_t sr = (n + tr - 1) / tr, sc = (k + tc - 1) / tc;
      std::vector<float> scale(static_cast<size_t>(sr * sc), 0.f);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          float& s = scale[static_cast<size_t>((r / tr) * sc + c / tc)];
          s = std::max(s, std::fabs(w[static_cast<size_t>(r * k + c)]) / 448.f);
        }
      Tensor q{DType::kF8E4M3, shape, std::vector<uint8_t>(static_cast<size_t>(n * k))};
      std::vector<float>& d = (*dequantized)[name];
      d.resize(static_cast<size_t>(n * k));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          const float s = scale[static_cast<size_t>((r / tr) * sc + c / tc)];
          const size_t i = static_cast<size_t>(r * k + c);
          const int code = NearestE4M3(w[i] / s);
          q.bytes[i] = static_cast<uint8_t>(code);
          d[i] = static_cast<float>(E4M3Value(code)) * s;
        }
      const std::string module = std::string(name).substr(0, std::string(name).size() - 7);
      (*fp8)[name] = std::move(q);
      const std::vector<int64_t> scale_shape = strategy == "tensor" ? std::vector<int64_t>{1}
                                               : strategy == "channel"
                                                   ? std::vector<int64_t>{n, 1}
                                                   : std::vector<int64_t>{sr, sc};
      (*fp8)[module + ".weight_scale"] = F32Tensor(scale_shape, scale);
    }
  }

  std::vector<const char*> AllNames() {
    names_.clear();
    names_.push_back("model.embed_tokens.weight");
    names_.push_back("model.norm.weight");
    names_.push_back("lm_head.weight");
    for (int l = 0; l < cfg_.num_layers; ++l)
      for (const char* s :
           {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
            "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
        names_.push_back(LayerTensorName(l, s));
    out_.clear();
    for (const std::string& n : names_) out_.push_back(n.c_str());
    return out_;
  }

  Status Load(const std::string& dir, std::unique_ptr<Weights>* w, ModelConfig* cfg) {
    LLMQ_RETURN_IF_ERROR(LoadModelConfig(dir, cfg));
    return Weights::Load(dir, *cfg, w);
  }

  ModelConfig cfg_;
  std::string dir_;
  std::unique_ptr<Weights> base_;
  std::vector<std::string> names_;
  std::vector<const char*> out_;
};

TEST_F(Fp8CheckpointTest, LoadsToTheWeightsItDequantizesAndGeneratesAsTheirF32Checkpoint) {
  Request r;
  r.id = "a";
  r.prompt_ids = {1, 15, 200, 7, 42, 99, 3};
  r.params.temperature = 0;
  r.params.max_tokens = 24;
  r.params.ignore_eos = true;
  r.params.logprobs = 0;
  // The sampled tokens' logprobs, in order.
  const auto logprobs = [](const std::map<std::string, RequestOutput>& out) {
    std::vector<float> v;
    for (const TokenLogprobs& t : out.at("a").completions.at(0).logprobs) v.push_back(t.logprob);
    return v;
  };
  // tiny's projections are [64 | 32 | 160, 64 | 160]: blocks of 48 x 40 leave partial edge tiles.
  for (const auto& [strategy, rows, cols] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"tensor", 1 << 20, 1 << 20}, {"channel", 1, 1 << 20}, {"block", 48, 40}}) {
    SCOPED_TRACE(strategy);
    json config;
    Checkpoint fp8;
    std::map<std::string, std::vector<float>> want;
    Quantize(strategy, rows, cols, &config, &fp8, &want);
    WriteCheckpoint(dir_ + "/" + strategy, config, fp8);
    std::unique_ptr<Weights> w;
    ModelConfig cfg;
    const Status st = Load(dir_ + "/" + strategy, &w, &cfg);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(want.size(), 7u * cfg_.num_layers);
    for (const auto& [name, d] : want) {
      ASSERT_EQ(w->Get(name).dtype, DType::kF8E4M3);
      const std::vector<float> got = w->ToF32(name);
      ASSERT_EQ(got.size(), d.size());
      EXPECT_EQ(std::memcmp(got.data(), d.data(), d.size() * 4), 0) << name;
    }
    // An f32 checkpoint of those weights: the model generates the same.
    Checkpoint f32 = fp8;
    for (auto& [name, d] : want) {
      f32.erase(name.substr(0, name.size() - 7) + ".weight_scale");
      f32[name] = F32Tensor(fp8.at(name).shape, d);
    }
    json plain = config;
    plain.erase("quantization_config");
    WriteCheckpoint(dir_ + "/" + strategy + "-f32", plain, f32);
    std::unique_ptr<Weights> w32;
    ModelConfig cfg32;
    ASSERT_TRUE(Load(dir_ + "/" + strategy + "-f32", &w32, &cfg32).ok());
    const auto a = testing::RunEngine(cfg, *w, {r});
    const auto b = testing::RunEngine(cfg32, *w32, {r});
    testing::ExpectSameIds(a, b, strategy.c_str());
    EXPECT_EQ(logprobs(a), logprobs(b));
    // Not the unquantized model's numbers (else the test would show nothing of the scales).
    EXPECT_NE(logprobs(a), logprobs(testing::RunEngine(cfg_, *base_, {r})));
  }
}

TEST_F(Fp8CheckpointTest, MalformedCheckpointsAreRefusedNamingTheTensor) {
  json config;
  Checkpoint good;
  std::map<std::string, std::vector<float>> want;
  Quantize("channel", 1, 1 << 20, &config, &good, &want);
  const std::string q = "model.layers.1.mlp.up_proj";
  struct Case {
    const char* what;
    std::function<void(json*, Checkpoint*)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no scale", [&](json*, Checkpoint* c) { c->erase(q + ".weight_scale"); },
       "tensor '" + q + ".weight' is F8_E4M3 but its scale '" + q + ".weight_scale' is missing"},
      {"scale of a wrong shape",
       [&](json*, Checkpoint* c) {
         c->at(q + ".weight_scale") = F32Tensor({2, 80}, std::vector<float>(160, 1.f));
       },
       "tensor '" + q + ".weight_scale' has shape [2, 80], expected one value, [160] or [160, 1]"},
      {"an F8 norm",
       [&](json*, Checkpoint* c) {
         c->at("model.norm.weight") = Tensor{DType::kF8E4M3, {64}, std::vector<uint8_t>(64, 0x38)};
       },
       "tensor 'model.norm.weight' is F8_E4M3, but only linear weights are quantized"},
      {"no quantization_config", [&](json* j, Checkpoint*) { j->erase("quantization_config"); },
       "is F8_E4M3, but config.json has no quantization_config"},
      {"an ignored module in F8",
       [&](json* j, Checkpoint*) {
         (*j)["quantization_config"]["ignore"] = {"lm_head", q};
       },
       "tensor '" + q + ".weight' is F8_E4M3, but quantization_config leaves '" + q +
           "' unquantized"},
  };
  for (const Case& c : cases) {
    json j = config;
    Checkpoint ck = good;
    c.change(&j, &ck);
    const std::string dir = dir_ + "/bad";
    std::filesystem::remove_all(dir);
    WriteCheckpoint(dir, j, ck);
    std::unique_ptr<Weights> w;
    ModelConfig cfg;
    const Status st = Load(dir, &w, &cfg);
    ASSERT_FALSE(st.ok()) << c.what;
    EXPECT_NE(st.message().find(c.message), std::string::npos) << c.what << ": " << st.ToString();
    EXPECT_NE(st.message().find(dir + "/model.safetensors"), std::string::npos) << st.ToString();
  }
}

// `llmq make-model --dtype fp8` writes such a checkpoint (llm-compressor's per-channel scheme) and
// `llmq generate` runs it.
TEST(Fp8MakeModelTest, WritesACheckpointThatLoadsAndGenerates) {
  const std::string dir = testing::CurrentTestDir() + "/m";
  const auto made =
      testing::RunLlmq({"make-model", "--shape", "tiny", "--dtype", "fp8", "--out", dir});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ModelConfig cfg;
  ASSERT_TRUE(LoadModelConfig(dir, &cfg).ok());
  EXPECT_TRUE(cfg.quantization.fp8);
  std::unique_ptr<Weights> w;
  ASSERT_TRUE(Weights::Load(dir, cfg, &w).ok());
  EXPECT_EQ(w->Get("model.layers.0.self_attn.q_proj.weight").dtype, DType::kF8E4M3);
  EXPECT_EQ(w->Get("lm_head.weight").dtype, DType::kBF16);
  // weight_dtype auto: an FP8 checkpoint's matrices are held in bf16 on the CPU (not f32).
  EXPECT_EQ(CpuBackend::ResolveWeightType(WeightDtype::kAuto, cfg, *w), kernels::WeightType::kBf16);
  const auto gen = testing::RunLlmq({"generate", "--model", dir, "--prompt", "Once upon a time",
                                     "--max-tokens", "8", "--temperature", "0"});
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_NE(gen.err.find("8 completion tokens"), std::string::npos) << gen.err;
}

}  // namespace
}  // namespace llmq
