#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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

// exp(x) for x <= 0 in float, written so that the compiler vectorizes it (std::exp is a call per
// element): x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by Cephes' expf polynomial (relative error
// about 1e-7), 2^n built in the exponent bits. Below -87 (and for NaN) the result is 0.
inline float ExpNonPositive(float x) {
  // Selects between values, never between computations: the loop stays branch-free.
  const float keep = x >= -87.0f ? 1.0f : 0.0f;  // 0 for NaN
  x = x >= -87.0f ? x : 0.0f;
  // Rounded to the nearest integer by adding and subtracting 1.5 * 2^23 (no call to floor).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * scale * keep;
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
