#include "engine/sampling/penalties.h"

#include <limits>
#include <vector>

namespace llmq {
namespace {

// The distinct in-vocabulary tokens of `a` and `b` with their counts, in first-seen order: one pass
// over the ids with a vocabulary-sized counter per thread, of which only the touched entries are
// reset (no sort, no allocation per call). Each token is then changed on its own, so the order does
// not matter.
void Counts(std::span<const int32_t> a, std::span<const int32_t> b, int vocab,
            std::vector<std::pair<int32_t, int>>* out) {
  thread_local std::vector<int32_t> slot;  // per id: 1 + its index in *out, or 0
  if (slot.size() < static_cast<size_t>(vocab)) slot.resize(vocab, 0);
  out->clear();
  for (std::span<const int32_t> ids : {a, b})
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) continue;
      if (slot[id] == 0) {
        out->push_back({id, 0});
        slot[id] = static_cast<int32_t>(out->size());
      }
      ++(*out)[slot[id] - 1].second;
    }
  for (const auto& [id, n] : *out) slot[id] = 0;
}

}  // namespace

bool HasPenalties(const SamplingParams& p, int num_generated) {
  return (num_generated < p.min_tokens) || !p.logit_bias.empty() || p.repetition_penalty != 1.0f ||
         (num_generated > 0 && (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f));
}

void ApplyPenalties(const SamplingParams& p, std::span<const int32_t> eos, const TokenHistory& h,
                    float* logits, int vocab) {
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (static_cast<int>(h.generated.size()) < p.min_tokens) {
    if (!p.ignore_eos)
      for (int32_t id : eos)
        if (in_vocab(id)) logits[id] = kNegInf;
    for (int32_t id : p.stop_token_ids)
      if (in_vocab(id)) logits[id] = kNegInf;
  }
  for (const auto& [id, bias] : p.logit_bias)
    if (in_vocab(id)) logits[id] += bias;
  thread_local std::vector<std::pair<int32_t, int>> counts;
  if (p.repetition_penalty != 1.0f) {
    Counts(h.prompt, h.generated, vocab, &counts);
    const float r = p.repetition_penalty;
    for (const auto& [id, n] : counts) {
      float& l = logits[id];
      l = l > 0.0f ? l / r : l * r;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    Counts(h.generated, {}, vocab, &counts);
    for (const auto& [id, n] : counts)
      logits[id] -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
  }
}

}  // namespace llmq
