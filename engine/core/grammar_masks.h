// GrammarMasks: a step's token masks for structured outputs (issue 24), the StepMasks the backend
// computes while its forward pass runs. Each logits row of a constrained sequence allows exactly
// the tokens its Matcher accepts next, and the model's EOS ids where the document may end there;
// an unconstrained row allows every token. A row that allows exactly one token is "forced": the
// engine appends that token without drawing from the row (engine/core/llm_engine.cpp).
//
// Deterministic and batch-invariant: a row's mask depends on its sequence's matcher alone.
// Two ways to compute them: ComputeRows (the host's: each row's mask where its matcher keeps it,
// most rows copying nothing), and Compute (the device's: ComputeRows, then the rows packed into
// one buffer to upload). Rows are computed side by side on the kernels' thread pool: a row whose
// matcher keeps its mask takes no lock, one whose mask changed reads its grammar's tables under a
// shared lock (matcher.h).
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
  // they are until the step's tokens are appended. False when none is constrained (then the step
  // has no masks).
  bool Prepare(const std::vector<Sequence*>& samplers);
  // Each constrained row's mask and forced token (row, forced); the first call computes them.
  void ComputeRows();
  // ComputeRows, and every row packed: [rows, words_per_row()] (StepMasks).
  const uint32_t* Compute() override;
  bool computed() const override { return packed_; }
  int words_per_row() const override { return words_; }
  // After ComputeRows: the token row i must take (the only one its mask allows), or -1.
  int32_t forced(size_t row) const { return forced_[row]; }
  // After ComputeRows: constrained row i's mask [words_per_row()] (its matcher's kept mask where it
  // can be; valid until the row's token is appended); null for an unconstrained row.
  const uint32_t* row(size_t i) const { return rows_[i]; }
  const LatencyHistogram& mask_times() const { return times_; }
  // Adds each ComputeRows's wall seconds to *seconds (StepProfile::masks_s; null: not timed).
  void set_profile(double* seconds) { profile_ = seconds; }

 private:
  int vocab_, words_;
  uint32_t tail_;  // the last word's bits inside the vocabulary
  std::vector<int32_t> eos_;
  const std::vector<Sequence*>* samplers_ = nullptr;
  bool rows_done_ = false, packed_ = false;
  std::vector<const uint32_t*> rows_;       // [rows]
  std::vector<std::vector<uint32_t>> own_;  // [rows]: a row's own words where it needs them
  std::vector<uint32_t> bits_;              // [rows, words_]: Compute's
  std::vector<int32_t> forced_;             // [rows]
  std::vector<double> seconds_;             // [rows]: each constrained row's mask time (-1: none)
  LatencyHistogram times_;
  double* profile_ = nullptr;
};

}  // namespace llmq
