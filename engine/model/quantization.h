// Pre-quantized checkpoints: how config.json's `quantization_config` says the linear weights are
// stored, and which of them. Supported: FP8 (E4M3) weights with their scales,
//   - `quant_method: "compressed-tensors"` (llm-compressor), `format: "float-quantized"`, one
//     config group of 8-bit symmetric float weights targeting Linear, strategy tensor, channel or
//     block; scale `X.weight_scale` beside each `X.weight`; `ignore` lists modules left in float
//     (names, or "re:" regexes matched from the start of the module name, as Python's re.match);
//   - `quant_method: "fp8"` (transformers' FineGrainedFP8, as Qwen3's and DeepSeek's FP8 releases):
//     `weight_block_size: [rows, cols]`, scale `X.weight_scale_inv` (multiplied, despite its
//     name); `modules_to_not_convert` left in float (a module is when a listed name is part of
//     its own).
// The weight is W[r][c] = fp8(Q[r][c]) * scale[r / rows][c / cols], the block told by the scale's
// shape: one value (per tensor), [out] or [out, 1] (per output channel), or
// [ceil(out / rows), ceil(in / cols)] (per block). Activation and KV-cache schemes are not applied:
// the weights are dequantized at load and the engine computes in its own types.
// Anything else (GPTQ, AWQ, bitsandbytes, integer compressed-tensors, ...) is refused at load,
// naming the field.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace llmq {

struct WeightQuantization {
  bool fp8 = false;          // false: no quantization_config; every weight is a float type
  std::string quant_method;  // as config.json names it: "compressed-tensors" or "fp8"
  std::string scale_suffix;  // "weight_scale" or "weight_scale_inv": the scale of X.weight is
                             // X.<scale_suffix>
  int block_rows = 0, block_cols = 0;  // the block strategy's tile; 0: none declared
  std::vector<std::string> ignore;     // modules left in float, as config.json lists them

  // Whether the linear layer `module` ("model.layers.0.mlp.up_proj", "lm_head") is stored
  // quantized: under an fp8 config, and not ignored.
  [[nodiscard]] bool Quantizes(const std::string& module) const;
};

// Parses config.json's `quantization_config` (`file` is used in messages only): Unsupported naming
// `quantization_config.<field>` for a method, format or scheme llmq does not load; InvalidArgument
// for a malformed one.
[[nodiscard]] Status ParseQuantizationConfig(const nlohmann::json& qc, const std::string& file,
                                             WeightQuantization* out);

}  // namespace llmq
