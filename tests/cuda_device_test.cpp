// The CUDA wiring: runs on a GPU, skips with a message without one (or without nvcc at build).
#include <gtest/gtest.h>

#include <vector>

#ifdef LLMQ_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace llmq {
namespace {

TEST(CudaDevice, SmokeKernelMatchesCpu) {
#ifndef LLMQ_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (nvcc not found at configure time)";
#else
  kernels::cuda::DeviceInfo info;
  std::string why;
  if (!kernels::cuda::QueryDevices(&info, &why)) GTEST_SKIP() << "no usable GPU: " << why;
  std::vector<float> out(1000);
  ASSERT_TRUE(kernels::cuda::SmokeTest(0.5f, 3.0f, 1000, out.data(), &why)) << why;
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], 0.5f * i + 3.0f);
#endif
}

}  // namespace
}  // namespace llmq
