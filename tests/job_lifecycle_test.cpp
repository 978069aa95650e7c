// The daemon's job lifecycle (daemon/job_lifecycle.h) on a real queue, without an engine: cancel
// in every state a job can be in when the cancel is seen (nothing run, partly run, results still
// in the committer, finalizing, a cancel interrupted by a crash, already terminal), and finalize
// after a crash (left finalizing before or after its files were written, complete but still
// in_progress), with the outbox files read back; finalizing sweeps the temporaries of dead writers.
#include "daemon/job_lifecycle.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using jobs::JobRecord;
using jobs::JobStatus;

class JobLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::CurrentTestDir();
    outbox_ = dir_ + "/outbox";
    fs::create_directories(outbox_);
    ASSERT_TRUE(jobs::Store::Open(dir_ + "/queue.db", &store_).ok());
    JobLifecycle::Hooks hooks;
    hooks.cancel_in_engine = [this](int64_t job) {
      calls_.push_back("cancel " + std::to_string(job));
    };
    hooks.flush_results = [this]() -> Status {
      calls_.push_back("flush");
      // Results the engine pushed before it dropped the job are committed by the flush.
      std::vector<jobs::Result> pushed = std::move(in_committer_);
      in_committer_.clear();
      return pushed.empty() ? Status::Ok() : store_->CommitResults(pushed);
    };
    hooks.unix_now = [] { return 1000.0; };
    hooks.finished_this_run = [this](int64_t job) { return finished_[job]; };
    life_ = std::make_unique<JobLifecycle>(outbox_, store_.get(),
                                           JobLifecycle::Facts{"tiny", "cpu", 2}, std::move(hooks));
  }

  // A job of `lines` requests, accepted (in_progress); returns it.
  JobRecord AddJob(const std::string& name, int lines) {
    JobRecord job;
    job.name = name;
    job.sha256 = "sha-" + std::to_string(++jobs_);
    EXPECT_TRUE(store_->Begin().ok());
    EXPECT_TRUE(store_->InsertJob(&job).ok());
    for (int i = 1; i <= lines; ++i) {
      jobs::NewRequest r;
      r.line = i;
      r.plan_rank = ++rank_;
      r.custom_id = "req-" + std::to_string(i);
      r.body = "{}";
      EXPECT_TRUE(store_->InsertRequest(job.id, r).ok());
    }
    EXPECT_TRUE(store_->FinishIngest(job.id, JobStatus::kInProgress).ok());
    EXPECT_TRUE(store_->Commit().ok());
    return Get(job.id);
  }
  jobs::Result Done(const JobRecord& j, int line) {
    jobs::Result r;
    r.job = j.id;
    r.line = line;
    r.output = "{\"custom_id\": \"req-" + std::to_string(line) + "\", \"ok\": true}";
    return r;
  }
  void Commit(const JobRecord& j, std::initializer_list<int> lines) {
    std::vector<jobs::Result> rs;
    for (int line : lines) rs.push_back(Done(j, line));
    ASSERT_TRUE(store_->CommitResults(rs).ok());
  }
  JobRecord Get(int64_t id) {
    JobRecord j;
    EXPECT_TRUE(store_->GetJob(id, &j).ok());
    return j;
  }
  std::vector<json> Lines(const std::string& file) {
    std::vector<json> out;
    std::ifstream f(outbox_ + "/" + file);
    for (std::string line; std::getline(f, line);) out.push_back(json::parse(line));
    return out;
  }
  int CancelledLines(const std::string& stem) {
    int n = 0;
    for (const json& e : Lines(stem + ".errors.jsonl"))
      n += e.dump().find("cancelled (llmq cancel) before it finished") != std::string::npos;
    return n;
  }
  size_t OutboxFiles() {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(outbox_)) n += e.is_regular_file();
    return n;
  }

  std::string dir_, outbox_;
  std::unique_ptr<jobs::Store> store_;
  std::unique_ptr<JobLifecycle> life_;
  std::vector<std::string> calls_;
  std::vector<jobs::Result> in_committer_;
  std::map<int64_t, int64_t> finished_;  // requests "this process" ran, by job
  int64_t rank_ = 0;
  int jobs_ = 0;
};

TEST_F(JobLifecycleTest, CancelBeforeAnythingRanGivesEveryLineACancelledError) {
  const JobRecord j = AddJob("a.jsonl", 5);
  ASSERT_TRUE(store_->RequestCancel(j.id).ok());
  life_->CheckJobs(/*stopping=*/false);
  const JobRecord after = Get(j.id);
  EXPECT_EQ(after.status, JobStatus::kCancelled);
  EXPECT_EQ(after.failed, 5);
  EXPECT_EQ(CancelledLines("a"), 5);
  EXPECT_EQ(Lines("a.results.jsonl").size(), 0u);
  EXPECT_EQ(calls_, (std::vector<std::string>{"cancel " + std::to_string(j.id), "flush"}))
      << "the engine drops the job, then what it produced is committed";
  const json sum = json::parse(std::ifstream(outbox_ + "/a.summary.json"));
  EXPECT_EQ(sum["requests"], 5);
  EXPECT_EQ(sum["failed"], 5);
}

TEST_F(JobLifecycleTest, CancelPartlyRunKeepsTheResultsIncludingThoseStillInTheCommitter) {
  const JobRecord j = AddJob("b.jsonl", 6);
  Commit(j, {1, 2});
  in_committer_ = {Done(j, 4)};  // produced, not yet committed when the cancel is seen
  finished_[j.id] = 1;           // line 4 ran in this process; 1 and 2 before a restart
  ASSERT_TRUE(store_->RequestCancel(j.id).ok());
  life_->CheckJobs(false);
  const JobRecord after = Get(j.id);
  EXPECT_EQ(after.status, JobStatus::kCancelled);
  EXPECT_EQ(after.completed, 3);
  EXPECT_EQ(after.failed, 3);
  const std::vector<json> results = Lines("b.results.jsonl");
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[2]["custom_id"], "req-4") << "line 4's result is kept, not cancelled";
  EXPECT_EQ(CancelledLines("b"), 3);
  const json sum = json::parse(std::ifstream(outbox_ + "/b.summary.json"));
  EXPECT_EQ(sum["finished_this_run"], 1);
  EXPECT_EQ(sum["resumed"], 2) << "lines 1 and 2, committed by an earlier run";
}

TEST_F(JobLifecycleTest, ACancelInterruptedByACrashIsFinishedWithoutCancellingTwice) {
  const JobRecord j = AddJob("c.jsonl", 4);
  Commit(j, {1});
  // The crash came after the status was set and some lines were cancelled.
  ASSERT_TRUE(store_->RequestCancel(j.id).ok());
  ASSERT_TRUE(store_->SetJobStatus(j.id, JobStatus::kCancelling).ok());
  jobs::Result r = Done(j, 2);
  r.is_error = true;
  r.output = "{\"error\": \"c.jsonl:2: cancelled (llmq cancel) before it finished\"}";
  ASSERT_TRUE(store_->CommitResults({r}).ok());
  life_->CheckJobs(/*stopping=*/true);
  EXPECT_EQ(Get(j.id).status, JobStatus::kCancelling) << "not while stopping (the engine drains)";
  EXPECT_TRUE(calls_.empty());
  life_->CheckJobs(false);  // the next start
  const JobRecord after = Get(j.id);
  EXPECT_EQ(after.status, JobStatus::kCancelled);
  EXPECT_EQ(after.completed + after.failed, 4);
  EXPECT_EQ(Lines("c.errors.jsonl").size(), 3u) << "each line once";
}

TEST_F(JobLifecycleTest, ACancelSeenWhileFinalizingEndsCancelledWithEveryResult) {
  const JobRecord j = AddJob("d.jsonl", 2);
  Commit(j, {1, 2});
  ASSERT_TRUE(store_->SetJobStatus(j.id, JobStatus::kFinalizing).ok());
  ASSERT_TRUE(store_->RequestCancel(j.id).ok());
  life_->CheckJobs(false);
  const JobRecord after = Get(j.id);
  EXPECT_EQ(after.status, JobStatus::kCancelled);
  EXPECT_EQ(after.completed, 2);
  EXPECT_EQ(Lines("d.results.jsonl").size(), 2u);
  EXPECT_EQ(CancelledLines("d"), 0);
}

TEST_F(JobLifecycleTest, TerminalJobsAreLeftAlone) {
  const JobRecord j = AddJob("e.jsonl", 1);
  Commit(j, {1});
  life_->CheckJobs(false);
  ASSERT_EQ(Get(j.id).status, JobStatus::kCompleted);
  const std::string summary = outbox_ + "/e.summary.json";
  fs::remove(summary);
  // llmq cancel refuses a finished job; a request that reaches the queue all the same changes
  // nothing.
  store_->RequestCancel(j.id).IgnoreError();
  life_->CheckJobs(false);
  EXPECT_EQ(Get(j.id).status, JobStatus::kCompleted);
  EXPECT_FALSE(fs::exists(summary)) << "a completed job is not finalized again";
  EXPECT_TRUE(calls_.empty());
}

TEST_F(JobLifecycleTest, ACompleteJobStillInProgressAfterACrashIsFinalized) {
  const JobRecord j = AddJob("f.jsonl", 3);
  Commit(j, {1, 2, 3});  // the crash came before the status changed
  ASSERT_EQ(Get(j.id).status, JobStatus::kInProgress);
  life_->CheckJobs(false);
  const JobRecord after = Get(j.id);
  EXPECT_EQ(after.status, JobStatus::kCompleted);
  EXPECT_EQ(Lines("f.results.jsonl").size(), 3u);
  EXPECT_EQ(json::parse(after.options)["outbox"], "f") << "the stem is kept in the job";
}

TEST_F(JobLifecycleTest, AFinalizeInterruptedAfterItsFilesWritesTheSameFilesAgain) {
  const JobRecord j = AddJob("g.jsonl", 2);
  Commit(j, {1, 2});
  ASSERT_TRUE(life_->Finalize(Get(j.id), JobStatus::kCompleted).ok());
  const std::string first = testing::ReadText(outbox_ + "/g.results.jsonl");
  const size_t files = OutboxFiles();
  // The crash came after the files were written and before the status was committed: the queue
  // says finalizing (set behind the store's back: it allows no way back from completed).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/queue.db").c_str(), &db), SQLITE_OK);
  const std::string sql =
      "UPDATE jobs SET status = 'finalizing', finished_at = 0 WHERE id = " + std::to_string(j.id);
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  ASSERT_EQ(Get(j.id).status, JobStatus::kFinalizing);
  life_->CheckJobs(false);
  EXPECT_EQ(Get(j.id).status, JobStatus::kCompleted);
  EXPECT_EQ(testing::ReadText(outbox_ + "/g.results.jsonl"), first);
  EXPECT_EQ(OutboxFiles(), files) << "the same stem, not g.<id>.*: nothing written twice";
}

TEST_F(JobLifecycleTest, AFinalizeInterruptedBeforeItsFilesWritesThem) {
  const JobRecord j = AddJob("h.jsonl", 2);
  Commit(j, {2, 1});
  ASSERT_TRUE(store_->SetJobStatus(j.id, JobStatus::kFinalizing).ok());
  std::ofstream(outbox_ + "/.h.results.jsonl.tmp") << "{\"half";  // the interrupted write's
  life_->CheckJobs(false);
  EXPECT_EQ(Get(j.id).status, JobStatus::kCompleted);
  const std::vector<json> results = Lines("h.results.jsonl");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["custom_id"], "req-1") << "in line order";
}

TEST_F(JobLifecycleTest, AnotherJobOfTheSameNameGetsItsOwnStem) {
  const JobRecord first = AddJob("same.jsonl", 1);
  Commit(first, {1});
  life_->CheckJobs(false);
  JobRecord second = AddJob("same.jsonl", 1);
  Commit(second, {1});
  life_->CheckJobs(false);
  second = Get(second.id);
  EXPECT_EQ(second.status, JobStatus::kCompleted);
  const std::string stem = "same." + second.public_id;
  EXPECT_EQ(json::parse(second.options)["outbox"], stem);
  EXPECT_TRUE(fs::exists(outbox_ + "/" + stem + ".results.jsonl"));
  EXPECT_TRUE(fs::exists(outbox_ + "/same.results.jsonl"));
}

// A pid no process has now: a child's, reaped.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST_F(JobLifecycleTest, FinalizingSweepsTemporariesOfWritersNoLongerRunning) {
  // Another worker on the folder was killed while it finalized: its temporaries stay until someone
  // sweeps them (the spool's owner only at its start-up, before).
  const pid_t dead = DeadPid(), alive = ::getppid();
  const std::string stale = ".k.results.jsonl.tmp-" + std::to_string(dead) + "-4";
  const std::string stale_other = ".other.errors.jsonl.tmp-" + std::to_string(dead) + "-5";
  const std::string live = ".other.summary.json.tmp-" + std::to_string(alive) + "-1";
  const std::string not_ours = ".k.results.jsonl.tmp-notapid";
  for (const std::string& name : {stale, stale_other, live, not_ours})
    std::ofstream(outbox_ + "/" + name) << "{\"half";
  const JobRecord j = AddJob("k.jsonl", 1);
  Commit(j, {1});
  life_->CheckJobs(false);
  EXPECT_EQ(Get(j.id).status, JobStatus::kCompleted);
  EXPECT_FALSE(fs::exists(outbox_ + "/" + stale));
  EXPECT_FALSE(fs::exists(outbox_ + "/" + stale_other)) << "any job's: the writer is gone";
  EXPECT_TRUE(fs::exists(outbox_ + "/" + live)) << "a running writer's is left alone";
  EXPECT_TRUE(fs::exists(outbox_ + "/" + not_ours)) << "not a temporary's name";
  EXPECT_EQ(Lines("k.results.jsonl").size(), 1u);
}

}  // namespace
}  // namespace llmq
