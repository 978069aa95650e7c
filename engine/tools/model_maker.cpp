#include "engine/tools/model_maker.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/bf16.h"
#include "base/durable_file.h"
#include "engine/model/weights.h"
#include "engine/sampling/sampler.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// One value's draw and conversion on one core (make-model of a 492M-parameter shape: 6.4 s of
// user time), for ParallelFor's choice to split a tensor.
constexpr double kMakeNsPerValue = 13;

// One tensor's bytes in `dtype`, uniform in [-a, a] (+ `center`).
struct RandomTensor {
  TensorToWrite spec;
  std::vector<uint8_t> bytes;
};

RandomTensor MakeTensor(const std::string& name, std::vector<int64_t> shape, DType dtype, Rng* rng,
                        float a, float center) {
  RandomTensor t;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  t.bytes.resize(n * DTypeSize(dtype));
  // Value i is draw i of the stream from *rng, whichever thread makes it (Rng::Skip): the same
  // bytes as one pass, in a fraction of the time (an 8B model is 8 billion draws).
  const Rng from = *rng;
  rng->Skip(static_cast<uint64_t>(n));
  kernels::ParallelFor(n, kMakeNsPerValue, [&](int64_t i0, int64_t i1) {
    Rng r = from;
    r.Skip(static_cast<uint64_t>(i0));
    for (int64_t i = i0; i < i1; ++i) {
      const float v = center + a * static_cast<float>(2.0 * r.NextDouble() - 1.0);
      if (dtype == DType::kF32) {
        std::memcpy(&t.bytes[i * 4], &v, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? FloatToBf16(v) : F32ToF16(v);
        std::memcpy(&t.bytes[i * 2], &h, 2);
      }
    }
  });
  t.spec = {name, dtype, std::move(shape), nullptr};
  return t;
}

// A linear weight [out, in] as an FP8 checkpoint stores it (compressed-tensors, strategy channel):
// uniform values quantized to E4M3 per output channel, `name` in F8_E4M3 and its BF16 scale
// `<module>.weight_scale` [out, 1] = the row's largest magnitude / 448.
void MakeFp8Linear(const std::string& name, int64_t out, int64_t in, Rng* rng, float a,
                   std::vector<RandomTensor>* ts) {
  RandomTensor q, scale;
  q.bytes.resize(static_cast<size_t>(out * in));
  scale.bytes.resize(static_cast<size_t>(out) * 2);
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t r = 0; r < out; ++r) {
    float amax = 0.f;
    for (float& v : row) {
      v = a * static_cast<float>(2.0 * rng->NextDouble() - 1.0);
      amax = std::max(amax, std::fabs(v));
    }
    const uint16_t s = FloatToBf16(amax > 0.f ? amax / 448.f : 1.f);
    std::memcpy(&scale.bytes[static_cast<size_t>(r) * 2], &s, 2);
    for (int64_t c = 0; c < in; ++c)
      q.bytes[static_cast<size_t>(r * in + c)] = F32ToF8E4M3(row[c] / Bf16ToFloat(s));
  }
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  q.spec = {name, DType::kF8E4M3, {out, in}, nullptr};
  scale.spec = {module + ".weight_scale", DType::kBF16, {out, 1}, nullptr};
  ts->push_back(std::move(q));
  ts->push_back(std::move(scale));
}

}  // namespace

std::vector<std::string> ShapeNames() {
  return {"tiny", "bench-110m", "bench-110m-gqa", "llama3-8b"};
}

Status ShapeConfig(const std::string& name, ModelConfig* cfg, DType* dtype) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  *dtype = DType::kF32;
  if (name == "tiny") {
    c.hidden_size = 64;
    c.intermediate_size = 160;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 512;
    c.max_position_embeddings = 512;
  } else if (name == "bench-110m" || name == "bench-110m-gqa") {
    c.hidden_size = 768;
    c.intermediate_size = 2048;
    c.num_layers = 12;
    c.num_heads = 12;
    c.num_kv_heads = name == "bench-110m" ? 12 : 4;
    c.head_dim = 64;
    c.vocab_size = 32000;
    c.max_position_embeddings = 1024;
  } else if (name == "llama3-8b") {  // Llama-3-8B's shape (the GPU benchmark's; BF16)
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.vocab_size = 128256;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0;
    *dtype = DType::kBF16;
  } else {
    return Status::InvalidArgument("unknown shape '" + name +
                                   "' (known: tiny, bench-110m, bench-110m-gqa, llama3-8b)");
  }
  *cfg = c;
  return Status::Ok();
}

std::string ConfigJson(const ModelConfig& c, DType dtype) {
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = c.architecture == "MistralForCausalLM" ? "mistral"
                    : c.architecture == "Qwen2ForCausalLM" ? "qwen2"
                    : c.architecture == "Qwen3ForCausalLM" ? "qwen3"
                                                           : "llama";
  if (c.architecture == "MistralForCausalLM") j["sliding_window"] = nullptr;  // full attention
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScaling::Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rs.factor}};
  } else if (rs.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rs.factor},
                         {"low_freq_factor", rs.low_freq_factor},
                         {"high_freq_factor", rs.high_freq_factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings}};
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] =
      c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["torch_dtype"] = dtype == DType::kF32   ? "float32"
                     : dtype == DType::kF16 ? "float16"
                                            : "bfloat16";
  if (dtype == DType::kF8E4M3)  // llm-compressor's FP8 per-channel scheme, lm_head left in BF16
    j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "float-quantized"},
                                {"quantization_status", "compressed"},
                                {"ignore", {"lm_head"}},
                                {"config_groups",
                                 {{"group_0",
                                   {{"targets", {"Linear"}},
                                    {"weights",
                                     {{"num_bits", 8},
                                      {"type", "float"},
                                      {"symmetric", true},
                                      {"strategy", "channel"},
                                      {"dynamic", false},
                                      {"group_size", nullptr},
                                      {"block_structure", nullptr},
                                      {"actorder", nullptr}}},
                                    {"input_activations", nullptr}}}}}};
  return j.dump(2) + "\n";
}

Status WriteRandomModel(const ModelConfig& c, DType dtype, uint64_t seed,
                        const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IoError(out_dir + ": cannot create: " + ec.message());
  LLMQ_RETURN_IF_ERROR(WriteFileDurably(out_dir + "/config.json", ConfigJson(c, dtype)));
  LLMQ_RETURN_IF_ERROR(WriteFileDurably(
      out_dir + "/generation_config.json",
      json{{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_ids}}.dump(2) + "\n"));
  LLMQ_RETURN_IF_ERROR(WriteFileDurably(
      out_dir + "/tokenizer_config.json",
      json{{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", true}, {"add_eos_token", false}}
              .dump(2) +
          "\n"));

  Rng rng(seed);
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Q = c.q_dim(), KV = c.kv_dim();
  // FP8: the projections quantized, everything else in BF16.
  const bool fp8 = dtype == DType::kF8E4M3;
  const DType plain = fp8 ? DType::kBF16 : dtype;
  std::vector<RandomTensor> ts;
  auto lin = [&](const std::string& name, int64_t out, int64_t in) {
    if (fp8) return MakeFp8Linear(name, out, in, &rng, std::sqrt(3.0f / in), &ts);
    ts.push_back(MakeTensor(name, {out, in}, dtype, &rng, std::sqrt(3.0f / in), 0.f));
  };
  auto norm = [&](const std::string& name, int64_t n) {
    return MakeTensor(name, {n}, plain, &rng, 0.2f, 1.0f);
  };
  ts.push_back(MakeTensor("model.embed_tokens.weight", {V, H}, plain, &rng, std::sqrt(3.0f), 0.f));
  for (int l = 0; l < c.num_layers; ++l) {
    ts.push_back(norm(LayerTensorName(l, "input_layernorm.weight"), H));
    lin(LayerTensorName(l, "self_attn.q_proj.weight"), Q, H);
    lin(LayerTensorName(l, "self_attn.k_proj.weight"), KV, H);
    lin(LayerTensorName(l, "self_attn.v_proj.weight"), KV, H);
    lin(LayerTensorName(l, "self_attn.o_proj.weight"), H, Q);
    if (c.qkv_bias) {  // Qwen2: [Q], [KV], [KV]
      auto bias = [&](const char* suffix, int64_t n) {
        return MakeTensor(LayerTensorName(l, suffix), {n}, plain, &rng, 0.5f, 0.f);
      };
      ts.push_back(bias("self_attn.q_proj.bias", Q));
      ts.push_back(bias("self_attn.k_proj.bias", KV));
      ts.push_back(bias("self_attn.v_proj.bias", KV));
    }
    if (c.qk_norm) {  // Qwen3: [head_dim] each
      ts.push_back(norm(LayerTensorName(l, "self_attn.q_norm.weight"), c.head_dim));
      ts.push_back(norm(LayerTensorName(l, "self_attn.k_norm.weight"), c.head_dim));
    }
    ts.push_back(norm(LayerTensorName(l, "post_attention_layernorm.weight"), H));
    lin(LayerTensorName(l, "mlp.gate_proj.weight"), I, H);
    lin(LayerTensorName(l, "mlp.up_proj.weight"), I, H);
    lin(LayerTensorName(l, "mlp.down_proj.weight"), H, I);
  }
  ts.push_back(norm("model.norm.weight", H));
  if (!c.tie_word_embeddings)  // left in BF16 by an FP8 checkpoint ("ignore": ["lm_head"])
    ts.push_back(MakeTensor("lm_head.weight", {V, H}, plain, &rng, std::sqrt(3.0f / H), 0.f));
  std::vector<TensorToWrite> specs;
  for (RandomTensor& t : ts) {
    t.spec.data = t.bytes.data();
    specs.push_back(t.spec);
  }
  return WriteSafetensors(out_dir + "/model.safetensors", specs);
}

}  // namespace llmq
