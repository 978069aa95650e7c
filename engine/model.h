// Model: everything loaded from a model directory — config, weights, tokenizer — and the backend
// built from them, chosen once at start-up.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace llmq {

struct Model {
  ModelConfig cfg;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
};

// Loads `dir` (config.json, generation_config.json, model.safetensors[.index.json],
// tokenizer.model) and builds the CPU backend. Errors name the file and the field or tensor.
Status LoadModel(const std::string& dir, Model* out);

}  // namespace llmq
