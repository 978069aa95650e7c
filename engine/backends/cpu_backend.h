// CpuBackend: the reference backend and the fallback where no GPU is. fp32 arithmetic throughout:
// the projection and LM-head matrices are packed for the batch-invariant GEMM once, at
// construction, as fp32, bf16 or int8 (kernels::WeightType: widened to fp32 in registers, the
// contract of kernels/cpu/gemm.h); the embedding is packed too and read a row at a time
// (PackedWeight::Row), in bf16 for int8 weights (EmbeddingType), from the LM head itself when tied
// to it and of its type; norms and biases stay fp32. The KV cache holds fp32 or bf16 elements
// (engine.kv_dtype: bf16 values are rounded once, when written, and widened when read). Every op
// computes each row from its own inputs in a fixed order, so a sequence's logits do not depend on
// the rest of the batch nor on how its prompt was chunked, bit for bit. A step's prefix groups
// (StepBatch::prefix_groups) make decode read each group's shared blocks once per step
// (kernels::PagedAttention's shared-prefix attention), with bit-identical results.
#pragma once

#include <memory>
#include <vector>

#include "base/backend_kind.h"
#include "engine/backends/backend.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"

namespace llmq {

class CpuBackend : public Backend {
 public:
  // `type`: how the matrices are packed (ResolveWeightType turns engine.weight_dtype into one);
  // `kv`: the KV cache's elements (engine.kv_dtype; auto is f32 here).
  CpuBackend(const ModelConfig& cfg, const Weights& w,
             kernels::WeightType type = kernels::WeightType::kF32, KvDtype kv = KvDtype::kF32);
  // engine.weight_dtype for `w`'s checkpoint: auto is bf16 when every matrix the backend packs is
  // stored as BF16 (packing them as bf16 then changes no bit of any result), else f32.
  static kernels::WeightType ResolveWeightType(WeightDtype asked, const ModelConfig& cfg,
                                               const Weights& w);
  kernels::WeightType weight_type() const { return type_; }
  KvDtype kv_dtype() const { return kv_bf16_ ? KvDtype::kBf16 : KvDtype::kF32; }
  // Bytes of one cached K or V element for engine.kv_dtype `kv` (auto: f32).
  static int KvElementBytes(KvDtype kv) { return kv == KvDtype::kBf16 ? 2 : 4; }
  // The embedding's type for matrices of `type`: the same, but bf16 for int8 (a token's input row
  // quantized per row doubled int8's KL against fp32 on the family models: weight_dtype_test).
  static kernels::WeightType EmbeddingType(kernels::WeightType type) {
    return type == kernels::WeightType::kInt8 ? kernels::WeightType::kBf16 : type;
  }
  // Whether the embedding is read from the packed LM head (tied, and of the embedding's type).
  static bool SharesHeadAsEmbedding(const ModelConfig& cfg, kernels::WeightType type) {
    return cfg.tie_word_embeddings && EmbeddingType(type) == type;
  }
  std::string name() const override { return "cpu"; }
  Status AllocateKv(int num_blocks, int block_size) override;
  Status Forward(const StepBatch& batch, float* logits) override;
  Status CopyBlocks(const std::vector<std::pair<int, int>>& src_dst) override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  int64_t kv_bytes_per_token() const override {
    return cfg_.KvBytesPerToken(KvElementBytes(kv_dtype()));
  }
  int64_t StepWorkingBytes(int max_tokens, int max_seqs) const override {
    return WorkingBytesFor(cfg_, max_tokens, max_seqs);
  }
  // weight_bytes() of `cfg`'s model, from the config alone (llmq plan): the matrices packed as
  // `type` (the LM head too), the embedding at EmbeddingType(type) unless it is the LM head's rows
  // (SharesHeadAsEmbedding), the norms and biases in fp32.
  static uint64_t WeightBytesFor(const ModelConfig& cfg,
                                 kernels::WeightType type = kernels::WeightType::kF32);
  // StepWorkingBytes: the activations of max_tokens rows (the MLP's of at most kMlpRows), the
  // GEMMs' packed-A scratch, the logits of max_seqs rows (the runner's and the sampler's), and the
  // attention scores of every pool thread.
  static int64_t WorkingBytesFor(const ModelConfig& cfg, int max_tokens, int max_seqs);
  // Whether the first page of each block of layer 0's K cache is in memory (mincore), for tests
  // of what the pool touches.
  std::vector<bool> ResidentKBlocksForTesting() const;
  // The MLP runs over a step's rows kMlpRows at a time, so its [rows, 2I] and [rows, I]
  // activations (and the down projection's packed A) stay bounded while a prefill step holds
  // thousands of rows. GEMM rows are independent (kernels/cpu/gemm.h), so the slices give the same
  // bits as one pass.
  static constexpr int kMlpRows = 512;
  // Another slice height (tests: slice boundaries inside a step change no bit); 0: kMlpRows.
  void set_mlp_rows_for_testing(int rows) { mlp_rows_ = rows > 0 ? rows : kMlpRows; }

 private:
  struct Layer {
    std::vector<float> attn_norm;   // [H]
    std::vector<float> mlp_norm;    // [H]
    kernels::PackedWeight qkv;      // [q_dim + 2 kv_dim, H]  (q, k, v stacked)
    std::vector<float> qkv_bias;    // [q_dim + 2 kv_dim] (q, k, v stacked); empty without biases
    std::vector<float> q_norm;      // [head_dim]; empty without q/k norm
    std::vector<float> k_norm;      // [head_dim]; empty without q/k norm
    kernels::PackedWeight o;        // [H, q_dim]
    kernels::PackedWeight gate_up;  // [2 I, H]  (gate, up stacked)
    kernels::PackedWeight down;     // [H, I]
  };
  ModelConfig cfg_;
  kernels::WeightType type_ = kernels::WeightType::kF32;
  bool kv_bf16_ = false;           // engine.kv_dtype bf16: k_cache_ and v_cache_ hold uint16_t
  kernels::PackedWeight embed_;    // [V, H]; empty when SharesHeadAsEmbedding (lm_head_'s rows)
  std::vector<float> final_norm_;  // [H]
  kernels::PackedWeight lm_head_;  // [V, H]
  std::vector<Layer> layers_;
  std::vector<float> cos_sin_;  // [max_pos, head_dim]: cos then sin of each position
  uint64_t weight_bytes_ = 0;

  // An anonymous mapping: zero pages until touched, so a large pool costs nothing up front.
  struct KvBuffer {
    char* data = nullptr;
    size_t bytes = 0;
    bool Reset(size_t n);  // false when the mapping fails (then empty)
    ~KvBuffer() { Reset(0); }
  };
  size_t KvBlockBytes() const;  // one layer's K (or V) of one block, all kv heads
  size_t KvTileBytes() const;   // the same of one kv head (one tile of kernels::PagedKv)
  int block_size_ = 16, num_blocks_ = 0;
  // Blocks [0, populated_blocks_) of every layer's K and V have their pages in memory: Forward
  // and CopyBlocks populate up to the highest block they write (PopulateKv) before writing.
  int populated_blocks_ = 0;
  bool populate_refused_ = false;  // the kernel lacks MADV_POPULATE_WRITE: writes fault pages in
  void PopulateKv(int32_t top_block);
  // Per layer, [num_kv_heads][num_blocks_] tiles: see kernels::PagedKv for the layout.
  KvBuffer k_cache_, v_cache_;

  // Activations, grown on demand and reused across steps: [T, .] except gu_ and act_ (a slice of
  // at most mlp_rows_ rows). The projections' outputs land in xn_ (dead once the GEMM that read it
  // ran) before they are added to x_.
  // 64-byte aligned (the kernels' vector rows start on cache lines; large ones are mapped on their
  // own and given back to the system when they grow).
  using Activations = std::vector<float, kernels::AlignedAllocator<float, 64>>;
  Activations x_, xn_, qkv_, attn_, gu_, act_;
  int mlp_rows_ = kMlpRows;
  std::vector<kernels::SharedPrefix> groups_;  // the step's prefix groups
  // The last layer past its K/V: only the rows that sample (GatherLogitsRows).
  std::vector<int32_t> out_query_start_, out_positions_;
  void GatherLogitsRows(const StepBatch& b, int64_t qkv_w, int qd);
};

}  // namespace llmq
