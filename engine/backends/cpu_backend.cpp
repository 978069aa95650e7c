#include "engine/backends/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq {
namespace {

// The matrices of a layer the backend packs.
constexpr const char* kLayerMatrices[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                          "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                          "mlp.down_proj.weight"};

// Grows v to n elements, exactly, without copying (the contents are rewritten every step) and
// without the old and new buffers alive at once.
template <class Vector>
void Grow(Vector& v, size_t n) {
  if (v.size() >= n) return;
  Vector().swap(v);
  v.resize(n);
}

}  // namespace

kernels::WeightType CpuBackend::ResolveWeightType(WeightDtype asked, const ModelConfig& cfg,
                                                  const Weights& w) {
  using kernels::WeightType;
  switch (asked) {
    case WeightDtype::kF32:
      return WeightType::kF32;
    case WeightDtype::kBf16:
      return WeightType::kBf16;
    case WeightDtype::kInt8:
      return WeightType::kInt8;
    case WeightDtype::kAuto:
      break;
  }
  std::vector<std::string> names = {cfg.tie_word_embeddings ? "model.embed_tokens.weight"
                                                            : "lm_head.weight"};
  for (int i = 0; i < cfg.num_layers; ++i)
    for (const char* s : kLayerMatrices) names.push_back(LayerTensorName(i, s));
  // BF16 matrices stay bf16; FP8 ones (dequantized at load: E4M3 times its scales) take bf16's
  // bytes too, the nearest CPU type to the checkpoint's own; any F32 or F16 matrix makes it f32.
  for (const std::string& name : names)
    if (const DType d = w.Get(name).dtype; d != DType::kBF16 && d != DType::kF8E4M3)
      return WeightType::kF32;
  return WeightType::kBf16;
}

uint64_t CpuBackend::WeightBytesFor(const ModelConfig& c, kernels::WeightType type) {
  using kernels::PackedWeight;
  const int H = c.hidden_size, I = c.intermediate_size;
  uint64_t layer = PackedWeight::BytesFor(c.q_dim() + 2 * c.kv_dim(), H, type) +
                   PackedWeight::BytesFor(H, c.q_dim(), type) +
                   PackedWeight::BytesFor(2 * I, H, type) + PackedWeight::BytesFor(H, I, type) +
                   2 * H * sizeof(float);
  if (c.qkv_bias) layer += (c.q_dim() + 2 * c.kv_dim()) * sizeof(float);
  if (c.qk_norm) layer += 2 * c.head_dim * sizeof(float);
  const uint64_t head = PackedWeight::BytesFor(c.vocab_size, H, type);
  const uint64_t embed = SharesHeadAsEmbedding(c, type)
                             ? 0
                             : PackedWeight::BytesFor(c.vocab_size, H, EmbeddingType(type));
  return layer * c.num_layers + head + embed + H * sizeof(float);  // + final norm
}

int64_t CpuBackend::WorkingBytesFor(const ModelConfig& c, int max_tokens, int max_seqs) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t row = 2 * H + (c.q_dim() + 2 * c.kv_dim()) + c.q_dim();  // Forward's, all rows
  const int64_t mlp_rows = std::min<int64_t>(max_tokens, kMlpRows);
  // Gemm's packed A (kernels/cpu/gemm.cpp): the largest [m, K] it packs, the attention block's
  // GEMMs over all rows, the MLP's over a slice.
  const int64_t packed_a = std::max(max_tokens * std::max<int64_t>(H, c.q_dim()), mlp_rows * I);
  const int64_t scores = int64_t{kernels::CpuThreads()} * kernels::kAttentionGroupRows *
                         (c.num_heads / c.num_kv_heads) *
                         c.max_position_embeddings;  // PagedAttention's, per thread
  return static_cast<int64_t>(sizeof(float)) * (max_tokens * row + mlp_rows * 3 * I + packed_a +
                                                2 * int64_t{max_seqs} * c.vocab_size + scores);
}

CpuBackend::CpuBackend(const ModelConfig& cfg, const Weights& w, kernels::WeightType type,
                       KvDtype kv)
    : cfg_(cfg),
      type_(type),
      kv_bf16_(kv == KvDtype::kBf16),
      weight_bytes_(WeightBytesFor(cfg, type)) {
  const int H = cfg.hidden_size;
  final_norm_ = w.ToF32("model.norm.weight");
  // Matrices are packed straight from the mapped file when stored as F32 or BF16 (no copy on the
  // way: a copy is as much new memory again, and first touches are the slow part of loading);
  // other dtypes are converted into an fp32 scratch first. Each matrix's mapped pages go once it
  // is packed (Weights::ReleasePages): the load's peak is the packed copy plus about one stacked
  // matrix of the file.
  std::vector<std::vector<float>> scratch;  // conversions, one per stacked matrix
  auto pack = [&](const std::vector<std::string>& names, const std::vector<int>& ns, int k,
                  kernels::WeightType as) {
    std::vector<const uint16_t*> bf16;
    for (const std::string& name : names)
      if (const uint16_t* p = w.Bf16InPlace(name)) bf16.push_back(p);
    kernels::PackedWeight packed;
    if (bf16.size() == names.size()) {
      packed = kernels::PackedWeight::PackStackedBf16(bf16, ns, k, as);
    } else {
      std::vector<const float*> f32;
      scratch.resize(names.size());
      for (size_t i = 0; i < names.size(); ++i) {
        const float* p = w.F32InPlace(names[i]);
        if (!p) {
          scratch[i] = w.ToF32(names[i]);
          p = scratch[i].data();
        }
        f32.push_back(p);
      }
      packed = kernels::PackedWeight::PackStacked(f32, ns, k, as);
      for (std::vector<float>& v : scratch) std::vector<float>().swap(v);
    }
    for (const std::string& name : names) w.ReleasePages(name);
    return packed;
  };
  const std::string head = cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  lm_head_ = pack({head}, {cfg.vocab_size}, H, type);
  if (!SharesHeadAsEmbedding(cfg, type))
    embed_ = pack({"model.embed_tokens.weight"}, {cfg.vocab_size}, H, EmbeddingType(type));
  layers_.resize(cfg.num_layers);
  for (int i = 0; i < cfg.num_layers; ++i) {
    auto get = [&](const char* s) { return w.ToF32(LayerTensorName(i, s)); };
    auto names = [&](std::initializer_list<const char*> ss) {
      std::vector<std::string> out;
      for (const char* s : ss) out.push_back(LayerTensorName(i, s));
      return out;
    };
    Layer& L = layers_[i];
    L.attn_norm = get("input_layernorm.weight");
    L.mlp_norm = get("post_attention_layernorm.weight");
    L.qkv = pack(
        names({"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}),
        {cfg.q_dim(), cfg.kv_dim(), cfg.kv_dim()}, H, type);
    if (cfg.qkv_bias) {
      L.qkv_bias = get("self_attn.q_proj.bias");
      for (const char* name : {"self_attn.k_proj.bias", "self_attn.v_proj.bias"}) {
        const std::vector<float> b = get(name);
        L.qkv_bias.insert(L.qkv_bias.end(), b.begin(), b.end());
      }
    }
    if (cfg.qk_norm) {
      L.q_norm = get("self_attn.q_norm.weight");
      L.k_norm = get("self_attn.k_norm.weight");
    }
    L.o = pack(names({"self_attn.o_proj.weight"}), {H}, cfg.q_dim(), type);
    L.gate_up = pack(names({"mlp.gate_proj.weight", "mlp.up_proj.weight"}),
                     {cfg.intermediate_size, cfg.intermediate_size}, H, type);
    L.down = pack(names({"mlp.down_proj.weight"}), {H}, cfg.intermediate_size, type);
  }
  // weight_bytes_ (from the config: llmq plan computes the same) is what was packed.
  uint64_t held = lm_head_.bytes() + embed_.bytes() + final_norm_.size() * sizeof(float);
  for (const Layer& L : layers_)
    held += L.qkv.bytes() + L.o.bytes() + L.gate_up.bytes() + L.down.bytes() +
            (L.attn_norm.size() + L.mlp_norm.size() + L.qkv_bias.size() + L.q_norm.size() +
             L.k_norm.size()) *
                sizeof(float);
  LLMQ_CHECK(held == weight_bytes_);

  // Rotary table, computed in double and rounded once.
  const std::vector<double> inv = cfg.RopeInvFreq();
  const int D = cfg.head_dim, half = D / 2;
  cos_sin_.resize(static_cast<size_t>(cfg.max_position_embeddings) * D);
  for (int p = 0; p < cfg.max_position_embeddings; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = p * inv[i];
      cos_sin_[static_cast<size_t>(p) * D + i] = static_cast<float>(std::cos(a));
      cos_sin_[static_cast<size_t>(p) * D + half + i] = static_cast<float>(std::sin(a));
    }
}

bool CpuBackend::KvBuffer::Reset(size_t n) {
  if (data) munmap(data, bytes);
  data = nullptr;
  bytes = 0;
  if (!n) return true;
  void* p =
      mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  data = static_cast<char*>(p);
  bytes = n;
  return true;
}

size_t CpuBackend::KvBlockBytes() const {
  return static_cast<size_t>(cfg_.kv_dim()) * block_size_ * KvElementBytes(kv_dtype());
}

size_t CpuBackend::KvTileBytes() const {
  return static_cast<size_t>(cfg_.head_dim) * block_size_ * KvElementBytes(kv_dtype());
}

Status CpuBackend::AllocateKv(int num_blocks, int block_size) {
  num_blocks_ = num_blocks;
  populated_blocks_ = 0;
  block_size_ = block_size;
  const size_t n = static_cast<size_t>(cfg_.num_layers) * num_blocks * KvBlockBytes();
  if (!k_cache_.Reset(n) || !v_cache_.Reset(n)) {
    k_cache_.Reset(0);
    v_cache_.Reset(0);
    num_blocks_ = 0;
    return Status::IoError("cannot map " + std::to_string(2 * n) + " bytes for the KV cache");
  }
  return Status::Ok();
}

Status CpuBackend::CopyBlocks(const std::vector<std::pair<int, int>>& src_dst) {
  const size_t tile = KvTileBytes();
  int32_t top = -1;  // the highest block written
  for (auto [s, d] : src_dst) top = std::max(top, d);
  PopulateKv(top);
  for (int l = 0; l < cfg_.num_layers; ++l)
    for (int h = 0; h < cfg_.num_kv_heads; ++h) {
      const size_t base = (static_cast<size_t>(l) * cfg_.num_kv_heads + h) * num_blocks_ * tile;
      for (auto [s, d] : src_dst)
        for (const KvBuffer* kv : {&k_cache_, &v_cache_})
          std::memcpy(kv->data + base + d * tile, kv->data + base + s * tile, tile);
    }
  return Status::Ok();
}

// The pool is mapped without backing; a page's first write is a page fault, and on a virtual
// machine each fault traps to the hypervisor (~3.5 s per GB of KV here, page by page). Asking the
// kernel to populate a step's new blocks in one call per layer costs about half. Blocks are taken
// lowest first (the block manager's free list is a stack that starts at block 0 and gets freed
// blocks back on top), so the highest block a step writes bounds the blocks ever used and this
// populates no page the pool would not have touched anyway (one range per layer and kv head: a
// head's tiles are a region of their own). Best effort: kernels before 5.14 refuse it
// (kernels::PopulateForWrite) and the writes fault the pages in as before. The regions are
// populated by the pool's threads (the kernel zeroes each page, and a VM's traps are per thread).
void CpuBackend::PopulateKv(int32_t top) {
  if (top < populated_blocks_ || populate_refused_) return;
  const size_t tile = KvTileBytes();
  const size_t page = 4096, from = populated_blocks_ * tile / page * page;
  const size_t to = static_cast<size_t>(top + 1) * tile;
  const int64_t regions = int64_t{cfg_.num_layers} * cfg_.num_kv_heads * 2;  // (layer, head, k|v)
  std::atomic<bool> refused{false};
  kernels::ParallelFor(regions, static_cast<double>(to - from) * kernels::kPopulateNsPerByte,
                       [&](int64_t r0, int64_t r1) {
                         for (int64_t r = r0; r < r1; ++r) {
                           const KvBuffer& kv = r % 2 ? v_cache_ : k_cache_;
                           char* region = kv.data + static_cast<size_t>(r / 2) * num_blocks_ * tile;
                           if (!kernels::PopulateForWrite(region + from, to - from))
                             refused.store(true, std::memory_order_relaxed);
                         }
                       });
  populate_refused_ = refused.load();
  populated_blocks_ = top + 1;
}

std::vector<bool> CpuBackend::ResidentKBlocksForTesting() const {
  // Block b is resident when its K tile of every kv head of layer 0 is.
  const size_t page = 4096, tile = KvTileBytes();
  const size_t bytes = static_cast<size_t>(cfg_.num_kv_heads) * num_blocks_ * tile;
  std::vector<unsigned char> pages((bytes + page - 1) / page);
  std::vector<bool> resident(num_blocks_, false);
  if (!k_cache_.data || mincore(k_cache_.data, bytes, pages.data()) != 0) return resident;
  for (int b = 0; b < num_blocks_; ++b) {
    bool all = true;
    for (int h = 0; h < cfg_.num_kv_heads; ++h)
      all = all && (pages[(static_cast<size_t>(h) * num_blocks_ + b) * tile / page] & 1);
    resident[b] = all;
  }
  return resident;
}

// The last layer's K and V of every row are in the cache by now; what the layer computes further
// (attention's output, the projections, the MLP, then the final norm) only the rows that sample
// need. Those rows' queries (qkv_'s first qd columns) and residual streams (x_) move to the
// front, in order (the rows ascend, so row i moves down or stays), with the batch's positions and
// each sequence's query rows for attention. Each row's arithmetic is its own (the kernels'
// contracts), so their logits are the bits a full last layer gives.
void CpuBackend::GatherLogitsRows(const StepBatch& b, int64_t qkv_w, int qd) {
  const int H = cfg_.hidden_size;
  const int64_t nl = static_cast<int64_t>(b.logits_rows.size());
  out_positions_.resize(nl);
  out_query_start_.assign(b.query_start.size(), 0);
  for (int64_t i = 0, s = 0; i < nl; ++i) {
    const int32_t row = b.logits_rows[i];
    while (b.query_start[s + 1] <= row) ++s;  // the row's sequence
    ++out_query_start_[s + 1];
    out_positions_[i] = b.positions[row];
    if (row == i) continue;
    std::memmove(&qkv_[i * qkv_w], &qkv_[row * qkv_w], qd * sizeof(float));
    std::memmove(&x_[i * H], &x_[static_cast<int64_t>(row) * H], H * sizeof(float));
  }
  for (size_t s = 1; s < out_query_start_.size(); ++s)
    out_query_start_[s] += out_query_start_[s - 1];
}

Status CpuBackend::Forward(const StepBatch& b, float* logits) {
  const int64_t T = b.num_tokens();
  const int H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t qkv_w = qd + 2 * kvd;
  for (int32_t p : b.positions)
    if (p < 0 || p >= cfg_.max_position_embeddings)
      return Status::InvalidArgument("position " + std::to_string(p) + " is outside the context");
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    if (b.logits_rows[i] >= T || b.logits_rows[i] < (i ? b.logits_rows[i - 1] + 1 : 0))
      return Status::InvalidArgument("logits rows must ascend within the batch's rows");
  Grow(x_, T * H);
  Grow(xn_, T * H);
  Grow(qkv_, T * qkv_w);
  Grow(attn_, T * qd);
  const int64_t mlp_rows = std::min<int64_t>(T, mlp_rows_);
  Grow(gu_, mlp_rows * 2 * I);
  Grow(act_, mlp_rows * I);

  int32_t top = -1;  // the highest block the step writes
  for (int32_t s : b.slot_mapping) top = std::max(top, s / block_size_);
  PopulateKv(top);
  const int64_t nl = static_cast<int64_t>(b.logits_rows.size());  // rows that sample
  const kernels::PackedWeight& embed = SharesHeadAsEmbedding(cfg_, type_) ? lm_head_ : embed_;
  for (int64_t r = 0; r < T; ++r) embed.Row(b.token_ids[r], x_.data() + r * H);
  kernels::AttentionBatch ab;
  ab.num_seqs = b.num_seqs();
  ab.query_start = b.query_start.data();
  ab.positions = b.positions.data();
  ab.block_tables = b.block_tables.data();
  ab.max_blocks = b.max_blocks;
  groups_.clear();
  for (const PrefixGroup& g : b.prefix_groups)
    groups_.push_back({g.first_seq, g.num_seqs, g.num_blocks});
  ab.groups = groups_.data();
  ab.num_groups = static_cast<int>(groups_.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const size_t layer_bytes = num_blocks_ * KvBlockBytes();
  // Profile (Backend::set_profile): the GEMMs by kind of step, and attention.
  double* gemm_s = step_profile_ ? (b.decode_only ? &step_profile_->decode_gemm_s
                                                  : &step_profile_->prefill_gemm_s)
                                 : nullptr;
  double* attention_s = step_profile_ ? &step_profile_->attention_s : nullptr;
  auto gemm = [&](const float* a, int64_t lda, int64_t m, const kernels::PackedWeight& w, float* c,
                  int64_t ldc) {
    ScopedTimer t(gemm_s);
    kernels::Gemm(a, lda, static_cast<int>(m), w, c, ldc);
  };

  for (int l = 0; l < cfg_.num_layers; ++l) {
    const Layer& L = layers_[l];
    char* k_layer = k_cache_.data + l * layer_bytes;
    char* v_layer = v_cache_.data + l * layer_bytes;
    kernels::PagedKv kv{nullptr, nullptr, block_size_, cfg_.num_kv_heads, D, num_blocks_};
    if (kv_bf16_) {
      kv.k16 = reinterpret_cast<uint16_t*>(k_layer);
      kv.v16 = reinterpret_cast<uint16_t*>(v_layer);
    } else {
      kv.k = reinterpret_cast<float*>(k_layer);
      kv.v = reinterpret_cast<float*>(v_layer);
    }
    // Attention block.
    kernels::RmsNorm(x_.data(), L.attn_norm.data(), T, H, cfg_.rms_norm_eps, xn_.data());
    gemm(xn_.data(), H, T, L.qkv, qkv_.data(), qkv_w);
    if (!L.qkv_bias.empty())
      kernels::AddBias(qkv_.data(), T, qkv_w, L.qkv_bias.data(), static_cast<int>(qkv_w));
    if (!L.q_norm.empty()) {
      kernels::HeadRmsNorm(qkv_.data(), T, qkv_w, cfg_.num_heads, D, L.q_norm.data(),
                           cfg_.rms_norm_eps);
      kernels::HeadRmsNorm(qkv_.data() + qd, T, qkv_w, cfg_.num_kv_heads, D, L.k_norm.data(),
                           cfg_.rms_norm_eps);
    }
    kernels::Rope(qkv_.data(), T, qkv_w, cfg_.num_heads, D, b.positions.data(), cos_sin_.data());
    kernels::Rope(qkv_.data() + qd, T, qkv_w, cfg_.num_kv_heads, D, b.positions.data(),
                  cos_sin_.data());
    kernels::AttentionBatch layer_ab = ab;
    int64_t rows = T;  // the rows the rest of the layer computes
    {
      ScopedTimer t(attention_s);
      kernels::WriteKv(kv, qkv_.data() + qd, qkv_.data() + qd + kvd, qkv_w, b.slot_mapping.data(),
                       T);
      if (l == cfg_.num_layers - 1 && nl < T) {
        GatherLogitsRows(b, qkv_w, qd);
        layer_ab.query_start = out_query_start_.data();
        layer_ab.positions = out_positions_.data();
        rows = nl;
      }
      kernels::PagedAttention(layer_ab, kv, qkv_.data(), qkv_w, cfg_.num_heads, scale,
                              attn_.data());
    }
    gemm(attn_.data(), qd, rows, L.o, xn_.data(), H);  // xn_: read by the QKV GEMM, free again
    kernels::AddInPlace(x_.data(), xn_.data(), rows * H);
    // MLP block, mlp_rows at a time; each slice's down projection lands on its own rows of xn_,
    // which its gate/up GEMM has read.
    kernels::RmsNorm(x_.data(), L.mlp_norm.data(), rows, H, cfg_.rms_norm_eps, xn_.data());
    for (int64_t r = 0; r < rows; r += mlp_rows) {
      const int64_t m = std::min(mlp_rows, rows - r);
      float* xn = xn_.data() + r * H;
      gemm(xn, H, m, L.gate_up, gu_.data(), 2 * I);
      kernels::SiluMul(gu_.data(), m, I, act_.data());
      gemm(act_.data(), I, m, L.down, xn, H);
    }
    kernels::AddInPlace(x_.data(), xn_.data(), rows * H);
  }
  // Final norm and LM head, for the rows that sample only: the last layer left them at the front
  // of x_ (when every row samples, they are where they were), normed into xn_.
  kernels::RmsNorm(x_.data(), final_norm_.data(), nl, H, cfg_.rms_norm_eps, xn_.data());
  gemm(xn_.data(), H, nl, lm_head_, logits, cfg_.vocab_size);
  return Status::Ok();
}

}  // namespace llmq
