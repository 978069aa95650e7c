// CudaBackend: the throughput backend. Weights live on the device once (bf16, or fp32 in the exact
// mode), the KV pool is one allocation per cache, GEMMs go through cuBLAS (bf16 in, fp32
// accumulate) and everything around them is kernels/cuda/. Built only with LLMQ_HAVE_CUDA; a
// machine without a usable device is told so by CheckCudaDevice, never by an abort.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "engine/backends/backend.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace llmq {

struct CudaBackendOptions {
  // kBf16: weights, K/V and GEMM inputs in bf16 (fp32 accumulate, fp32 residual stream).
  // kFp32: everything fp32 (the exact mode the reference tests use).
  // kFp8: as kBf16, but the projections' weights (q/k/v, o, gate/up, down) in FP8 E4M3 with one
  // fp32 scale per output channel, quantized on the device at load (kernels/cuda/fp8.h): half
  // the bytes of bf16. The embedding and the LM head stay bf16. Compute capability 8.9 or later
  // (CheckFp8Device).
  enum class Precision { kBf16, kFp32, kFp8 };
  Precision precision = Precision::kBf16;
  int device = 0;
};

// Knobs for benchmarks, changeable between steps.
struct CudaTuning {
  // Time every phase of each step with device events (costs a little per step).
  bool profile = false;
  int attention_variant = 0;  // kernels::cuda::kVariant* (0: auto)
  // Decode attention is split over the context down to this many keys a split when too few rows
  // fill the device (kernels::cuda::AttentionSplits).
  int min_split_keys = 64;
  // Prefill chunks of at least this many rows take the matrix-product attention
  // (kernels/cuda/prefill_attention.h); INT_MAX: never.
  int prefill_gemm_min_rows = 64;
  // Those chunks, and the shared halves of cascade groups, take the fused kernels instead
  // (kernels::cuda::FlashPrefillAttention, FlashCascadeAttention) where they apply (bf16,
  // head_dim 64 or 128), with no scratch: on an H200 the 8 x 1,024 prefill step took 229 ms with
  // them, 258 ms with the matrix products (2026-12-04).
  bool prefill_fused = true;
  // Products of a decode graph bucket's rows (more than kernels::cuda::kGemvMaxRows) through the
  // fastest of cuBLASLt's candidates, each bucket's timed at the next step
  // (kernels/cuda/gemm_tuned.h); bf16 weights only. Off: on an H200 (2026-12-04) the batch-256
  // step took 24.6 ms with it against 24.5 with cuBLAS's pick.
  bool gemm_tuned = false;
  // Cascade attention for the prefix groups of decode-only steps (kernels/cuda/prefill_attention.h
  // CascadePrefixAttention): a group's shared blocks are read once per step, not once per row.
  bool cascade = true;
  int cascade_min_keys = 128;  // key reads a group must save (CudaPlanOptions)
  // The step's own kernels (norms, GEMVs, rope, the tensor-core attention and its merge, embedding)
  // launched as programmatic dependents (kernels/cuda/pdl.h; sm_90 and later, ignored before): each
  // may start while the one before finishes, and waits for it inside. Off until measured.
  bool pdl = false;
  // Decode steps replay CUDA graphs captured per (batch bucket, context) shape
  // (engine/backends/graph_buckets.h, GraphContext): one launch instead of a dozen per layer.
  bool graphs = true;
};

// The backend proper; the element type (bf16 or float) is chosen at creation, behind this class.
class CudaBackend : public Backend {
 public:
  // Like Forward, but the next-token ids of logits_rows are picked on the device (greedy argmax:
  // NaN as -inf, ties to the lowest id, as the CPU sampler) and only L ids cross to the host.
  //   ids: [L] host
  virtual Status ForwardArgmax(const StepBatch& batch, int32_t* ids) = 0;
  // Device memory in bytes: free now and total.
  virtual Status MemoryInfo(uint64_t* free_bytes, uint64_t* total_bytes) const = 0;
  virtual void SetTuning(const CudaTuning& t) = 0;
  // With CudaTuning::profile: the device time of each phase since the last call divided by
  // `steps`, one line each ("  attention  12.345 ms  40.1%"); empty when nothing was profiled.
  // `ms`, when given, gets the same milliseconds by phase name.
  virtual std::string TakeProfile(int steps, std::map<std::string, double>* ms = nullptr) = 0;
  // CUDA graphs captured so far (a shape's first step, or after a buffer it reads moved).
  virtual int64_t graph_captures() const = 0;
  // Steps that ran as a graph's replay.
  virtual int64_t graph_replays() const = 0;
  // Why CUDA graphs were turned off (a capture the driver refused), or empty.
  virtual std::string graph_error() const = 0;
  // The device's name and multiprocessor count, for reports.
  virtual std::string device_name() const = 0;
  // 1,024 sequences and 8,192 tokens, vLLM's offline defaults on an 80 GB-class card: the larger
  // decode batch shares each weight read among more rows (on an H200 the real job ran 1.14x
  // faster than with the CPU's 256 / 2,048, bench/RESULTS.md).
  StepLimits default_step_limits() const override { return {1024, 8192}; }
};

// OK when CUDA device `device` (an index among the visible ones) can be used; otherwise
// Unsupported with the runtime's reason as the message (no driver, "no CUDA device", "no device
// 3: 2 visible", ...).
Status CheckCudaDevice(int device = 0);
// OK when device `device` computes FP8 products (compute capability 8.9 or later: Ada, Hopper);
// otherwise Unsupported naming the device and its capability.
Status CheckFp8Device(int device = 0);

// Uploads `w` and builds the backend. Errors (no device, out of memory, a failed cuBLAS call) name
// the call and the reason.
Status CreateCudaBackend(const ModelConfig& cfg, const Weights& w, const CudaBackendOptions& opt,
                         std::unique_ptr<Backend>* out);
// The same backend on random weights made on the device (uniform, scaled by 1/sqrt(fan-in); norms
// 1), for benchmarks of a model's shape without its files: nothing crosses from the host.
Status CreateCudaBackendRandom(const ModelConfig& cfg, const CudaBackendOptions& opt, uint64_t seed,
                               std::unique_ptr<CudaBackend>* out);
// As CreateCudaBackend, typed (the GPU tests and benchmarks call ForwardArgmax).
Status CreateCudaBackendTyped(const ModelConfig& cfg, const Weights& w,
                              const CudaBackendOptions& opt, std::unique_ptr<CudaBackend>* out);

}  // namespace llmq
