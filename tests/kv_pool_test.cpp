// The KV pool's size from the backend: bytes per token in the backend's element type, the budget
// a GPU backend reports (Backend::KvBudgetBytes) or engine.kv_cache_memory, and the int32 slot
// clamp.
#include <gtest/gtest.h>

#include <limits>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "tests/small_model.h"

namespace llmq {
namespace {

// A CPU backend that sizes its pool as a bf16 GPU backend would: 2-byte K/V and a budget of its
// own (nullopt: none).
class DeviceLikeBackend : public Backend {
 public:
  DeviceLikeBackend(Backend* inner, std::optional<int64_t> budget)
      : inner_(inner), budget_(budget) {}
  std::string name() const override { return "devicelike"; }
  Status AllocateKv(int num_blocks, int block_size) override {
    allocated = num_blocks;
    return inner_->AllocateKv(num_blocks, block_size);
  }
  Status Forward(const StepBatch& b, float* logits) override { return inner_->Forward(b, logits); }
  Status CopyBlocks(const std::vector<std::pair<int, int>>& c) override {
    return inner_->CopyBlocks(c);
  }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  int64_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token() / 2; }
  std::optional<int64_t> KvBudgetBytes(double util, int max_tokens, int max_seqs) const override {
    asked_util = util;
    asked_step = {max_seqs, max_tokens};
    return budget_;
  }
  StepLimits default_step_limits() const override { return {1024, 8192}; }  // a GPU's

  int allocated = 0;
  mutable double asked_util = 0;
  mutable StepLimits asked_step;  // the limits KvBudgetBytes was asked for

 private:
  Backend* inner_;
  std::optional<int64_t> budget_;
};

class KvPoolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::MakeSmallModel("kv_pool_model", 5, 256, &cfg_, &w_);
    be_ = std::make_unique<CpuBackend>(cfg_, *w_);
  }
  static void TearDownTestSuite() {
    be_.reset();
    w_.reset();
  }
  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
  static std::unique_ptr<CpuBackend> be_;
};
ModelConfig KvPoolTest::cfg_;
std::unique_ptr<Weights> KvPoolTest::w_;
std::unique_ptr<CpuBackend> KvPoolTest::be_;

TEST_F(KvPoolTest, CpuBytesPerTokenAreFp32) {
  // 2 (K, V) x 2 layers x 1 kv head x 16 head_dim x 4 bytes.
  EXPECT_EQ(be_->kv_bytes_per_token(), 2 * 2 * 1 * 16 * 4);
  EXPECT_EQ(be_->kv_bytes_per_token(), cfg_.KvBytesPerToken(4));
  EXPECT_EQ(be_->KvBudgetBytes(0.9, 2048, 256),
            std::nullopt);  // the CPU takes engine.kv_cache_memory
}

TEST(KvBlocksFor, DividesTheBudgetAndClampsToInt32Slots) {
  EXPECT_EQ(KvBlocksFor(256, 1 << 20, 16), (1 << 20) / (256 * 16));
  EXPECT_EQ(KvBlocksFor(128, 1 << 20, 16), 2 * KvBlocksFor(256, 1 << 20, 16));  // bf16: twice
  EXPECT_EQ(KvBlocksFor(256, 256 * 16 * 3 + 5, 16), 3);                         // whole blocks only
  EXPECT_EQ(KvBlocksFor(256, 100, 16), 1);                                      // at least one
  EXPECT_EQ(KvBlocksFor(1, std::numeric_limits<int64_t>::max(), 16),
            std::numeric_limits<int32_t>::max() / 16);  // slots are int32
  EXPECT_EQ(KvBlocksFor(0, 1000, 1), 1000);             // a backend saying 0 divides by 1
}

TEST_F(KvPoolTest, BudgetComesFromTheConfigOrTheBackend) {
  EngineOptions o;
  o.kv_memory_bytes = 1 << 20;
  KvPoolPlan p;
  ASSERT_TRUE(PlanKvPool(*be_, o, &p).ok());
  EXPECT_EQ(p.num_blocks, (1 << 20) / (256 * 16));
  EXPECT_EQ(p.bytes_per_token, 256);
  EXPECT_EQ(p.budget_bytes, 1 << 20);
  EXPECT_EQ(p.source, "engine.kv_cache_memory");

  DeviceLikeBackend no_budget(be_.get(), std::nullopt);
  ASSERT_TRUE(PlanKvPool(no_budget, o, &p).ok());
  EXPECT_EQ(p.num_blocks, (1 << 20) / (128 * 16));  // half the bytes per token: twice the blocks

  DeviceLikeBackend gpu(be_.get(), int64_t{3} << 20);
  o.gpu_memory_utilization = 0.5;
  ASSERT_TRUE(PlanKvPool(gpu, o, &p).ok());
  EXPECT_EQ(gpu.asked_util, 0.5);
  EXPECT_EQ(p.num_blocks, (3 << 20) / (128 * 16));
  EXPECT_EQ(p.budget_bytes, int64_t{3} << 20);
  EXPECT_EQ(p.source, "devicelike: engine.gpu_memory_utilization 0.5 of the device");

  o.num_blocks = 7;  // given outright: no budget asked
  ASSERT_TRUE(PlanKvPool(gpu, o, &p).ok());
  EXPECT_EQ(p.num_blocks, 7);
  EXPECT_EQ(p.source, "engine.num_blocks");
}

TEST_F(KvPoolTest, CpuDefaultComesFromTheHostMemory) {
  EngineOptions o;
  o.kv_memory_bytes = 0;  // auto
  o.host_memory = {int64_t{1} << 30, "MemAvailable"};
  o.gpu_memory_utilization = 0.5;
  KvPoolPlan p;
  ASSERT_TRUE(PlanKvPool(*be_, o, &p).ok());
  HostKvInputs in;
  in.memory = int64_t{1} << 30;
  in.utilization = 0.5;
  in.weight_bytes = static_cast<int64_t>(be_->weight_bytes());
  // The step the engine will run: the CPU backend's limits (the options leave them auto).
  const SchedulerOptions step = ResolveStepLimits(o.scheduler, *be_);
  EXPECT_EQ(step.max_num_seqs, 256);
  in.working_bytes = be_->StepWorkingBytes(step.max_num_batched_tokens, step.max_num_seqs);
  EXPECT_GT(in.working_bytes, be_->StepWorkingBytes(1, 1));
  in.kv_bytes_per_token = 256;
  EXPECT_EQ(p.budget_bytes, HostKvBudget(in));
  EXPECT_EQ(p.num_blocks, KvBlocksFor(256, p.budget_bytes, 16));
  EXPECT_EQ(p.source, "engine.gpu_memory_utilization 0.5 of MemAvailable 1.00 GiB");
  // The model's context caps it: 2 x 256 sequences x 256 tokens.
  ASSERT_TRUE(PlanKvPool(*be_, o, &p, cfg_.max_position_embeddings).ok());
  EXPECT_EQ(p.budget_bytes, int64_t{2} * 256 * 256 * 256);
  // An explicit size wins; memory that the weights and working memory fill is a clear error.
  o.kv_memory_bytes = 1 << 20;
  ASSERT_TRUE(PlanKvPool(*be_, o, &p).ok());
  EXPECT_EQ(p.source, "engine.kv_cache_memory");
  o.kv_memory_bytes = 0;
  o.host_memory.bytes = 1000;
  const Status st = PlanKvPool(*be_, o, &p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("less than one block"), std::string::npos) << st.message();
}

TEST_F(KvPoolTest, ABudgetShortOfOneBlockIsAClearError) {
  DeviceLikeBackend full(be_.get(), 128 * 16 - 1);
  EngineOptions o;
  KvPoolPlan p;
  Status st = PlanKvPool(full, o, &p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gpu_memory_utilization"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("less than one block"), std::string::npos) << st.message();
  DeviceLikeBackend negative(be_.get(), -5);
  EXPECT_FALSE(PlanKvPool(negative, o, &p).ok());
  std::unique_ptr<LlmEngine> e;
  EXPECT_FALSE(LlmEngine::Create(cfg_, &full, nullptr, o, &e).ok());
}

TEST_F(KvPoolTest, EngineAllocatesThePlannedPoolAndChecksTheUtilization) {
  DeviceLikeBackend gpu(be_.get(), int64_t{1} << 20);
  EngineOptions o;
  std::unique_ptr<LlmEngine> e;
  ASSERT_TRUE(LlmEngine::Create(cfg_, &gpu, nullptr, o, &e).ok());
  EXPECT_EQ(gpu.asked_util, 0.9);  // the default
  EXPECT_EQ(e->num_blocks(), (1 << 20) / (128 * 16));
  EXPECT_EQ(gpu.allocated, e->num_blocks());
  EXPECT_EQ(e->kv_pool().num_blocks, e->num_blocks());
  for (double bad : {0.0, -0.1, 1.01}) {
    o.gpu_memory_utilization = bad;
    const Status st = LlmEngine::Create(cfg_, &gpu, nullptr, o, &e);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << bad;
  }
}

TEST_F(KvPoolTest, StepLimitsLeftAutoAreTheBackends) {
  EngineOptions o;  // engine.max_num_seqs and max_num_batched_tokens absent: 0, auto
  EXPECT_EQ(o.scheduler.max_num_seqs, 0);
  EXPECT_EQ(o.scheduler.max_num_batched_tokens, 0);
  o.kv_memory_bytes = int64_t{1} << 20;
  std::unique_ptr<LlmEngine> e;
  ASSERT_TRUE(LlmEngine::Create(cfg_, be_.get(), nullptr, o, &e).ok());
  EXPECT_EQ(e->max_num_seqs(), 256) << "the CPU backend's";
  EXPECT_EQ(e->max_num_batched_tokens(), 2048);
  DeviceLikeBackend gpu(be_.get(), int64_t{1} << 20);
  ASSERT_TRUE(LlmEngine::Create(cfg_, &gpu, nullptr, o, &e).ok());
  EXPECT_EQ(e->max_num_seqs(), 1024) << "the GPU backend's";
  EXPECT_EQ(e->max_num_batched_tokens(), 8192);
  EXPECT_EQ(gpu.asked_step.max_num_seqs, 1024) << "its budget reserves the step it will run";
  EXPECT_EQ(gpu.asked_step.max_num_batched_tokens, 8192);
  // Each set on its own: the other stays the backend's.
  o.scheduler.max_num_seqs = 64;
  ASSERT_TRUE(LlmEngine::Create(cfg_, &gpu, nullptr, o, &e).ok());
  EXPECT_EQ(e->max_num_seqs(), 64);
  EXPECT_EQ(e->max_num_batched_tokens(), 8192);
  EXPECT_EQ(gpu.asked_step.max_num_seqs, 64);
  o.scheduler = {.max_num_batched_tokens = 4096, .max_num_seqs = 0};
  ASSERT_TRUE(LlmEngine::Create(cfg_, be_.get(), nullptr, o, &e).ok());
  EXPECT_EQ(e->max_num_seqs(), 256);
  EXPECT_EQ(e->max_num_batched_tokens(), 4096);
  o.scheduler.max_num_seqs = -1;
  EXPECT_EQ(LlmEngine::Create(cfg_, be_.get(), nullptr, o, &e).code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace llmq
