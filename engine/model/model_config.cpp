#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

namespace llmq {
namespace {

using json = nlohmann::json;

Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return Status::Ok();
}

Status ParseJson(const std::string& text, const std::string& file, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return Status::Corruption(file + ": not valid JSON");
  if (!out->is_object()) return Status::Corruption(file + ": top level is not a JSON object");
  return Status::Ok();
}

Status RequireInt(const json& j, const std::string& file, const char* key, int* out) {
  if (!j.contains(key))
    return Status::InvalidArgument(file + ": missing required field '" + key + "'");
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 30))
    return Status::InvalidArgument(file + ": field '" + key + "' must be a positive integer");
  *out = v.get<int>();
  return Status::Ok();
}

Status OptionalNumber(const json& j, const std::string& file, const char* key, double* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_number())
    return Status::InvalidArgument(file + ": field '" + key + "' must be a number");
  *out = j[key].get<double>();
  return Status::Ok();
}

// eos_token_id may be an integer or a list of integers.
Status ParseEos(const json& v, const std::string& file, std::vector<int>* out) {
  out->clear();
  if (v.is_number_integer()) {
    out->push_back(v.get<int>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_number_integer())
        return Status::InvalidArgument(file + ": field 'eos_token_id' must hold integers");
      out->push_back(e.get<int>());
    }
  } else if (!v.is_null()) {
    return Status::InvalidArgument(file + ": field 'eos_token_id' must be an integer or a list");
  }
  return Status::Ok();
}

Status ParseRopeScaling(const json& v, const std::string& file, RopeScaling* rs) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_object())
    return Status::InvalidArgument(file + ": field 'rope_scaling' must be an object");
  std::string type;
  if (v.contains("rope_type") && v["rope_type"].is_string())
    type = v["rope_type"];
  else if (v.contains("type") && v["type"].is_string())
    type = v["type"];
  else
    return Status::InvalidArgument(file + ": field 'rope_scaling.rope_type' missing");
  if (type == "default") return Status::Ok();
  if (!v.contains("factor") || !v["factor"].is_number() || v["factor"].get<double>() <= 0)
    return Status::InvalidArgument(file +
                                   ": field 'rope_scaling.factor' must be a positive number");
  rs->factor = v["factor"].get<double>();
  if (type == "linear") {
    rs->type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    rs->type = RopeScaling::Type::kLlama3;
    for (const char* k :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!v.contains(k) || !v[k].is_number())
        return Status::InvalidArgument(file + ": field 'rope_scaling." + k + "' missing");
    }
    rs->low_freq_factor = v["low_freq_factor"].get<double>();
    rs->high_freq_factor = v["high_freq_factor"].get<double>();
    rs->original_max_position_embeddings = v["original_max_position_embeddings"].get<int64_t>();
    if (rs->high_freq_factor <= rs->low_freq_factor || rs->original_max_position_embeddings <= 0)
      return Status::InvalidArgument(file +
                                     ": field 'rope_scaling' has inconsistent llama3 factors");
  } else {
    return Status::Unsupported(file + ": field 'rope_scaling.rope_type' '" + type +
                               "' is not supported (supported: linear, llama3)");
  }
  return Status::Ok();
}

// A sliding window narrower than the context changes attention; it is not implemented, so a config
// where it matters is refused naming the setting. Hugging Face's rules: sliding_window defaults to
// 4096 when absent; Mistral slides every layer; Qwen2/Qwen3 slide only with use_sliding_window,
// and then only layers max_window_layers (default 28) and up; Llama has no window.
Status CheckSlidingWindow(const json& j, const std::string& file, const ModelConfig& c) {
  const bool mistral = c.architecture == "MistralForCausalLM";
  const bool qwen = c.architecture == "Qwen2ForCausalLM" || c.architecture == "Qwen3ForCausalLM";
  if (!mistral && !qwen) return Status::Ok();
  int64_t window = 4096;
  if (j.contains("sliding_window")) {
    const json& w = j["sliding_window"];
    if (w.is_null()) return Status::Ok();
    if (!w.is_number_integer() || w.get<int64_t>() <= 0)
      return Status::InvalidArgument(file +
                                     ": field 'sliding_window' must be a positive integer or null");
    window = w.get<int64_t>();
  }
  if (window >= c.max_position_embeddings) return Status::Ok();  // never narrower than the context
  std::string layers = "every layer";
  if (qwen) {
    if (j.contains("use_sliding_window") && !j["use_sliding_window"].is_boolean())
      return Status::InvalidArgument(file + ": field 'use_sliding_window' must be a boolean");
    if (!j.value("use_sliding_window", false)) return Status::Ok();
    int first = 28;
    if (j.contains("max_window_layers") && !j["max_window_layers"].is_null()) {
      if (!j["max_window_layers"].is_number_integer() || j["max_window_layers"].get<int64_t>() < 0)
        return Status::InvalidArgument(
            file + ": field 'max_window_layers' must be a non-negative integer");
      first = static_cast<int>(std::min<int64_t>(j["max_window_layers"].get<int64_t>(), 1 << 30));
    }
    if (first >= c.num_layers) return Status::Ok();  // no layer slides
    layers = "layers " + std::to_string(first) + " and up (use_sliding_window is true, " +
             "max_window_layers is " + std::to_string(first) + ")";
  }
  return Status::Unsupported(file + ": field 'sliding_window' is " + std::to_string(window) +
                             (j.contains("sliding_window") ? "" : " (the default when absent)") +
                             ", narrower than max_position_embeddings " +
                             std::to_string(c.max_position_embeddings) + ", for " + layers +
                             ": sliding-window attention is not implemented yet (" +
                             c.architecture + ")");
}

// The supported families and what sets each apart from Llama.
struct Architecture {
  const char* name;
  bool qkv_bias;
  bool qk_norm;
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", false, false},
    {"MistralForCausalLM", false, false},
    {"Qwen2ForCausalLM", true, false},
    {"Qwen3ForCausalLM", false, true},
};

}  // namespace

std::string SupportedArchitectures() {
  std::string s;
  for (const Architecture& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

Status SetArchitecture(const std::string& name, const std::string& file, ModelConfig* cfg) {
  for (const Architecture& a : kArchitectures) {
    if (name != a.name) continue;
    cfg->architecture = name;
    cfg->qkv_bias = a.qkv_bias;
    cfg->qk_norm = a.qk_norm;
    return Status::Ok();
  }
  return Status::Unsupported(file + ": field 'architectures' names '" + name +
                             "', which is not supported (supported: " + SupportedArchitectures() +
                             ")");
}

std::vector<double> ModelConfig::RopeInvFreq() const {
  const int half = head_dim / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(rope_theta, (2.0 * i) / head_dim);
  const RopeScaling& rs = rope_scaling;
  if (rs.type == RopeScaling::Type::kLinear) {
    for (double& f : inv) f /= rs.factor;
  } else if (rs.type == RopeScaling::Type::kLlama3) {
    // Hugging Face _compute_llama3_parameters.
    const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
    const double low_wavelen = old_ctx / rs.low_freq_factor;
    const double high_wavelen = old_ctx / rs.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
    }
  }
  return inv;
}

Status ParseModelConfig(const std::string& text, const std::string& file, ModelConfig* out) {
  json j;
  LLMQ_RETURN_IF_ERROR(ParseJson(text, file, &j));
  ModelConfig c;
  if (!j.contains("architectures") || !j["architectures"].is_array() ||
      j["architectures"].empty() || !j["architectures"][0].is_string())
    return Status::InvalidArgument(file + ": missing required field 'architectures'");
  LLMQ_RETURN_IF_ERROR(SetArchitecture(j["architectures"][0].get<std::string>(), file, &c));
  LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "hidden_size", &c.hidden_size));
  LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "intermediate_size", &c.intermediate_size));
  LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "num_hidden_layers", &c.num_layers));
  LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "num_attention_heads", &c.num_heads));
  LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "vocab_size", &c.vocab_size));
  c.num_kv_heads = c.num_heads;
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null())
    LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "num_key_value_heads", &c.num_kv_heads));
  if (c.num_heads % c.num_kv_heads != 0)
    return Status::InvalidArgument(
        file + ": field 'num_key_value_heads' (" + std::to_string(c.num_kv_heads) +
        ") must divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "head_dim", &c.head_dim));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return Status::InvalidArgument(
          file + ": field 'hidden_size' is not a multiple of num_attention_heads");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) return Status::InvalidArgument(file + ": field 'head_dim' must be even");
  LLMQ_RETURN_IF_ERROR(RequireInt(j, file, "max_position_embeddings", &c.max_position_embeddings));
  LLMQ_RETURN_IF_ERROR(OptionalNumber(j, file, "rope_theta", &c.rope_theta));
  LLMQ_RETURN_IF_ERROR(OptionalNumber(j, file, "rms_norm_eps", &c.rms_norm_eps));
  if (j.contains("tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean())
      return Status::InvalidArgument(file + ": field 'tie_word_embeddings' must be a boolean");
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    return Status::Unsupported(file + ": field 'hidden_act' must be \"silu\"");
  // Qwen2's q/k/v biases come with the family (its config has no switch); elsewhere
  // attention_bias would add an o_proj bias too, and no family has MLP biases.
  for (const char* k : {"attention_bias", "mlp_bias"})
    if (j.contains(k) && j[k].is_boolean() && j[k].get<bool>() &&
        !(c.qkv_bias && std::string(k) == "attention_bias"))
      return Status::Unsupported(file + ": field '" + k + "' true is not supported for " +
                                 c.architecture);
  LLMQ_RETURN_IF_ERROR(CheckSlidingWindow(j, file, c));
  if (j.contains("rope_scaling"))
    LLMQ_RETURN_IF_ERROR(ParseRopeScaling(j["rope_scaling"], file, &c.rope_scaling));
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = j["bos_token_id"].get<int>();
  if (j.contains("eos_token_id"))
    LLMQ_RETURN_IF_ERROR(ParseEos(j["eos_token_id"], file, &c.eos_token_ids));
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"];
  if (j.contains("quantization_config"))
    LLMQ_RETURN_IF_ERROR(ParseQuantizationConfig(j["quantization_config"], file, &c.quantization));
  *out = c;
  return Status::Ok();
}

Status LoadModelConfig(const std::string& dir, ModelConfig* out) {
  const std::string path = dir + "/config.json";
  std::string text;
  LLMQ_RETURN_IF_ERROR(ReadFile(path, &text));
  LLMQ_RETURN_IF_ERROR(ParseModelConfig(text, path, out));
  const std::string gen_path = dir + "/generation_config.json";
  std::string gen_text;
  if (ReadFile(gen_path, &gen_text).ok()) {
    json g;
    LLMQ_RETURN_IF_ERROR(ParseJson(gen_text, gen_path, &g));
    if (g.contains("eos_token_id")) {
      std::vector<int> eos;
      LLMQ_RETURN_IF_ERROR(ParseEos(g["eos_token_id"], gen_path, &eos));
      if (!eos.empty()) out->eos_token_ids = eos;
    }
    if (g.contains("bos_token_id") && g["bos_token_id"].is_number_integer())
      out->bos_token_id = g["bos_token_id"].get<int>();
  }
  return Status::Ok();
}

}  // namespace llmq
