// Workload generators shared by the benchmarks and the tests: the shapes a night's batch has.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/sampling/sampler.h"

namespace llmq::bench {

using Prompts = std::vector<std::vector<int32_t>>;

inline std::vector<int32_t> RandomRun(Rng& rng, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = 3 + static_cast<int32_t>(rng.NextU64() % (vocab - 3));
  return t;
}

// `head` followed by a random document of doc_min..doc_max tokens.
inline std::vector<int32_t> WithDocument(const std::vector<int32_t>& head, Rng& rng, int doc_min,
                                         int doc_max, int vocab) {
  std::vector<int32_t> p = head;
  const int n = doc_min + static_cast<int>(rng.NextU64() % (doc_max - doc_min + 1));
  const std::vector<int32_t> doc = RandomRun(rng, n, vocab);
  p.insert(p.end(), doc.begin(), doc.end());
  return p;
}

inline void Shuffle(Prompts& p, Rng& rng) {
  for (size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[rng.NextU64() % i]);
}

// `requests` prompts: BOS + one shared `prefix`-token instruction + a distinct document of
// doc_min..doc_max tokens; shuffled.
inline Prompts SharedInstructions(int requests, int prefix, int doc_min, int doc_max, int vocab,
                                  uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> head{1};
  const std::vector<int32_t> instr = RandomRun(rng, prefix, vocab);
  head.insert(head.end(), instr.begin(), instr.end());
  Prompts out;
  for (int i = 0; i < requests; ++i) {
    out.push_back(WithDocument(head, rng, doc_min, doc_max, vocab));
  }
  Shuffle(out, rng);
  return out;
}

// Nested sharing: BOS + a `system`-token system prompt + one of `templates` task templates of
// `tmpl` tokens + a distinct document of doc_min..doc_max tokens; `docs` documents per template;
// shuffled.
inline Prompts Nested(int templates, int docs, int system, int tmpl, int doc_min, int doc_max,
                      int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> sys{1};
  const std::vector<int32_t> s = RandomRun(rng, system, vocab);
  sys.insert(sys.end(), s.begin(), s.end());
  Prompts out;
  for (int t = 0; t < templates; ++t) {
    std::vector<int32_t> head = sys;
    const std::vector<int32_t> tm = RandomRun(rng, tmpl, vocab);
    head.insert(head.end(), tm.begin(), tm.end());
    for (int d = 0; d < docs; ++d) {
      out.push_back(WithDocument(head, rng, doc_min, doc_max, vocab));
    }
  }
  Shuffle(out, rng);
  return out;
}

// Tokens of the radix tree over `prompts`: each distinct prefix counted once.
inline int64_t UniqueTokens(const Prompts& prompts) {
  Prompts sorted = prompts;
  std::sort(sorted.begin(), sorted.end());
  int64_t total = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    size_t common = 0;
    if (i > 0)
      while (common < sorted[i].size() && common < sorted[i - 1].size() &&
             sorted[i][common] == sorted[i - 1][common])
        ++common;
    total += static_cast<int64_t>(sorted[i].size() - common);
  }
  return total;
}

}  // namespace llmq::bench
