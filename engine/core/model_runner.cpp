#include "engine/core/model_runner.h"

#include <algorithm>
#include <string>

#include "engine/core/prefix_groups.h"

namespace llmq {

void ModelRunner::Build(const std::vector<ScheduledSeq>& step, StepBatch* b,
                        std::vector<Sequence*>* samplers) {
  b->Clear();
  samplers->clear();
  first_block_.clear();
  num_tokens_.clear();
  for (const ScheduledSeq& s : step) {
    b->max_blocks = std::max<int32_t>(b->max_blocks, s.seq->block_table.size());
    first_block_.push_back(s.seq->block_table.empty() ? -1 : s.seq->block_table[0]);
    num_tokens_.push_back(s.num_tokens);
  }
  OrderBySharedFirstBlock(first_block_, num_tokens_, &order_);
  b->decode_only = !step.empty();
  for (int32_t k : order_) {
    const ScheduledSeq& s = step[k];
    const Sequence& q = *s.seq;
    b->decode_only = b->decode_only && s.num_tokens == 1;
    for (int i = 0; i < s.num_tokens; ++i) {
      const int pos = q.num_computed + i;
      b->token_ids.push_back(q.tokens[pos]);
      b->positions.push_back(pos);
      b->slot_mapping.push_back(q.block_table[pos / block_size_] * block_size_ + pos % block_size_);
    }
    b->query_start.push_back(b->num_tokens());
    b->context_lens.push_back(q.num_computed + s.num_tokens);
    b->block_tables.insert(b->block_tables.end(), q.block_table.begin(), q.block_table.end());
    b->block_tables.resize(b->block_tables.size() + b->max_blocks - q.block_table.size(), -1);
    if (q.num_computed + s.num_tokens == static_cast<int>(q.tokens.size())) {
      b->logits_rows.push_back(b->num_tokens() - 1);
      samplers->push_back(s.seq);
    }
  }
  if (groups_) DetectPrefixGroups(block_size_, b);
}

Status ModelRunner::Forward(StepMasks* masks) {
  ids_.clear();
  // Grown to the rows asked for, exactly, neither cleared nor re-faulted (GrowBuffer): the
  // backend writes every row.
  logits_size_ = batch_.logits_rows.size() * static_cast<size_t>(vocab_);
  logits_.Reserve(logits_size_);
  batch_.masks = masks;
  // A backend that does not apply the masks leaves them to the caller, whose sampler applies them
  // (SampleNext's mask) and then never reads the logits of refused tokens.
  return backend_->Forward(batch_, logits_.data());
}

Status ModelRunner::ForwardSample(const std::vector<RowSampling>& rows, StepMasks* masks) {
  if (masks != nullptr && !backend_->applies_masks())
    return Status::Internal("ForwardSample: " + backend_->name() + " does not apply token masks");
  if (rows.size() != batch_.logits_rows.size())
    return Status::Internal("ForwardSample: " + std::to_string(rows.size()) + " rows for " +
                            std::to_string(batch_.logits_rows.size()) + " samplers");
  logits_size_ = 0;
  ids_.assign(rows.size(), 0);
  batch_.masks = masks;
  LLMQ_RETURN_IF_ERROR(backend_->ForwardSample(batch_, rows.data(), ids_.data()));
  // Masks never computed were never applied (and their forced tokens are unknown): the ids were
  // drawn without the grammar.
  if (masks != nullptr && !masks->computed())
    return Status::Internal("ForwardSample: " + backend_->name() +
                            " did not compute the step's token masks");
  return Status::Ok();
}

}  // namespace llmq
