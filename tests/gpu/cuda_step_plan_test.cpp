// The plain arithmetic of the CUDA backend (no GPU needed: these run wherever the CUDA targets are
// built, CI included): which rows take the prefill path, context splits, partition fit, the
// few-rows product's fit, scratch sizes.
#include <gtest/gtest.h>

#include "engine/cuda_step_plan.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/prefill_attention.h"

namespace llmq {
namespace {

namespace kc = kernels::cuda;

ModelConfig Shape() {
  ModelConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  return c;
}

// Sequences given as (first position, rows).
StepBatch Batch(const std::vector<std::pair<int, int>>& seqs) {
  StepBatch b;
  b.Clear();
  for (auto [p0, n] : seqs) {
    for (int i = 0; i < n; ++i) {
      b.token_ids.push_back(1);
      b.positions.push_back(p0 + i);
      b.slot_mapping.push_back(p0 + i);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(p0 + n);
  }
  return b;
}

TEST(CudaStepPlan, LongChunksTakeThePrefillPathAndTheRestKeepTheirRows) {
  // A decode row, a 100-row chunk over 200 cached tokens, a 10-row chunk, a fresh 64-row prompt.
  const StepBatch b = Batch({{500, 1}, {200, 100}, {30, 10}, {0, 64}});
  CudaStepPlan plan;
  ASSERT_TRUE(PlanCudaStep(b, Shape(), 2, 64, int64_t{1} << 30, &plan).ok());
  EXPECT_EQ(plan.max_context, 501);
  EXPECT_EQ(plan.prefill_seqs, (std::vector<int>{1, 3}));
  std::vector<int32_t> rest = {0};
  for (int r = 101; r < 111; ++r) rest.push_back(r);
  EXPECT_EQ(plan.rest_rows, rest);
  EXPECT_EQ(plan.prefill_scratch, kc::PrefillScratchBytes(100, 300, 8, 2, 64, 2));
}

TEST(CudaStepPlan, ScratchLimitAndGapsSendChunksToThePerRowKernel) {
  StepBatch b = Batch({{0, 128}, {0, 128}});
  b.positions[128 + 5] = 300;  // not consecutive
  CudaStepPlan plan;
  const int64_t need = kc::PrefillScratchBytes(128, 128, 8, 2, 64, 4);
  ASSERT_TRUE(PlanCudaStep(b, Shape(), 4, 64, need, &plan).ok());
  EXPECT_EQ(plan.prefill_seqs, (std::vector<int>{0}));
  EXPECT_EQ(plan.rest_rows.size(), 128u);
  ASSERT_TRUE(PlanCudaStep(b, Shape(), 4, 64, need - 1, &plan).ok());
  EXPECT_TRUE(plan.prefill_seqs.empty());
  EXPECT_EQ(plan.rest_rows.size(), 256u);
  EXPECT_EQ(plan.prefill_scratch, 0);
}

TEST(CudaStepPlan, APositionOutsideTheContextIsRefusedByName) {
  StepBatch b = Batch({{0, 3}});
  b.positions[2] = 4096;
  CudaStepPlan plan;
  const Status st = PlanCudaStep(b, Shape(), 2, 64, 1 << 30, &plan);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("4096"), std::string::npos) << st.message();
}

TEST(CudaLaunchMath, SplitsFillTheDeviceAndPartitionsStayWithinTheirLimit) {
  // Few rows: split until ~2 blocks per SM, never below 128 keys a split.
  EXPECT_EQ(kc::AttentionSplits(1, 8, 1001, 132), 7);
  EXPECT_EQ(kc::AttentionSplits(1, 8, 100000, 132), 33);
  EXPECT_EQ(kc::AttentionSplits(256, 8, 1001, 132), 1);
  EXPECT_EQ(kc::AttentionSplits(1, 8, 100, 132), 1);
  // Partitions of at most kMaxPartLen keys.
  EXPECT_EQ(kc::AttentionSplitsFor(256, 8, 1001, 132), 2);
  EXPECT_EQ(kc::AttentionSplitsFor(256, 8, 512, 132), 1);
  EXPECT_TRUE(kc::PartitionFits(128, 1001, 2));
  EXPECT_FALSE(kc::PartitionFits(128, 1001, 1));
  EXPECT_FALSE(kc::PartitionFits(96, 100, 1));
  EXPECT_EQ(kc::AttentionWorkspaceFloats(3, 8, 64, 2), 3 * 8 * 2 * 66);
}

TEST(CudaLaunchMath, GemvServesFewRowsOfSixteenByteMultiples) {
  EXPECT_TRUE(kc::GemvFits<kc::bf16>(1, 4096));
  EXPECT_TRUE(kc::GemvFits<kc::bf16>(8, 8));
  EXPECT_FALSE(kc::GemvFits<kc::bf16>(9, 4096));
  EXPECT_FALSE(kc::GemvFits<kc::bf16>(0, 4096));
  EXPECT_FALSE(kc::GemvFits<kc::bf16>(1, 172));
  EXPECT_TRUE(kc::GemvFits<float>(1, 172));
}

TEST(CudaLaunchMath, PrefillScratchCountsEveryBuffer) {
  // Kc, Vc [2, 300, 64] bf16; Qc [8, 100, 64] bf16; S [8, 100, 300] float; P bf16; O float;
  // each rounded up to 256 bytes.
  auto up = [](int64_t b) { return (b + 255) / 256 * 256; };
  EXPECT_EQ(kc::PrefillScratchBytes(100, 300, 8, 2, 64, 2),
            2 * up(2 * 300 * 64 * 2) + up(8 * 100 * 64 * 2) + up(8 * 100 * 300 * 4) +
                up(8 * 100 * 300 * 2) + up(8 * 100 * 64 * 4));
}

}  // namespace
}  // namespace llmq
