// JobRunner (daemon/job_runner.h) directly: a real queue, a real engine on the tiny model, the
// daemon's loop (Serve) on its own thread, and holds and releases sent from the test at points
// the runner's own hooks mark (a step count, an idle tick), never after a span of time.
#include "daemon/job_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tests/tiny_context.h"

namespace llmq {
namespace {

using jobs::JobStatus;

// Groups committed within a millisecond (the tests wait on commits, not on the interval).
jobs::ResultCommitter::Options QuickCommits() {
  jobs::ResultCommitter::Options o;
  o.interval = std::chrono::milliseconds(1);
  return o;
}

class JobRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testing::LoadTinyModel("job_runner_model", &model_); }

  void SetUp() override {
    const std::string db = testing::CurrentTestDir() + "/queue.db";
    ASSERT_TRUE(jobs::Store::Open(db, &runner_store_).ok());
    ASSERT_TRUE(jobs::Store::Open(db, &commit_store_).ok());
    ASSERT_TRUE(jobs::Store::Open(db, &reader_).ok());
    EngineOptions opt;
    opt.num_blocks = 256;
    opt.scheduler.max_num_seqs = 4;  // a job of 24 runs in several rounds
    ASSERT_TRUE(
        LlmEngine::Create(model_.cfg, model_.backend.get(), model_.tokenizer.get(), opt, &engine_)
            .ok());
    ctx_ = testing::TinyContext(&model_);
    ctx_.capacity = engine_->max_sequence_tokens();
    committer_ = std::make_unique<jobs::ResultCommitter>(commit_store_.get(), QuickCommits());
  }
  void TearDown() override {
    if (thread_.joinable()) {
      runner_->Stop();
      thread_.join();
    }
  }

  // A job of `n` requests of `max_tokens` tokens (EOS ignored), accepted.
  int64_t AddJob(int n, int max_tokens) {
    jobs::JobRecord job;
    job.name = "j.jsonl";
    job.sha256 = "sha";
    EXPECT_TRUE(reader_->Begin().ok());
    EXPECT_TRUE(reader_->InsertJob(&job).ok());
    for (int i = 1; i <= n; ++i) {
      jobs::NewRequest r;
      r.line = i;
      r.plan_rank = i;
      r.custom_id = "r" + std::to_string(i);
      r.body = nlohmann::json{{"custom_id", r.custom_id},
                              {"method", "POST"},
                              {"url", "/v1/completions"},
                              {"body",
                               {{"prompt", "Tell story " + std::to_string(i)},
                                {"max_tokens", max_tokens},
                                {"ignore_eos", true}}}}
                   .dump();
      EXPECT_TRUE(reader_->InsertRequest(job.id, r).ok());
    }
    EXPECT_TRUE(reader_->FinishIngest(job.id, JobStatus::kInProgress).ok());
    EXPECT_TRUE(reader_->Commit().ok());
    return job.id;
  }

  // Starts Serve on its own thread; `on_step(steps)` and `on_tick()` run on that thread.
  // `worker`: claims under leases as that worker (its committer too).
  void Serve(std::function<void(int)> on_step, std::function<void()> on_tick = nullptr,
             const std::string& worker = "") {
    RunnerOptions ro;
    ro.worker = worker;
    ro.lease_seconds = 0.2;  // an idle worker gives its leases back after this long
    if (!worker.empty()) {
      jobs::ResultCommitter::Options co = QuickCommits();
      co.worker = worker;
      committer_ = std::make_unique<jobs::ResultCommitter>(commit_store_.get(), co);
    }
    ro.on_tick = std::move(on_tick);
    ro.tick_interval = std::chrono::milliseconds(1);
    runner_ =
        std::make_unique<JobRunner>(ctx_, engine_.get(), runner_store_.get(), committer_.get(), ro);
    thread_ = std::thread([this, on_step = std::move(on_step)] {
      int steps = 0;
      serve_status_ = runner_->Serve([&] { on_step(++steps); });
    });
  }

  jobs::JobRecord Job(int64_t id) {
    jobs::JobRecord j;
    EXPECT_TRUE(reader_->GetJob(id, &j).ok());
    return j;
  }

  static Model model_;
  std::unique_ptr<jobs::Store> runner_store_, commit_store_, reader_;
  std::unique_ptr<LlmEngine> engine_;
  BuildContext ctx_;
  std::unique_ptr<jobs::ResultCommitter> committer_;
  std::unique_ptr<JobRunner> runner_;
  std::thread thread_;
  Status serve_status_;
};
Model JobRunnerTest::model_;

// Issue 23, row 1: at a window's end everything is held (running requests abandoned); when the
// next window opens the rest must run by itself, though every request was fed before the hold
// (the runner had found nothing more in the queue).
TEST_F(JobRunnerTest, ReleasedAfterAFullHoldTheRestRunsByItselfExactlyOnce) {
  const int64_t job = AddJob(24, 6);
  std::atomic<bool> held{false}, idle_while_held{false};
  Serve(
      [&](int steps) {
        if (steps == 8) {  // some finished, some running, most not admitted yet
          runner_->Hold(/*running_too=*/true);
          held = true;
        }
      },
      [&] {
        if (held && !engine_->HasWork()) idle_while_held = true;  // on the engine thread
      });
  ASSERT_TRUE(testing::WaitFor([&] { return idle_while_held.load(); }, 60));
  ASSERT_TRUE(committer_->Flush().ok());
  const jobs::JobRecord at_hold = Job(job);
  EXPECT_LT(at_hold.completed, 24) << "the hold came before the end";
  runner_->Release();  // the next window opens; nothing else happens (no new job, no restart)
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        jobs::JobRecord j;
        return reader_->GetJob(job, &j).ok() && j.completed == 24;
      },
      60))
      << "stalled after the release at " << Job(job).completed << "/24";
  runner_->Stop();
  thread_.join();
  EXPECT_TRUE(serve_status_.ok()) << serve_status_.message();
  ASSERT_TRUE(committer_->Close().ok());
  std::set<int64_t> lines;
  int results = 0;
  ASSERT_TRUE(reader_
                  ->ForEachResult(job,
                                  [&](int64_t line, bool is_error, std::string_view,
                                      const jobs::ResultMetrics&) {
                                    EXPECT_FALSE(is_error) << line;
                                    lines.insert(line);
                                    ++results;
                                    return Status::Ok();
                                  })
                  .ok());
  EXPECT_EQ(results, 24) << "each request once";
  EXPECT_EQ(lines.size(), 24u);
  EXPECT_EQ(Job(job).failed, 0);
}

// Issue 27: the store holds leases in this worker's name on requests its engine never saw (a
// claim its killed last incarnation sent, committed after this one registered). Idle, the worker
// gives them back, so they run (here: by itself, woken as the daemon's poll would).
TEST_F(JobRunnerTest, AnIdleWorkerGivesBackLeasesItDoesNotRun) {
  const int64_t id = AddJob(6, 2);
  jobs::WorkerInfo w;
  w.id = "host:/state#0";
  ASSERT_TRUE(reader_->RegisterWorker(w).ok());
  jobs::Claim stale;  // the dead incarnation's claim, leased for longer than the test
  ASSERT_TRUE(reader_->ClaimNextGroup(w.id, 3600, 100, &stale).ok());
  ASSERT_EQ(stale.requests.size(), 1u);  // a plan group of its own
  Serve([](int) {}, nullptr, w.id);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        runner_->Wake();  // as the daemon's poll does when the queue changes
        return Job(id).completed == 6;
      },
      60))
      << "the leases were never given back: " << Job(id).completed << " of 6";
}

}  // namespace
}  // namespace llmq
