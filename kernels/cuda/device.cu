#include <cuda_runtime.h>

#include "kernels/cuda/device.h"

namespace llmq::kernels::cuda {
namespace {

// out: [n] device memory.
__global__ void AffineIota(float a, float b, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * static_cast<float>(i) + b;
}

bool Ok(cudaError_t e, std::string* why) {
  if (e == cudaSuccess) return true;
  *why = cudaGetErrorString(e);
  return false;
}

}  // namespace

bool QueryDevices(DeviceInfo* info, std::string* why) {
  if (!Ok(cudaGetDeviceCount(&info->count), why)) return false;
  if (info->count == 0) return *why = "no CUDA device", false;
  cudaDeviceProp prop{};
  if (!Ok(cudaGetDeviceProperties(&prop, 0), why)) return false;
  info->name = prop.name;
  info->sm_major = prop.major;
  info->sm_minor = prop.minor;
  return Ok(cudaMemGetInfo(&info->free_memory, &info->total_memory), why);
}

bool SmokeTest(float a, float b, int n, float* out, std::string* why) {
  float* d = nullptr;
  if (!Ok(cudaMalloc(&d, sizeof(float) * n), why)) return false;
  AffineIota<<<(n + 255) / 256, 256>>>(a, b, n, d);
  const bool ok = Ok(cudaGetLastError(), why) &&
                  Ok(cudaMemcpy(out, d, sizeof(float) * n, cudaMemcpyDeviceToHost), why);
  cudaFree(d);
  return ok;
}

}  // namespace llmq::kernels::cuda
