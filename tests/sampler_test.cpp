#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

namespace llmq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplingParams Temp(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

std::vector<double> Softmax(const std::vector<float>& logits, double t) {
  double m = *std::max_element(logits.begin(), logits.end()) / t, z = 0;
  std::vector<double> out;
  for (float l : logits) out.push_back(std::exp(l / t - m));
  for (double v : out) z += v;
  for (double& v : out) v /= z;
  return out;
}

// Empirical frequencies of SampleToken over `n` draws from one seeded stream.
std::vector<double> Freqs(const std::vector<float>& logits, const SamplingParams& p, int n,
                          uint64_t seed = 42) {
  Rng rng(seed);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    int id = SampleToken(logits.data(), static_cast<int>(logits.size()), p, &rng);
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int>(logits.size()));
    f[id] += 1.0;
  }
  for (double& v : f) v /= n;  // exact 1.0 when one token always wins
  return f;
}

std::vector<float> LogProbs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// --- Rng -------------------------------------------------------------------------------------

TEST(RngTest, MatchesReferenceSplitmix64) {
  Rng rng(0);  // reference outputs of Vigna's splitmix64.c for seed 0
  EXPECT_EQ(rng.NextU64(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.NextU64(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.NextU64(), 0x06C45D188009454Full);
}

TEST(RngTest, NextDoubleIsTop53Bits) {
  Rng a(7), b(7);
  for (int i = 0; i < 1000; ++i) {
    double d = a.NextDouble();
    EXPECT_EQ(d, static_cast<double>(b.NextU64() >> 11) / 9007199254740992.0);
    EXPECT_GE(d, 0.0);
    EXPECT_LT(d, 1.0);
  }
}

TEST(RngTest, SameSeedSameStreamDifferentSeedsDiffer) {
  Rng a(123), b(123), c(124);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differ += x != c.NextU64();
  }
  EXPECT_EQ(differ, 100);
}

TEST(RngTest, SkipReachesTheDrawThatNCallsWouldHave) {
  for (uint64_t n : {0ull, 1ull, 2ull, 17ull, 1000ull}) {
    Rng skipped(99), walked(99);
    skipped.Skip(n);
    for (uint64_t i = 0; i < n; ++i) walked.NextU64();
    EXPECT_EQ(skipped.NextU64(), walked.NextU64()) << n;
  }
  // Skips add up, past 2^32 draws and around the counter's wrap.
  Rng a(5), b(5);
  a.Skip(uint64_t{1} << 40);
  a.Skip(~uint64_t{0});
  b.Skip((uint64_t{1} << 40) - 1);
  EXPECT_EQ(a.NextU64(), b.NextU64());
}

// --- Greedy ----------------------------------------------------------------------------------

TEST(SamplerTest, GreedyArgmaxAndTieToLowestId) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (float t : {0.0f, -1.0f, 1e-6f, kNaN}) {
    Rng rng(5), fresh(5);
    EXPECT_EQ(SampleToken(l.data(), 5, Temp(t), &rng), 1) << t;
    EXPECT_EQ(rng.NextU64(), fresh.NextU64()) << "greedy must not draw";
  }
  EXPECT_EQ(SampleToken(l.data(), 5, Temp(0), nullptr), 1);  // no rng needed when greedy
}

TEST(SamplerTest, GreedyIgnoresFiltersAndNaN) {
  std::vector<float> l = {kNaN, 1.0f, kNaN, 2.0f};
  SamplingParams p = Temp(0);
  p.top_k = 1;
  p.top_p = 0.1f;
  EXPECT_EQ(SampleToken(l.data(), 4, p, nullptr), 3);
}

// --- Determinism -----------------------------------------------------------------------------

TEST(SamplerTest, ExactlyOneDrawPerSampledToken) {
  std::vector<float> l = {1.0f, 2.0f, 0.5f, -3.0f};
  SamplingParams p = Temp(0.8f);
  p.top_k = 3;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  Rng rng(9), shadow(9);
  for (int i = 0; i < 50; ++i) {
    SampleToken(l.data(), 4, p, &rng);
    shadow.NextU64();
  }
  EXPECT_EQ(rng.NextU64(), shadow.NextU64());
  // Also when nothing is finite: the stream position must not depend on the logits.
  std::vector<float> dead = {-kInf, kNaN};
  Rng r2(9), s2(9);
  EXPECT_EQ(SampleToken(dead.data(), 2, p, &r2), 0);
  s2.NextU64();
  EXPECT_EQ(r2.NextU64(), s2.NextU64());
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDiffers) {
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[i] = std::sin(i * 0.37f) * 2.0f;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(SampleToken(l.data(), 100, Temp(1.0f), &rng));
    return ids;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

// --- Distributions ---------------------------------------------------------------------------

TEST(SamplerTest, TemperatureOneMatchesSoftmax) {
  std::vector<float> l = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
  auto want = Softmax(l, 1.0);
  auto got = Freqs(l, Temp(1.0f), 200000);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.01) << i;
}

TEST(SamplerTest, TemperatureHalfSharpens) {
  std::vector<float> l = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
  auto want = Softmax(l, 0.5);
  auto got = Freqs(l, Temp(0.5f), 200000);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.01) << i;
  EXPECT_GT(got[1], Softmax(l, 1.0)[1] + 0.1);  // the top token gains mass
}

TEST(SamplerTest, TopKKeepsKAndTheirRatio) {
  std::vector<float> l = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
  SamplingParams p = Temp(1.0f);
  p.top_k = 2;
  auto got = Freqs(l, p, 200000);
  EXPECT_EQ(got[0] + got[2] + got[3], 0.0);
  double e1 = std::exp(2.0), e4 = std::exp(1.5);
  EXPECT_NEAR(got[1], e1 / (e1 + e4), 0.01);
  EXPECT_NEAR(got[4], e4 / (e1 + e4), 0.01);
}

TEST(SamplerTest, TopKBoundaryTiesGoToLowerIds) {
  std::vector<float> l = {1.0f, 2.0f, 2.0f, 2.0f, 2.0f};
  SamplingParams p = Temp(1.0f);
  p.top_k = 2;
  auto got = Freqs(l, p, 20000);
  EXPECT_NEAR(got[1], 0.5, 0.02);
  EXPECT_NEAR(got[2], 0.5, 0.02);
  EXPECT_EQ(got[0] + got[3] + got[4], 0.0);
  p.top_k = 1;  // top_k = 1 is greedy in effect
  EXPECT_EQ(Freqs(l, p, 100)[1], 1.0);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingP) {
  auto l = LogProbs({0.5, 0.3, 0.2});
  SamplingParams p = Temp(1.0f);
  p.top_p = 0.7f;
  auto got = Freqs(l, p, 200000);
  EXPECT_EQ(got[2], 0.0);
  EXPECT_NEAR(got[0], 0.625, 0.01);  // 0.5 / 0.8
  EXPECT_NEAR(got[1], 0.375, 0.01);
  p.top_p = 0.4f;  // the top token alone reaches it
  EXPECT_EQ(Freqs(l, p, 1000)[0], 1.0);
  p.top_p = 0.0f;  // always keeps at least one
  EXPECT_EQ(Freqs(l, p, 1000)[0], 1.0);
  p.top_p = 0.9f;
  EXPECT_GT(Freqs(l, p, 10000)[2], 0.1);
}

TEST(SamplerTest, TopPIsMeasuredAfterTopKRenormalizes) {
  // vLLM order: top-k first, then top-p over the renormalized top-k probabilities.
  auto l = LogProbs({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = Temp(1.0f);
  p.top_p = 0.5f;
  auto no_k = Freqs(l, p, 20000);  // 0.4 < 0.5 -> keeps two
  EXPECT_GT(no_k[1], 0.3);
  p.top_k = 2;  // renormalized 4/7 >= 0.5 -> keeps one
  EXPECT_EQ(Freqs(l, p, 1000)[0], 1.0);
}

TEST(SamplerTest, MinPDropsBelowFractionOfMax) {
  auto l = LogProbs({0.5, 0.3, 0.2});
  SamplingParams p = Temp(1.0f);
  p.min_p = 0.5f;  // threshold 0.25: keeps 0.5 and 0.3
  auto got = Freqs(l, p, 200000);
  EXPECT_EQ(got[2], 0.0);
  EXPECT_NEAR(got[0], 0.625, 0.01);
  EXPECT_NEAR(got[1], 0.375, 0.01);
  p.min_p = 1.0f;  // only the max survives
  EXPECT_EQ(Freqs(l, p, 1000)[0], 1.0);
}

TEST(SamplerTest, NaNAndInfLogits) {
  std::vector<float> l = {kNaN, 1.0f, kNaN, 1.0f, -kInf};
  auto got = Freqs(l, Temp(1.0f), 20000);
  EXPECT_EQ(got[0] + got[2] + got[4], 0.0);
  EXPECT_NEAR(got[1], 0.5, 0.02);

  std::vector<float> dead = {kNaN, -kInf, kNaN};
  EXPECT_EQ(Freqs(dead, Temp(1.0f), 10)[0], 1.0);
  EXPECT_EQ(SampleToken(dead.data(), 3, Temp(0.0f), nullptr), 0);

  std::vector<float> pinf = {5.0f, kInf, kNaN, kInf};  // +inf tokens share all the mass
  auto g2 = Freqs(pinf, Temp(1.0f), 20000);
  EXPECT_EQ(g2[0] + g2[2], 0.0);
  EXPECT_NEAR(g2[1], 0.5, 0.02);
  EXPECT_EQ(SampleToken(pinf.data(), 4, Temp(0.0f), nullptr), 1);
}

// Straightforward full-sort reference for the documented contract: `n` draws from `rng`.
std::vector<int> ReferenceSample(const std::vector<float>& logits, const SamplingParams& p,
                                 Rng* rng, int n_draws) {
  float m = -kInf;
  for (float l : logits)
    if (l > m) m = l;
  if (m == -kInf) {
    for (int i = 0; i < n_draws; ++i) rng->NextU64();
    return std::vector<int>(n_draws, 0);
  }
  const double t = p.temperature, x_max = m / t;
  struct C {
    float logit;
    int id;
    double w;
  };
  std::vector<C> c;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > -kInf) c.push_back({logits[i], int(i), std::exp(logits[i] / t - x_max)});
  std::sort(c.begin(), c.end(), [](const C& a, const C& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  if (p.top_k > 0 && size_t(p.top_k) < c.size()) c.resize(p.top_k);
  double z = 0, cum = 0;
  for (auto& e : c) z += e.w;
  size_t keep = c.size();
  if (p.top_p < 1) {
    for (keep = 0; keep < c.size();)
      if ((cum += c[keep++].w) >= p.top_p * z) break;
  }
  size_t n = 0;
  while (n < keep && c[n].w >= p.min_p) ++n;
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += c[i].w;
  std::vector<int> ids;
  for (int d = 0; d < n_draws; ++d) {
    double target = rng->NextDouble() * total;
    size_t i = 0;
    for (cum = c[0].w; i + 1 < n && !(target < cum);) cum += c[++i].w;
    ids.push_back(c[i].id);
  }
  return ids;
}

std::vector<int> Sample(const std::vector<float>& logits, const SamplingParams& p, Rng* rng,
                        int n_draws) {
  std::vector<int> ids;
  for (int d = 0; d < n_draws; ++d)
    ids.push_back(SampleToken(logits.data(), static_cast<int>(logits.size()), p, rng));
  return ids;
}

SamplingParams RandomParams(Rng* g) {
  SamplingParams p = Temp(static_cast<float>(0.2 + 2.0 * g->NextDouble()));
  if (g->NextU64() % 2) p.top_k = 1 + g->NextU64() % 40;
  if (g->NextU64() % 2) p.top_p = static_cast<float>(g->NextDouble());
  if (g->NextU64() % 3 == 0) p.min_p = static_cast<float>(0.3 * g->NextDouble());
  return p;
}

TEST(SamplerTest, SmallVocabsMatchReference) {
  Rng g(2024);
  for (int trial = 0; trial < 3000; ++trial) {
    int vocab = 1 + g.NextU64() % 40;
    std::vector<float> l(vocab);
    for (float& x : l) {
      uint64_t kind = g.NextU64() % 10;  // coarse values give many ties
      x = kind == 0 ? -kInf : kind == 1 ? kNaN : static_cast<float>(g.NextU64() % 8) * 0.5f;
    }
    SamplingParams p = RandomParams(&g);
    Rng a(trial), b(trial);
    ASSERT_EQ(Sample(l, p, &a, 5), ReferenceSample(l, p, &b, 5)) << "trial " << trial;
  }
}

TEST(SamplerTest, LargeVocabMatchesFullSortReference) {
  // Exercises the large-vocab paths: heap and compacting top-k, bucketed selection, min-p skip.
  const int vocab = 128000;
  std::vector<std::vector<float>> cases(3, std::vector<float>(vocab));
  Rng gen(77);
  for (int i = 0; i < vocab; ++i) {
    cases[0][i] = static_cast<float>(gen.NextDouble() * 12.0 - 6.0);  // flat
    double g = gen.NextDouble() + gen.NextDouble() + gen.NextDouble() - 1.5;
    cases[1][i] = static_cast<float>(g * 6.0);  // LLM-like bell curve...
    cases[2][i] = 0.5f;                         // all tied: one bucket
  }
  cases[1][123] = cases[1][99999] = 14.0f;  // ...with two tied spikes
  cases[0][5] = kNaN;
  cases[0][6] = -kInf;
  const std::array kTopK = {0, 50, 0, 1000, 0, 5, 5000, 100000, 0};
  const std::array kTopP = {1.0f, 1.0f, 0.9f, 0.95f, 0.3f, 0.5f, 0.9f, 1.0f, 1.0f};
  const std::array kMinP = {0.0f, 0.0f, 0.0f, 0.01f, 0.02f, 0.0f, 0.0f, 0.001f, 0.05f};
  for (size_t k = 0; k < cases.size(); ++k) {
    for (size_t cfg = 0; cfg < kTopK.size(); ++cfg) {
      SamplingParams p = Temp(cfg % 2 ? 0.7f : 1.3f);
      p.top_k = kTopK[cfg];
      p.top_p = kTopP[cfg];
      p.min_p = kMinP[cfg];
      Rng a(cfg), b(cfg);
      ASSERT_EQ(Sample(cases[k], p, &a, 20), ReferenceSample(cases[k], p, &b, 20))
          << "case " << k << " cfg " << cfg;
    }
  }
}

TEST(SamplerTest, LargeVocabPlusInf) {
  std::vector<float> l(5000, 1.0f);
  l[7] = l[4000] = l[4500] = kInf;
  l[8] = kNaN;
  SamplingParams p = Temp(1.0f);
  auto got = Freqs(l, p, 30000);
  EXPECT_NEAR(got[7], 1.0 / 3, 0.02);
  EXPECT_NEAR(got[4000], 1.0 / 3, 0.02);
  EXPECT_NEAR(got[4500], 1.0 / 3, 0.02);
  p.top_k = 2;  // ties among +inf: lower ids first
  got = Freqs(l, p, 2000);
  EXPECT_EQ(got[4500], 0.0);
  EXPECT_NEAR(got[7], 0.5, 0.05);
  std::fill(l.begin() + 1000, l.end(), kInf);  // more +inf tokens than the direct-select limit
  got = Freqs(l, Temp(1.0f), 4000);
  double low_half = 0.0;  // +inf ids 1000..2999 of 7 and 1000..4999: about half the mass
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(i == 7 || got[i] == 0.0) << i;
  for (int i = 1000; i < 3000; ++i) low_half += got[i];
  EXPECT_NEAR(low_half, 0.5, 0.05);
}

// A row drawn under a token mask (structured outputs) gives what the row with the mask applied
// (refused logits -inf) gives, token and logprobs, for every path of the sampler: greedy, the
// top-k heap and compaction, top-p, min-p, +inf and NaN logits, penalties and logprobs, masks
// sparse, dense, full, of one token or of none, and a vocabulary not a multiple of 32.
TEST(SamplerTest, MaskedRowsDrawAsTheRowWithTheMaskApplied) {
  Rng gen(2024);
  for (const int vocab : {1000, 128000}) {
    const int words = (vocab + 31) / 32;
    for (int trial = 0; trial < 24; ++trial) {
      std::vector<float> l(static_cast<size_t>(vocab));
      for (float& x : l) {
        const uint64_t kind = gen.NextU64() % 200;
        x = kind == 0 ? kNaN : kind == 1 ? -kInf : static_cast<float>(gen.NextDouble() * 8 - 4);
      }
      if (trial % 6 == 5) l[static_cast<size_t>(gen.NextU64() % vocab)] = kInf;
      std::vector<uint32_t> mask(static_cast<size_t>(words), 0);
      const int shape = trial % 5;  // sparse, dense, full, one token, none
      for (int i = 0; i < vocab; ++i) {
        const bool on = shape == 0   ? gen.NextU64() % 500 == 0
                        : shape == 1 ? gen.NextU64() % 10 != 0
                                     : shape == 2;
        if (on) mask[static_cast<size_t>(i) >> 5] |= 1u << (i & 31);
      }
      if (shape == 3) mask[static_cast<size_t>(vocab - 3) >> 5] |= 1u << ((vocab - 3) & 31);
      std::vector<float> applied = l;
      for (int i = 0; i < vocab; ++i)
        if (!((mask[static_cast<size_t>(i) >> 5] >> (i & 31)) & 1u))
          applied[static_cast<size_t>(i)] = -kInf;
      const std::vector<int32_t> eos = {2}, prompt = {5, 6}, generated = {7, 7, 9};
      const TokenHistory h{prompt, generated};
      for (int cfg = 0; cfg < 8; ++cfg) {
        SamplingParams p = Temp(cfg == 0 ? 0.0f : 0.8f);
        if (cfg == 2) p.top_k = 5;
        if (cfg == 3) p.top_k = 5000;
        if (cfg == 4) p.top_p = 0.9f;
        if (cfg == 5) p.min_p = 0.05f;
        if (cfg == 6) p.logprobs = 3;
        if (cfg == 7) p.frequency_penalty = 0.5f;
        Rng a(trial * 10 + cfg), b(trial * 10 + cfg);
        TokenLogprobs la, lb;
        const int got = SampleNext(l.data(), vocab, p, eos, h, &a, &la, mask.data());
        const int want = SampleNext(applied.data(), vocab, p, eos, h, &b, &lb);
        ASSERT_EQ(got, want) << "vocab " << vocab << " trial " << trial << " cfg " << cfg;
        ASSERT_EQ(la.logprob, lb.logprob);
        ASSERT_EQ(la.top.size(), lb.top.size());
        for (size_t k = 0; k < la.top.size(); ++k) {
          ASSERT_EQ(la.top[k].id, lb.top[k].id);
          ASSERT_EQ(la.top[k].logprob, lb.top[k].logprob);
        }
        ASSERT_EQ(a.NextU64(), b.NextU64()) << "the same draws spent";
      }
    }
  }
}

// Greedy over rows full of ties, against a plain loop: the lowest allowed id of the largest
// logit, whichever lane of which vector of which word holds it, NaN never, masks of every
// density (the pass that skips words refusing all, and the one that reads every word), and the
// tokens past the last whole word.
TEST(SamplerTest, GreedyTiesGoToTheLowestAllowedIdUnderEveryMask) {
  Rng gen(77);
  for (const int vocab : {31, 1000, 1003, 128256}) {
    const int words = (vocab + 31) / 32;
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> l(static_cast<size_t>(vocab));
      for (float& x : l) {
        const uint64_t kind = gen.NextU64() % 100;
        x = kind == 0 ? kNaN : kind == 1 ? -kInf : static_cast<float>(gen.NextU64() % 4);
      }
      if (trial % 8 == 7) std::fill(l.begin(), l.end(), -kInf);
      if (trial % 8 == 6) l[static_cast<size_t>(gen.NextU64() % vocab)] = kInf;
      std::vector<uint32_t> mask(static_cast<size_t>(words), 0);
      const int shape = trial % 5;  // none, dense, 1%, 0.1%, one token
      for (int i = 0; i < vocab; ++i) {
        const uint64_t r = gen.NextU64() % 1000;
        const bool on = shape == 1 ? r < 900 : shape == 2 ? r < 10 : shape == 3 ? r < 1 : false;
        if (on) mask[static_cast<size_t>(i) >> 5] |= 1u << (i & 31);
      }
      if (shape == 4) mask[static_cast<size_t>(vocab - 1) >> 5] |= 1u << ((vocab - 1) & 31);
      const uint32_t* m = shape == 0 ? nullptr : mask.data();
      int want = 0;
      float best = -kInf;
      for (int i = 0; i < vocab; ++i) {
        const bool allowed = m == nullptr || ((m[i >> 5] >> (i & 31)) & 1u);
        if (allowed && l[static_cast<size_t>(i)] > best) {
          best = l[static_cast<size_t>(i)];
          want = i;
        }
      }
      ASSERT_EQ(SampleToken(l.data(), vocab, Temp(0), nullptr, m), want)
          << "vocab " << vocab << " trial " << trial;
    }
  }
}

// --- Stop strings ----------------------------------------------------------------------------

TEST(StopTest, FindStopBasics) {
  EXPECT_EQ(FindStop("hello world", 0, {}), std::string::npos);
  EXPECT_EQ(FindStop("hello world", 0, {""}), std::string::npos);  // empty stop ignored
  EXPECT_EQ(FindStop("STOPabc", 0, {"STOP"}), 0u);                 // stop at start
  EXPECT_EQ(FindStop("abc", 0, {"abcd"}), std::string::npos);
  EXPECT_EQ(FindStop("x</s>y</s>", 0, {"</s>"}), 1u);  // earliest
}

TEST(StopTest, FindStopOnlyReportsMatchesEndingInNewText) {
  const std::string t = "ab</s>cd";         // match occupies [2, 6)
  EXPECT_EQ(FindStop(t, 5, {"</s>"}), 2u);  // last byte (5) is new
  EXPECT_EQ(FindStop(t, 6, {"</s>"}), std::string::npos);
  EXPECT_EQ(FindStop(t, 100, {"</s>"}), std::string::npos);
  // "aa" in "aaaa" from new_from 3: the match must start at >= 2.
  EXPECT_EQ(FindStop("aaaa", 3, {"aa"}), 2u);
}

TEST(StopTest, StopSplitAcrossChunks) {
  std::vector<std::string> stops = {"</s>"};
  std::string text = "abc</";
  EXPECT_EQ(FindStop(text, 0, stops), std::string::npos);
  EXPECT_EQ(StopHoldback(text, stops), 2u);
  size_t released = text.size() - StopHoldback(text, stops);
  text += "s>tail";
  EXPECT_EQ(FindStop(text, 5, stops), 3u);
  EXPECT_EQ(text.substr(0, FindStop(text, 5, stops)), text.substr(0, released));
}

TEST(StopTest, OverlappingStopsPickEarliestStart) {
  EXPECT_EQ(FindStop("xabcd", 0, {"bc", "abcd"}), 1u);
  EXPECT_EQ(FindStop("xabcd", 0, {"abcd", "bc"}), 1u);
  EXPECT_EQ(FindStop("xabcd", 4, {"cd", "abcd"}), 1u);
}

TEST(StopTest, StopHoldback) {
  EXPECT_EQ(StopHoldback("", {"abc"}), 0u);
  EXPECT_EQ(StopHoldback("zab", {}), 0u);
  EXPECT_EQ(StopHoldback("zab", {""}), 0u);
  EXPECT_EQ(StopHoldback("zab", {"abc", "bcx"}), 2u);
  EXPECT_EQ(StopHoldback("zbc", {"abc", "bcx"}), 2u);
  EXPECT_EQ(StopHoldback("xab", {"ab"}), 0u);  // only proper prefixes: "ab" itself is a match
  EXPECT_EQ(StopHoldback("aa", {"aa"}), 1u);
  EXPECT_EQ(StopHoldback("ab", {"abcdef"}), 2u);  // whole text may be held
  EXPECT_EQ(StopHoldback("xyz", {"abc"}), 0u);
  EXPECT_EQ(StopHoldback("aab", {"aabx", "bxx"}), 3u);  // longest wins across stops
}

TEST(StopTest, Unicode) {
  const std::string stop = "\xE3\x80\x82";  // U+3002 "。", 3 bytes
  const std::string text = "\xE4\xBD\xA0\xE5\xA5\xBD" + stop + "\xE4\xB8\x96";  // 你好。世
  EXPECT_EQ(FindStop(text, 0, {stop}), 6u);
  // Stop split mid-code-point: hold back the partial bytes.
  EXPECT_EQ(StopHoldback(text.substr(0, 7), {stop}), 1u);
  EXPECT_EQ(StopHoldback(text.substr(0, 8), {stop}), 2u);
  EXPECT_EQ(FindStop(text.substr(0, 9), 8, {stop}), 6u);
  const std::string emoji = "\xF0\x9F\x9B\x91";            // U+1F6D1
  EXPECT_EQ(FindStop("ok" + emoji, 3, {emoji, "k"}), 2u);  // "k" ended in old text
  EXPECT_EQ(FindStop("ok" + emoji, 1, {emoji, "k"}), 1u);
}

}  // namespace
}  // namespace llmq
