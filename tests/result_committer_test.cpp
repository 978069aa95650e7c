// Tests for jobs/result_committer: a real store, a pushing thread, groups by size and by time,
// Flush and Close semantics, and a failing group whose error is kept.
#include "jobs/result_committer.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace llmq::jobs {
namespace {

using std::chrono::milliseconds;

struct Fixture {
  std::string path;
  std::unique_ptr<Store> store;   // the committer's
  std::unique_ptr<Store> reader;  // everyone else's (a second connection, as documented)
  int64_t job = 0;
};

Fixture Make(int lines) {
  Fixture f;
  f.path = testing::CurrentTestDir() + "/queue.db";
  EXPECT_TRUE(Store::Open(f.path, &f.store).ok());
  EXPECT_TRUE(Store::Open(f.path, &f.reader).ok());
  EXPECT_TRUE(f.store->Begin().ok());
  JobRecord job;
  job.name = "job.jsonl";
  job.sha256 = "sha";
  EXPECT_TRUE(f.store->InsertJob(&job).ok());
  for (int i = 1; i <= lines; ++i) {
    NewRequest r;
    r.line = i;
    r.plan_rank = i;
    r.body = "{}";
    EXPECT_TRUE(f.store->InsertRequest(job.id, r).ok());
  }
  EXPECT_TRUE(f.store->FinishIngest(job.id, JobStatus::kInProgress).ok());
  EXPECT_TRUE(f.store->Commit().ok());
  f.job = job.id;
  return f;
}

Result MakeResult(int64_t job, int64_t line) {
  Result r;
  r.job = job;
  r.line = line;
  r.output = "{\"line\": " + std::to_string(line) + "}";
  r.metrics.completion_tokens = 1;
  return r;
}

// The job's completed count as another connection sees it.
int64_t Completed(const Fixture& f) {
  JobRecord job;
  EXPECT_TRUE(f.reader->GetJob(f.job, &job).ok());
  return job.completed;
}

// Waits up to 5 s for the reader to see `n` completed results.
bool WaitForCompleted(const Fixture& f, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Completed(f) >= n) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return false;
}

TEST(ResultCommitter, CommitsEverythingPushedFromAnotherThread) {
  Fixture f = Make(3000);
  ResultCommitter c(f.store.get(), {milliseconds(5), 64, 256});  // a small queue: Push blocks
  std::thread engine([&] {
    for (int i = 1; i <= 3000; ++i) c.Push(MakeResult(f.job, i));
  });
  engine.join();
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(c.committed(), 3000);
  EXPECT_EQ(Completed(f), 3000) << "Flush returned: everything pushed before it is committed";
  int64_t pending = -1;
  ASSERT_TRUE(f.reader->CountPending(f.job, &pending).ok());
  EXPECT_EQ(pending, 0);
  EXPECT_TRUE(c.Close().ok());
  EXPECT_TRUE(c.Close().ok()) << "Close again: the same status";
}

TEST(ResultCommitter, FullGroupCommitsWithoutWaitingForTheInterval) {
  Fixture f = Make(25);
  ResultCommitter c(f.store.get(), {std::chrono::seconds(30), 10, 1000});
  for (int i = 1; i <= 25; ++i) c.Push(MakeResult(f.job, i));
  ASSERT_TRUE(WaitForCompleted(f, 20));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(Completed(f), 20) << "the last 5 wait for their interval (or a Flush)";
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Completed(f), 25);
}

TEST(ResultCommitter, IntervalCommitsAPartialGroup) {
  Fixture f = Make(3);
  ResultCommitter c(f.store.get(), {milliseconds(20), 512, 1000});
  for (int i = 1; i <= 3; ++i) c.Push(MakeResult(f.job, i));
  EXPECT_TRUE(WaitForCompleted(f, 3)) << "committed without a Flush, once the interval passed";
  EXPECT_TRUE(c.Close().ok());
}

TEST(ResultCommitter, CloseCommitsWhatIsStillQueued) {
  Fixture f = Make(5);
  {
    ResultCommitter c(f.store.get(), {std::chrono::seconds(30), 512, 1000});
    for (int i = 1; i <= 5; ++i) c.Push(MakeResult(f.job, i));
    EXPECT_EQ(Completed(f), 0);
    ASSERT_TRUE(c.Close().ok());
  }
  EXPECT_EQ(Completed(f), 5);
  // The store is the caller's again after Close.
  int64_t pending = -1;
  ASSERT_TRUE(f.store->CountPending(f.job, &pending).ok());
  EXPECT_EQ(pending, 0);
}

TEST(ResultCommitter, ResultPushedTwiceIsCountedOnce) {
  Fixture f = Make(2);
  ResultCommitter c(f.store.get());
  c.Push(MakeResult(f.job, 1));
  ASSERT_TRUE(c.Flush().ok());
  c.Push(MakeResult(f.job, 1));
  c.Push(MakeResult(f.job, 2));
  c.Push(MakeResult(f.job, 2));
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(c.committed(), 2);
  EXPECT_EQ(Completed(f), 2);
}

TEST(ResultCommitter, FailedGroupStaysUncommittedAndItsErrorIsKept) {
  Fixture f = Make(3);
  ResultCommitter c(f.store.get(), {milliseconds(5), 512, 1000});
  c.Push(MakeResult(f.job, 1));
  c.Push(MakeResult(f.job, 99));  // no such request: the whole group fails
  const Status first = c.Flush();
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.message().find("line 99"), std::string::npos) << first.message();
  EXPECT_EQ(Completed(f), 0) << "line 1 stays pending: it runs again";
  // Later groups still commit; the first error stays reported.
  c.Push(MakeResult(f.job, 2));
  EXPECT_EQ(c.Flush().message(), first.message());
  EXPECT_EQ(Completed(f), 1);
  EXPECT_EQ(c.Close().message(), first.message());
}

TEST(ResultCommitter, FlushWithNothingPushedReturnsAtOnce) {
  Fixture f = Make(1);
  ResultCommitter c(f.store.get(), {std::chrono::seconds(30), 512, 1000});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.Flush().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace llmq::jobs
