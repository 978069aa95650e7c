// The plain, obviously-right decoder forward the CPU backend is checked against: double
// accumulation, weights widened to double, a contiguous KV cache, one sequence, no batching.
// Written from the Hugging Face modeling_llama definitions (plus modeling_qwen2's q/k/v biases and
// modeling_qwen3's per-head q/k RMSNorm before RoPE), sharing no code with engine/ or
// kernels/ except the config and weight loading.
#pragma once

#include <vector>

#include "engine/backends/backend.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace llmq::testing {

// Logits [tokens.size(), vocab] at every position of `tokens`.
std::vector<std::vector<double>> ReferenceLogits(const ModelConfig& cfg, const Weights& w,
                                                 const std::vector<int>& tokens);

// Runs tokens[begin, end) of one sequence through `be` as one step, its blocks at `table`
// (physical block of each logical block); returns the logits of every row, [end - begin, vocab].
std::vector<float> ForwardOneSequence(Backend& be, const std::vector<int>& tokens, int begin,
                                      int end, const std::vector<int32_t>& table, int block_size,
                                      int vocab);

// max_j |a_j - b_j| / max_j |b_j|: the error relative to the logits' scale.
double RelativeError(const float* a, const std::vector<double>& b);

}  // namespace llmq::testing
