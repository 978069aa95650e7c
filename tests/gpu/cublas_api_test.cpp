// cuBLAS is loaded at run time: the table must bind every function the kernels call (no GPU needed;
// the library comes with the CUDA toolkit that built these tests).
#include <gtest/gtest.h>

#include "kernels/cuda/cublas_api.h"

namespace llmq {
namespace {

TEST(CublasApi, LoadsTheLibraryAndEverySymbolOnce) {
  const Status loaded = kernels::cuda::LoadCublas();
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const kernels::cuda::CublasApi* api = kernels::cuda::Cublas();
  ASSERT_NE(api, nullptr);
  EXPECT_NE(api->gemm_ex, nullptr);
  EXPECT_NE(api->gemm_strided_batched_ex, nullptr);
  EXPECT_EQ(kernels::cuda::Cublas(), api);  // loaded once
  EXPECT_STREQ(api->status_name(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
}

}  // namespace
}  // namespace llmq
