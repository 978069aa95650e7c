#include "engine/cuda_backend.h"

#include "kernels/cuda/device.h"

namespace llmq {

bool CudaDevicePresent(std::string* why) {
  kernels::cuda::DeviceInfo info;
  return kernels::cuda::QueryDevices(&info, why);
}

Status CreateCudaBackend(const ModelConfig&, const Weights&, const CudaBackendOptions&,
                         std::unique_ptr<Backend>*) {
  return Status::Unsupported("the CUDA backend is not built yet");
}

}  // namespace llmq
