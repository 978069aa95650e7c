// Backend: the seam between the engine and the device. It takes a whole step's flat batch in one
// call and owns the KV pool; nothing per token crosses it. Chosen once at start-up.
// Device failures (out of memory, a failed launch, a lost device) come back as a non-OK Status; the
// engine fails the requests of that step and keeps serving the others.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/core/step_profile.h"
#include "engine/sampling/sampler.h"

namespace llmq {

// A run of consecutive sequences of a step that share already-computed prefix blocks
// (engine/core/prefix_groups.h): sequences [first_seq, first_seq + num_seqs) all have the same
// block_tables[s][0, num_blocks), and every one of those blocks lies wholly before each member's
// first query row (its K/V are in the cache; none of this step's tokens go there).
struct PrefixGroup {
  int32_t first_seq = 0;
  int32_t num_seqs = 0;    // >= 2
  int32_t num_blocks = 0;  // >= 1
  bool operator==(const PrefixGroup&) const = default;
};

// Structured outputs (issue 24): the tokens each logits row of a step may take, computed by the
// engine (its grammar matchers) while the forward pass runs. A backend that overlaps them with its
// forward pass (applies_masks()) calls Compute() once, after it has started the forward pass and
// before it needs the masks, and applies them: a masked token's logit is -inf in the logits
// Forward writes, and ForwardSample never picks one. Other backends ignore the masks: the engine
// computes them after Forward (ModelRunner::Forward) and its sampler draws each row under its
// mask (SampleNext), never writing the row.
class StepMasks {
 public:
  virtual ~StepMasks() = default;
  // The rows' masks (the first call computes them; later calls return the same words):
  // [L, words_per_row()] uint32, bit t % 32 of word t / 32 set when the row's token t is allowed;
  // bits past the vocabulary clear; a row of an unconstrained sequence all ones (up to the
  // vocabulary).
  virtual const uint32_t* Compute() = 0;
  virtual bool computed() const = 0;
  virtual int words_per_row() const = 0;  // (vocab + 31) / 32
};

// One step: S sequences, T tokens (prefill chunks and decode tokens mixed), in sequence order.
// Decode sequences come first, those sharing prefix blocks next to each other.
struct StepBatch {
  std::vector<int32_t> token_ids;  // [T]
  std::vector<int32_t> positions;  // [T] position of each token within its sequence
  std::vector<int32_t>
      slot_mapping;  // [T] KV slot (block * block_size + offset) the token's K/V go to
  std::vector<int32_t>
      query_start;  // [S+1] tokens of seq s are rows [query_start[s], query_start[s+1])
  std::vector<int32_t>
      context_lens;  // [S] tokens in the cache for seq s once this step's are written
  std::vector<int32_t> block_tables;  // [S, max_blocks] row-major physical block ids, -1 padded
  int32_t max_blocks = 0;
  std::vector<int32_t> logits_rows;  // [L] rows whose next-token logits are wanted, ascending
  bool decode_only = false;          // every sequence contributes exactly one token (T == S)
  // Disjoint, in sequence order; a backend may read each group's shared blocks once per step
  // (the CPU backend's shared-prefix attention, the CUDA backend's cascade attention). Empty when
  // EngineOptions::shared_prefix_attention is off.
  std::vector<PrefixGroup> prefix_groups;
  // The logits rows' token masks; null when no row of the step is constrained.
  StepMasks* masks = nullptr;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_seqs() const { return static_cast<int>(context_lens.size()); }
  void Clear() {
    token_ids.clear();
    positions.clear();
    slot_mapping.clear();
    query_start.assign(1, 0);
    context_lens.clear();
    block_tables.clear();
    max_blocks = 0;
    logits_rows.clear();
    decode_only = false;
    prefix_groups.clear();
    masks = nullptr;
  }
};

// The most sequences and tokens one engine step runs (SchedulerOptions).
struct StepLimits {
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
};
// The CPU backend's (Backend::default_step_limits): vLLM's CPU defaults, a step's activations
// staying in the caches.
constexpr StepLimits kCpuStepLimits{256, 2048};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // (Re)creates the KV pool: `num_blocks` blocks of `block_size` tokens, for every layer.
  virtual Status AllocateKv(int num_blocks, int block_size) = 0;
  // Runs the model on `batch`; writes logits [L, vocab] (L = batch.logits_rows.size()) to `logits`.
  // On failure the K/V written for the batch's slots are unspecified.
  virtual Status Forward(const StepBatch& batch, float* logits) = 0;
  // True when ForwardSample picks the ids on the device, so that the logits need not cross to the
  // host. The engine then calls ForwardSample for the steps whose rows need nothing but
  // RowSampling (no logprobs, penalties or biases, no first token shared by n > 1 samples), and
  // Forward for the others.
  virtual bool samples_on_device() const { return false; }
  // Runs the model on `batch` and picks the next token of each logits row i:
  // ids[i] = SampleTokenWithDraw(row i's logits, rows[i]) within the backend's stated tolerance
  // (greedy: the same argmax rule).   rows, ids: [L]
  virtual Status ForwardSample(const StepBatch& batch, const RowSampling* rows, int32_t* ids) {
    return Status::Unsupported(name() + " does not sample on its device");
  }
  // True when Forward and ForwardSample apply a batch's StepMasks themselves (on the device, while
  // the forward pass runs). Otherwise the engine never samples a constrained step on the device.
  virtual bool applies_masks() const { return false; }
  // Copies the KV of whole blocks src[i] -> dst[i] in every layer (copy-on-write of shared blocks).
  virtual Status CopyBlocks(const std::vector<std::pair<int, int>>& src_dst) = 0;
  // Bytes of device memory the weights occupy.
  virtual uint64_t weight_bytes() const = 0;
  // Bytes the KV pool holds per token: K and V of every layer in the backend's element type,
  // 2 x layers x kv_heads x head_dim x bytes per element (ModelConfig::KvBytesPerToken).
  virtual int64_t kv_bytes_per_token() const = 0;
  // The KV pool's byte budget when the backend sizes it from its device: a GPU backend returns
  // total memory x gpu_memory_utilization - memory already in use (weights, workspaces) - the
  // activation reserve of its largest step (up to `max_tokens` tokens over `max_seqs` sequences,
  // a logits row each). nullopt: the configured engine.kv_cache_memory (the CPU backend). Called
  // once, before AllocateKv.
  virtual std::optional<int64_t> KvBudgetBytes(double gpu_memory_utilization, int max_tokens,
                                               int max_seqs) const {
    return std::nullopt;
  }
  // Host memory a step of up to `max_tokens` tokens over `max_seqs` sequences needs besides the
  // weights and the KV pool (activations, logits, scratch), for a backend whose pool is sized from
  // the host's memory (the CPU backend; PlanKvPool). 0: none (a GPU's reserve is in its budget).
  virtual int64_t StepWorkingBytes(int max_tokens, int max_seqs) const { return 0; }
  // The step limits an engine on this backend takes where its options leave them 0 (auto:
  // engine.max_num_seqs / max_num_batched_tokens absent; LlmEngine::Create). This default is the
  // CPU's; a GPU backend states its own.
  virtual StepLimits default_step_limits() const { return kCpuStepLimits; }
  // Where the forward pass's time goes is added to *p from now on (null: not timed); a backend
  // that does not split its forward pass ignores it.
  void set_profile(StepProfile* p) { step_profile_ = p; }

 protected:
  StepProfile* step_profile_ = nullptr;
};

}  // namespace llmq
