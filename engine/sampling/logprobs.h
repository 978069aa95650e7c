// Log-probabilities of the distribution the model produced: log_softmax of a row of raw logits
// (before logit_bias, penalties, temperature and truncation: vLLM's default "raw" logprobs), as
// the OpenAI API reports them for each generated token.
#pragma once

#include <cstdint>
#include <vector>

namespace llmq {

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// One generated token: its own log-probability and, when asked, the most likely tokens of the
// same position (logprob descending, id ascending).
struct TokenLogprobs {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
};

// The largest logit of a row, NaN skipped (-inf if none): eight independent lanes, so the compiler
// can use vmaxps (`l > m ? l : m` keeps m when l is NaN, exactly like the instruction).
float MaxLogit(const float* logits, int vocab);

// log(sum(exp(logits))) over [0, vocab), computed in float as max + log(sum(exp(l - max))): the
// exponentials in float (a vectorized polynomial, relative error about 1e-7), 64 lanes in a fixed
// order, the lanes summed in double (the same row
// gives the same bits on every run and in every batch). NaN counts as -inf. All -inf: -inf. Any
// +inf: +inf.
float LogSumExp(const float* logits, int vocab);

// The log-probability of token `id` under the row whose LogSumExp is `lse`: logits[id] - lse.
// With +inf logits, the +inf tokens share the mass equally (log(1 / count)), the others get -inf.
float TokenLogprob(const float* logits, int vocab, float lse, int id);

// The `k` most likely tokens of the row (logit descending, id ascending; NaN last), with their
// log-probabilities; fewer when vocab < k.
void TopLogprobs(const float* logits, int vocab, float lse, int k, std::vector<TopLogprob>* out);

// The log-probabilities of a sampled token `id` and the row's top `k` (k >= 0).
TokenLogprobs RowLogprobs(const float* logits, int vocab, int k, int id);

}  // namespace llmq
