#include "engine/backends/backend_choice.h"

#ifdef LLMQ_HAVE_CUDA
#include "engine/backends/cuda_backend.h"
#endif

namespace llmq {

bool BuiltWithCuda() {
#ifdef LLMQ_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

StatusOr<ResolvedBackend> ResolveBackend(BackendKind want, int device_index) {
  if (want == BackendKind::kCpu) return ResolvedBackend{BackendKind::kCpu, ""};
#ifdef LLMQ_HAVE_CUDA
  const Status device = CheckCudaDevice(device_index);
  if (device.ok())
    return ResolvedBackend{BackendKind::kCuda,
                           want == BackendKind::kAuto ? "a CUDA device is present" : ""};
  const std::string reason = "no usable CUDA device: " + device.message();
#else
  const std::string reason = "built without CUDA";
#endif
  if (want == BackendKind::kCuda)
    return Status::Unsupported("backend cuda: " + reason +
                               (BuiltWithCuda() ? ""
                                                : " (llmq is built with it where nvcc is found, "
                                                  "or with -DLLMQ_CUDA=ON)"));
  return ResolvedBackend{BackendKind::kCpu, reason};
}

}  // namespace llmq
