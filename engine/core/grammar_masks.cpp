#include "engine/core/grammar_masks.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/core/step_profile.h"
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
    : vocab_(vocab),
      words_((vocab + 31) / 32),
      tail_(vocab % 32 == 0 ? ~0u : (1u << (vocab % 32)) - 1),
      eos_(std::move(eos)) {
  std::sort(eos_.begin(), eos_.end());
  eos_.erase(std::unique(eos_.begin(), eos_.end()), eos_.end());
  std::erase_if(eos_, [&](int32_t e) { return e < 0 || e >= vocab_; });
}

bool GrammarMasks::Prepare(const std::vector<Sequence*>& samplers) {
  samplers_ = &samplers;
  rows_done_ = packed_ = false;
  return std::any_of(samplers.begin(), samplers.end(),
                     [](const Sequence* s) { return s->matcher != nullptr; });
}

void GrammarMasks::ComputeRows() {
  if (rows_done_) return;
  ScopedTimer timer(profile_);
  const std::vector<Sequence*>& rows = *samplers_;
  const size_t W = static_cast<size_t>(words_);
  rows_.assign(rows.size(), nullptr);
  forced_.assign(rows.size(), -1);
  seconds_.assign(rows.size(), -1.0);
  if (own_.size() < rows.size()) own_.resize(rows.size());
  // A mask's cost averaged over a job's rows: most are their matcher's kept mask (no copy), the
  // rows whose state a token changed cost tens of µs (bench/RESULTS.md, structured_bench).
  constexpr double kRowNs = 3e3;
  kernels::ParallelFor(static_cast<int64_t>(rows.size()), kRowNs, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i) {
      Matcher* m = rows[i]->matcher.get();
      if (m == nullptr) continue;
      const auto start = std::chrono::steady_clock::now();
      const std::vector<uint32_t>& w = m->Mask().words();
      const bool can_end = m->CanEnd() && !eos_.empty();
      if (w.size() == W && m->grammar()->trie().vocab_size() <= vocab_ && !can_end) {
        // The kept mask as it is (a matcher never sets a bit past its trie's vocabulary).
        rows_[i] = w.data();
        forced_[i] = m->OnlyToken();
      } else {
        // A row of its own: the EOS ids added, or the trie's vocabulary fitted to the model's.
        std::vector<uint32_t>& own = own_[i];
        own.resize(W);
        const size_t n = std::min(w.size(), W);
        std::copy(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n), own.begin());
        std::fill(own.begin() + static_cast<std::ptrdiff_t>(n), own.end(), 0u);
        if (can_end)
          for (const int32_t e : eos_) own[static_cast<size_t>(e) >> 5] |= 1u << (e & 31);
        own[W - 1] &= tail_;
        rows_[i] = own.data();
        forced_[i] = OnlyToken(own.data(), W);
      }
      seconds_[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  });
  for (const double sec : seconds_)
    if (sec >= 0) times_.Add(sec);
  rows_done_ = true;
}

const uint32_t* GrammarMasks::Compute() {
  if (packed_) return bits_.data();
  ComputeRows();
  const size_t W = static_cast<size_t>(words_);
  bits_.resize(rows_.size() * W);  // each row written whole below
  for (size_t i = 0; i < rows_.size(); ++i) {
    uint32_t* row = &bits_[i * W];
    if (rows_[i] != nullptr) {
      std::copy(rows_[i], rows_[i] + W, row);
    } else {
      std::fill(row, row + W - 1, ~0u);
      row[W - 1] = tail_;
    }
  }
  packed_ = true;
  return bits_.data();
}

}  // namespace llmq
