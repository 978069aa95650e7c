#include "engine/sampling/sampler.h"

#include <immintrin.h>
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

void Rng::Skip(uint64_t n) {
  state_ += n * 0x9E3779B97F4A7C15ull;  // NextU64's increment, n times (mod 2^64)
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

// Greedy decoding and the draw's first pass read a whole row of logits (the vocabulary: 128k
// floats, 512 KB, for Llama 3) per token: one pass, AVX2, at the memory's speed, masked or not.
// A 32-token word of the mask is four vectors of 8 logits; a refused token's lane reads -inf (a
// blend, not a branch). Where the mask refuses most words (a JSON structure state: a few hundred
// tokens allowed), the words refusing all are skipped unread; elsewhere every word is read, since
// a branch on words refused at random costs more than the reads it saves.

// Bits 8k .. 8k+7 of `bits` in the sign bits of 8 lanes (blendv's selector).
inline __m256 LaneSelect(uint32_t bits, int k) {
  const __m256i shifts = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  return _mm256_castsi256_ps(
      _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(bits >> (8 * k))), shifts));
}

// Whether the words refusing all are worth skipping: fewer than 1 in 8 words allows a token.
bool SkipRefusedWords(const uint32_t* mask, int vocab) {
  if (mask == nullptr) return false;
  const int full = vocab / 32;
  int some = 0;
  for (int w = 0; w < full; ++w) some += mask[w] != 0;
  return some * 8 < full;
}

// Calls f(base, k, v) for the 4 vectors k of each whole word of the row (base: the word's first
// token), v the 8 logits with refused lanes -inf. kSkip: words refusing all are not read.
template <bool kSkip, class F>
inline void ForEachWordVector(const float* logits, int vocab, const uint32_t* mask, F&& f) {
  const __m256 ninf = _mm256_set1_ps(-kFInf);
  const int full = vocab / 32;
  for (int w = 0; w < full; ++w) {
    const uint32_t bits = mask != nullptr ? mask[w] : ~0u;
    if (kSkip && bits == 0) continue;
    const float* at = logits + 32 * w;
    for (int k = 0; k < 4; ++k) {
      __m256 v = _mm256_loadu_ps(at + 8 * k);
      if (bits != ~0u) v = _mm256_blendv_ps(ninf, v, LaneSelect(bits, k));
      f(32 * w, k, v);
    }
  }
}

// The largest allowed logit (NaN counts as -inf; -inf when none is allowed).
template <bool kSkip>
float MaxAllowedT(const float* logits, int vocab, const uint32_t* mask) {
  __m256 best[4];
  for (__m256& b : best) b = _mm256_set1_ps(-kFInf);
  ForEachWordVector<kSkip>(logits, vocab, mask, [&](int, int k, __m256 v) {
    best[k] = _mm256_max_ps(v, best[k]);  // a NaN in v keeps best[k]
  });
  alignas(32) float lanes[32];
  for (int k = 0; k < 4; ++k) _mm256_store_ps(lanes + 8 * k, best[k]);
  float m = -kFInf;
  for (const float x : lanes) m = x > m ? x : m;
  for (int i = vocab / 32 * 32; i < vocab; ++i)
    if (Allowed(mask, i) && logits[i] > m) m = logits[i];
  return m;
}

float MaxAllowed(const float* logits, int vocab, const uint32_t* mask) {
  return SkipRefusedWords(mask, vocab) ? MaxAllowedT<true>(logits, vocab, mask)
                                       : MaxAllowedT<false>(logits, vocab, mask);
}

// The allowed token of the largest logit, in one pass: each lane keeps its first maximum and
// where it is; of the lanes' maxima the lowest id wins a tie. NaN counts as -inf; all -inf (or
// nothing allowed): id 0.
template <bool kSkip>
int ArgmaxT(const float* logits, int vocab, const uint32_t* mask) {
  __m256 best[4];
  __m256i at[4];
  for (int k = 0; k < 4; ++k) {
    best[k] = _mm256_set1_ps(-kFInf);
    at[k] = _mm256_setzero_si256();
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  ForEachWordVector<kSkip>(logits, vocab, mask, [&](int base, int k, __m256 v) {
    const __m256 gt = _mm256_cmp_ps(v, best[k], _CMP_GT_OQ);  // false for NaN
    best[k] = _mm256_blendv_ps(best[k], v, gt);
    const __m256i ids = _mm256_add_epi32(_mm256_set1_epi32(base + 8 * k), lane);
    at[k] = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(at[k]), _mm256_castsi256_ps(ids), gt));
  });
  alignas(32) float lanes[32];
  alignas(32) int32_t ids[32];
  for (int k = 0; k < 4; ++k) {
    _mm256_store_ps(lanes + 8 * k, best[k]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ids + 8 * k), at[k]);
  }
  float m = -kFInf;
  int id = 0;
  for (int j = 0; j < 32; ++j)
    if (lanes[j] > m || (lanes[j] == m && m != -kFInf && ids[j] < id)) {
      m = lanes[j];
      id = ids[j];
    }
  for (int i = vocab / 32 * 32; i < vocab; ++i)  // past every whole word: a tie keeps id
    if (Allowed(mask, i) && logits[i] > m) {
      m = logits[i];
      id = i;
    }
  return m == -kFInf ? 0 : id;
}

int Argmax(const float* logits, int vocab, const uint32_t* mask) {
  return SkipRefusedWords(mask, vocab) ? ArgmaxT<true>(logits, vocab, mask)
                                       : ArgmaxT<false>(logits, vocab, mask);
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
