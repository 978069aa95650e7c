// Model: everything loaded from a model directory — config, weights, tokenizer — and the backend
// built from them, chosen once at start-up.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/backends/backend.h"
#include "engine/backends/backend_choice.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/text/tokenizer.h"

namespace llmq {

struct Model {
  ModelConfig cfg;
  // The mapped safetensors files; null with the CPU backend, which keeps its own packed copy
  // (the mapping is released once it is built).
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  BackendChoice choice;     // as asked (kind may be kAuto)
  std::string backend_why;  // why `auto` resolved as it did; "" for an explicit choice
  // "cpu", "cuda (bf16)", "cuda:1 (bf16)" (engine.device 1), "cpu (auto: no usable CUDA device:
  // ...)": for start-up lines, summaries and the worker's row (`llmq workers`).
  std::string backend_description() const;
};

// Loads `dir` (config.json, generation_config.json, model.safetensors[.index.json],
// tokenizer.model) and builds the backend `choice` resolves to (ResolveBackend: a `cuda` that
// cannot be had fails before anything is read). Errors name the file and the field or tensor, or
// the backend and why. `tokenizer_loaded`, when set, is called with the tokenizer (which outlives
// *out's load, owned by it) before the backend takes the weights, the longest part of a load: work
// that needs only the vocabulary (structured outputs' token trie) starts there, beside it.
Status LoadModel(const std::string& dir, const BackendChoice& choice, Model* out,
                 const std::function<void(const Tokenizer*)>& tokenizer_loaded = nullptr);
// Hands the free memory of the heap back to the system (glibc's malloc_trim; nothing elsewhere).
// LoadModel calls it once the CPU backend has packed its weights: the widened temporaries that
// packing freed sit between live blocks of the heap, where free() alone keeps them resident.
void ReleaseFreeHeap();
// The CPU backend (the tests' reference: bit-exact, batch-invariant).
inline Status LoadModel(const std::string& dir, Model* out) {
  return LoadModel(dir, BackendChoice{BackendKind::kCpu, Precision::kFp32, WeightDtype::kF32}, out);
}

}  // namespace llmq
