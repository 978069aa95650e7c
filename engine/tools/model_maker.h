// Model maker: writes a random-weight model in the Hugging Face layout (config.json,
// generation_config.json, tokenizer_config.json, model.safetensors, tokenizer.model trained by
// sentencepiece on generated text), so tests, benchmarks and the demo need no downloaded model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace llmq {

// Named shapes: "tiny" (tests), "bench-110m", "bench-110m-gqa".
Status ShapeConfig(const std::string& name, ModelConfig* cfg, DType* dtype);
std::vector<std::string> ShapeNames();

// Writes config.json, generation_config.json and model.safetensors (no tokenizer) to `out_dir`.
Status WriteRandomModel(const ModelConfig& cfg, DType dtype, uint64_t seed,
                        const std::string& out_dir);

// Writes the whole model to `out_dir` (created if needed). Weights are uniform with the variance of
// 1/fan_in (norm weights around 1), deterministic from `seed`.
Status MakeModel(const ModelConfig& cfg, DType dtype, uint64_t seed, const std::string& out_dir);

// config.json text for `cfg`.
std::string ConfigJson(const ModelConfig& cfg, DType dtype);

}  // namespace llmq
