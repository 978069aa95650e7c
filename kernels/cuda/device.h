// CUDA device discovery: the wiring the CUDA backend will stand on. Compiled only when nvcc is
// found (LLMQ_HAVE_CUDA); callers ask at run time whether a usable GPU is present.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace llmq::kernels::cuda {

struct DeviceInfo {
  int count = 0;     // visible CUDA devices
  std::string name;  // device 0
  int sm_major = 0, sm_minor = 0;
  size_t total_memory = 0, free_memory = 0;
};

// The devices when at least one is usable; otherwise Unsupported with the driver's reason as the
// message (no driver, "no CUDA device", ...). Never aborts.
StatusOr<DeviceInfo> QueryDevices();

// Runs a trivial kernel that writes out[i] = a * i + b for i < n on device 0 and copies the result
// back: proves the toolchain, the runtime and the device work end to end. `out` is host memory.
// Internal with the runtime's reason when a step fails.
Status SmokeTest(float a, float b, int n, float* out);

}  // namespace llmq::kernels::cuda
