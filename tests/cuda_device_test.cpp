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
  const StatusOr<kernels::cuda::DeviceInfo> info = kernels::cuda::QueryDevices();
  if (!info.ok()) GTEST_SKIP() << "no usable GPU: " << info.status().message();
  EXPECT_GE(info->count, 1);
  std::vector<float> out(1000);
  const Status st = kernels::cuda::SmokeTest(0.5f, 3.0f, 1000, out.data());
  ASSERT_TRUE(st.ok()) << st.message();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], 0.5f * i + 3.0f);
#endif
}

}  // namespace
}  // namespace llmq
