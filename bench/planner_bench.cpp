// PrefixPlanner at night-job scale: 100,000 shuffled requests in two shapes, planning time
// best of 3.
//   nested: 1 system prompt (200 tokens) > 100 templates (800 tokens) > documents (100-300 tokens)
//   flat:   one 1,000-token prefix + a 100-300 token document
// Every prompt is its own allocation (as the engine's requests are), so planning reads all
// ~120M input tokens from memory.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "engine/core/prefix_planner.h"

namespace {

constexpr int kRequests = 100000;
constexpr int kVocab = 32000;
constexpr int kBlockSize = 16;

using Prompts = std::vector<std::vector<int32_t>>;

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n) {
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(rng() % kVocab);
  return v;
}

// `levels` are the shared segments' lengths and fan-out below the root: {{200, 1}, {800, 100}}
// is one 200-token system prompt followed by one of 100 800-token templates.
Prompts MakeWorkload(const std::vector<std::pair<int, int>>& levels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::vector<int32_t>>> segments;  // [level][choice] -> tokens
  for (const auto& [len, fanout] : levels) {
    segments.emplace_back();
    for (int c = 0; c < fanout; ++c) segments.back().push_back(RandomTokens(rng, len));
  }
  Prompts prompts(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    const int doc_len = 100 + static_cast<int>(rng() % 201);
    auto& p = prompts[i];
    size_t total = doc_len;
    for (const auto& level : segments) total += level[0].size();
    p.reserve(total);
    // Request i uses choice (i mod fan-out) at each level: balanced groups before the shuffle.
    for (const auto& level : segments) {
      const auto& s = level[i % level.size()];
      p.insert(p.end(), s.begin(), s.end());
    }
    for (int k = 0; k < doc_len; ++k) p.push_back(static_cast<int32_t>(rng() % kVocab));
  }
  std::shuffle(prompts.begin(), prompts.end(), rng);
  return prompts;
}

void Bench(const char* name, const Prompts& prompts) {
  const std::vector<std::span<const int32_t>> spans(prompts.begin(), prompts.end());
  int64_t total = 0;
  for (const auto& p : prompts) total += static_cast<int64_t>(p.size());
  double best_ms = 1e30;
  llmq::Plan plan;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    plan = llmq::PlanPrefixes(spans, kBlockSize).value();
    const auto t1 = std::chrono::steady_clock::now();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  size_t top = 0;
  for (const auto& g : plan.groups) top += g.parent < 0;
  std::printf("%-8s %9zu %14lld %14lld %8.1fx %7zu %6zu %10.1f %12.0f\n", name, prompts.size(),
              static_cast<long long>(total), static_cast<long long>(plan.unique_tokens),
              static_cast<double>(total) / static_cast<double>(plan.unique_tokens),
              plan.groups.size(), top, best_ms, static_cast<double>(total) / best_ms / 1e3);
}

}  // namespace

int main() {
  std::printf("PrefixPlanner, block_size %d, planning time best of 3\n", kBlockSize);
  std::printf("%-8s %9s %14s %14s %9s %7s %6s %10s %12s\n", "shape", "requests", "total_tokens",
              "unique_tokens", "dedup", "groups", "top", "plan_ms", "Mtokens/s");
  {
    const Prompts nested = MakeWorkload({{200, 1}, {800, 100}}, 1);
    Bench("nested", nested);
  }
  {
    const Prompts flat = MakeWorkload({{1000, 1}}, 2);
    Bench("flat", flat);
  }
  return 0;
}
