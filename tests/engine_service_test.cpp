// The engine as a long-lived service: Cancel in every state a request can be in, Add between steps
// over many windows with bounded bookkeeping, backend and planner failures that fail only what they
// touch, the default seed, and the request metrics (exact, on a manual clock). Invariants are
// checked after every step.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <new>
#include <set>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "tests/manual_time.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using Outputs = std::map<std::string, RequestOutput>;

// A CpuBackend that fails chosen calls (1-based) without touching the KV cache.
class FlakyBackend : public Backend {
 public:
  explicit FlakyBackend(Backend* inner) : inner_(inner) {}
  std::string name() const override { return "flaky"; }
  Status AllocateKv(int num_blocks, int block_size) override {
    if (fail_alloc) return Status::Internal("out of device memory");
    return inner_->AllocateKv(num_blocks, block_size);
  }
  Status Forward(const StepBatch& batch, float* logits) override {
    if (fail_forward.count(++forward_calls)) return Status::Internal("device lost");
    if (time) time->Advance(std::chrono::seconds(1));
    return inner_->Forward(batch, logits);
  }
  Status CopyBlocks(const std::vector<std::pair<int, int>>& src_dst) override {
    if (fail_copy.count(++copy_calls)) return Status::Internal("copy failed");
    return inner_->CopyBlocks(src_dst);
  }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  int64_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }

  bool fail_alloc = false;
  std::set<int> fail_forward, fail_copy;
  int forward_calls = 0, copy_calls = 0;
  testing::ManualTime* time = nullptr;  // when set, each Forward takes one second of it

 private:
  Backend* inner_;
};

class EngineServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::MakeSmallModel("service_model", 23, 512, &cfg_, &w_);
    be_ = std::make_unique<CpuBackend>(cfg_, *w_);
  }
  static void TearDownTestSuite() { be_.reset(), w_.reset(); }

  static std::unique_ptr<LlmEngine> Make(const EngineOptions& opt, Backend* be = nullptr) {
    std::unique_ptr<LlmEngine> e;
    const Status st = LlmEngine::Create(cfg_, be ? be : be_.get(), nullptr, opt, &e);
    EXPECT_TRUE(st.ok()) << st.message();
    return e;
  }

  // Greedy requests "<prefix>-<i>": `shared` common leading tokens, then `own` tokens of their own.
  static std::vector<Request> Requests(const std::string& prefix, int count, int shared, int own,
                                       int max_tokens, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> common;
    for (int j = 0; j < shared; ++j)
      common.push_back(3 + static_cast<int>(rng.NextU64() % (cfg_.vocab_size - 3)));
    std::vector<Request> reqs;
    for (int i = 0; i < count; ++i) {
      Request r;
      r.id = prefix + "-" + std::to_string(i);
      r.prompt_ids = common;
      for (int j = 0; j < own; ++j)
        r.prompt_ids.push_back(3 + static_cast<int>(rng.NextU64() % (cfg_.vocab_size - 3)));
      r.params.temperature = 0;
      r.params.max_tokens = max_tokens;
      r.params.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    return reqs;
  }

  // Steps until done, checking the invariants after every step; `before_step(k)` runs before
  // step k (k = 0 before the first). Outputs by id; `failed_steps` counts non-OK Steps.
  static Outputs Drive(LlmEngine* e, const std::function<void(int)>& before_step = nullptr,
                       int* failed_steps = nullptr) {
    Outputs out;
    std::vector<RequestOutput> step;
    for (int k = 0; k < 100000; ++k) {
      if (before_step) before_step(k);
      if (!e->HasWork()) break;
      step.clear();
      const Status st = e->Step(&step);
      if (!st.ok() && failed_steps) ++*failed_steps;
      for (RequestOutput& o : step) {
        EXPECT_FALSE(out.count(o.id)) << o.id << " reported twice";
        out[o.id] = std::move(o);
      }
      const Status invariants = e->CheckInvariants();
      EXPECT_TRUE(invariants.ok()) << "after step " << k << ": " << invariants.message();
      if (!invariants.ok()) break;
    }
    EXPECT_FALSE(e->HasWork());
    EXPECT_EQ(e->num_unfinished(), 0u);
    EXPECT_EQ(e->blocks().num_in_use(), 0) << "blocks leaked (or still pinned)";
    EXPECT_EQ(e->blocks().num_available(), e->num_blocks());
    return out;
  }

  static Outputs RunAll(const std::vector<Request>& reqs, const EngineOptions& opt,
                        Backend* be = nullptr, int* failed_steps = nullptr) {
    auto e = Make(opt, be);
    for (const Request& r : reqs) e->Add(r);
    return Drive(e.get(), nullptr, failed_steps);
  }

  static void ExpectSame(const Outputs& got, const Outputs& want, const std::string& what) {
    for (const auto& [id, w] : want) {
      ASSERT_TRUE(got.count(id)) << what << ": " << id << " missing";
      const RequestOutput& g = got.at(id);
      ASSERT_TRUE(g.ok()) << what << ": " << id << ": " << g.error;
      ASSERT_EQ(g.completions.size(), w.completions.size()) << what << " " << id;
      for (size_t k = 0; k < w.completions.size(); ++k)
        EXPECT_EQ(g.completions[k].ids, w.completions[k].ids) << what << " " << id << " #" << k;
    }
  }

  static ModelConfig cfg_;
  static std::unique_ptr<Weights> w_;
  static std::unique_ptr<CpuBackend> be_;
};
ModelConfig EngineServiceTest::cfg_;
std::unique_ptr<Weights> EngineServiceTest::w_;
std::unique_ptr<CpuBackend> EngineServiceTest::be_;

// One Cancel scenario: requests, options, which one to cancel and before which step, and what the
// engine's counts say just before (the state the request is in).
struct CancelCase {
  std::string name;
  std::vector<Request> reqs;
  EngineOptions opt;
  std::string victim;
  int before_step;
  std::function<void(const LlmEngine&)> expect_state;
};

class EngineCancelTest : public EngineServiceTest {
 protected:
  static void RunCase(const CancelCase& c) {
    SCOPED_TRACE(c.name);
    std::vector<Request> others;
    for (const Request& r : c.reqs)
      if (r.id != c.victim) others.push_back(r);
    const Outputs reference = RunAll(others, c.opt);

    auto e = Make(c.opt);
    for (const Request& r : c.reqs) e->Add(r);
    bool cancelled = false;
    const Outputs got = Drive(e.get(), [&](int k) {
      if (k != c.before_step) return;
      ASSERT_TRUE(e->HasWork());
      if (c.expect_state) c.expect_state(*e);
      const size_t unfinished = e->num_unfinished();
      cancelled = e->Cancel(c.victim);
      EXPECT_EQ(e->num_unfinished(), unfinished) << "reported on the next step";
      EXPECT_FALSE(e->Cancel(c.victim)) << "a second Cancel of the same id";
      const Status st = e->CheckInvariants();
      EXPECT_TRUE(st.ok()) << "after Cancel: " << st.message();
    });
    ASSERT_TRUE(cancelled);
    ASSERT_TRUE(got.count(c.victim));
    const RequestOutput& v = got.at(c.victim);
    EXPECT_TRUE(v.cancelled);
    EXPECT_EQ(v.error, "cancelled");
    EXPECT_TRUE(v.completions.empty());
    EXPECT_EQ(got.size(), c.reqs.size());
    ExpectSame(got, reference, c.name);
    EXPECT_FALSE(e->Cancel(c.victim)) << "finished";
    EXPECT_FALSE(e->Cancel("no-such-id"));
  }
};

TEST_F(EngineCancelTest, InTheUnplannedWindow) {
  CancelCase c{"window", Requests("w", 6, 16, 8, 6, 1), {}, "w-3", 0, nullptr};
  c.opt.num_blocks = 64;
  c.expect_state = [](const LlmEngine& e) {
    EXPECT_EQ(e.num_window(), 6u);
    EXPECT_EQ(e.num_queued(), 0u);
  };
  RunCase(c);
}

// max_num_seqs 1: one running, a few Sequences waiting, the rest only planned.
EngineOptions OneAtATime() {
  EngineOptions o;
  o.num_blocks = 64;
  o.enable_planner = false;  // arrival order, so positions are known
  o.scheduler.max_num_seqs = 1;
  return o;
}

TEST_F(EngineCancelTest, PlannedButNotMaterialized) {
  CancelCase c{"planned", Requests("p", 12, 0, 10, 4, 2), OneAtATime(), "p-10", 1, nullptr};
  c.expect_state = [](const LlmEngine& e) {
    EXPECT_EQ(e.num_window(), 0u);
    EXPECT_EQ(e.num_running(), 1u);
    EXPECT_EQ(e.num_queued(), 11u);
  };
  RunCase(c);
}

TEST_F(EngineCancelTest, Waiting) {
  CancelCase c{"waiting", Requests("q", 8, 0, 10, 4, 3), OneAtATime(), "q-1", 1, nullptr};
  c.expect_state = [](const LlmEngine& e) { EXPECT_EQ(e.num_queued(), 7u); };
  RunCase(c);
}

TEST_F(EngineCancelTest, RunningInPrefill) {
  CancelCase c{"prefill", Requests("f", 4, 0, 40, 6, 4), OneAtATime(), "f-0", 2, nullptr};
  c.opt.scheduler.max_num_batched_tokens = 8;  // a 40-token prompt takes 5 steps
  c.expect_state = [](const LlmEngine& e) {
    EXPECT_EQ(e.num_running(), 1u);
    EXPECT_EQ(e.stats().tokens_generated, 0);
  };
  RunCase(c);
}

TEST_F(EngineCancelTest, RunningInDecode) {
  CancelCase c{"decode", Requests("d", 4, 0, 20, 12, 5), OneAtATime(), "d-0", 4, nullptr};
  c.expect_state = [](const LlmEngine& e) {
    EXPECT_EQ(e.num_running(), 1u);
    EXPECT_EQ(e.stats().tokens_generated, 4);
  };
  RunCase(c);
}

TEST_F(EngineCancelTest, ForkedSamplesAllReleased) {
  CancelCase c{"forked", Requests("n", 4, 8, 14, 10, 6), {}, "n-1", 3, nullptr};
  c.reqs[1].n = 3;  // greedy: three identical samples, each with its own blocks after the fork
  c.opt.num_blocks = 64;
  c.opt.scheduler.max_num_seqs = 4;
  c.expect_state = [](const LlmEngine& e) {
    EXPECT_GE(e.stats().tokens_generated, 3 + 4);
    EXPECT_GE(e.blocks().num_in_use(), 6);
  };
  RunCase(c);
}

// A group of five sharing two blocks of prefix, admitted one at a time: the engine pins the
// prefix once the first member computed it.
CancelCase Group(const std::string& name, const std::vector<Request>& reqs, const std::string& who,
                 int before) {
  CancelCase c{name, reqs, {}, who, before, nullptr};
  c.opt.num_blocks = 64;
  c.opt.scheduler.max_num_seqs = 1;
  return c;
}

TEST_F(EngineCancelTest, GroupMemberWhoseBlocksArePinned) {
  // g-0 computed the prefix in step 0; step 1 pinned it; cancel g-0 while it decodes.
  RunCase(Group("pinned runner", Requests("g", 5, 32, 8, 6, 7), "g-0", 2));
}

TEST_F(EngineCancelTest, LastMemberOfAPinnedGroupLeavesNoPinBehind) {
  // The group's last member is the last request of all: nothing admitted after it would ever
  // move the admission mark past the group's end if the hole stalled it.
  RunCase(Group("last member", Requests("g", 5, 32, 8, 6, 8), "g-4", 2));
}

TEST_F(EngineCancelTest, MiddleMemberOfAPinnedGroup) {
  RunCase(Group("middle member", Requests("g", 5, 32, 8, 6, 9), "g-2", 3));
}

TEST_F(EngineServiceTest, AddBetweenStepsOverAThousandWindowsKeepsBookkeepingBounded) {
  EngineOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 96;
  opt.scheduler.max_num_seqs = 4;
  auto e = Make(opt);
  const int kWindows = 1000;
  int added = 0, cancelled = 0;
  size_t max_bookkeeping = 0;
  Rng rng(11);
  const Outputs out = Drive(e.get(), [&](int k) {
    max_bookkeeping = std::max(max_bookkeeping, e->bookkeeping_size());
    if ((k % 2 != 0 && e->HasWork()) || added >= kWindows) return;
    // Three requests sharing two blocks, then their own few tokens: one group per window.
    for (Request& r : Requests("w" + std::to_string(added), 3, 8, 2 + added % 3, 2, added))
      e->Add(std::move(r));
    ++added;
    if (added % 10 == 0) cancelled += e->Cancel("w" + std::to_string(added - 1) + "-1");
    if (added % 25 == 0) cancelled += e->Cancel("w" + std::to_string(added - 3) + "-0");
  });
  EXPECT_EQ(added, kWindows);
  EXPECT_EQ(out.size(), 3u * kWindows);
  int n_cancelled = 0;
  for (const auto& [id, o] : out) {
    n_cancelled += o.cancelled;
    EXPECT_TRUE(o.ok() || o.cancelled) << id << ": " << o.error;
  }
  EXPECT_EQ(n_cancelled, cancelled);
  EXPECT_GT(cancelled, 0);
  // Bounded by what is in flight (a few windows), not by the 3,000 requests seen.
  EXPECT_LT(max_bookkeeping, 40u);
  EXPECT_EQ(e->bookkeeping_size(), 0u);
}

TEST_F(EngineServiceTest, BackendFailureFailsOnlyThatStepsRequests) {
  const std::vector<Request> reqs = Requests("b", 6, 0, 12, 8, 12);
  EngineOptions opt;
  opt.num_blocks = 64;
  opt.scheduler.max_num_seqs = 2;
  const Outputs clean = RunAll(reqs, opt);
  for (int fail_at : {1, 3, 9}) {
    SCOPED_TRACE("forward call " + std::to_string(fail_at));
    FlakyBackend flaky(be_.get());
    flaky.fail_forward = {fail_at};
    int failed_steps = 0;
    const Outputs got = RunAll(reqs, opt, &flaky, &failed_steps);
    EXPECT_EQ(failed_steps, 1);
    ASSERT_EQ(got.size(), reqs.size());
    Outputs survivors;
    int failed = 0;
    for (const auto& [id, o] : got) {
      if (o.ok()) {
        survivors[id] = clean.at(id);
        continue;
      }
      ++failed;
      EXPECT_EQ(o.error, "backend: device lost") << id;
      EXPECT_FALSE(o.cancelled);
    }
    EXPECT_GE(failed, 1);
    EXPECT_LE(failed, 2) << "only the requests of the failed step (max_num_seqs 2)";
    ExpectSame(got, survivors, "survivors");
  }
}

TEST_F(EngineServiceTest, AFailedStepRegistersNothingInThePrefixCache) {
  // Two requests with the same 48-token prefix, one at a time: the first one's prefill fails
  // (the backend writes nothing), so the second must compute the prefix itself, not read the
  // failed step's blocks from the cache.
  const std::vector<Request> reqs = Requests("c", 2, 48, 4, 5, 13);
  EngineOptions opt = OneAtATime();
  const Outputs clean = RunAll(reqs, opt);
  FlakyBackend flaky(be_.get());
  flaky.fail_forward = {1};
  int failed_steps = 0;
  const Outputs got = RunAll(reqs, opt, &flaky, &failed_steps);
  EXPECT_EQ(failed_steps, 1);
  EXPECT_EQ(got.at("c-0").error, "backend: device lost");
  EXPECT_EQ(got.at("c-1").metrics.cached_prompt_tokens, 0);
  ExpectSame(got, {{"c-1", clean.at("c-1")}}, "after a failed step");
}

TEST_F(EngineServiceTest, FailedCopyOnWriteFailsTheForkedRequestOnly) {
  std::vector<Request> reqs = Requests("k", 3, 0, 10, 6, 14);  // 10 tokens: a partial block
  reqs[0].n = 2;  // the forks' first decode copies the shared partial block
  EngineOptions opt;
  opt.num_blocks = 64;
  opt.scheduler.max_num_seqs = 1;  // k-1 and k-2 wait while k-0's samples decode
  const Outputs clean = RunAll(reqs, opt);
  FlakyBackend flaky(be_.get());
  flaky.fail_copy = {1};
  int failed_steps = 0;
  const Outputs got = RunAll(reqs, opt, &flaky, &failed_steps);
  EXPECT_EQ(failed_steps, 1);
  EXPECT_EQ(flaky.copy_calls, 1);
  EXPECT_EQ(got.at("k-0").error, "backend: copy failed");
  ExpectSame(got, {{"k-1", clean.at("k-1")}, {"k-2", clean.at("k-2")}}, "untouched");
}

TEST_F(EngineServiceTest, CreateFailsWhenTheKvPoolCannotBeAllocated) {
  FlakyBackend flaky(be_.get());
  flaky.fail_alloc = true;
  EngineOptions opt;
  opt.num_blocks = 64;
  std::unique_ptr<LlmEngine> e;
  const Status st = LlmEngine::Create(cfg_, &flaky, nullptr, opt, &e);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out of device memory"), std::string::npos) << st.message();
  EXPECT_EQ(e, nullptr);
}

TEST_F(EngineServiceTest, PlannerFailureFallsBackToArrivalOrder) {
  const std::vector<Request> reqs = Requests("p", 6, 16, 6, 5, 15);
  EngineOptions opt;
  opt.num_blocks = 64;
  opt.enable_planner = false;
  const Outputs reference = RunAll(reqs, opt);
  opt.enable_planner = true;
  opt.planner = [](const std::vector<std::span<const int32_t>>&, int) -> StatusOr<Plan> {
    throw std::bad_alloc();  // as planning a huge window may
  };
  auto e = Make(opt);
  for (const Request& r : reqs) e->Add(r);
  std::vector<RequestOutput> first;
  const Status st = e->Step(&first);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("planner"), std::string::npos) << st.message();
  Outputs got = Drive(e.get());
  for (RequestOutput& o : first) got[o.id] = std::move(o);
  ExpectSame(got, reference, "planner failed");
}

TEST_F(EngineServiceTest, DuplicateUnfinishedIdIsRefused) {
  std::vector<Request> reqs = Requests("u", 1, 0, 6, 3, 16);
  EngineOptions opt;
  opt.num_blocks = 64;
  auto e = Make(opt);
  e->Add(reqs[0]);
  e->Add(reqs[0]);
  std::vector<RequestOutput> out;
  while (e->HasWork()) ASSERT_TRUE(e->Step(&out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NE(out[0].error.find("already unfinished"), std::string::npos) << out[0].error;
  EXPECT_TRUE(out[1].ok());
}

// FNV-1a 64 and the splitmix64 finalizer, written out again here (not shared with the engine).
uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}
uint64_t Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TEST(DefaultSeed, IsFnv1aOfJobZeroCustomIdThenSplitmix) {
  // The published FNV-1a 64 vectors check the helper above.
  EXPECT_EQ(Fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a("foobar"), 0x85944171f73967e8ull);
  for (auto [job, custom] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {"", "req-1"}, {"job-42", "doc-17"}, {"ab", "c"}, {"a", "bc"}})
    EXPECT_EQ(DefaultSeed(job, custom), Finalize(Fnv1a(job + std::string(1, '\0') + custom)))
        << job << "/" << custom;
  // Fixed values: a change here changes what every unseeded request samples.
  EXPECT_EQ(DefaultSeed("", ""), 0x25fc6dd36ce04b20ull);
  EXPECT_EQ(DefaultSeed("", "req-1"), 0x877d4f62143cf0a8ull);
  EXPECT_EQ(DefaultSeed("job-42", "doc-17"), 0x5fa0f5d2c64a0427ull);
  EXPECT_NE(DefaultSeed("ab", "c"), DefaultSeed("a", "bc")) << "the 0 byte separates the fields";
}

TEST_F(EngineServiceTest, UnseededSamplingIsReproducibleFromDefaultSeed) {
  std::vector<Request> reqs = Requests("s", 2, 0, 12, 10, 17);
  for (Request& r : reqs) {
    r.params.temperature = 0.9f;
    r.n = 2;
  }
  reqs[1].prompt_ids = reqs[0].prompt_ids;
  reqs[1].params.seed = DefaultSeed("", reqs[0].id);  // what the engine uses for s-0
  EngineOptions opt;
  opt.num_blocks = 64;
  const Outputs a = RunAll(reqs, opt);
  const Outputs b = RunAll(reqs, opt);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(a.at("s-0").completions[k].ids, a.at("s-1").completions[k].ids) << k;
    EXPECT_EQ(a.at("s-0").completions[k].ids, b.at("s-0").completions[k].ids) << k;
  }
  EXPECT_NE(a.at("s-0").completions[0].ids, a.at("s-0").completions[1].ids)
      << "sample k draws from seed + 0x9E3779B97F4A7C15 * k";
}

// On a manual clock that only a forward pass moves (one second each): the metrics are exact.
TEST_F(EngineServiceTest, MetricsMeasureQueueFromArrivalAndTtftFromAdmission) {
  testing::ManualTime time;
  FlakyBackend timed(be_.get());
  timed.time = &time;
  std::vector<Request> reqs = Requests("m", 3, 0, 10, 6, 18);
  reqs[0].arrival = time.Now() - std::chrono::seconds(10);  // waited in a database before Add
  reqs[1].params.max_tokens = 1;
  reqs[2].n = 2;
  EngineOptions opt;
  opt.num_blocks = 64;
  opt.time = &time;
  auto e = Make(opt, &timed);
  for (const Request& r : reqs) e->Add(r);
  const Outputs out = Drive(e.get());
  int64_t tokens = 0;
  for (const auto& [id, o] : out) {
    ASSERT_TRUE(o.ok()) << o.error;
    const RequestMetrics& m = o.metrics;
    tokens += m.completion_tokens;
    EXPECT_LE(m.queue_seconds + m.ttft_seconds, m.total_seconds) << id;
  }
  // All three are admitted by the first step and prefilled by its forward pass, which samples
  // their first tokens; each later step samples one more token of each sample.
  const RequestMetrics& m0 = out.at("m-0").metrics;
  EXPECT_EQ(m0.queue_seconds, 10.0) << "from arrival, not from Add";
  EXPECT_EQ(m0.ttft_seconds, 1.0) << "from admission (one forward), not from arrival";
  EXPECT_EQ(m0.itl_seconds, 1.0) << "one forward between tokens";
  EXPECT_EQ(m0.total_seconds, 16.0) << "arrival to the sixth token";
  const RequestMetrics& m1 = out.at("m-1").metrics;
  EXPECT_EQ(m1.queue_seconds, 0.0) << "arrival unset: the time of Add";
  EXPECT_EQ(m1.ttft_seconds, 1.0);
  EXPECT_EQ(m1.itl_seconds, 0) << "one token: no gap";
  EXPECT_EQ(m1.total_seconds, 1.0);
  EXPECT_EQ(out.at("m-2").metrics.itl_seconds, 1.0) << "the mean over both samples";
  EXPECT_EQ(out.at("m-2").metrics.total_seconds, 6.0);
  EXPECT_EQ(e->stats().tokens_generated, tokens);
  EXPECT_EQ(tokens, 6 + 1 + 2 * 6);
}

}  // namespace
}  // namespace llmq
