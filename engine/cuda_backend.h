// CudaBackend: the throughput backend. Weights live on the device once (bf16, or fp32 in the exact
// mode), the KV pool is one allocation per cache, GEMMs go through cuBLAS (bf16 in, fp32
// accumulate) and everything around them is kernels/cuda/. Built only with LLMQ_HAVE_CUDA; a
// machine without a usable device is told so by CudaDevicePresent, never by an abort.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/weights.h"

namespace llmq {

struct CudaBackendOptions {
  // kBf16: weights, K/V and GEMM inputs in bf16 (fp32 accumulate, fp32 residual stream).
  // kFp32: everything fp32 (the exact mode the reference tests use).
  enum class Precision { kBf16, kFp32 };
  Precision precision = Precision::kBf16;
  int device = 0;
};

// True when a CUDA device can be used; otherwise false with the runtime's reason in `why`.
bool CudaDevicePresent(std::string* why);

// Uploads `w` and builds the backend. Errors (no device, out of memory, a failed cuBLAS call) name
// the call and the reason.
Status CreateCudaBackend(const ModelConfig& cfg, const Weights& w, const CudaBackendOptions& opt,
                         std::unique_ptr<Backend>* out);

}  // namespace llmq
