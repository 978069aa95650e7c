#include "engine/penalties.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace llmq {
namespace {

// The distinct tokens of `ids` with their counts, in id order (sorted copy: no vocab-sized state).
void Counts(std::span<const int32_t> ids, std::vector<std::pair<int32_t, int>>* out) {
  thread_local std::vector<int32_t> sorted;
  sorted.assign(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  out->clear();
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    out->push_back({sorted[i], static_cast<int>(j - i)});
    i = j;
  }
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
    thread_local std::vector<int32_t> all;
    all.assign(h.prompt.begin(), h.prompt.end());
    all.insert(all.end(), h.generated.begin(), h.generated.end());
    Counts(all, &counts);
    const float r = p.repetition_penalty;
    for (const auto& [id, n] : counts) {
      if (!in_vocab(id)) continue;
      float& l = logits[id];
      l = l > 0.0f ? l / r : l * r;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    Counts(h.generated, &counts);
    for (const auto& [id, n] : counts)
      if (in_vocab(id))
        logits[id] -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
  }
}

}  // namespace llmq
