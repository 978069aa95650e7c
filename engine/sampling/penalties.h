// Penalties and biases: what a request asks to change in a row of logits before it is sampled.
// Each row is processed from its own sequence's tokens only (batch-invariant), in this order
// (vLLM's):
//   1. min_tokens: while fewer tokens than min_tokens were generated, the EOS ids (unless
//      ignore_eos) and stop_token_ids get -inf;
//   2. logit_bias: bias added to the token's logit (OpenAI: -100..100);
//   3. repetition_penalty r (vLLM's extension), over the distinct tokens of prompt + completion:
//      logit > 0 ? logit / r : logit * r;
//   4. frequency_penalty f and presence_penalty p (OpenAI's formula), over the completion:
//      logit -= count * f + (count > 0) * p.
// Then the sampler's temperature, top-k, top-p, min-p and draw (engine/sampling/sampler.h).
#pragma once

#include <cstdint>
#include <span>

#include "engine/sampling/sampler.h"

namespace llmq {

// True when ApplyPenalties would change anything for a sequence that has generated
// `num_generated` tokens (when false, the raw row is sampled as is).
bool HasPenalties(const SamplingParams& p, int num_generated);

// Applies the steps above to `logits[0, vocab)` in place. `eos` are the model's EOS ids. Token ids
// outside [0, vocab) are skipped. Thread-safe (scratch buffers are thread_local).
void ApplyPenalties(const SamplingParams& p, std::span<const int32_t> eos, const TokenHistory& h,
                    float* logits, int vocab);

}  // namespace llmq
