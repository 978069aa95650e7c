#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/exp.h"

namespace llmq {
namespace {

constexpr float kFInf = std::numeric_limits<float>::infinity();

// The order of the top lists: logit descending, id ascending, NaN after everything.
bool Before(const TopLogprob& a, const TopLogprob& b) {
  const bool an = std::isnan(a.logprob), bn = std::isnan(b.logprob);
  if (an != bn) return bn;
  return a.logprob > b.logprob || (!(b.logprob > a.logprob) && a.id < b.id);
}

// exp(x) for x <= 0 (kernels/cpu/exp.h: vectorized, unlike std::exp). Below -87 (and for NaN)
// the result is 0; selects between values, never between computations: the loop stays
// branch-free.
inline float ExpNonPositive(float x) {
  const float keep = x >= kernels::kExpLo ? 1.0f : 0.0f;  // 0 for NaN
  x = x >= kernels::kExpLo ? x : 0.0f;
  return kernels::ExpInRange<kernels::ScalarOps<>, kernels::ExpLastStep::kProductPR>(x) * keep;
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
  // Eight lanes of 8: the loop is vectorized, and the order of the sums is fixed by this code.
  float lane[64] = {};
  int i = 0;
  for (; i + 64 <= vocab; i += 64)
    for (int j = 0; j < 64; ++j) lane[j] += ExpNonPositive(logits[i + j] - m);
  for (; i < vocab; ++i) lane[0] += ExpNonPositive(logits[i] - m);
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
  // A heap of the k best by raw logit (worst on top). Once it is full, most logits fail one float
  // compare against the worst kept one: a later id with an equal logit ranks after it, and NaN
  // ranks last.
  out->reserve(k);
  int i = 0;
  for (; i < vocab && static_cast<int>(out->size()) < k; ++i) {
    out->push_back({i, logits[i]});
    std::push_heap(out->begin(), out->end(), Before);
  }
  float worst = out->front().logprob;
  for (; i < vocab; ++i) {
    const float l = logits[i];
    if (!(l > worst) && !std::isnan(worst)) continue;
    const TopLogprob x{i, l};
    if (!Before(x, out->front())) continue;
    std::pop_heap(out->begin(), out->end(), Before);
    out->back() = x;
    std::push_heap(out->begin(), out->end(), Before);
    worst = out->front().logprob;
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
