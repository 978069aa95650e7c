// The plain arithmetic of the CUDA backend (no GPU needed: these run wherever the CUDA targets are
// built, CI included): which rows take the prefill path, context splits, partition fit, the
// few-rows product's fit, scratch sizes.
#include <gtest/gtest.h>

#include "engine/backends/cuda_step_plan.h"
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

CudaPlanOptions Opt(int elem_size, int64_t max_scratch) {
  CudaPlanOptions o;
  o.elem_size = elem_size;
  o.min_rows = 64;
  o.max_scratch = max_scratch;
  return o;
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
  ASSERT_TRUE(PlanCudaStep(b, Shape(), Opt(2, int64_t{1} << 30), &plan).ok());
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
  ASSERT_TRUE(PlanCudaStep(b, Shape(), Opt(4, need), &plan).ok());
  EXPECT_EQ(plan.prefill_seqs, (std::vector<int>{0}));
  EXPECT_EQ(plan.rest_rows.size(), 128u);
  ASSERT_TRUE(PlanCudaStep(b, Shape(), Opt(4, need - 1), &plan).ok());
  EXPECT_TRUE(plan.prefill_seqs.empty());
  EXPECT_EQ(plan.rest_rows.size(), 256u);
  EXPECT_EQ(plan.prefill_scratch, 0);
}

TEST(CudaStepPlan, APositionOutsideTheContextIsRefusedByName) {
  StepBatch b = Batch({{0, 3}});
  b.positions[2] = 4096;
  CudaStepPlan plan;
  const Status st = PlanCudaStep(b, Shape(), Opt(2, 1 << 30), &plan);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("4096"), std::string::npos) << st.message();
}

// A decode-only step of `n` sequences at position `pos`, with the given prefix groups.
StepBatch Decode(int n, int pos, const std::vector<PrefixGroup>& groups) {
  std::vector<std::pair<int, int>> seqs(n, {pos, 1});
  StepBatch b = Batch(seqs);
  b.decode_only = true;
  b.prefix_groups = groups;
  return b;
}

TEST(CudaStepPlan, DecodeGroupsTakeCascadeAttentionWithTheirSharedKeysSkippedByTheirRows) {
  // Rows 0-1 alone, 2-5 share 8 blocks (128 keys), 6-7 share 1 block (16 keys x 1 saved: below
  // the threshold of 128 saved key reads).
  const StepBatch b = Decode(8, 300, {{2, 4, 8}, {6, 2, 1}});
  CudaStepPlan plan;
  ASSERT_TRUE(PlanCudaStep(b, Shape(), Opt(2, int64_t{1} << 30), &plan).ok());
  ASSERT_EQ(plan.cascade.size(), 1u);
  EXPECT_EQ(plan.cascade[0], (CascadePlan{2, 4, 128, 2}));
  EXPECT_EQ(plan.key_begin, (std::vector<int32_t>{0, 0, 128, 128, 128, 128, 0, 0}));
  EXPECT_EQ(plan.prefill_scratch, kc::CascadeScratchBytes(4, 128, 8, 2, 64, 2));
  EXPECT_EQ(plan.rest_rows.size(), 8u);  // every row still takes the per-row kernel (its suffix)
}

TEST(CudaStepPlan, CascadeIsOffForMixedStepsWhenDisabledAndWhenScratchDoesNotFit) {
  StepBatch b = Decode(4, 300, {{0, 4, 8}});
  CudaStepPlan plan;
  CudaPlanOptions o = Opt(2, int64_t{1} << 30);
  o.cascade = false;
  ASSERT_TRUE(PlanCudaStep(b, Shape(), o, &plan).ok());
  EXPECT_TRUE(plan.cascade.empty());
  EXPECT_TRUE(plan.key_begin.empty());
  o = Opt(2, kc::CascadeScratchBytes(4, 128, 8, 2, 64, 2) - 1);
  ASSERT_TRUE(PlanCudaStep(b, Shape(), o, &plan).ok());
  EXPECT_TRUE(plan.cascade.empty());
  o = Opt(2, int64_t{1} << 30);
  o.min_rows = 1;  // single rows through the prefill path: no cascade (its rows are elsewhere)
  ASSERT_TRUE(PlanCudaStep(b, Shape(), o, &plan).ok());
  EXPECT_TRUE(plan.cascade.empty());
  b.decode_only = false;  // a step with prefill chunks: no cascade
  ASSERT_TRUE(PlanCudaStep(b, Shape(), Opt(2, int64_t{1} << 30), &plan).ok());
  EXPECT_TRUE(plan.cascade.empty());
  EXPECT_TRUE(plan.key_begin.empty());
}

// With the fused kernels no chunk or group needs scratch: a chunk and a group too large for the
// matrix products' scratch still take the prefill path and cascade attention, with none reserved.
TEST(CudaStepPlan, FusedKernelsNeedNoScratchSoNoLimitSendsRowsElsewhere) {
  CudaPlanOptions o = Opt(2, 0);
  o.fused = true;
  CudaStepPlan plan;
  ASSERT_TRUE(PlanCudaStep(Batch({{0, 128}, {0, 3}}), Shape(), o, &plan).ok());
  EXPECT_EQ(plan.prefill_seqs, (std::vector<int>{0}));
  EXPECT_EQ(plan.rest_rows, (std::vector<int32_t>{128, 129, 130}));
  EXPECT_EQ(plan.prefill_scratch, 0);
  ASSERT_TRUE(PlanCudaStep(Decode(4, 300, {{0, 4, 8}}), Shape(), o, &plan).ok());
  ASSERT_EQ(plan.cascade.size(), 1u);
  EXPECT_EQ(plan.cascade[0], (CascadePlan{0, 4, 128, 0}));
  EXPECT_EQ(plan.prefill_scratch, 0);
  o.fused = false;  // the same steps with the matrix products: no scratch allowed, none taken
  ASSERT_TRUE(PlanCudaStep(Batch({{0, 128}, {0, 3}}), Shape(), o, &plan).ok());
  EXPECT_TRUE(plan.prefill_seqs.empty());
  ASSERT_TRUE(PlanCudaStep(Decode(4, 300, {{0, 4, 8}}), Shape(), o, &plan).ok());
  EXPECT_TRUE(plan.cascade.empty());
}

TEST(CudaGraphShape, ContextsArePowersOfTwoFrom256WithinTheModel) {
  EXPECT_EQ(GraphContext(1, 4096), 256);
  EXPECT_EQ(GraphContext(256, 4096), 256);
  EXPECT_EQ(GraphContext(257, 4096), 512);
  EXPECT_EQ(GraphContext(3000, 4096), 4096);
  EXPECT_EQ(GraphContext(3000, 3500), 3500);
  EXPECT_EQ(GraphContext(100, 128), 128);
}

TEST(CudaGraphShape, PaddingKeepsTheRealRowsFirstAndWritesNothing) {
  StepBatch b = Decode(3, 40, {});
  b.max_blocks = 3;
  b.block_tables = {7, 8, 9, 4, 5, -1, 1, 2, 3};
  b.logits_rows = {0, 2};  // row 1 samples nothing this step
  StepBatch p;
  ASSERT_TRUE(PadDecodeStep(b, 8, 16, 16, &p));
  EXPECT_EQ(p.num_seqs(), 8);
  EXPECT_EQ(p.num_tokens(), 8);
  EXPECT_EQ(p.max_blocks, 16);
  EXPECT_TRUE(p.decode_only);
  EXPECT_EQ(p.token_ids[2], b.token_ids[2]);
  EXPECT_EQ(p.positions[2], 40);
  EXPECT_EQ(p.slot_mapping[2], b.slot_mapping[2]);
  for (int s = 3; s < 8; ++s) {
    EXPECT_EQ(p.slot_mapping[s], -1);
    EXPECT_EQ(p.positions[s], 0);
    EXPECT_EQ(p.block_tables[s * 16], 0);
    EXPECT_EQ(p.block_tables[s * 16 + 1], -1);
  }
  EXPECT_EQ(std::vector<int32_t>(p.block_tables.begin() + 16, p.block_tables.begin() + 19),
            (std::vector<int32_t>{4, 5, -1}));
  EXPECT_EQ(p.block_tables[16 + 3], -1);
  EXPECT_EQ(p.logits_rows, (std::vector<int32_t>{0, 2, 3, 4, 5, 6, 7, 0}));
  EXPECT_EQ(p.query_start.back(), 8);
  // What does not fit: a position past the shape's columns (40 / 16 = column 2), more sequences
  // than the bucket, a prefill chunk.
  EXPECT_FALSE(PadDecodeStep(b, 8, 2, 16, &p));
  EXPECT_FALSE(PadDecodeStep(b, 2, 16, 16, &p));
  // A table wider than the shape is cut where no position reaches.
  b.positions.assign(3, 20);
  ASSERT_TRUE(PadDecodeStep(b, 4, 2, 16, &p));
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{7, 8, 4, 5, 1, 2, 0, -1}));
  b.decode_only = false;
  EXPECT_FALSE(PadDecodeStep(b, 8, 16, 16, &p));
}

TEST(CudaLaunchMath, SplitsFillTheDeviceAndPartitionsStayWithinTheirLimit) {
  // Few rows: split until ~2 blocks per SM, never below 64 keys a split.
  EXPECT_EQ(kc::AttentionSplits(1, 8, 1001, 132), 15);
  EXPECT_EQ(kc::AttentionSplits(1, 8, 1001, 132, 32), 31);  // a lower floor (CudaTuning)
  EXPECT_EQ(kc::AttentionSplitsFor(1, 8, 1001, 132, 32), 31);
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
