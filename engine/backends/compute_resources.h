// What the compute backends may use on this machine, as the commands around the engine see it:
// the CPU kernels' threads and the CPU budget (kernels/cpu/), the memory of GPU 0
// (kernels/cuda/). The daemon reaches the kernels only through here (the layering: daemon ->
// engine -> kernels -> base).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace llmq {

// The threads the CPU kernels use (kernels::CpuThreads) and sets them (kernels::SetCpuThreads:
// before the pool is first used).
int CpuThreads();
void SetCpuThreads(int threads);

// The CPUs the process may use and why: "4 usable CPUs: affinity 8, cgroup quota 4 (cpu.max)".
int UsableCpus();
std::string DescribeUsableCpus();

// The total memory of GPU 0 and its name. Unsupported (with the driver's reason) where llmq was
// built without CUDA or no device is usable.
Status GpuMemory(uint64_t* bytes, std::string* name);

}  // namespace llmq
