// Weights: a model's safetensors files (single file or sharded via model.safetensors.index.json),
// memory-mapped and validated against the ModelConfig at load time: every required tensor present,
// shapes and dtypes as the config implies. Nothing in the hot loop re-checks them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace llmq {

struct TensorView {
  std::string name;
  std::string file;  // the file it lives in
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // mapped bytes, numel * DTypeSize(dtype); may be unaligned for
                                  // the dtype: read via memcpy or ConvertToF32
  // An FP8 weight's scale (engine/model/quantization.h), set by Weights::Load: one scale per tile
  // of [scale_rows, scale_cols] elements (the whole tensor, a row, or a block).
  const TensorView* scale = nullptr;
  int64_t scale_rows = 0, scale_cols = 0;
  int64_t numel() const;
};

// Names of the tensors of a Llama checkpoint (Hugging Face naming):
// LayerTensorName(3, "self_attn.q_proj.weight") == "model.layers.3.self_attn.q_proj.weight".
std::string LayerTensorName(int layer, const char* suffix);

class Weights {
 public:
  // Loads `dir`/model.safetensors or, if absent, `dir`/model.safetensors.index.json and its shards.
  // Validates every file with ParseSafetensors, then checks the required tensors against `cfg`:
  //   model.embed_tokens.weight [vocab, hidden]; model.norm.weight [hidden];
  //   lm_head.weight [vocab, hidden] unless tie_word_embeddings;
  //   per layer i, model.layers.i.{input_layernorm,post_attention_layernorm}.weight [hidden],
  //   self_attn.q_proj [heads*head_dim, hidden], k_proj/v_proj [kv_heads*head_dim, hidden],
  //   o_proj [hidden, heads*head_dim], mlp.gate_proj/up_proj [intermediate, hidden],
  //   mlp.down_proj [hidden, intermediate];
  //   with cfg.qkv_bias (Qwen2) self_attn.q_proj.bias [heads*head_dim],
  //   self_attn.{k,v}_proj.bias [kv_heads*head_dim];
  //   with cfg.qk_norm (Qwen3) self_attn.{q,k}_norm.weight [head_dim].
  // An FP8 checkpoint (cfg.quantization): each linear weight (the projections, lm_head) the config
  // quantizes is F8_E4M3 with its scale beside it, of a shape the quantization allows; an F8_E4M3
  // tensor anywhere else is refused.
  // A layer bias or q/k norm the architecture does not use is refused (it would be dropped);
  // other extra tensors are ignored. Errors name the file and the tensor (missing, wrong shape,
  // unsupported dtype, ...).
  static Status Load(const std::string& dir, const ModelConfig& cfg, std::unique_ptr<Weights>* out);

  const TensorView* Find(const std::string& name) const;
  const TensorView& Get(const std::string& name) const;  // aborts if absent (validated at load)
  // The tensor's values as floats: converted, or dequantized (an FP8 weight times its scales).
  std::vector<float> ToF32(const std::string& name) const;
  // The tensor's floats in the mapping itself when it is stored as F32 at a float-aligned address
  // (the usual case), else nullptr (read it with ToF32). Valid while these Weights live.
  const float* F32InPlace(const std::string& name) const;
  // The same for a tensor stored as BF16 at a 2-byte-aligned address: its bits in the mapping.
  const uint16_t* Bf16InPlace(const std::string& name) const;
  // Drops the mapped pages of tensor `name` (and of the pages it shares with its neighbours) from
  // this process's memory (madvise MADV_DONTNEED; a later read faults them in again from the file,
  // unchanged), once a backend holds its own copy: a load's peak RSS is then that copy plus about
  // one tensor of the file, not plus the whole file. Advice only: a failure changes nothing.
  void ReleasePages(const std::string& name) const;
  uint64_t total_bytes() const { return total_bytes_; }  // bytes of all tensors as stored

 private:
  // Links each FP8 weight to its scale (TensorView::scale), checking dtypes and shapes.
  [[nodiscard]] Status FindScales(const ModelConfig& cfg);

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
  uint64_t total_bytes_ = 0;
};

}  // namespace llmq
