#include "engine/core/grammar_masks.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>

#include "engine/structured/matcher.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq {

void LatencyHistogram::Add(double seconds) {
  const double us = seconds * 1e6;
  int b = us <= 1 ? 0 : static_cast<int>(std::ceil(4 * std::log2(us)));
  b = std::clamp(b, 0, kBuckets - 1);
  ++buckets_[static_cast<size_t>(b)];
  ++count_;
}

double LatencyHistogram::Quantile(double p) const {
  if (count_ == 0) return 0;
  const auto want = static_cast<int64_t>(std::ceil(p * static_cast<double>(count_)));
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[static_cast<size_t>(b)];
    if (seen >= want) return std::exp2(b / 4.0) * 1e-6;
  }
  return std::exp2((kBuckets - 1) / 4.0) * 1e-6;
}

GrammarMasks::GrammarMasks(int vocab, std::vector<int32_t> eos)
    : vocab_(vocab), words_((vocab + 31) / 32), eos_(std::move(eos)) {}

bool GrammarMasks::Prepare(const std::vector<Sequence*>& samplers) {
  samplers_ = &samplers;
  computed_ = false;
  return std::any_of(samplers.begin(), samplers.end(),
                     [](const Sequence* s) { return s->matcher != nullptr; });
}

const uint32_t* GrammarMasks::Compute() {
  if (computed_) return bits_.data();
  const std::vector<Sequence*>& rows = *samplers_;
  const size_t W = static_cast<size_t>(words_);
  bits_.resize(rows.size() * W);  // each row written whole below
  forced_.assign(rows.size(), -1);
  const uint32_t tail = vocab_ % 32 == 0 ? ~0u : (1u << (vocab_ % 32)) - 1;  // bits past vocab
  // The constrained rows grouped by grammar: a grammar's rows one after another (they would wait
  // on its lock anyway), the groups side by side on the kernels' pool. Each row's mask depends on
  // its matcher alone, so neither the grouping nor the threads change a bit of it.
  std::vector<std::pair<const CompiledGrammar*, size_t>> order;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (const Matcher* m = rows[i]->matcher.get()) {
      order.emplace_back(m->grammar(), i);
    } else {
      uint32_t* row = &bits_[i * W];
      std::fill(row, row + W - 1, ~0u);
      row[W - 1] = tail;
    }
  }
  std::sort(order.begin(), order.end());
  std::vector<size_t> group_begin;
  for (size_t k = 0; k < order.size(); ++k)
    if (k == 0 || order[k].first != order[k - 1].first) group_begin.push_back(k);
  const auto groups = static_cast<int64_t>(group_begin.size());
  group_begin.push_back(order.size());
  seconds_.assign(rows.size(), -1.0);
  // A mask's cost averaged over a job's rows: most keep their mask (a 16 KB copy, ~2 µs), the
  // rows whose state a token changed cost tens of µs (bench/RESULTS.md, structured_bench).
  constexpr double kRowNs = 10e3;
  const double per_group = groups > 0 ? kRowNs * static_cast<double>(order.size()) / groups : 0;
  kernels::ParallelFor(groups, per_group, [&](int64_t g0, int64_t g1) {
    for (size_t k = group_begin[static_cast<size_t>(g0)]; k < group_begin[static_cast<size_t>(g1)];
         ++k) {
      const size_t i = order[k].second;
      uint32_t* row = &bits_[i * W];
      Matcher* m = rows[i]->matcher.get();
      const auto start = std::chrono::steady_clock::now();
      const std::vector<uint32_t>& w = m->Mask().words();
      const size_t n = std::min(w.size(), W);
      std::copy(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n), row);
      std::fill(row + n, row + W, 0u);
      if (m->CanEnd())
        for (int32_t e : eos_)
          if (e >= 0 && e < vocab_) row[e >> 5] |= 1u << (e & 31);
      row[W - 1] &= tail;
      seconds_[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      int allowed = 0, last = -1;
      for (size_t j = 0; j < W && allowed < 2; ++j)
        if (row[j] != 0) {
          allowed += std::popcount(row[j]);
          last = static_cast<int>(j * 32) + std::countr_zero(row[j]);
        }
      if (allowed == 1) forced_[i] = last;
    }
  });
  for (const double s : seconds_)
    if (s >= 0) times_.Add(s);
  computed_ = true;
  return bits_.data();
}

}  // namespace llmq
