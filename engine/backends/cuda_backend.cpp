// CudaBackend: the forward of engine/backends/cpu_backend.cpp on the device. One stream; per step
// one host-to-device copy of the batch metadata, the kernels and cuBLAS calls, and one copy back of
// the logits (Forward) or the ids (ForwardArgmax). A constrained step's token masks (StepBatch::
// masks) are computed on the host while the device runs the forward pass, then copied and applied
// to the logits rows on the device (ApplyMasks), eagerly or after a graph's replay.
//
// Per layer (x: the float residual stream [T, H]; T = the element type, bf16 or float):
//   xn = RmsNorm(x)                     [T, H] T
//   qkv = xn · Wqkvᵀ                    [T, q_dim + 2 kv_dim] float   (one GEMM for q, k, v)
//   bias, q/k norms, rotary; k, v -> their paged slots; q stays in qkv
//   attn = PagedAttention(q, cache)     [T, q_dim] T
//   x += attn · Woᵀ                     (the GEMM accumulates: the residual add costs nothing)
//   xn = RmsNorm(x);  gu = xn · Wguᵀ    [T, 2I] float                 (one GEMM for gate, up)
//   act = silu(gate) * up               [T, I] T
//   x += act · Wdownᵀ
#include "engine/backends/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>

#include "engine/backends/cuda_step_plan.h"
#include "engine/backends/graph_buckets.h"
#include "engine/backends/weight_staging.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_fp8.h"
#include "kernels/cuda/gemm_tuned.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sample.h"

namespace llmq {
namespace {

namespace kc = kernels::cuda;
using kc::bf16;

// An error that leaves the CUDA context unusable: every later call would fail too. The process
// ends with the message (systemd restarts it; the queue re-runs the step's requests).
bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

Status CudaError(const char* call, const char* file, int line, cudaError_t e) {
  const std::string msg = std::string(call) + " at " + file + ":" + std::to_string(line) + ": " +
                          cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (IsSticky(e)) {
    std::fprintf(stderr, "llmq: the CUDA device failed and cannot be used further: %s\n",
                 msg.c_str());
    std::abort();
  }
  return Status::Internal(msg);
}

Status CublasError(const char* call, const char* file, int line, cublasStatus_t s) {
  const kc::CublasApi* api = kc::Cublas();
  const std::string name =
      api ? std::string(api->status_name(s)) + " (" + api->status_string(s) + ")"
          : "status " + std::to_string(static_cast<int>(s));
  return Status::Internal(std::string(call) + " at " + file + ":" + std::to_string(line) + ": " +
                          name);
}

#define LLMQ_CUDA_TRY(call)                                                 \
  do {                                                                      \
    const cudaError_t e_ = (call);                                          \
    if (e_ != cudaSuccess) return CudaError(#call, __FILE__, __LINE__, e_); \
  } while (0)
#define LLMQ_CUBLAS_TRY(call)                                                           \
  do {                                                                                  \
    const cublasStatus_t s_ = (call);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) return CublasError(#call, __FILE__, __LINE__, s_); \
  } while (0)

// One device allocation, grown (never shrunk) by Reserve.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(o.p), bytes(o.bytes) {
    o.p = nullptr;
    o.bytes = 0;
  }
  ~DeviceBuffer() { cudaFree(p); }
  Status Reserve(size_t want) {
    if (want <= bytes) return Status::Ok();
    cudaFree(p);
    p = nullptr;
    bytes = 0;
    LLMQ_CUDA_TRY(cudaMalloc(&p, want));
    bytes = want;
    return Status::Ok();
  }
  template <class U>
  U* as() const {
    return static_cast<U*>(p);
  }
};

// Two pinned host buffers that take turns: Next waits until the copy last issued from the buffer
// it returns has finished; Issue copies the filled bytes to the device on the stream and marks the
// buffer busy until then. Drain waits for every copy (the host may then drop what it staged from).
// Where pinned memory is refused (a container's limits), the buffers are ordinary memory and each
// copy completes before Issue returns: slower, but the model still loads.
class PinnedStager {
 public:
  static constexpr size_t kBytes = size_t{64} << 20;  // each; 2 x 64 MiB pinned while loading
  ~PinnedStager() { Free(); }
  Status Init(cudaStream_t stream) {
    stream_ = stream;
    for (Slot& s : slots_) {
      if (!s.host && cudaMallocHost(&s.host, kBytes) != cudaSuccess) {
        cudaGetLastError();  // not sticky: the fallback below
        s.host = std::malloc(kBytes);
        s.pageable = true;
        if (!s.host) return Status::Internal("weight staging: no host memory for 64 MiB");
      }
      if (!s.done) LLMQ_CUDA_TRY(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    }
    return Status::Ok();
  }
  Status Next(void** host) {
    Slot& s = slots_[next_];
    if (s.busy) LLMQ_CUDA_TRY(cudaEventSynchronize(s.done));
    s.busy = false;
    *host = s.host;
    return Status::Ok();
  }
  Status Issue(void* device, size_t bytes) {
    Slot& s = slots_[next_];
    next_ ^= 1;
    if (s.pageable) {  // in stream order, and done on return: the buffer is free again
      LLMQ_CUDA_TRY(cudaMemcpyAsync(device, s.host, bytes, cudaMemcpyHostToDevice, stream_));
      LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));
      return Status::Ok();
    }
    LLMQ_CUDA_TRY(cudaMemcpyAsync(device, s.host, bytes, cudaMemcpyHostToDevice, stream_));
    LLMQ_CUDA_TRY(cudaEventRecord(s.done, stream_));
    s.busy = true;
    return Status::Ok();
  }
  Status Drain() {
    for (Slot& s : slots_)
      if (s.busy) LLMQ_CUDA_TRY(cudaEventSynchronize(s.done));
    for (Slot& s : slots_) s.busy = false;
    return Status::Ok();
  }
  void Free() {
    for (Slot& s : slots_) {
      if (s.busy) cudaEventSynchronize(s.done);
      if (s.host && s.pageable) std::free(s.host);
      if (s.host && !s.pageable) cudaFreeHost(s.host);
      if (s.done) cudaEventDestroy(s.done);
      s = Slot{};
    }
  }

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool busy = false;
    bool pageable = false;  // cudaMallocHost refused: std::malloc'd
  };
  Slot slots_[2];
  int next_ = 0;
  cudaStream_t stream_ = nullptr;
};

// One decoder layer's weights on the device.
// With FP8 projections (engine.precision fp8) qkv, o, gate_up and down hold fp8 values and their
// *_s buffers one float scale per row (output channel; kernels/cuda/fp8.h); else the *_s are empty.
struct Layer {
  DeviceBuffer attn_norm, mlp_norm;  // [H] float
  DeviceBuffer qkv, qkv_s;           // [q_dim + 2 kv_dim, H] T or fp8; [q_dim + 2 kv_dim] float
  DeviceBuffer qkv_bias;             // [q_dim + 2 kv_dim] float; empty without biases
  DeviceBuffer q_norm, k_norm;       // [head_dim] float; empty without q/k norms
  DeviceBuffer o, o_s;               // [H, q_dim] T or fp8; [H] float
  DeviceBuffer gate_up, gate_up_s;   // [2I, H] T or fp8; [2I] float
  DeviceBuffer down, down_s;         // [H, I] T or fp8; [H] float
};

// A prepared step as the kernels see it: device pointers into the step's metadata and the
// launches' arguments (CudaBackendImpl::Prepare fills it, Enqueue launches it).
struct StepLaunch {
  int nt = 0, L = 0;  // tokens, logits rows
  const int32_t *ids = nullptr, *pos = nullptr, *slots = nullptr, *rows = nullptr;  // [T], [L]
  kc::AttentionArgs aa;                  // the per-row kernel's rows
  std::vector<kc::PrefillChunk> chunks;  // chunks through the matrix-product attention
  std::vector<kc::CascadeGroup> groups;  // cascade groups' shared halves
};

template <class T>
class CudaBackendImpl final : public CudaBackend {
 public:
  // fp8: the projections' weights in FP8 (T must be bf16; the device's capability is checked by
  // MakeAny).
  CudaBackendImpl(const ModelConfig& cfg, bool fp8) : cfg_(cfg), fp8_(fp8) {}
  ~CudaBackendImpl() override {
    for (auto& [key, g] : graphs_cache_)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    if (cublas_) kc::Cublas()->destroy(cublas_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (cudaEvent_t e : step_span_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    if (host_meta_) cudaFreeHost(host_meta_);
    if (host_masks_) cudaFreeHost(host_masks_);
  }

  std::string name() const override { return "cuda"; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  int64_t kv_bytes_per_token() const override { return cfg_.KvBytesPerToken(sizeof(T)); }

  // total x utilization - what is in use now (weights, the CUDA context, cuBLAS) - the reserve of
  // the engine's largest step (ActivationReserve).
  std::optional<int64_t> KvBudgetBytes(double gpu_memory_utilization, int max_tokens,
                                       int max_seqs) const override {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return int64_t{0};
    const double budget = static_cast<double>(total_b) * gpu_memory_utilization -
                          static_cast<double>(total_b - free_b) -
                          static_cast<double>(ActivationReserve(max_tokens, max_seqs));
    return static_cast<int64_t>(std::max(0.0, budget));
  }
  std::string device_name() const override { return device_name_; }
  int64_t graph_captures() const override { return graph_captures_; }
  int64_t graph_replays() const override { return graph_replays_; }
  std::string graph_error() const override { return graph_error_; }

  void SetTuning(const CudaTuning& t) override {
    attention_variant_ = t.attention_variant;
    min_split_keys_ = t.min_split_keys;
    prefill_gemm_min_rows_ = t.prefill_gemm_min_rows;
    prefill_fused_ = t.prefill_fused;
    gemm_tuned_ = t.gemm_tuned && std::is_same_v<T, bf16> && !fp8_;
    cascade_ = t.cascade;
    graphs_ = t.graphs && graph_error_.empty();  // a refused capture is not retried
    cascade_min_keys_ = t.cascade_min_keys;
    profile_ = t.profile;
    pdl_ = t.pdl && sm_major_ >= 9;
  }

  std::string TakeProfile(int steps, std::map<std::string, double>* ms) override {
    static const char* kNames[kNumPhases] = {"embed",     "rmsnorm", "qkv gemm",     "qkv rope+kv",
                                             "attention", "o gemm",  "gate_up gemm", "silu*up",
                                             "down gemm", "lm head", "token mask",   "sample+copy"};
    double total = 0;
    for (double ms : phase_ms_) total += ms;
    std::string out;
    char line[96];
    for (int p = 0; p < kNumPhases; ++p) {
      if (phase_ms_[p] <= 0) continue;
      std::snprintf(line, sizeof line, "  %-14s %9.3f ms %5.1f%%\n", kNames[p],
                    phase_ms_[p] / steps, 100 * phase_ms_[p] / total);
      if (ms) (*ms)[kNames[p]] = phase_ms_[p] / steps;
      out += line;
      phase_ms_[p] = 0;
    }
    return out;
  }

  Status Init(int device) {
    LLMQ_CUDA_TRY(cudaSetDevice(device));
    cudaDeviceProp prop{};
    LLMQ_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    device_name_ = prop.name;
    num_sms_ = prop.multiProcessorCount;
    sm_major_ = prop.major;
    LLMQ_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (Status st = kc::LoadCublas(); !st.ok())
      return Status::Unsupported("cuBLAS: " + st.message());
    const kc::CublasApi* api = kc::Cublas();
    LLMQ_CUBLAS_TRY(api->create(&cublas_));
    LLMQ_CUBLAS_TRY(api->set_stream(cublas_, stream_));
    // A workspace of our own (set after the stream, which resets it): cuBLAS then allocates
    // nothing per call, so neither a step nor a CUDA graph's capture grows device memory.
    LLMQ_RETURN_IF_ERROR(blas_ws_.Reserve(kCublasWorkspace));
    LLMQ_CUBLAS_TRY(api->set_workspace(cublas_, blas_ws_.p, kCublasWorkspace));
    if (fp8_) LLMQ_RETURN_IF_ERROR(fp8_gemm_.Init(blas_ws_.p, kCublasWorkspace));
    // Before any step is captured in a graph. Where it fails only the deep attention variant
    // (a benchmark's choice) cannot run; the error is not left for a later launch's check.
    if (kc::PrepareAttention() != cudaSuccess) (void)cudaGetLastError();
    return Status::Ok();
  }

  // Weights from a checkpoint, uploaded once through two pinned staging buffers: the CPU pool
  // fills one from the mapping (engine/backends/weight_staging.h: bf16 into bf16 as it lies,
  // others converted) while the other's copy to the device runs. Each tensor's mapped pages are
  // dropped once staged, so the host holds about two staging buffers, not the checkpoint.
  // Projections under FP8 precision are staged as float and quantized per row on the device (an
  // FP8 checkpoint's weights arrive dequantized; a per-channel one quantizes back to its own
  // values).
  Status Upload(const Weights& w) {
    LLMQ_RETURN_IF_ERROR(stager_.Init(stream_));
    constexpr StageType kT = std::is_same_v<T, float> ? StageType::kF32 : StageType::kBf16;
    auto put = [&](std::initializer_list<std::string> names, StageType type, DeviceBuffer* b) {
      LLMQ_RETURN_IF_ERROR(Stage(w, names, type, b));
      weight_bytes_ += b->bytes;
      return Status::Ok();
    };
    // A projection's stacked weights of `rows` output channels: T, or FP8 values and scales.
    auto proj = [&](std::initializer_list<std::string> names, int64_t rows, DeviceBuffer* b,
                    DeviceBuffer* bs) -> Status {
      if (!fp8_) return put(names, kT, b);
      DeviceBuffer f;  // float, freed once Quantize has waited for the stream
      LLMQ_RETURN_IF_ERROR(Stage(w, names, StageType::kF32, &f));
      const int64_t n = static_cast<int64_t>(f.bytes / sizeof(float));
      return Quantize(f.as<float>(), rows, n / rows, b, bs);
    };
    LLMQ_RETURN_IF_ERROR(put({"model.embed_tokens.weight"}, kT, &embed_));
    LLMQ_RETURN_IF_ERROR(put({"model.norm.weight"}, StageType::kF32, &final_norm_));
    if (!cfg_.tie_word_embeddings) LLMQ_RETURN_IF_ERROR(put({"lm_head.weight"}, kT, &lm_head_own_));
    layers_.resize(cfg_.num_layers);
    for (int i = 0; i < cfg_.num_layers; ++i) {
      auto n = [&](const char* s) { return LayerTensorName(i, s); };
      Layer& L = layers_[i];
      LLMQ_RETURN_IF_ERROR(put({n("input_layernorm.weight")}, StageType::kF32, &L.attn_norm));
      LLMQ_RETURN_IF_ERROR(
          put({n("post_attention_layernorm.weight")}, StageType::kF32, &L.mlp_norm));
      // [q_dim + 2 kv_dim, H]: q, k, v stacked row-wise, so one GEMM makes the three.
      LLMQ_RETURN_IF_ERROR(proj({n("self_attn.q_proj.weight"), n("self_attn.k_proj.weight"),
                                 n("self_attn.v_proj.weight")},
                                cfg_.q_dim() + 2 * cfg_.kv_dim(), &L.qkv, &L.qkv_s));
      if (cfg_.qkv_bias)
        LLMQ_RETURN_IF_ERROR(put(
            {n("self_attn.q_proj.bias"), n("self_attn.k_proj.bias"), n("self_attn.v_proj.bias")},
            StageType::kF32, &L.qkv_bias));
      if (cfg_.qk_norm) {
        LLMQ_RETURN_IF_ERROR(put({n("self_attn.q_norm.weight")}, StageType::kF32, &L.q_norm));
        LLMQ_RETURN_IF_ERROR(put({n("self_attn.k_norm.weight")}, StageType::kF32, &L.k_norm));
      }
      LLMQ_RETURN_IF_ERROR(proj({n("self_attn.o_proj.weight")}, cfg_.hidden_size, &L.o, &L.o_s));
      LLMQ_RETURN_IF_ERROR(proj({n("mlp.gate_proj.weight"), n("mlp.up_proj.weight")},
                                2 * int64_t{cfg_.intermediate_size}, &L.gate_up, &L.gate_up_s));
      LLMQ_RETURN_IF_ERROR(proj({n("mlp.down_proj.weight")}, cfg_.hidden_size, &L.down, &L.down_s));
    }
    LLMQ_RETURN_IF_ERROR(stager_.Drain());
    stager_.Free();
    return Finish();
  }

  // Random weights made on the device (benchmarks).
  Status Random(uint64_t seed) {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
    const int64_t qkv_rows = cfg_.q_dim() + 2 * cfg_.kv_dim();
    auto rnd = [&](int64_t n, float scale, DeviceBuffer* b) -> Status {
      LLMQ_RETURN_IF_ERROR(b->Reserve(n * sizeof(T)));
      weight_bytes_ += n * sizeof(T);
      LLMQ_CUDA_TRY(kc::FillUniform<T>(b->as<T>(), n, scale, seed++, stream_));
      return Status::Ok();
    };
    // A projection of `rows` output channels: T, or made in T and quantized (fp8_).
    auto rnd_proj = [&](int64_t rows, int64_t cols, float scale, DeviceBuffer* b,
                        DeviceBuffer* bs) -> Status {
      if (!fp8_) return rnd(rows * cols, scale, b);
      DeviceBuffer made;
      LLMQ_RETURN_IF_ERROR(rnd(rows * cols, scale, &made));
      weight_bytes_ -= rows * cols * sizeof(T);
      return Quantize(made.as<T>(), rows, cols, b, bs);
    };
    auto ones = [&](int64_t n, DeviceBuffer* b) -> Status {
      LLMQ_RETURN_IF_ERROR(b->Reserve(n * sizeof(float)));
      weight_bytes_ += n * sizeof(float);
      LLMQ_CUDA_TRY(kc::FillConstant<float>(b->as<float>(), n, 1.f, stream_));
      return Status::Ok();
    };
    const float sh = 1.f / std::sqrt(static_cast<float>(H));
    LLMQ_RETURN_IF_ERROR(rnd(V * H, 1.f, &embed_));
    LLMQ_RETURN_IF_ERROR(ones(H, &final_norm_));
    if (!cfg_.tie_word_embeddings) LLMQ_RETURN_IF_ERROR(rnd(V * H, sh, &lm_head_own_));
    layers_.resize(cfg_.num_layers);
    for (Layer& L : layers_) {
      LLMQ_RETURN_IF_ERROR(ones(H, &L.attn_norm));
      LLMQ_RETURN_IF_ERROR(ones(H, &L.mlp_norm));
      LLMQ_RETURN_IF_ERROR(rnd_proj(qkv_rows, H, sh, &L.qkv, &L.qkv_s));
      if (cfg_.qkv_bias) {
        LLMQ_RETURN_IF_ERROR(L.qkv_bias.Reserve(qkv_rows * sizeof(float)));
        LLMQ_CUDA_TRY(
            kc::FillUniform<float>(L.qkv_bias.as<float>(), qkv_rows, 0.1f, seed++, stream_));
      }
      if (cfg_.qk_norm) {
        LLMQ_RETURN_IF_ERROR(ones(cfg_.head_dim, &L.q_norm));
        LLMQ_RETURN_IF_ERROR(ones(cfg_.head_dim, &L.k_norm));
      }
      LLMQ_RETURN_IF_ERROR(
          rnd_proj(H, cfg_.q_dim(), 1.f / std::sqrt(float(cfg_.q_dim())), &L.o, &L.o_s));
      LLMQ_RETURN_IF_ERROR(rnd_proj(2 * I, H, sh, &L.gate_up, &L.gate_up_s));
      LLMQ_RETURN_IF_ERROR(rnd_proj(H, I, 1.f / std::sqrt(float(I)), &L.down, &L.down_s));
    }
    return Finish();
  }

  Status MemoryInfo(uint64_t* free_bytes, uint64_t* total_bytes) const override {
    size_t f = 0, t = 0;
    LLMQ_CUDA_TRY(cudaMemGetInfo(&f, &t));
    *free_bytes = f;
    *total_bytes = t;
    return Status::Ok();
  }

  Status AllocateKv(int num_blocks, int block_size) override {
    cache_.num_blocks = num_blocks;
    cache_.block_size = block_size;
    cache_.kv_heads = cfg_.num_kv_heads;
    cache_.head_dim = cfg_.head_dim;
    const size_t bytes = static_cast<size_t>(cfg_.num_layers) * cache_.LayerElems() * sizeof(T);
    // Released first, so that a smaller pool can replace a larger one on a full device.
    LLMQ_RETURN_IF_ERROR(Release(&k_));
    LLMQ_RETURN_IF_ERROR(Release(&v_));
    LLMQ_RETURN_IF_ERROR(k_.Reserve(bytes));
    LLMQ_RETURN_IF_ERROR(v_.Reserve(bytes));
    cache_.k = k_.as<T>();
    cache_.v = v_.as<T>();
    return Status::Ok();
  }

  Status CopyBlocks(const std::vector<std::pair<int, int>>& src_dst) override {
    if (src_dst.empty()) return Status::Ok();
    std::vector<int32_t> flat;
    flat.reserve(2 * src_dst.size());
    for (auto [s, d] : src_dst) {
      flat.push_back(s);
      flat.push_back(d);
    }
    LLMQ_RETURN_IF_ERROR(pairs_.Reserve(flat.size() * sizeof(int32_t)));
    LLMQ_CUDA_TRY(cudaMemcpyAsync(pairs_.p, flat.data(), flat.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    LLMQ_CUDA_TRY(kc::CopyKvBlocks<T>(cache_, cfg_.num_layers, pairs_.as<int32_t>(),
                                      static_cast<int>(src_dst.size()), stream_));
    LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status Forward(const StepBatch& b, float* logits) override {
    BeginStepSpan();
    LLMQ_RETURN_IF_ERROR(ReserveMasks(b));
    LLMQ_RETURN_IF_ERROR(Run(b));
    LLMQ_RETURN_IF_ERROR(ApplyMasks(b));
    Mark(kSample);
    return Deliver(logits, logits_.p,
                   b.logits_rows.size() * static_cast<size_t>(cfg_.vocab_size) * sizeof(float));
  }

  bool samples_on_device() const override { return true; }
  bool applies_masks() const override { return true; }

  Status ForwardSample(const StepBatch& b, const RowSampling* rows, int32_t* ids) override {
    return PickIds(b, rows, ids);
  }

  Status ForwardArgmax(const StepBatch& b, int32_t* ids) override {
    return PickIds(b, nullptr, ids);
  }

 private:
  static Status Release(DeviceBuffer* b) {
    LLMQ_CUDA_TRY(cudaFree(b->p));
    b->p = nullptr;
    b->bytes = 0;
    return Status::Ok();
  }

  // `names` stacked, as `type`, into b (Upload; b holds exactly that many bytes after): staged
  // 64 MiB at a time on the stream, each tensor's mapped pages dropped once staged. An FP8
  // checkpoint's tensor (one with a scale) is dequantized first.
  Status Stage(const Weights& w, std::initializer_list<std::string> names, StageType type,
               DeviceBuffer* b) {
    std::vector<StagedPart> parts;
    std::vector<std::vector<float>> dequantized;  // keeps ToF32's floats alive
    dequantized.reserve(names.size());
    for (const std::string& n : names) {
      const TensorView& t = w.Get(n);
      if (t.scale) {
        dequantized.push_back(w.ToF32(n));
        parts.push_back({DType::kF32, dequantized.back().data(), t.numel()});
      } else {
        parts.push_back({t.dtype, t.data, t.numel()});
      }
    }
    const size_t es = type == StageType::kF32 ? sizeof(float) : sizeof(uint16_t);
    const int64_t total = StagedNumel(parts), chunk = PinnedStager::kBytes / es;
    LLMQ_RETURN_IF_ERROR(b->Reserve(total * es));
    for (int64_t at = 0; at < total; at += chunk) {
      const int64_t n = std::min(chunk, total - at);
      void* host = nullptr;
      LLMQ_RETURN_IF_ERROR(stager_.Next(&host));
      FillStaged(parts, type, at, n, host);
      LLMQ_RETURN_IF_ERROR(stager_.Issue(static_cast<uint8_t*>(b->p) + at * es, n * es));
    }
    for (const std::string& n : names) w.ReleasePages(n);
    return Status::Ok();
  }
  // w, ws = the FP8 values and per-row scales of src [rows, cols] (kernels/cuda/fp8.h); waits for
  // the stream, so that the caller may free src.
  template <class U>
  Status Quantize(const U* src, int64_t rows, int64_t cols, DeviceBuffer* w, DeviceBuffer* ws) {
    LLMQ_RETURN_IF_ERROR(w->Reserve(rows * cols));
    LLMQ_RETURN_IF_ERROR(ws->Reserve(rows * sizeof(float)));
    weight_bytes_ += rows * cols + rows * sizeof(float);
    LLMQ_CUDA_TRY(kc::QuantizeRowsFp8<U>(src, rows, static_cast<int>(cols), w->as<kc::fp8>(),
                                         ws->as<float>(), stream_));
    LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  // The rotary table (as the CPU backend's, computed in double and rounded once) and the head.
  Status Finish() {
    const std::vector<double> inv = cfg_.RopeInvFreq();
    const int D = cfg_.head_dim, half = D / 2;
    std::vector<float> cs(static_cast<size_t>(cfg_.max_position_embeddings) * D);
    for (int p = 0; p < cfg_.max_position_embeddings; ++p)
      for (int i = 0; i < half; ++i) {
        const double a = p * inv[i];
        cs[static_cast<size_t>(p) * D + i] = static_cast<float>(std::cos(a));
        cs[static_cast<size_t>(p) * D + half + i] = static_cast<float>(std::sin(a));
      }
    LLMQ_RETURN_IF_ERROR(cos_sin_.Reserve(cs.size() * sizeof(float)));
    LLMQ_CUDA_TRY(cudaMemcpy(cos_sin_.p, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));
    lm_head_ = cfg_.tie_word_embeddings ? embed_.as<T>() : lm_head_own_.as<T>();
    LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  // Device bytes the activations of a step of `tokens` tokens over `seqs` sequences (a logits row
  // each) take, plus the prefill path's largest scratch and the attention workspace of a decode
  // step of `seqs` rows over up to kReserveContext keys, split and with cascade: kept out of the
  // KV pool's budget. (Longer contexts grow the workspace when they come, from the memory
  // gpu_memory_utilization leaves.)
  static constexpr int kReserveContext = 8192;
  static constexpr int64_t kCublasWorkspace = int64_t{32} << 20;  // Hopper's recommended size
  int64_t ActivationReserve(int64_t tokens, int64_t seqs) const {
    tokens = std::max<int64_t>(tokens, 1);
    seqs = std::clamp<int64_t>(seqs, 1, tokens);  // a logits row per sequence, a token each
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, es = sizeof(T);
    const int64_t qkv_w = cfg_.q_dim() + 2 * cfg_.kv_dim();
    const int64_t per_token =
        4 * H + es * H + 4 * qkv_w + es * cfg_.q_dim() + 4 * 2 * I + es * I + 4 * 4 +
        (fp8_ ? Fp8MaxK() + 4 + 4 * H : 0);  // FP8: quantized rows, their scales, o/down sums
    const int64_t logits = seqs * (4 * H + 4 * int64_t{cfg_.vocab_size});
    const int rows = static_cast<int>(seqs),
              context = std::min(kReserveContext, cfg_.max_position_embeddings);
    const int slots =
        kc::AttentionSplitsFor(rows, cfg_.num_kv_heads, context, num_sms_, min_split_keys_) + 1;
    const int64_t attn_ws =
        kc::AttentionWorkspaceFloats(rows, cfg_.num_heads, cfg_.head_dim, slots) * 4;
    return tokens * per_token + logits + kMaxPrefillScratch + attn_ws;
  }

  // Activations for T tokens and L logits rows; grown on the first large steps, then reused.
  Status Reserve(int64_t t, int64_t l, int64_t meta_ints) {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    const int64_t qkv_w = cfg_.q_dim() + 2 * cfg_.kv_dim();
    LLMQ_RETURN_IF_ERROR(x_.Reserve(t * H * 4));
    LLMQ_RETURN_IF_ERROR(xn_.Reserve(t * H * sizeof(T)));
    LLMQ_RETURN_IF_ERROR(qkv_.Reserve(t * qkv_w * 4));
    LLMQ_RETURN_IF_ERROR(attn_.Reserve(t * cfg_.q_dim() * sizeof(T)));
    LLMQ_RETURN_IF_ERROR(gu_.Reserve(t * 2 * I * 4));
    LLMQ_RETURN_IF_ERROR(act_.Reserve(t * I * sizeof(T)));
    LLMQ_RETURN_IF_ERROR(xl_.Reserve(std::max<int64_t>(l, 1) * H * 4));
    LLMQ_RETURN_IF_ERROR(logits_.Reserve(std::max<int64_t>(l, 1) * cfg_.vocab_size * 4));
    LLMQ_RETURN_IF_ERROR(meta_.Reserve(meta_ints * 4));
    if (fp8_) {
      LLMQ_RETURN_IF_ERROR(xq_.Reserve(t * Fp8MaxK()));
      LLMQ_RETURN_IF_ERROR(xs_.Reserve(t * 4));
      LLMQ_RETURN_IF_ERROR(raw_.Reserve(t * H * 4));
    }
    if (host_meta_cap_ < meta_ints) {
      if (host_meta_) LLMQ_CUDA_TRY(cudaFreeHost(host_meta_));
      host_meta_ = nullptr;
      host_meta_cap_ = 0;
      LLMQ_CUDA_TRY(cudaMallocHost(&host_meta_, meta_ints * 4));
      host_meta_cap_ = meta_ints;
    }
    return Status::Ok();
  }

  // Profiling (CudaBackendOptions::profile): an event is recorded on the stream where each phase
  // begins; after the step's synchronisation the gaps between consecutive events are added to
  // their phases. Off, Mark costs a branch.
  enum Phase {
    kEmbed,
    kNorm,
    kQkv,
    kRope,
    kAttention,
    kO,
    kGateUp,
    kSilu,
    kDown,
    kHead,
    kMask,
    kSample,
    kNumPhases
  };
  void Mark(Phase p) {
    if (!profile_) return;
    if (marks_ == events_.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      events_.push_back(e);
      phases_.push_back(p);
    }
    phases_[marks_] = p;
    cudaEventRecord(events_[marks_++], stream_);
  }
  // Call after the stream is synchronised.
  void CollectProfile() {
    for (size_t i = 0; i + 1 < marks_; ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, events_[i], events_[i + 1]) == cudaSuccess)
        phase_ms_[phases_[i]] += ms;
    }
    marks_ = 0;
  }

  // y = x · wᵀ (+ y): the warp-per-feature kernel for a few rows (decode at small batch, where
  // cuBLAS falls short of the bandwidth), cuBLAS otherwise.
  Status Linear(const T* x, int64_t t, int k, const T* w, int n, float* y, bool accumulate) {
    if (kc::GemvFits<T>(t, k)) {
      LLMQ_CUDA_TRY(kc::Gemv<T>(x, t, k, w, n, y, accumulate, stream_));
    } else if constexpr (std::is_same_v<T, bf16>) {
      if (gemm_tuned_ && tuned_gemm_.tuned(t, k, n))
        return tuned_gemm_.Run(x, t, k, w, n, y, accumulate, stream_);
      LLMQ_CUBLAS_TRY(kc::Gemm<T>(cublas_, x, t, k, w, n, y, accumulate));
    } else {
      LLMQ_CUBLAS_TRY(kc::Gemm<T>(cublas_, x, t, k, w, n, y, accumulate));
    }
    return Status::Ok();
  }

  // The widest input of a projection (its k): the FP8 path's quantized rows are this wide.
  int64_t Fp8MaxK() const {
    return std::max<int64_t>({cfg_.hidden_size, cfg_.q_dim(), cfg_.intermediate_size});
  }

  // y = x · wᵀ (+ y) for a projection whose weights are `w`, and, with FP8 weights, `ws` their
  // per-channel scales: a few rows through GemvFp8 (bf16 activations, the weights read once),
  // more quantized per token (xq_, xs_) into cuBLASLt's FP8 product, scaled by ScaleRowsCols (the
  // sums of an accumulating projection go through raw_ first). T weights: Linear.
  Status Project(const T* x, int64_t t, int k, const DeviceBuffer& w, const DeviceBuffer& ws, int n,
                 float* y, bool accumulate) {
    if (!ws.p) return Linear(x, t, k, w.as<T>(), n, y, accumulate);
    if constexpr (std::is_same_v<T, bf16>) {
      if (kc::GemvFp8Fits(t, k)) {
        LLMQ_CUDA_TRY(
            kc::GemvFp8(x, t, k, w.as<kc::fp8>(), ws.as<float>(), n, y, accumulate, stream_));
        return Status::Ok();
      }
      LLMQ_CUDA_TRY(kc::QuantizeRowsFp8<T>(x, t, k, xq_.as<kc::fp8>(), xs_.as<float>(), stream_));
      float* raw = accumulate ? raw_.as<float>() : y;
      LLMQ_RETURN_IF_ERROR(
          fp8_gemm_.Run(xq_.as<kc::fp8>(), t, k, w.as<kc::fp8>(), n, raw, stream_));
      LLMQ_CUDA_TRY(
          kc::ScaleRowsCols(raw, xs_.as<float>(), ws.as<float>(), t, n, y, accumulate, stream_));
      return Status::Ok();
    } else {
      return Status::Internal("FP8 weights on the fp32 path");
    }
  }

  // Runs `b` and picks each logits row's id on the device: SampleRows under `rows`, or the argmax
  // when null; only the L ids cross to the host.
  Status PickIds(const StepBatch& b, const RowSampling* rows, int32_t* ids) {
    BeginStepSpan();
    LLMQ_RETURN_IF_ERROR(ReserveMasks(b));
    LLMQ_RETURN_IF_ERROR(Run(b, rows));
    LLMQ_RETURN_IF_ERROR(ApplyMasks(b));
    const int L = static_cast<int>(b.logits_rows.size());
    LLMQ_RETURN_IF_ERROR(ids_.Reserve(std::max(1, L) * sizeof(int32_t)));
    Mark(kSample);
    if (rows) {
      LLMQ_CUDA_TRY(kc::SampleRows(logits_.as<float>(), L, cfg_.vocab_size, sample_params_,
                                   ids_.as<int32_t>(), stream_));
    } else {
      LLMQ_CUDA_TRY(
          kc::ArgmaxRows(logits_.as<float>(), L, cfg_.vocab_size, ids_.as<int32_t>(), stream_));
    }
    return Deliver(ids, ids_.p, L * sizeof(int32_t));
  }

  // A constrained step's token masks (b.masks, [L, words_per_row] uint32): their buffers are
  // sized before the forward pass is enqueued (growing one may synchronise the device), so that
  // nothing waits on the stream between Run and ApplyMasks.
  Status ReserveMasks(const StepBatch& b) {
    if (b.masks == nullptr) return Status::Ok();
    const size_t bytes = MaskBytes(b);
    LLMQ_RETURN_IF_ERROR(mask_words_.Reserve(std::max<size_t>(bytes, 4)));
    if (host_masks_cap_ < bytes) {
      if (host_masks_) LLMQ_CUDA_TRY(cudaFreeHost(host_masks_));
      host_masks_ = nullptr;
      host_masks_cap_ = 0;
      LLMQ_CUDA_TRY(cudaMallocHost(&host_masks_, bytes));
      host_masks_cap_ = bytes;
    }
    return Status::Ok();
  }
  static size_t MaskBytes(const StepBatch& b) {
    return b.logits_rows.size() * static_cast<size_t>(b.masks->words_per_row()) * 4;
  }

  // Once the forward pass is enqueued (eagerly or as a graph's replay): the masks are computed
  // here, on the host, while the device runs it, then copied (through pinned memory) and applied
  // to the logits rows (logits_ [L, V]; a graph's padding rows past L are never read).
  Status ApplyMasks(const StepBatch& b) {
    if (b.masks == nullptr) return Status::Ok();
    Mark(kMask);  // the device's wait for the host's masks counts as theirs
    const uint32_t* words = nullptr;
    try {
      words = b.masks->Compute();
    } catch (const std::exception& e) {
      // The stream is left idle, as after any failed step (its buffers are reused by the next).
      LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));
      return Status::Internal(std::string("token masks: ") + e.what());
    }
    const int L = static_cast<int>(b.logits_rows.size());
    const size_t bytes = MaskBytes(b);
    std::memcpy(host_masks_, words, bytes);
    LLMQ_CUDA_TRY(
        cudaMemcpyAsync(mask_words_.p, host_masks_, bytes, cudaMemcpyHostToDevice, stream_));
    LLMQ_CUDA_TRY(kc::ApplyTokenBitmask(logits_.as<float>(), L, cfg_.vocab_size,
                                        mask_words_.as<uint32_t>(), b.masks->words_per_row(),
                                        stream_));
    return Status::Ok();
  }

  // The step's result to the host, the end of the step: the last phase's mark, the
  // synchronisation, the profile's collection.
  Status Deliver(void* host, const void* device, size_t bytes) {
    LLMQ_CUDA_TRY(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
    Mark(kSample);  // the end of the last phase
    if (span_open_) LLMQ_CUDA_TRY(cudaEventRecord(step_span_[1], stream_));
    LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));
    CollectProfile();
    if (span_open_) {
      span_open_ = false;
      float ms = 0;
      LLMQ_CUDA_TRY(cudaEventElapsedTime(&ms, step_span_[0], step_span_[1]));
      step_profile_->device_s += ms * 1e-3;
    }
    return Status::Ok();
  }

  // With the engine's profile (Backend::set_profile): the step's span on the device, from its
  // first work (this event, recorded before anything of the step is enqueued) to its result's
  // copy to the host (Deliver), eager or a graph's replay alike; StepProfile::device_s sums the
  // spans. Two events a step, no synchronisation of their own. A step that fails before Deliver
  // leaves its span open; the next step's begin records over it.
  void BeginStepSpan() {
    span_open_ = false;
    if (step_profile_ == nullptr) return;
    for (cudaEvent_t& e : step_span_)
      if (e == nullptr && cudaEventCreate(&e) != cudaSuccess) return;  // no span, no profile
    span_open_ = cudaEventRecord(step_span_[0], stream_) == cudaSuccess;
  }

  // A multi-call kernel's status as the backend's (the failed step named).
  static Status Check(const kc::KernelStatus& ks) {
    if (ks.cuda != cudaSuccess) return CudaError(ks.where, __FILE__, __LINE__, ks.cuda);
    if (ks.blas != CUBLAS_STATUS_SUCCESS) return CublasError(ks.where, __FILE__, __LINE__, ks.blas);
    return Status::Ok();
  }

  // Runs the model on `b`; the logits of b.logits_rows are left in logits_ [L, V] float (rows
  // past L may follow: a graph's padding). With `sampling` ([L]) the rows' parameters are in
  // sample_params_.
  Status Run(const StepBatch& b, const RowSampling* sampling = nullptr) {
    if (b.num_tokens() == 0) return Status::Ok();
    if (cache_.num_blocks == 0) return Status::Internal("Forward before AllocateKv");
    // Decode steps replay a CUDA graph of their shape, except steps with cascade groups (their
    // launches change from step to step), when profiling (events between the launches) and when
    // single rows would take the prefill path (its launch arguments are the step's positions).
    CudaStepPlan plan;
    LLMQ_RETURN_IF_ERROR(PlanCudaStep(b, cfg_, PlanOptions(), &plan));
    if (gemm_tuned_ && !gemm_tune_tried_) LLMQ_RETURN_IF_ERROR(TuneGemms());
    const int bucket = GraphBucketFor(b.num_seqs(), graph_buckets_);
    if (graphs_ && b.decode_only && bucket > 0 && !profile_ && prefill_gemm_min_rows_ > 1 &&
        plan.cascade.empty())
      return RunGraph(b, plan, sampling, bucket);
    return RunEager(b, plan, sampling);
  }

  Status RunEager(const StepBatch& b, const CudaStepPlan& plan, const RowSampling* sampling) {
    StepLaunch s;
    LLMQ_RETURN_IF_ERROR(Prepare(b, plan, sampling, 0, &s));
    return Enqueue(s);
  }

  // CudaTuning::gemm_tuned: times cuBLASLt's candidates for the four projections at each graph
  // bucket past the few-rows kernel's rows (decode steps are padded to their bucket), on inputs of
  // zeros and layer 0's weights, before any of those steps is captured. About 47 buckets x 4
  // shapes x 8 candidates x 6 runs: a second or so, once.
  Status TuneGemms() {
    gemm_tune_tried_ = true;
    if constexpr (std::is_same_v<T, bf16>) {
      LLMQ_RETURN_IF_ERROR(tuned_gemm_.Init(blas_ws_.p, kCublasWorkspace));
      const int H = cfg_.hidden_size, I = cfg_.intermediate_size, qd = cfg_.q_dim();
      const int qkv_w = qd + 2 * cfg_.kv_dim();
      const Layer& W = layers_[0];
      const std::tuple<const T*, int, int> shapes[] = {// weights, k, n
                                                       {W.qkv.as<T>(), H, qkv_w},
                                                       {W.o.as<T>(), qd, H},
                                                       {W.gate_up.as<T>(), H, 2 * I},
                                                       {W.down.as<T>(), I, H}};
      const int rows = graph_buckets_.empty() ? 0 : graph_buckets_.back();
      DeviceBuffer x, scratch;
      LLMQ_RETURN_IF_ERROR(x.Reserve(size_t(rows) * std::max({H, I, qd}) * sizeof(T)));
      LLMQ_RETURN_IF_ERROR(scratch.Reserve(size_t(rows) * std::max({qkv_w, H, 2 * I}) * 4));
      LLMQ_CUDA_TRY(cudaMemsetAsync(x.p, 0, x.bytes, stream_));
      for (int bucket : graph_buckets_)
        if (!kc::GemvFits<T>(bucket, H))
          for (const auto& [w, k, n] : shapes)
            LLMQ_RETURN_IF_ERROR(
                tuned_gemm_.Tune(x.as<T>(), bucket, k, w, n, scratch.as<float>(), stream_));
      LLMQ_CUDA_TRY(cudaStreamSynchronize(stream_));  // before x and scratch are freed
    }
    return Status::Ok();
  }

  CudaPlanOptions PlanOptions() const {
    CudaPlanOptions po;
    po.elem_size = sizeof(T);
    po.block_size = cache_.block_size;
    po.min_rows = prefill_gemm_min_rows_;
    po.max_scratch = kMaxPrefillScratch;
    po.cascade = cascade_;
    po.cascade_min_keys = cascade_min_keys_;
    po.fused = Fused();
    return po;
  }

  // Prefill chunks and cascade groups take the fused kernels (CudaTuning::prefill_fused).
  bool Fused() const {
    return prefill_fused_ && std::is_same_v<T, kc::bf16> &&
           kc::FlashPrefillFits(cfg_.head_dim, sizeof(T));
  }

  // A decode step through the graph of (bucket, context): the step padded to that shape
  // (PadDecodeStep), its metadata uploaded, the graph captured on first use (or when a buffer it
  // reads has moved since) and replayed.
  Status RunGraph(const StepBatch& b, const CudaStepPlan& plan, const RowSampling* sampling,
                  int bucket) {
    const int ctx = GraphContext(plan.max_context, cfg_.max_position_embeddings);
    if (!PadDecodeStep(b, bucket, (ctx + cache_.block_size - 1) / cache_.block_size,
                       cache_.block_size, &padded_))
      return RunEager(b, plan, sampling);  // a position past the shape's columns: no graph
    if (sampling) {
      padded_rows_.assign(sampling, sampling + b.logits_rows.size());
      padded_rows_.resize(padded_.logits_rows.size());  // greedy
    }
    CudaStepPlan padded_plan;
    LLMQ_RETURN_IF_ERROR(PlanCudaStep(padded_, cfg_, PlanOptions(), &padded_plan));
    StepLaunch s;
    LLMQ_RETURN_IF_ERROR(
        Prepare(padded_, padded_plan, sampling ? padded_rows_.data() : nullptr, ctx, &s));
    Graph& g = graphs_cache_[{bucket, ctx}];
    const std::vector<const void*> sig = Signature();
    if (!g.exec || g.sig != sig) {
      if (g.exec) cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
      bool refused = false;
      const Status captured = Capture(s, &g.exec, &refused);
      if (refused) {
        // A capture this device or driver refuses: the step (and every later one) runs eagerly,
        // which computes the same; the reason is kept for reports.
        graphs_ = false;
        graph_error_ = captured.message();
        return RunEager(b, plan, sampling);
      }
      LLMQ_RETURN_IF_ERROR(captured);  // a launch's own error (bad arguments), as eagerly
      g.sig = sig;
      ++graph_captures_;
    }
    LLMQ_CUDA_TRY(cudaGraphLaunch(g.exec, stream_));
    ++graph_replays_;
    return Status::Ok();
  }

  // Captures Enqueue(s) on the stream into an executable graph. The capture is ended whatever
  // happens, so the stream is usable after a failure. *refused: the capture itself failed (an
  // operation it cannot hold, or instantiation); otherwise a non-OK Status is a launch's error.
  Status Capture(const StepLaunch& s, cudaGraphExec_t* exec, bool* refused) {
    *refused = false;
    LLMQ_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const Status enq = Enqueue(s);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    cudaGetLastError();  // a failed capture's error is reported here, not by the next launch
    if (end != cudaSuccess || !enq.ok()) {
      if (graph) cudaGraphDestroy(graph);
      *refused = end != cudaSuccess;
      return end != cudaSuccess ? CudaError("cudaStreamEndCapture", __FILE__, __LINE__, end) : enq;
    }
    const cudaError_t inst = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);
    if (inst != cudaSuccess) {
      *exec = nullptr;
      *refused = true;
      cudaGetLastError();
      return CudaError("cudaGraphInstantiate", __FILE__, __LINE__, inst);
    }
    return Status::Ok();
  }

  // What a captured graph has baked in: every buffer's address and the pool's shape. A step whose
  // buffers grew (a larger step came first) or whose pool was reallocated captures again.
  // The tuning that decides the launches is part of it too.
  std::vector<const void*> Signature() const {
    auto i = [](int64_t v) { return reinterpret_cast<const void*>(static_cast<intptr_t>(v)); };
    return {x_.p,
            xn_.p,
            qkv_.p,
            attn_.p,
            gu_.p,
            act_.p,
            xl_.p,
            logits_.p,
            meta_.p,
            attn_ws_.p,
            xq_.p,
            xs_.p,
            raw_.p,
            cache_.k,
            cache_.v,
            i(cache_.num_blocks),
            i(cache_.block_size),
            i(cache_.kv_heads),
            i(attention_variant_),
            i(min_split_keys_),
            i(gemm_tuned_),
            i(pdl_)};
  }

  // Sizes the buffers for `b` (planned as `plan`) and uploads its metadata (one copy): *s gets
  // what the kernels read. With `sampling` ([L]) the rows' parameters travel with the metadata
  // (sample_params_).
  // `min_context`: attention is launched for at least this context (a graph's shape).
  Status Prepare(const StepBatch& b, const CudaStepPlan& plan, const RowSampling* sampling,
                 int min_context, StepLaunch* s) {
    const int nt = b.num_tokens(), S = b.num_seqs(), L = static_cast<int>(b.logits_rows.size());
    const int qkv_w = cfg_.q_dim() + 2 * cfg_.kv_dim(), D = cfg_.head_dim;
    const int max_context = std::max(plan.max_context, min_context);
    const std::vector<int>& gemm_seqs = plan.prefill_seqs;
    const std::vector<int32_t>& rest = plan.rest_rows;
    const int64_t scratch = plan.prefill_scratch;
    const int n_rest = static_cast<int>(rest.size());
    if (scratch > 0) LLMQ_RETURN_IF_ERROR(prefill_ws_.Reserve(scratch));

    // The metadata in one pinned buffer and one copy:
    //   ids [T] | positions [T] | slots [T] | row_seq [T] | logits_rows [L] | rest [n_rest] |
    //   tables [S, maxb] | key_begin [T] (with cascade groups only) | pad to 8 bytes |
    //   sampling parameters [L] (ForwardSample only)
    const int64_t n_kb = static_cast<int64_t>(plan.key_begin.size());
    const int64_t kb_at = 4 * int64_t{nt} + L + n_rest + int64_t{S} * b.max_blocks;
    const int64_t sp_at = (kb_at + n_kb + 1) / 2 * 2;
    constexpr int64_t kSpInts = sizeof(kc::SampleParams) / 4;
    const int64_t meta = sampling ? sp_at + L * kSpInts : kb_at + n_kb;
    LLMQ_RETURN_IF_ERROR(Reserve(nt, L, meta));
    int32_t* h = host_meta_;
    std::memcpy(h, b.token_ids.data(), nt * 4);
    std::memcpy(h + nt, b.positions.data(), nt * 4);
    std::memcpy(h + 2 * nt, b.slot_mapping.data(), nt * 4);
    for (int q = 0; q < S; ++q)
      for (int r = b.query_start[q]; r < b.query_start[q + 1]; ++r) h[3 * nt + r] = q;
    std::memcpy(h + 4 * nt, b.logits_rows.data(), L * 4);
    std::memcpy(h + 4 * nt + L, rest.data(), n_rest * 4);
    std::memcpy(h + 4 * nt + L + n_rest, b.block_tables.data(), int64_t{S} * b.max_blocks * 4);
    std::memcpy(h + kb_at, plan.key_begin.data(), n_kb * 4);
    if (sampling) {
      kc::SampleParams* sp = reinterpret_cast<kc::SampleParams*>(h + sp_at);
      for (int i = 0; i < L; ++i) {
        sp[i].temperature = sampling[i].temperature;
        sp[i].top_k = sampling[i].top_k;
        sp[i].top_p = sampling[i].top_p;
        sp[i].min_p = sampling[i].min_p;
        sp[i].u = sampling[i].u;
      }
    }
    LLMQ_CUDA_TRY(cudaMemcpyAsync(meta_.p, h, meta * 4, cudaMemcpyHostToDevice, stream_));
    const int32_t* d = meta_.as<int32_t>();
    s->nt = nt;
    s->L = L;
    s->ids = d;
    s->pos = d + nt;
    s->slots = d + 2 * nt;
    s->rows = d + 4 * nt;
    const int32_t *row_seq = d + 3 * nt, *rest_rows = d + 4 * nt + L;
    const int32_t* tables = d + 4 * nt + L + n_rest;
    sample_params_ =
        sampling ? reinterpret_cast<const kc::SampleParams*>(meta_.as<int32_t>() + sp_at) : nullptr;

    kc::AttentionArgs& aa = s->aa;
    aa = kc::AttentionArgs{};
    aa.q = qkv_.as<float>();
    aa.q_stride = qkv_w;
    aa.num_tokens = n_rest;
    aa.rows = gemm_seqs.empty() ? nullptr : rest_rows;
    aa.num_heads = cfg_.num_heads;
    aa.row_seq = row_seq;
    aa.positions = s->pos;
    aa.block_tables = tables;
    aa.max_blocks = b.max_blocks;
    aa.max_context = max_context;
    aa.scale = 1.0f / std::sqrt(static_cast<float>(D));
    aa.variant = attention_variant_;
    aa.num_splits = kc::AttentionSplitsFor(std::max(1, n_rest), cfg_.num_kv_heads, max_context,
                                           num_sms_, min_split_keys_);
    // Cascade groups (decode-only steps: every row is in `rest`, rows == nullptr, so the
    // workspace's row i is query row i, as CascadeGroup::ws_rows assumes).
    aa.key_begin = n_kb > 0 ? d + kb_at : nullptr;
    if (aa.slot_stride() > 1 && n_rest > 0) {
      LLMQ_RETURN_IF_ERROR(attn_ws_.Reserve(
          kc::AttentionWorkspaceFloats(n_rest, cfg_.num_heads, D, aa.slot_stride()) * 4));
      aa.workspace = attn_ws_.as<float>();
    }
    s->groups.clear();
    for (const CascadePlan& p : plan.cascade) {
      kc::CascadeGroup g;
      g.rows.q = qkv_.as<float>();
      g.rows.q_stride = qkv_w;
      g.rows.row0 = p.row0;
      g.rows.q_len = p.num_rows;
      g.rows.num_heads = cfg_.num_heads;
      g.rows.block_table = tables + int64_t{p.first_seq} * b.max_blocks;
      g.rows.scale = aa.scale;
      g.shared_len = p.shared_len;
      g.workspace = aa.workspace;
      g.ws_rows = n_rest;
      g.num_splits = aa.num_splits;
      s->groups.push_back(g);
    }
    s->chunks.clear();
    for (int q : gemm_seqs) {
      kc::PrefillChunk c;
      c.q = qkv_.as<float>();
      c.q_stride = qkv_w;
      c.row0 = b.query_start[q];
      c.q_len = b.query_start[q + 1] - c.row0;
      c.p0 = b.positions[c.row0];
      c.num_heads = cfg_.num_heads;
      c.block_table = tables + int64_t{q} * b.max_blocks;
      c.scale = aa.scale;
      s->chunks.push_back(c);
    }
    return Status::Ok();
  }

  // Enqueues the forward of a prepared step: embedding, every layer, the final norm and the LM
  // head of the logits rows (logits_ [L, V] float). Nothing here allocates or synchronises, so a
  // CUDA graph can capture it.
  Status Enqueue(const StepLaunch& s) {
    // This thread's launches are programmatic dependents for the step's enqueue only.
    struct PdlScope {
      explicit PdlScope(bool on) { kc::SetProgrammaticLaunch(on); }
      ~PdlScope() { kc::SetProgrammaticLaunch(false); }
    } pdl_scope(pdl_);
    const int nt = s.nt, L = s.L;
    const int H = cfg_.hidden_size, I = cfg_.intermediate_size, qd = cfg_.q_dim();
    const int qkv_w = qd + 2 * cfg_.kv_dim();
    const kc::AttentionArgs& aa = s.aa;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    float* x = x_.as<float>();
    T* xn = xn_.as<T>();
    float* qkv = qkv_.as<float>();

    Mark(kEmbed);
    LLMQ_CUDA_TRY(kc::Embed<T>(embed_.as<T>(), H, s.ids, nt, x, stream_));
    for (int l = 0; l < cfg_.num_layers; ++l) {
      const Layer& W = layers_[l];
      Mark(kNorm);
      LLMQ_CUDA_TRY(kc::RmsNorm<T>(x, W.attn_norm.as<float>(), nt, H, eps, xn, stream_));
      Mark(kQkv);
      LLMQ_RETURN_IF_ERROR(Project(xn, nt, H, W.qkv, W.qkv_s, qkv_w, qkv, false));
      Mark(kRope);
      LLMQ_CUDA_TRY(kc::QkvRopeWriteKv<T>(qkv, nt, qkv_w, cfg_.num_heads, W.qkv_bias.as<float>(),
                                          W.q_norm.as<float>(), W.k_norm.as<float>(), eps, s.pos,
                                          cos_sin_.as<float>(), s.slots, cache_, l, stream_));
      Mark(kAttention);
      // The groups' shared halves first: the paged kernel's merge reads their partials.
      for (const kc::CascadeGroup& g : s.groups) {
        if constexpr (std::is_same_v<T, kc::bf16>)
          if (Fused()) {
            LLMQ_CUDA_TRY(kc::FlashCascadeAttention(g, cache_, l, stream_));
            continue;
          }
        LLMQ_RETURN_IF_ERROR(
            Check(kc::CascadePrefixAttention<T>(cublas_, g, cache_, l, prefill_ws_.p, stream_)));
      }
      if (aa.num_tokens > 0)
        LLMQ_CUDA_TRY(kc::PagedAttention<T>(aa, cache_, l, attn_.as<T>(), stream_));
      for (const kc::PrefillChunk& c : s.chunks) {
        if constexpr (std::is_same_v<T, kc::bf16>)
          if (Fused()) {
            LLMQ_CUDA_TRY(kc::FlashPrefillAttention(c, cache_, l, attn_.as<T>(), stream_));
            continue;
          }
        LLMQ_RETURN_IF_ERROR(Check(
            kc::PrefillAttention<T>(cublas_, c, cache_, l, prefill_ws_.p, attn_.as<T>(), stream_)));
      }
      Mark(kO);
      LLMQ_RETURN_IF_ERROR(Project(attn_.as<T>(), nt, qd, W.o, W.o_s, H, x, true));
      Mark(kNorm);
      LLMQ_CUDA_TRY(kc::RmsNorm<T>(x, W.mlp_norm.as<float>(), nt, H, eps, xn, stream_));
      Mark(kGateUp);
      LLMQ_RETURN_IF_ERROR(
          Project(xn, nt, H, W.gate_up, W.gate_up_s, 2 * I, gu_.as<float>(), false));
      Mark(kSilu);
      LLMQ_CUDA_TRY(kc::SiluMul<T>(gu_.as<float>(), nt, I, act_.as<T>(), stream_));
      Mark(kDown);
      LLMQ_RETURN_IF_ERROR(Project(act_.as<T>(), nt, I, W.down, W.down_s, H, x, true));
    }
    // Final norm and LM head for the rows that sample only.
    Mark(kHead);
    LLMQ_CUDA_TRY(kc::GatherRows(x, H, s.rows, L, xl_.as<float>(), stream_));
    LLMQ_CUDA_TRY(kc::RmsNorm<T>(xl_.as<float>(), final_norm_.as<float>(), L, H, eps, xn, stream_));
    LLMQ_RETURN_IF_ERROR(Linear(xn, L, H, lm_head_, cfg_.vocab_size, logits_.as<float>(), false));
    return Status::Ok();
  }

  ModelConfig cfg_;
  std::string device_name_;
  int num_sms_ = 1;
  int sm_major_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  uint64_t weight_bytes_ = 0;

  PinnedStager stager_;         // Upload's staging, freed when it returns
  DeviceBuffer embed_;          // [V, H] T
  DeviceBuffer final_norm_;     // [H] float
  DeviceBuffer lm_head_own_;    // [V, H] T; empty when tied
  const T* lm_head_ = nullptr;  // lm_head_own_ or embed_
  DeviceBuffer cos_sin_;        // [max_pos, D] float
  std::vector<Layer> layers_;

  kc::KvCache<T> cache_;
  DeviceBuffer k_, v_;  // [layers, blocks, kv_heads, block_size, D] T each

  // Activations (see the file comment) and step metadata.
  DeviceBuffer x_, xn_, qkv_, attn_, gu_, act_, xl_, logits_, meta_, ids_, pairs_, attn_ws_;
  // FP8 projections (fp8_): a step's rows quantized ([T, Fp8MaxK()] fp8), their scales ([T]
  // float), the sums of o and down before they are scaled into the residual ([T, H] float).
  const bool fp8_;
  DeviceBuffer xq_, xs_, raw_;
  kc::Fp8Gemm fp8_gemm_;
  int32_t* host_meta_ = nullptr;                     // pinned
  const kc::SampleParams* sample_params_ = nullptr;  // [L] in meta_, for ForwardSample
  int64_t host_meta_cap_ = 0;
  DeviceBuffer mask_words_;         // [L, words_per_row] uint32: a constrained step's token masks
  uint32_t* host_masks_ = nullptr;  // the same, pinned: Compute's words on their way to the device
  size_t host_masks_cap_ = 0;       // bytes

  int attention_variant_ = kc::kVariantAuto;
  int min_split_keys_ = kc::kMinSplitKeys;
  int prefill_gemm_min_rows_ = 64;
  bool prefill_fused_ = true;
  bool pdl_ = false;              // CudaTuning::pdl on a device that has it
  bool gemm_tuned_ = false;       // CudaTuning::gemm_tuned
  bool gemm_tune_tried_ = false;  // TuneGemms ran (its failure is the step's, once)
  kc::TunedGemm tuned_gemm_;      // the buckets' products, once TuneGemms ran
  bool cascade_ = true;
  int cascade_min_keys_ = 128;
  // CUDA graphs of decode steps, by (bucket, context); see RunGraph.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<const void*> sig;  // Signature() when captured
  };
  bool graphs_ = true;
  std::vector<int> graph_buckets_ = DefaultGraphBuckets(512);
  std::map<std::pair<int, int>, Graph> graphs_cache_;
  int64_t graph_captures_ = 0, graph_replays_ = 0;
  std::string graph_error_;               // why graphs were turned off, if they were
  StepBatch padded_;                      // RunGraph's scratch
  std::vector<RowSampling> padded_rows_;  // RunGraph's scratch
  // The largest scratch one prefill chunk may take for its matrix-product attention; a larger
  // chunk (a long context) goes to the per-row kernel.
  static constexpr int64_t kMaxPrefillScratch = int64_t{1} << 30;
  DeviceBuffer prefill_ws_;
  DeviceBuffer blas_ws_;  // cuBLAS's workspace (kCublasWorkspace bytes)
  bool profile_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<Phase> phases_;  // the phase that begins at events_[i]
  size_t marks_ = 0;
  double phase_ms_[kNumPhases] = {};
  cudaEvent_t step_span_[2] = {nullptr, nullptr};  // BeginStepSpan, Deliver
  bool span_open_ = false;
};

template <class T>
Status Make(const ModelConfig& cfg, const Weights* w, const CudaBackendOptions& opt, uint64_t seed,
            std::unique_ptr<CudaBackend>* out) {
  auto b = std::make_unique<CudaBackendImpl<T>>(
      cfg, opt.precision == CudaBackendOptions::Precision::kFp8);
  LLMQ_RETURN_IF_ERROR(b->Init(opt.device));
  LLMQ_RETURN_IF_ERROR(w ? b->Upload(*w) : b->Random(seed));
  *out = std::move(b);
  return Status::Ok();
}

Status MakeAny(const ModelConfig& cfg, const Weights* w, const CudaBackendOptions& opt,
               uint64_t seed, std::unique_ptr<CudaBackend>* out) {
  if (Status st = CheckCudaDevice(opt.device); !st.ok())
    return Status::Unsupported("no usable CUDA device: " + st.message());
  if (cfg.head_dim % 2 || cfg.head_dim > 256)
    return Status::Unsupported("the CUDA backend supports an even head_dim up to 256, not " +
                               std::to_string(cfg.head_dim));
  if (opt.precision == CudaBackendOptions::Precision::kFp8) {
    LLMQ_RETURN_IF_ERROR(CheckFp8Device(opt.device));
    if (cfg.hidden_size % 16 || cfg.q_dim() % 16 || cfg.intermediate_size % 16)
      return Status::Unsupported(
          "engine.precision fp8: the FP8 products need hidden_size, the attention width and "
          "intermediate_size in multiples of 16");
  }
  return opt.precision == CudaBackendOptions::Precision::kFp32 ? Make<float>(cfg, w, opt, seed, out)
                                                               : Make<bf16>(cfg, w, opt, seed, out);
}

}  // namespace

Status CheckFp8Device(int device) {
  cudaDeviceProp prop{};
  LLMQ_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  if (prop.major * 10 + prop.minor < 89)
    return Status::Unsupported("engine.precision fp8: device " + std::to_string(device) + " (" +
                               prop.name + ") has compute capability " +
                               std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                               "; FP8 products need 8.9 or later (Ada, Hopper): use bf16");
  return Status::Ok();
}

Status CheckCudaDevice(int device) {
  const StatusOr<kernels::cuda::DeviceInfo> devices = kernels::cuda::QueryDevices();
  if (!devices.ok()) return devices.status();
  if (device < 0 || device >= devices->count)
    return Status::Unsupported("no device " + std::to_string(device) + ": " +
                               std::to_string(devices->count) + " visible");
  return Status::Ok();
}

Status CreateCudaBackendTyped(const ModelConfig& cfg, const Weights& w,
                              const CudaBackendOptions& opt, std::unique_ptr<CudaBackend>* out) {
  return MakeAny(cfg, &w, opt, 0, out);
}

Status CreateCudaBackend(const ModelConfig& cfg, const Weights& w, const CudaBackendOptions& opt,
                         std::unique_ptr<Backend>* out) {
  std::unique_ptr<CudaBackend> b;
  LLMQ_RETURN_IF_ERROR(MakeAny(cfg, &w, opt, 0, &b));
  *out = std::move(b);
  return Status::Ok();
}

Status CreateCudaBackendRandom(const ModelConfig& cfg, const CudaBackendOptions& opt, uint64_t seed,
                               std::unique_ptr<CudaBackend>* out) {
  return MakeAny(cfg, nullptr, opt, seed, out);
}

}  // namespace llmq
