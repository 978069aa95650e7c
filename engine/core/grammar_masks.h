// GrammarMasks: a step's token masks for structured outputs (issue 24), the StepMasks the backend
// computes while its forward pass runs. Each logits row of a constrained sequence allows exactly
// the tokens its Matcher accepts next, and the model's EOS ids where the document may end there;
// an unconstrained row allows every token. A row that allows exactly one token is "forced": the
// engine appends that token without drawing from the row (engine/core/llm_engine.cpp).
//
// Deterministic and batch-invariant: a row's mask depends on its sequence's matcher alone.
// Computed when Compute is called (on the engine's thread, or the backend's while the device
// works): the rows of one grammar one after another (they share its lock: matcher.h), the rows of
// different grammars side by side on the kernels' thread pool.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/backends/backend.h"
#include "engine/core/sequence.h"

namespace llmq {

// Mask times, in buckets 2^(1/4) wide from 1 µs (p50/p99 for the summary; bounded however long
// the engine serves).
class LatencyHistogram {
 public:
  void Add(double seconds);
  int64_t count() const { return count_; }
  // The upper bound of the bucket holding the p-quantile (0 < p <= 1), in seconds; 0 when empty.
  double Quantile(double p) const;

 private:
  static constexpr int kBuckets = 120;  // 1 µs .. 2^30 µs
  std::array<int64_t, kBuckets> buckets_{};
  int64_t count_ = 0;
};

class GrammarMasks final : public StepMasks {
 public:
  // `vocab`: the model's logits per row; `eos`: its EOS ids.
  GrammarMasks(int vocab, std::vector<int32_t> eos);
  // Before the forward pass: the step's samplers (ModelRunner::Prepare), whose matchers stay as
  // they are until Compute ran. False when none is constrained (then the step has no masks).
  bool Prepare(const std::vector<Sequence*>& samplers);
  const uint32_t* Compute() override;
  bool computed() const override { return computed_; }
  int words_per_row() const override { return words_; }
  // After Compute: the token row i must take (the only one its mask allows), or -1.
  int32_t forced(size_t row) const { return forced_[row]; }
  // After Compute: row i's mask [words_per_row()].
  const uint32_t* row(size_t i) const { return &bits_[i * static_cast<size_t>(words_)]; }
  const LatencyHistogram& mask_times() const { return times_; }

 private:
  int vocab_, words_;
  std::vector<int32_t> eos_;
  const std::vector<Sequence*>* samplers_ = nullptr;
  bool computed_ = false;
  std::vector<uint32_t> bits_;   // [rows, words_]
  std::vector<int32_t> forced_;  // [rows]
  std::vector<double> seconds_;  // [rows]: each constrained row's mask time (-1: none)
  LatencyHistogram times_;
};

}  // namespace llmq
