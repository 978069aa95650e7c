#include "engine/core/grammar_masks.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>

#include "engine/structured/matcher.h"

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
  bits_.assign(rows.size() * W, ~0u);
  forced_.assign(rows.size(), -1);
  const uint32_t tail = vocab_ % 32 == 0 ? ~0u : (1u << (vocab_ % 32)) - 1;  // bits past vocab
  for (size_t i = 0; i < rows.size(); ++i) {
    uint32_t* row = &bits_[i * W];
    row[W - 1] = tail;
    Matcher* m = rows[i]->matcher.get();
    if (m == nullptr) continue;
    const auto start = std::chrono::steady_clock::now();
    m->Mask(&scratch_);
    const std::vector<uint32_t>& w = scratch_.words();
    const size_t n = std::min(w.size(), W);
    std::copy(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n), row);
    std::fill(row + n, row + W, 0u);
    if (m->CanEnd())
      for (int32_t e : eos_)
        if (e >= 0 && e < vocab_) row[e >> 5] |= 1u << (e & 31);
    row[W - 1] &= tail;
    times_.Add(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    int allowed = 0, last = -1;
    for (size_t k = 0; k < W && allowed < 2; ++k)
      if (row[k] != 0) {
        allowed += std::popcount(row[k]);
        last = static_cast<int>(k * 32) + std::countr_zero(row[k]);
      }
    if (allowed == 1) forced_[i] = last;
  }
  computed_ = true;
  return bits_.data();
}

}  // namespace llmq
