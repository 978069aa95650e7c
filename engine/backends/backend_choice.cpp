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

Status ResolveBackend(BackendKind want, BackendKind* got, std::string* why) {
  std::string reason;
  if (why) why->clear();
  if (want == BackendKind::kCpu) {
    *got = BackendKind::kCpu;
    return Status::Ok();
  }
#ifdef LLMQ_HAVE_CUDA
  std::string device_why;
  const bool device = CudaDevicePresent(&device_why);
  if (device) {
    *got = BackendKind::kCuda;
    if (why && want == BackendKind::kAuto) *why = "a CUDA device is present";
    return Status::Ok();
  }
  reason = "no usable CUDA device: " + device_why;
#else
  reason = "built without CUDA";
#endif
  if (want == BackendKind::kCuda)
    return Status::Unsupported("backend cuda: " + reason +
                               (BuiltWithCuda() ? ""
                                                : " (llmq is built with it where nvcc is found, "
                                                  "or with -DLLMQ_CUDA=ON)"));
  *got = BackendKind::kCpu;
  if (why) *why = reason;
  return Status::Ok();
}

}  // namespace llmq
