#include "engine/backends/compute_resources.h"

#include "kernels/cpu/cpu_count.h"
#include "kernels/cpu/thread_pool.h"
#ifdef LLMQ_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace llmq {

int CpuThreads() {
  return kernels::CpuThreads();
}
void SetCpuThreads(int threads) {
  kernels::SetCpuThreads(threads);
}

int UsableCpus() {
  return kernels::ReadCpuBudget().usable;
}
std::string DescribeUsableCpus() {
  return kernels::DescribeCpuBudget(kernels::ReadCpuBudget());
}

Status GpuMemory(uint64_t* bytes, std::string* name) {
#ifdef LLMQ_HAVE_CUDA
  const StatusOr<kernels::cuda::DeviceInfo> info = kernels::cuda::QueryDevices();
  if (!info.ok())
    return Status::Unsupported("no usable CUDA device (" + info.status().message() + ")");
  *bytes = info->total_memory;
  *name = info->name;
  return Status::Ok();
#else
  (void)bytes;
  (void)name;
  return Status::Unsupported("built without CUDA");
#endif
}

}  // namespace llmq
