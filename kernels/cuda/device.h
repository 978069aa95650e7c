// CUDA device discovery: the wiring the CUDA backend will stand on. Compiled only when nvcc is
// found (LLMQ_HAVE_CUDA); callers ask at run time whether a usable GPU is present.
#pragma once

#include <string>

namespace llmq::kernels::cuda {

struct DeviceInfo {
  int count = 0;     // visible CUDA devices
  std::string name;  // device 0
  int sm_major = 0, sm_minor = 0;
  size_t total_memory = 0, free_memory = 0;
};

// Fills `info` and returns true when at least one device is usable; otherwise returns false with
// the driver's reason in `why` (no driver, no device, ...). Never aborts.
bool QueryDevices(DeviceInfo* info, std::string* why);

// Runs a trivial kernel that writes out[i] = a * i + b for i < n on device 0 and copies the result
// back: proves the toolchain, the runtime and the device work end to end. `out` is host memory.
bool SmokeTest(float a, float b, int n, float* out, std::string* why);

}  // namespace llmq::kernels::cuda
