#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace llmq {
namespace {

constexpr float kFInf = std::numeric_limits<float>::infinity();

// The order of the top lists: logit descending, id ascending, NaN after everything.
bool Before(const TopLogprob& a, const TopLogprob& b) {
  const bool an = std::isnan(a.logprob), bn = std::isnan(b.logprob);
  if (an != bn) return bn;
  return a.logprob > b.logprob || (!(b.logprob > a.logprob) && a.id < b.id);
}

}  // namespace

float MaxLogit(const float* logits, int vocab) {
  float m[8];
  std::fill(m, m + 8, -kFInf);
  int i = 0;
  for (; i + 8 <= vocab; i += 8)
    for (int j = 0; j < 8; ++j) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
  for (; i < vocab; ++i) m[0] = logits[i] > m[0] ? logits[i] : m[0];
  return *std::max_element(m, m + 8);
}

float LogSumExp(const float* logits, int vocab) {
  const float m = MaxLogit(logits, vocab);
  if (m == -kFInf || m == kFInf) return m;
  float lane[8] = {};
  int i = 0;
  // exp(NaN - m) is NaN: the select keeps NaN out of the sum (NaN counts as -inf).
  for (; i + 8 <= vocab; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float e = std::exp(logits[i + j] - m);
      lane[j] += e == e ? e : 0.0f;
    }
  for (; i < vocab; ++i) {
    const float e = std::exp(logits[i] - m);
    lane[0] += e == e ? e : 0.0f;
  }
  double sum = 0.0;
  for (float l : lane) sum += l;
  return m + static_cast<float>(std::log(sum));
}

float TokenLogprob(const float* logits, int vocab, float lse, int id) {
  if (id < 0 || id >= vocab) return -kFInf;
  const float l = logits[id];
  if (std::isnan(l)) return -kFInf;
  if (lse == kFInf) {
    if (l != kFInf) return -kFInf;
    const auto count = std::count(logits, logits + vocab, kFInf);
    return -std::log(static_cast<float>(count));
  }
  if (lse == -kFInf) return -kFInf;
  return l - lse;
}

void TopLogprobs(const float* logits, int vocab, float lse, int k, std::vector<TopLogprob>* out) {
  out->clear();
  k = std::min(k, vocab);
  if (k <= 0) return;
  // A heap of the k best by raw logit (worst on top); most logits fail one compare.
  out->reserve(k);
  for (int i = 0; i < vocab; ++i) {
    const TopLogprob x{i, logits[i]};
    if (static_cast<int>(out->size()) < k) {
      out->push_back(x);
      std::push_heap(out->begin(), out->end(), Before);
    } else if (Before(x, out->front())) {
      std::pop_heap(out->begin(), out->end(), Before);
      out->back() = x;
      std::push_heap(out->begin(), out->end(), Before);
    }
  }
  std::sort_heap(out->begin(), out->end(), Before);
  for (TopLogprob& t : *out) t.logprob = TokenLogprob(logits, vocab, lse, t.id);
}

TokenLogprobs RowLogprobs(const float* logits, int vocab, int k, int id) {
  TokenLogprobs r;
  const float lse = LogSumExp(logits, vocab);
  r.id = id;
  r.logprob = TokenLogprob(logits, vocab, lse, id);
  TopLogprobs(logits, vocab, lse, k, &r.top);
  return r;
}

}  // namespace llmq
