// ModelConfig: the fields of a Hugging Face config.json (+ generation_config.json) that the engine
// needs, for the families in SupportedArchitectures(): LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM and Qwen3ForCausalLM. They share one decoder (pre-norm, RoPE, GQA, SwiGLU); a
// family differs only in the flags SetArchitecture sets (q/k/v biases, per-head q/k RMSNorm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/model/quantization.h"

namespace llmq {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                  // llama3 only
  double high_freq_factor = 4.0;                 // llama3 only
  int64_t original_max_position_embeddings = 0;  // llama3 only
};

struct ModelConfig {
  std::string architecture;  // one of SupportedArchitectures(); set with SetArchitecture
  // Family flags, set by SetArchitecture from `architecture` (never from other config fields):
  bool qkv_bias = false;  // Qwen2: self_attn.{q,k,v}_proj.bias [q_dim], [kv_dim], [kv_dim], added
                          // to the projections before RoPE
  bool qk_norm = false;   // Qwen3: self_attn.{q,k}_norm.weight [head_dim], an RMSNorm (eps
                          // rms_norm_eps) of every q and k head after projection, before RoPE
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // == num_heads (MHA), < num_heads (GQA), 1 (MQA)
  int head_dim = 0;      // explicit "head_dim", else hidden_size / num_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  RopeScaling rope_scaling;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;   // generation_config.json wins over config.json
  std::string torch_dtype;          // informational
  WeightQuantization quantization;  // config.json's quantization_config (none: plain floats)

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // Bytes of K and V for one token over all layers at `bytes_per_element`.
  int64_t KvBytesPerToken(int bytes_per_element) const {
    return int64_t{2} * num_layers * num_kv_heads * head_dim * bytes_per_element;
  }
  // Parameters of this shape (embedding, layers with their biases and q/k norms, norm, untied
  // head).
  int64_t NumParams() const {
    const int64_t H = hidden_size, I = intermediate_size, V = vocab_size;
    const int64_t per_layer = 2 * H + H * (q_dim() + 2 * kv_dim()) + q_dim() * H + 3 * H * I +
                              (qkv_bias ? q_dim() + 2 * kv_dim() : 0) +
                              (qk_norm ? 2 * head_dim : 0);
    return V * H + num_layers * per_layer + H + (tie_word_embeddings ? 0 : V * H);
  }
  // Parameters of the projections (q/k/v, o, gate/up, down) over all layers: the weights FP8 holds
  // in one byte each (engine.precision fp8), with one scale per output channel (ProjectionRows).
  int64_t ProjectionParams() const {
    const int64_t H = hidden_size, I = intermediate_size;
    return num_layers * (H * (q_dim() + 2 * kv_dim()) + q_dim() * H + 3 * H * I);
  }
  int64_t ProjectionRows() const {
    return num_layers *
           (q_dim() + 2 * kv_dim() + 2 * int64_t{hidden_size} + 2 * int64_t{intermediate_size});
  }
  // Inverse rotary frequencies (head_dim / 2 of them) with rope_scaling applied.
  std::vector<double> RopeInvFreq() const;
};

// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM".
std::string SupportedArchitectures();
// Sets cfg->architecture and the family flags (qkv_bias, qk_norm) it implies. An unsupported name
// is refused naming it and the supported list (`file` is used in messages only).
Status SetArchitecture(const std::string& name, const std::string& file, ModelConfig* cfg);

// Parses `dir`/config.json and, if present, `dir`/generation_config.json. Errors name the file and
// the field.
Status LoadModelConfig(const std::string& dir, ModelConfig* out);
// Parses config.json text (`file` is used in messages only).
Status ParseModelConfig(const std::string& json_text, const std::string& file, ModelConfig* out);

}  // namespace llmq
