#include "engine/model/model.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "engine/backends/cpu_backend.h"
#ifdef LLMQ_HAVE_CUDA
#include "engine/backends/cuda_backend.h"
#endif

namespace llmq {

void ReleaseFreeHeap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

std::string Model::backend_description() const {
  std::string s = backend ? backend->name() : "none";
  if (backend && backend->name() != "cpu") {
    if (choice.device != 0) s += ":" + std::to_string(choice.device);  // "cuda:1 (bf16)"
    s += std::string(" (") + PrecisionName(choice.precision) + ")";
  }
  if (!backend_why.empty()) s += " (auto: " + backend_why + ")";
  return s;
}

Status LoadModel(const std::string& dir, const BackendChoice& choice, Model* out,
                 const std::function<void(const Tokenizer*)>& tokenizer_loaded) {
  Model m;
  m.choice = choice;
  LLMQ_ASSIGN_OR_RETURN(ResolvedBackend resolved, ResolveBackend(choice.kind, choice.device));
  const BackendKind kind = resolved.kind;
  m.backend_why = std::move(resolved.why);
  // A worker meant for GPU N must not quietly run on the CPU (engine.device is per GPU).
  if (kind == BackendKind::kCpu && choice.device != 0)
    return Status::Unsupported("engine.device " + std::to_string(choice.device) +
                               ": a CUDA device, but the backend is cpu" +
                               (m.backend_why.empty() ? std::string(" (engine.backend cpu)")
                                                      : " (auto: " + m.backend_why + ")"));
  LLMQ_RETURN_IF_ERROR(LoadModelConfig(dir, &m.cfg));
  LLMQ_RETURN_IF_ERROR(Weights::Load(dir, m.cfg, &m.weights));
  LLMQ_RETURN_IF_ERROR(Tokenizer::Load(dir, &m.tokenizer));
  if (m.tokenizer->vocab_size() > m.cfg.vocab_size)
    return Status::InvalidArgument(
        dir + (m.tokenizer->hf() ? "/tokenizer.json" : "/tokenizer.model") + ": has " +
        std::to_string(m.tokenizer->vocab_size()) + " pieces, more than the model's vocab_size " +
        std::to_string(m.cfg.vocab_size));
  if (tokenizer_loaded) tokenizer_loaded(m.tokenizer.get());
  if (kind == BackendKind::kCpu) {
    m.backend = std::make_unique<CpuBackend>(
        m.cfg, *m.weights, CpuBackend::ResolveWeightType(choice.weight_dtype, m.cfg, *m.weights),
        choice.kv_dtype);
    // The backend packed its own fp32 copy: unmapping the files now holds the weights once
    // (peak RSS = packed weights + KV pool + working memory, not + the mapping).
    m.weights.reset();
    ReleaseFreeHeap();
  } else {
    if (choice.weight_dtype != WeightDtype::kAuto)
      return Status::Unsupported(std::string("engine.weight_dtype ") +
                                 WeightDtypeName(choice.weight_dtype) +
                                 ": the CPU backend's; the cuda backend's weights follow "
                                 "engine.precision (use auto, or the cpu backend)");
    const KvDtype follows = choice.precision == Precision::kFp32 ? KvDtype::kF32 : KvDtype::kBf16;
    if (choice.kv_dtype != KvDtype::kAuto && choice.kv_dtype != follows)
      return Status::Unsupported(std::string("engine.kv_dtype ") + KvDtypeName(choice.kv_dtype) +
                                 ": the cuda backend's KV cache follows engine.precision (" +
                                 PrecisionName(choice.precision) + "); use auto or " +
                                 KvDtypeName(follows));
#ifdef LLMQ_HAVE_CUDA
    CudaBackendOptions opt;
    opt.precision = choice.precision == Precision::kFp32  ? CudaBackendOptions::Precision::kFp32
                    : choice.precision == Precision::kFp8 ? CudaBackendOptions::Precision::kFp8
                                                          : CudaBackendOptions::Precision::kBf16;
    opt.device = choice.device;
    LLMQ_RETURN_IF_ERROR(CreateCudaBackend(m.cfg, *m.weights, opt, &m.backend));
#else
    return Status::Unsupported("backend cuda: this llmq was built without CUDA");
#endif
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace llmq
