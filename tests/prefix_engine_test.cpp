// The prefix-aware engine: the prefix cache, the planner, preemption and n > 1 change how much is
// computed, never what is generated; shared prefixes are computed once.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>

#include "bench/workloads.h"
#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "engine/tools/model_maker.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using Outputs = std::map<std::string, RequestOutput>;

struct RunStats {
  Outputs out;
  int64_t computed = 0, cached = 0, preemptions = 0;
};

RunStats RunAll(const ModelConfig& cfg, Backend* be, const std::vector<Request>& reqs,
                EngineOptions opt) {
  std::unique_ptr<LlmEngine> engine;
  EXPECT_TRUE(LlmEngine::Create(cfg, be, nullptr, opt, &engine).ok());
  for (const Request& r : reqs) engine->Add(r);
  RunStats rs;
  int steps = 0;
  std::vector<RequestOutput> step;
  while (engine->HasWork()) {
    EXPECT_LT(++steps, 200000) << "no progress";
    if (steps >= 200000) break;
    step.clear();
    EXPECT_TRUE(engine->Step(&step).ok());
    for (RequestOutput& o : step) {
      rs.computed += o.metrics.computed_prompt_tokens;
      rs.cached += o.metrics.cached_prompt_tokens;
      rs.out[o.id] = std::move(o);
    }
  }
  rs.preemptions = engine->stats().preemptions;
  EXPECT_EQ(engine->blocks().num_in_use(), 0) << "blocks leaked";
  const Status st = engine->CheckInvariants();
  EXPECT_TRUE(st.ok()) << st.message();
  return rs;
}

std::vector<Request> Requests(const bench::Prompts& prompts, int max_tokens) {
  std::vector<Request> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt_ids = prompts[i];
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

class PrefixEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::MakeSmallModel("prefix_model", 17, 2048, &cfg_, &w_);
    be_ = std::make_unique<CpuBackend>(cfg_, *w_);
  }
  static void TearDownTestSuite() { be_.reset(), w_.reset(); }
  // Each request run alone, without the prefix features: the reference outputs.
  static Outputs EachAlone(const std::vector<Request>& reqs, const EngineOptions& base,
                           Backend* be = nullptr) {
    Outputs alone;
    for (const Request& r : reqs) {
      EngineOptions o = base;
      o.enable_prefix_cache = o.enable_planner = o.shared_prefix_attention = false;
      alone.merge(RunAll(cfg_, be ? be : be_.get(), {r}, o).out);
    }
    return alone;
  }
  static void ExpectSharedPrefixNeverChangesOutputs(Backend* be);
  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
  static std::unique_ptr<CpuBackend> be_;
};
ModelConfig PrefixEngineTest::cfg_;
std::unique_ptr<Weights> PrefixEngineTest::w_;
std::unique_ptr<CpuBackend> PrefixEngineTest::be_;

TEST_F(PrefixEngineTest, CacheAndPlannerNeverChangeGreedyOutputs) {
  const auto reqs = Requests(bench::Nested(3, 6, 40, 50, 5, 40, cfg_.vocab_size, 4), 8);
  EngineOptions base;
  base.num_blocks = 400;
  base.scheduler.max_num_batched_tokens = 96;  // prefills are chunked and mixed with decodes
  const Outputs reference = EachAlone(reqs, base);
  for (bool cache : {false, true})
    for (bool planner : {false, true}) {
      EngineOptions o = base;
      o.enable_prefix_cache = cache;
      o.enable_planner = planner;
      const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
      testing::ExpectSameIds(
          rs.out, reference,
          cache ? (planner ? "cache+planner" : "cache") : (planner ? "planner" : "plain"));
      if (cache)
        EXPECT_GT(rs.cached, 0);
      else
        EXPECT_EQ(rs.cached, 0);
    }
}

TEST_F(PrefixEngineTest, SharedInstructionsComputeThePrefixOnce) {
  const bench::Prompts prompts = bench::SharedInstructions(512, 1000, 100, 300, cfg_.vocab_size, 8);
  const int64_t unique = bench::UniqueTokens(prompts);
  EngineOptions o;
  o.num_blocks = 6000;
  o.scheduler.max_num_batched_tokens = 4096;
  const RunStats rs = RunAll(cfg_, be_.get(), Requests(prompts, 32), o);
  ASSERT_EQ(rs.out.size(), 512u);
  std::printf("shared instructions: unique %lld, computed %lld (%.3fx), cached %lld\n",
              static_cast<long long>(unique), static_cast<long long>(rs.computed),
              static_cast<double>(rs.computed) / unique, static_cast<long long>(rs.cached));
  EXPECT_LE(rs.computed, 1.05 * unique);
  for (const auto& [id, o] : rs.out) EXPECT_EQ(o.completions.at(0).ids.size(), 32u) << id;
}

TEST_F(PrefixEngineTest, NestedPrefixesWithASmallPoolComputeEachOnceWithThePlanner) {
  // 8 templates x 64 documents; the pool holds one template's group, not all 8 prefixes.
  const bench::Prompts prompts = bench::Nested(8, 64, 64, 336, 100, 300, cfg_.vocab_size, 21);
  const int64_t unique = bench::UniqueTokens(prompts);
  EngineOptions o;
  o.num_blocks = 120;  // a prefix is 25 blocks; 8 of them would be 200
  o.scheduler.max_num_seqs = 4;
  o.scheduler.max_num_batched_tokens = 1024;
  const RunStats planned = RunAll(cfg_, be_.get(), Requests(prompts, 8), o);
  o.enable_planner = false;
  const RunStats fcfs = RunAll(cfg_, be_.get(), Requests(prompts, 8), o);
  std::printf(
      "nested, small pool: unique %lld | planner: computed %lld (%.3fx) | FCFS+LRU: computed %lld "
      "(%.3fx)\n",
      static_cast<long long>(unique), static_cast<long long>(planned.computed),
      static_cast<double>(planned.computed) / unique, static_cast<long long>(fcfs.computed),
      static_cast<double>(fcfs.computed) / unique);
  EXPECT_LE(planned.computed, 1.05 * unique);
  EXPECT_GT(fcfs.computed, planned.computed);
  testing::ExpectSameIds(planned.out, fcfs.out, "planner vs fcfs");
}

// Requests admitted together whose shared prefix is not cached yet and ends inside a block, with
// short documents, so that most prompts end in that block too: a request that needs the start of
// a block another is computing waits for those tokens, then copies them, so the prefix is computed
// once (computed == unique prompt tokens, where each request used to compute the prefix's tail
// again), and the outputs are those of each request run alone.
TEST_F(PrefixEngineTest, PrefixesEndingInsideABlockAreComputedOnceWhenAdmittedTogether) {
  // BOS + 36 tokens (2 blocks + 5); and BOS + 20 > 4 templates of 60 (81 tokens: 5 blocks + 1).
  const bench::Prompts flat = bench::SharedInstructions(6, 36, 1, 10, cfg_.vocab_size, 41);
  const bench::Prompts nested = bench::Nested(4, 8, 20, 60, 1, 10, cfg_.vocab_size, 42);
  for (const bench::Prompts* prompts : {&flat, &nested}) {
    const std::vector<Request> reqs = Requests(*prompts, 6);
    const int64_t unique = bench::UniqueTokens(*prompts);
    EngineOptions o;
    o.num_blocks = 400;
    const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
    EXPECT_EQ(rs.computed, unique) << prompts->size() << " prompts";
    testing::ExpectSameIds(rs.out, EachAlone(reqs, o), "admitted together vs alone");
  }
}

TEST_F(PrefixEngineTest, MoreKvThanThePoolPreemptsAndCompletesIdentically) {
  const auto reqs = Requests(bench::SharedInstructions(24, 40, 10, 60, cfg_.vocab_size, 5), 60);
  EngineOptions roomy;
  roomy.num_blocks = 1000;
  EngineOptions tight = roomy;
  tight.num_blocks = 20;  // each request needs up to 11 blocks by its end
  const RunStats a = RunAll(cfg_, be_.get(), reqs, roomy);
  const RunStats b = RunAll(cfg_, be_.get(), reqs, tight);
  EXPECT_EQ(a.preemptions, 0);
  EXPECT_GT(b.preemptions, 0);
  testing::ExpectSameIds(a.out, b.out, "preempted vs roomy");
}

TEST_F(PrefixEngineTest, APromptThatCanNeverFitIsRefusedAndTheRestRun) {
  auto reqs = Requests(bench::SharedInstructions(4, 20, 5, 10, cfg_.vocab_size, 6), 4);
  Request huge = reqs[0];
  huge.id = "huge";
  huge.prompt_ids.resize(400, 7);
  reqs.push_back(huge);
  EngineOptions o;
  o.num_blocks = 16;  // 256 tokens
  const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
  ASSERT_EQ(rs.out.size(), 5u);
  EXPECT_FALSE(rs.out.at("huge").ok());
  EXPECT_NE(rs.out.at("huge").error.find("exceed the KV cache"), std::string::npos);
  for (const auto& [id, o] : rs.out) {
    if (id != "huge") {
      EXPECT_TRUE(o.ok()) << id << ": " << o.error;
    }
  }
}

TEST_F(PrefixEngineTest, ParallelSamplesShareThePromptBlocks) {
  auto reqs = Requests(bench::SharedInstructions(1, 100, 20, 20, cfg_.vocab_size, 9), 12);
  reqs[0].n = 4;
  reqs[0].params.temperature = 1.0f;
  reqs[0].params.seed = 3;
  EngineOptions o;
  o.num_blocks = 64;
  const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
  const RequestOutput& out = rs.out.at("r0");
  ASSERT_EQ(out.completions.size(), 4u);
  EXPECT_EQ(out.metrics.computed_prompt_tokens, static_cast<int>(reqs[0].prompt_ids.size()));
  EXPECT_EQ(out.metrics.completion_tokens, 48);
  std::set<std::vector<int32_t>> distinct;
  for (const Completion& c : out.completions) distinct.insert(c.ids);
  EXPECT_GT(distinct.size(), 1u) << "samples with their own generators differ";
  // Same seed, same samples.
  const RunStats again = RunAll(cfg_, be_.get(), reqs, o);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(again.out.at("r0").completions[k].ids, out.completions[k].ids);
}

// Found in review: a request ahead of a pinned group in queue order (its prompt is exactly the
// group's outer prefix) got preempted and could never be readmitted while the group's pin held
// blocks it needed; nothing ran, so nothing ever freed them.
TEST_F(PrefixEngineTest, PinsNeverStallAPreemptedRequest) {
  Rng rng(1);
  const std::vector<int32_t> s = bench::RandomRun(rng, 32, cfg_.vocab_size);
  std::vector<int32_t> t = s;
  const std::vector<int32_t> tmpl = bench::RandomRun(rng, 16, cfg_.vocab_size);
  t.insert(t.end(), tmpl.begin(), tmpl.end());
  auto reqs = Requests({s, bench::WithDocument(t, rng, 5, 5, cfg_.vocab_size),
                        bench::WithDocument(t, rng, 5, 5, cfg_.vocab_size)},
                       100);
  reqs[0].params.max_tokens = 160;  // needs all 12 blocks by its end
  EngineOptions o;
  o.num_blocks = 12;
  o.scheduler.max_num_seqs = 2;
  const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
  EXPECT_EQ(rs.out.size(), 3u);
  EXPECT_GT(rs.preemptions, 0);
}

TEST_F(PrefixEngineTest, HugeMaxTokensRunsToTheContextWithoutOverflow) {
  auto reqs = Requests(bench::SharedInstructions(1, 10, 5, 5, cfg_.vocab_size, 2), 0);
  reqs[0].params.max_tokens = std::numeric_limits<int>::max();
  EngineOptions o;
  o.num_blocks = 200;
  const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
  const RequestOutput& out = rs.out.at("r0");
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(reqs[0].prompt_ids.size() + out.completions[0].ids.size(),
            static_cast<size_t>(cfg_.max_position_embeddings));
  EXPECT_EQ(out.completions[0].finish_reason, "length");
}

TEST_F(PrefixEngineTest, RecomputedPromptsOfForkedSamplesAreCounted) {
  auto reqs = Requests(bench::SharedInstructions(1, 19, 0, 0, cfg_.vocab_size, 3), 40);
  reqs[0].n = 2;
  EngineOptions o;
  o.num_blocks = 4;  // two samples of 60 tokens cannot both stay resident
  o.enable_prefix_cache = false;
  const RunStats rs = RunAll(cfg_, be_.get(), reqs, o);
  const RequestOutput& out = rs.out.at("r0");
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_GT(out.metrics.preemptions, 0);
  EXPECT_GE(out.metrics.computed_prompt_tokens, 2 * out.metrics.prompt_tokens);
}

// Forwards to a backend and counts the steps that carried prefix groups.
class GroupCountingBackend : public Backend {
 public:
  explicit GroupCountingBackend(Backend* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  Status AllocateKv(int num_blocks, int block_size) override {
    return inner_->AllocateKv(num_blocks, block_size);
  }
  Status Forward(const StepBatch& b, float* logits) override {
    if (!b.prefix_groups.empty()) ++grouped_steps;
    return inner_->Forward(b, logits);
  }
  Status CopyBlocks(const std::vector<std::pair<int, int>>& src_dst) override {
    return inner_->CopyBlocks(src_dst);
  }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  int64_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }
  int grouped_steps = 0;

 private:
  Backend* inner_;
};

// Shared-prefix attention (decode reads a group's shared blocks once per step) and token-granular
// prefix reuse change what is read and computed, never what is generated: greedy and seeded
// sampling give the same ids with the features on and off, and as each request run alone.
void PrefixEngineTest::ExpectSharedPrefixNeverChangesOutputs(Backend* be) {
  // Prefixes that end inside a block (45 and 37 tokens), so reuse copies partial blocks too.
  bench::Prompts prompts = bench::SharedInstructions(10, 45, 3, 30, cfg_.vocab_size, 31);
  const bench::Prompts more = bench::SharedInstructions(6, 37, 1, 20, cfg_.vocab_size, 32);
  prompts.insert(prompts.end(), more.begin(), more.end());
  for (bool sampled : {false, true}) {
    std::vector<Request> reqs = Requests(prompts, 24);
    if (sampled)
      for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].params.temperature = 0.8f;
        reqs[i].params.top_p = 0.9f;
        reqs[i].params.seed = 100 + i;
        reqs[i].n = i % 3 == 0 ? 2 : 1;
      }
    EngineOptions base;
    base.num_blocks = 400;
    base.scheduler.max_num_batched_tokens = 128;  // chunked prefills mixed with decodes
    const Outputs alone = EachAlone(reqs, base, be);
    for (bool cache : {false, true})
      for (bool shared : {false, true}) {
        EngineOptions o = base;
        o.enable_prefix_cache = cache;
        o.shared_prefix_attention = shared;
        GroupCountingBackend counting(be);
        const RunStats rs = RunAll(cfg_, &counting, reqs, o);
        const std::string what = std::string(sampled ? "seeded" : "greedy") +
                                 (cache ? " cache" : " no-cache") +
                                 (shared ? " shared-attention" : " plain-attention");
        testing::ExpectSameIds(rs.out, alone, what.c_str());
        if (shared && cache) {
          EXPECT_GT(counting.grouped_steps, 0) << what;
        } else if (!shared) {
          EXPECT_EQ(counting.grouped_steps, 0) << what;
        }
      }
  }
}

TEST_F(PrefixEngineTest, SharedPrefixAttentionNeverChangesOutputs) {
  ExpectSharedPrefixNeverChangesOutputs(be_.get());
}

// The same over a bf16 KV cache (engine.kv_dtype): reused and copied blocks (whole and partial, and
// a forked sample's) hold the bf16 values computed once, so reuse still changes no output.
TEST_F(PrefixEngineTest, SharedPrefixAttentionNeverChangesOutputsWithBf16Kv) {
  CpuBackend bf16(cfg_, *w_, kernels::WeightType::kF32, KvDtype::kBf16);
  ExpectSharedPrefixNeverChangesOutputs(&bf16);
}

TEST(PrefixEngineStories, CacheOnOffAndPlannerGiveTheSameStories) {
  const std::string dir = testing::SharedModel("stories260K");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "stories260K");
  Model m;
  ASSERT_TRUE(LoadModel(dir, &m).ok());
  std::vector<Request> reqs;
  const char* docs[] = {"Lily had a red ball.", "Tom saw a big dog.", "The sun was hot.",
                        "A bird sang."};
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.id = "s" + std::to_string(i);
    const std::string text =
        std::string(
            "Once upon a time, in a small house near the woods, there lived a kind old man. ") +
        docs[i % 4] + (i >= 4 ? " Then" : "");
    for (int id : m.tokenizer->Encode(text)) r.prompt_ids.push_back(id);
    r.params.temperature = 0;
    r.params.max_tokens = 30;
    reqs.push_back(r);
  }
  EngineOptions plain;
  plain.num_blocks = 200;
  plain.enable_prefix_cache = plain.enable_planner = false;
  Outputs alone;
  for (const Request& r : reqs) alone.merge(RunAll(m.cfg, m.backend.get(), {r}, plain).out);
  EngineOptions full = plain;
  full.enable_prefix_cache = full.enable_planner = true;
  const RunStats rs = RunAll(m.cfg, m.backend.get(), reqs, full);
  testing::ExpectSameIds(rs.out, alone, "stories: cache + planner vs alone");
  EXPECT_GT(rs.cached, 0);
}

}  // namespace
}  // namespace llmq
