#include "engine/sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "engine/sampling/penalties.h"

namespace llmq {

uint64_t Rng::NextU64() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::NextDouble() {
  return static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
}

namespace {

constexpr float kMinTemperature = 1e-5f;  // below: greedy (vLLM's _SAMPLING_EPS)
constexpr size_t kHeapTopK = 2048;        // top_k up to this: heap selection on raw logits
constexpr size_t kSmallRange = 32;        // MassSelect sorts ranges this small
constexpr float kFInf = std::numeric_limits<float>::infinity();

// A candidate token: its raw logit (the order key) and weight w = exp(logit/T - max/T) in
// double, proportional to its probability (the most likely token has w == 1).
struct Cand {
  double w;
  float logit;
  int id;
};

// The one order every filter and the draw use: logit (= probability) descending, id ascending.
// A strict total order, so every selection algorithm yields the same ranks on every library.
inline bool Before(const Cand& a, const Cand& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Whether `mask` (null: every token) allows token i.
inline bool Allowed(const uint32_t* mask, int i) {
  return mask == nullptr || ((mask[i >> 5] >> (i & 31)) & 1u);
}

// Calls f(i) for each token `mask` allows, in increasing order (every token when null): a word
// of 32 refused tokens costs one test, and their logits are not read.
template <class F>
inline void ForEachAllowed(const uint32_t* mask, int vocab, F&& f) {
  if (mask == nullptr) {
    for (int i = 0; i < vocab; ++i) f(i);
    return;
  }
  for (int base = 0; base < vocab; base += 32) {
    uint32_t bits = mask[base >> 5];
    if (bits == ~0u && base + 32 <= vocab) {
      for (int i = base; i < base + 32; ++i) f(i);
      continue;
    }
    for (; bits != 0; bits &= bits - 1) {
      const int i = base + std::countr_zero(bits);
      if (i < vocab) f(i);
    }
  }
}

// Walks the whole 32-token words of `mask` in order: run(begin, end) for each run of allowed
// words (one stretch of tokens [begin, end)), word(base, bits) for each word allowing some of its
// tokens; a word refusing all is skipped unread. Either returns true to stop the walk. The tokens
// past the last whole word are the caller's (vocab % 32 of them).
template <class Run, class Word>
inline void ForEachSpan(const uint32_t* mask, int vocab, Run&& run, Word&& word) {
  const int full = vocab / 32;
  for (int w = 0; w < full;) {
    const uint32_t bits = mask[w];
    if (bits == ~0u) {
      int r = w + 1;
      while (r < full && mask[r] == ~0u) ++r;
      if (run(w * 32, r * 32)) return;
      w = r;
      continue;
    }
    if (bits != 0 && word(w * 32, bits)) return;
    ++w;
  }
}

// MaxLogit over the tokens `mask` allows: eight lanes as MaxLogit, a run of allowed words as one
// stretch, a refused token's lane value -inf in a mixed word (a select, not a branch).
float MaxAllowed(const float* logits, int vocab, const uint32_t* mask) {
  if (mask == nullptr) return MaxLogit(logits, vocab);
  float m[8];
  std::fill(m, m + 8, -kFInf);
  ForEachSpan(
      mask, vocab,
      [&](int begin, int end) {
        for (int k = begin; k < end; k += 8)
          for (int j = 0; j < 8; ++j) m[j] = logits[k + j] > m[j] ? logits[k + j] : m[j];
        return false;
      },
      [&](int base, uint32_t bits) {
        for (int k = 0; k < 32; k += 8)
          for (int j = 0; j < 8; ++j) {
            const float v = (bits >> (k + j)) & 1u ? logits[base + k + j] : -kFInf;
            m[j] = v > m[j] ? v : m[j];
          }
        return false;
      });
  for (int i = vocab / 32 * 32; i < vocab; ++i)
    if (Allowed(mask, i) && logits[i] > m[0]) m[0] = logits[i];
  return *std::max_element(m, m + 8);
}

// Greedy argmax over the allowed tokens; NaN counts as -inf; ties (all -inf included) go to the
// lowest id.
int Argmax(const float* logits, int vocab, const uint32_t* mask) {
  const float m = MaxAllowed(logits, vocab, mask);
  if (m == -kFInf) return 0;
  if (mask == nullptr) return static_cast<int>(std::find(logits, logits + vocab, m) - logits);
  // The first allowed token equal to m: a run searched as one stretch, a mixed word's 32
  // compares gathered into bits.
  int found = -1;
  ForEachSpan(
      mask, vocab,
      [&](int begin, int end) {
        const float* at = std::find(logits + begin, logits + end, m);
        if (at != logits + end) found = static_cast<int>(at - logits);
        return found >= 0;
      },
      [&](int base, uint32_t bits) {
        uint32_t eq = 0;
        for (int k = 0; k < 32; ++k) eq |= static_cast<uint32_t>(logits[base + k] == m) << k;
        if ((eq &= bits) != 0) found = base + std::countr_zero(eq);
        return found >= 0;
      });
  if (found >= 0) return found;
  for (int i = vocab / 32 * 32; i < vocab; ++i)
    if (Allowed(mask, i) && logits[i] == m) return i;
  return 0;
}

// Keeps the top `k` (k < c.size()) of `c` in Before order, preserving their relative order.
void TopKCompact(std::vector<Cand>* c, size_t k) {
  thread_local std::vector<Cand> scratch;
  scratch.assign(c->begin(), c->end());
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), Before);
  const Cand bound = scratch[k - 1];
  size_t n = 0;
  for (const Cand& x : *c)
    if (!Before(bound, x)) (*c)[n++] = x;
  c->resize(n);
}

// Finds the rank r (in Before order) of the first candidate whose running weight sum crosses
// `target`: base + sum(w of ranks 0..r) > target, or >= target when `inclusive`. Rearranges
// c[0, n) so that c[0, r) holds exactly the candidates of ranks < r (in no particular order) and
// returns r; *before gets base plus their weight. If rounding means no rank crosses, returns the
// last one, n - 1.
// Quickselect on weight mass with our own partition (summation order is ours, not the standard
// library's, so results are reproducible everywhere): expected O(n), no full sort.
size_t MassSelect(Cand* c, size_t n, double base, double target, bool inclusive, double* before) {
  auto crosses = [&](double s) { return inclusive ? s >= target : s > target; };
  size_t lo = 0, hi = n;  // base: weight of c[0, lo) plus what the caller ranked before c
  int budget = 64;        // guards against degenerate pivots: then sort what is left
  while (hi - lo > kSmallRange && budget-- > 0) {
    // Median of three (by Before) as pivot, moved to hi - 1.
    size_t a = lo, b = lo + (hi - lo) / 2, z = hi - 1;
    if (Before(c[b], c[a])) std::swap(c[a], c[b]);
    if (Before(c[z], c[b])) std::swap(c[b], c[z]);
    if (Before(c[b], c[a])) std::swap(c[a], c[b]);
    std::swap(c[b], c[hi - 1]);
    const Cand pivot = c[hi - 1];
    size_t m = lo;
    double left = 0.0;
    for (size_t i = lo; i + 1 < hi; ++i) {
      if (Before(c[i], pivot)) {
        left += c[i].w;
        std::swap(c[i], c[m++]);
      }
    }
    std::swap(c[m], c[hi - 1]);  // pivot now at rank m
    if (m > lo && crosses(base + left)) {
      hi = m;
      continue;
    }
    base += left;
    if (crosses(base + pivot.w)) {
      *before = base;
      return m;
    }
    base += pivot.w;
    lo = m + 1;
  }
  std::sort(c + lo, c + hi, Before);
  for (size_t i = lo; i < hi; ++i) {
    if (crosses(base + c[i].w)) {
      *before = base;
      return i;
    }
    base += c[i].w;
  }
  // No crossing (rounding): the last rank of the range we narrowed to.
  size_t r = hi > lo ? hi - 1 : lo - 1;
  *before = base - c[r].w;
  return r;
}

// The first candidate, in Before order among those ranked no later than `cut` (all of `c` if
// null), whose running weight sum crosses `target` (see MassSelect), and the weight ranked before
// it. Large sets are first bucketed by logit distance from the max (a monotone key, so buckets
// are contiguous runs of the order): one pass sums each bucket, and only the crossing bucket is
// selected in. All sums run in an order fixed by this code, never by the standard library.
struct Pick {
  Cand cand;
  double before;
};
Pick Select(const std::vector<Cand>& c, const Cand* cut, float max_l, double t, double target,
            bool inclusive) {
  constexpr int kBuckets = 1024;
  constexpr double kNatsPerBucket = 1.0 / 32.0;  // buckets span 32 nats below the max
  constexpr size_t kDirect = 2048;               // smaller sets skip the buckets
  thread_local std::vector<Cand> pool;
  pool.clear();
  auto in_cut = [&](const Cand& x) { return cut == nullptr || !Before(*cut, x); };
  double base = 0.0;
  if (c.size() <= kDirect) {
    for (const Cand& x : c)
      if (in_cut(x)) pool.push_back(x);
  } else {
    // NaN distance (all logits +inf) lands in the last bucket, which then holds everything.
    const double scale = 1.0 / (t * kNatsPerBucket);
    auto bucket = [&](float l) {
      const double b = static_cast<double>(max_l - l) * scale;
      return b < kBuckets - 1 ? static_cast<int>(b) : kBuckets - 1;
    };
    double mass[kBuckets] = {};
    for (const Cand& x : c)
      if (in_cut(x)) mass[bucket(x.logit)] += x.w;
    int pick = -1, last = 0;
    for (int b = 0; b < kBuckets; ++b) {
      if (mass[b] == 0.0) continue;
      last = b;
      const double s = base + mass[b];
      if (inclusive ? s >= target : s > target) {
        pick = b;
        break;
      }
      base = s;
    }
    if (pick < 0) {  // rounding: no bucket crosses; take the last rank of the last bucket
      pick = last;
      base -= mass[last];
    }
    for (const Cand& x : c)
      if (bucket(x.logit) == pick && in_cut(x)) pool.push_back(x);
  }
  double before = 0.0;
  size_t r = MassSelect(pool.data(), pool.size(), base, target, inclusive, &before);
  return {pool[r], before};
}

}  // namespace

// Arithmetic contract (what makes the ids reproducible): the order is logit desc, id asc; weights
// are w = exp(double(logit) / double(T) - double(max_logit) / double(T)) in double; NaN logits are
// -inf; tokens with w == 0 (underflow) have probability 0 and are dropped. With any +inf logit the
// +inf tokens share the mass equally. Filters, in vLLM's order, each keeping a prefix of the order:
//   top-k: the k first tokens (boundary ties: lower id first);
//   top-p: over the top-k renormalized distribution, the shortest prefix whose cumulative
//          probability reaches top_p (so at least one token);
//   min-p: w >= min_p, i.e. p >= min_p * p_max (ratios survive renormalization).
// The kept prefix is renormalized, one u = rng->NextDouble() is drawn, and the token returned is
// the first in order whose cumulative weight exceeds u * total. Exactly one draw per sampled call,
// whatever the logits (all -inf/NaN: id 0, like the argmax).
bool IsGreedy(const SamplingParams& p) {
  return !(p.temperature >= kMinTemperature);  // NaN T: greedy too
}

int SampleToken(const float* logits, int vocab, const SamplingParams& p, Rng* rng,
                const uint32_t* mask) {
  if (IsGreedy(p)) return Argmax(logits, vocab, mask);
  // Drawn up front: one draw per sampled token, always.
  return SampleTokenWithDraw(logits, vocab, p, rng->NextDouble(), mask);
}

RowSampling ToRowSampling(const SamplingParams& p, double u) {
  RowSampling r;
  r.temperature = IsGreedy(p) ? 0.f : p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.u = u;
  return r;
}

int SampleRow(const float* logits, int vocab, const RowSampling& r) {
  SamplingParams p;
  p.temperature = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  return SampleTokenWithDraw(logits, vocab, p, r.u);
}

int SampleTokenWithDraw(const float* logits, int vocab, const SamplingParams& p, double u,
                        const uint32_t* mask) {
  if (IsGreedy(p)) return Argmax(logits, vocab, mask);
  if (vocab <= 0) return 0;

  const float max_l = MaxAllowed(logits, vocab, mask);
  if (max_l == -kFInf) return 0;

  const double t = static_cast<double>(p.temperature);
  const double x_max = static_cast<double>(max_l) / t;
  const bool use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < static_cast<size_t>(vocab);
  const bool use_top_p = p.top_p < 1.0f;
  const double min_w = p.min_p > 0.0f ? std::min(static_cast<double>(p.min_p), 1.0) : 0.0;
  auto weight = [&](float l) { return std::exp(static_cast<double>(l) / t - x_max); };

  // Candidates (reused per thread: no 2 MB allocation per call).
  thread_local std::vector<Cand> c;
  c.clear();
  if (max_l == kFInf) {
    ForEachAllowed(mask, vocab, [&](int i) {
      if (logits[i] == kFInf) c.push_back({1.0, kFInf, i});
    });
    if (use_top_k && static_cast<size_t>(p.top_k) < c.size()) TopKCompact(&c, p.top_k);
  } else if (use_top_k && static_cast<size_t>(p.top_k) <= kHeapTopK) {
    // Heap of the k best so far, worst on top; most logits fail one float compare. A later id
    // that ties the worst logit ranks after it, hence the strict >.
    c.reserve(p.top_k);
    float worst = -kFInf;
    ForEachAllowed(mask, vocab, [&](int i) {
      const float l = logits[i];
      if (!(l > worst)) return;  // also NaN
      if (c.size() == static_cast<size_t>(p.top_k)) {
        std::pop_heap(c.begin(), c.end(), Before);
        c.back() = {0.0, l, i};
      } else {
        c.push_back({0.0, l, i});
      }
      std::push_heap(c.begin(), c.end(), Before);
      if (c.size() == static_cast<size_t>(p.top_k)) worst = c.front().logit;
    });
    std::sort_heap(c.begin(), c.end(), Before);  // unique order: sums below are reproducible
    size_t n = 0;
    for (Cand& x : c)
      if ((x.w = weight(x.logit)) > 0.0) c[n++] = x;
    c.resize(n);
  } else {
    // Without top-p, min-p may be applied first (it keeps a prefix either way), skipping exp for
    // tokens far below its threshold; the exact w >= min_w test is done below.
    const double skip_below = (min_w > 0.0 && !use_top_p) ? std::log(min_w) - 1e-6 : -1e300;
    c.reserve(vocab);
    ForEachAllowed(mask, vocab, [&](int i) {
      const double d = static_cast<double>(logits[i]) / t - x_max;
      if (!(d >= skip_below)) return;  // also NaN and -inf
      const double w = std::exp(d);
      if (w > 0.0) c.push_back({w, logits[i], i});
    });
    if (use_top_k && static_cast<size_t>(p.top_k) < c.size()) TopKCompact(&c, p.top_k);
  }

  // z normalizes the top-k distribution, which top-p is measured against.
  double z = 0.0;
  for (const Cand& x : c) z += x.w;
  double total = z;
  if (min_w > 0.0) {  // w of the top token is exactly 1 >= min_w, so one always survives
    size_t n = 0;
    total = 0.0;
    for (const Cand& x : c) {
      if (x.w >= min_w) {
        c[n++] = x;
        total += x.w;
      }
    }
    c.resize(n);
  }

  Cand cut;  // top-p keeps the ranks up to and including `cut`
  if (use_top_p) {
    Pick last = Select(c, nullptr, max_l, t, static_cast<double>(p.top_p) * z, true);
    cut = last.cand;
    total = last.before + last.cand.w;
  }
  return Select(c, use_top_p ? &cut : nullptr, max_l, t, u * total, false).cand.id;
}

int SampleNext(const float* logits, int vocab, const SamplingParams& p,
               std::span<const int32_t> eos, const TokenHistory& h, Rng* rng, TokenLogprobs* lp,
               const uint32_t* mask) {
  if (mask != nullptr &&
      (HasPenalties(p, static_cast<int>(h.generated.size())) || (lp && p.logprobs >= 0))) {
    // Penalties and logprobs read the whole row: the masked row, written once here.
    thread_local std::vector<float> masked;
    masked.resize(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) masked[i] = Allowed(mask, i) ? logits[i] : -kFInf;
    logits = masked.data();
    mask = nullptr;
  }
  int token = 0;
  if (HasPenalties(p, static_cast<int>(h.generated.size()))) {
    thread_local std::vector<float> row;
    row.assign(logits, logits + vocab);
    ApplyPenalties(p, eos, h, row.data(), vocab);
    token = SampleToken(row.data(), vocab, p, rng);
  } else {
    token = SampleToken(logits, vocab, p, rng, mask);
  }
  if (lp && p.logprobs >= 0) *lp = RowLogprobs(logits, vocab, p.logprobs, token);
  return token;
}

size_t FindStop(const std::string& text, size_t new_from, const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    if (s.empty() || s.size() > text.size()) continue;
    // A match at `pos` ends after new_from iff pos + s.size() > new_from.
    size_t from = new_from >= s.size() ? new_from - s.size() + 1 : 0;
    size_t pos = text.find(s, from);
    if (pos < best) best = pos;  // npos never wins
  }
  return best;
}

size_t StopHoldback(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    // Longest proper prefix of s that is a suffix of text; only lengths above `best` matter.
    size_t max_len = std::min(s.empty() ? 0 : s.size() - 1, text.size());
    for (size_t len = max_len; len > best; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

uint64_t DefaultSeed(std::string_view job_id, std::string_view custom_id) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ull;
  };
  for (char c : job_id) mix(static_cast<unsigned char>(c));
  mix(0);
  for (char c : custom_id) mix(static_cast<unsigned char>(c));
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace llmq
