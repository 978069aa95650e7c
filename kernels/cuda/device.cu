#include <cuda_runtime.h>

#include "kernels/cuda/device.h"

namespace llmq::kernels::cuda {
namespace {

// out: [n] device memory.
__global__ void AffineIota(float a, float b, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * static_cast<float>(i) + b;
}

// The device cannot be used: the runtime's reason.
Status Unusable(cudaError_t e) {
  return Status::Unsupported(cudaGetErrorString(e));
}

}  // namespace

StatusOr<DeviceInfo> QueryDevices() {
  DeviceInfo info;
  cudaError_t e = cudaGetDeviceCount(&info.count);
  if (e != cudaSuccess) return Unusable(e);
  if (info.count == 0) return Status::Unsupported("no CUDA device");
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) return Unusable(e);
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  if ((e = cudaMemGetInfo(&info.free_memory, &info.total_memory)) != cudaSuccess)
    return Unusable(e);
  return info;
}

Status SmokeTest(float a, float b, int n, float* out) {
  float* d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(float) * n);
  if (e != cudaSuccess) return Status::Internal(cudaGetErrorString(e));
  AffineIota<<<(n + 255) / 256, 256>>>(a, b, n, d);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(out, d, sizeof(float) * n, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return e == cudaSuccess ? Status::Ok() : Status::Internal(cudaGetErrorString(e));
}

}  // namespace llmq::kernels::cuda
