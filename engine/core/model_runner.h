// ModelRunner: turns a scheduled step into the Backend's flat batch and runs it. The batch keeps
// the step's order except that decode sequences sharing their first block are put next to each
// other (OrderBySharedFirstBlock), and it carries the step's prefix groups (DetectPrefixGroups).
#pragma once

#include <span>
#include <vector>

#include "base/grow_buffer.h"
#include "engine/backends/backend.h"
#include "engine/core/scheduler.h"

namespace llmq {

class ModelRunner {
 public:
  // `prefix_groups`: whether batches carry their prefix groups (off: always empty).
  ModelRunner(Backend* backend, int vocab_size, int block_size, bool prefix_groups = true)
      : backend_(backend), vocab_(vocab_size), block_size_(block_size), groups_(prefix_groups) {}
  // Runs one step: `samplers` receives the sequences that finish their pending tokens in this step
  // (in batch order), logits() their next-token logits [L, vocab]. The backend's Status.
  Status Run(const std::vector<ScheduledSeq>& step, std::vector<Sequence*>* samplers) {
    Prepare(step, samplers);
    return Forward();
  }
  // The same in two halves: Prepare builds the batch (and names the samplers), then either Forward
  // (logits() filled) or ForwardSample (the backend picks the ids on its device: ids() filled,
  // one per sampler, under rows [L]). `masks`: the samplers' token masks (null: none); after
  // Forward on a backend that does not apply them, logits() are unmasked and the masks are the
  // caller's to compute and apply (LlmEngine: GrammarMasks::ComputeRows, SampleNext's mask);
  // ForwardSample only runs on a backend that applies them (and fails when that backend never
  // computed them).
  void Prepare(const std::vector<ScheduledSeq>& step, std::vector<Sequence*>* samplers) {
    Build(step, &batch_, samplers);
  }
  Status Forward(StepMasks* masks = nullptr);
  Status ForwardSample(const std::vector<RowSampling>& rows, StepMasks* masks = nullptr);
  // [rows sampled this step, vocab]
  std::span<const float> logits() const { return {logits_.data(), logits_size_}; }
  size_t logits_capacity() const { return logits_.capacity(); }  // the largest step's, exactly
  const std::vector<int32_t>& ids() const { return ids_; }
  // Builds the flat batch (exposed for tests).
  void Build(const std::vector<ScheduledSeq>& step, StepBatch* b, std::vector<Sequence*>* samplers);

 private:
  Backend* backend_;
  int vocab_, block_size_;
  bool groups_;
  StepBatch batch_;
  GrowBuffer<float> logits_;
  size_t logits_size_ = 0;
  std::vector<int32_t> ids_;
  std::vector<int32_t> first_block_, num_tokens_, order_;  // Build's scratch
};

}  // namespace llmq
