// Tests for jobs/result_committer: a real store, a pushing thread, groups by size and by time,
// Flush and Close semantics, and a failing group whose error is kept. Time is a manual clock the
// tests move (tests/manual_time.h), and they wait on the committer's report after each commit
// attempt: nothing sleeps or bounds the wall clock.
#include "jobs/result_committer.h"
#include "tests/manual_time.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
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

// What the committer reports after each commit attempt (Options::after_attempt), to wait on.
class Attempts {
 public:
  std::function<void(const Status&, int64_t)> Hook() {
    return [this](const Status&, int64_t committed) {
      std::lock_guard<std::mutex> l(mu_);
      ++attempts_;
      committed_ = committed;
      cv_.notify_all();
    };
  }
  // Blocks until the committer has committed `n` results (no bound on how long: ctest's TIMEOUT
  // reports a committer that never gets there).
  void WaitForCommitted(int64_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return committed_ >= n; });
  }
  int attempts() {
    std::lock_guard<std::mutex> l(mu_);
    return attempts_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int attempts_ = 0;
  int64_t committed_ = 0;
};

// Options with the given interval and sizes, the rest the defaults.
ResultCommitter::Options Sized(std::chrono::milliseconds interval, size_t max_batch,
                               size_t max_queue) {
  ResultCommitter::Options o;
  o.interval = interval;
  o.max_batch = max_batch;
  o.max_queue = max_queue;
  return o;
}

// Options on a manual clock, reporting to `attempts`.
ResultCommitter::Options ManualOptions(milliseconds interval, size_t max_batch,
                                       testing::ManualTime* time, Attempts* attempts) {
  ResultCommitter::Options o;
  o.interval = interval;
  o.max_batch = max_batch;
  o.max_queue = 1000;
  o.time = time;
  o.after_attempt = attempts->Hook();
  return o;
}

TEST(ResultCommitter, CommitsEverythingPushedFromAnotherThread) {
  Fixture f = Make(3000);
  ResultCommitter c(f.store.get(), Sized(milliseconds(5), 64, 256));  // a small queue: Push blocks
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

// Time stands still: only full groups can commit, and the rest waits for its interval.
TEST(ResultCommitter, FullGroupCommitsWithoutWaitingForTheInterval) {
  Fixture f = Make(25);
  testing::ManualTime time;
  Attempts attempts;
  ResultCommitter c(f.store.get(), ManualOptions(std::chrono::seconds(30), 10, &time, &attempts));
  const auto pushed_at = time.Now();
  for (int i = 1; i <= 25; ++i) c.Push(MakeResult(f.job, i));
  attempts.WaitForCommitted(20);
  EXPECT_EQ(time.WaitForWaiter(), pushed_at + std::chrono::seconds(30))
      << "the last 5 wait for the interval from the first push";
  EXPECT_EQ(Completed(f), 20);
  ASSERT_TRUE(c.Flush().ok()) << "a Flush does not wait for the interval";
  EXPECT_EQ(Completed(f), 25);
  EXPECT_EQ(time.Now(), pushed_at);
}

TEST(ResultCommitter, IntervalCommitsAPartialGroup) {
  Fixture f = Make(3);
  testing::ManualTime time;
  Attempts attempts;
  ResultCommitter c(f.store.get(), ManualOptions(milliseconds(20), 512, &time, &attempts));
  const auto pushed_at = time.Now();
  for (int i = 1; i <= 3; ++i) c.Push(MakeResult(f.job, i));
  ASSERT_EQ(time.WaitForWaiter(), pushed_at + milliseconds(20))
      << "the group waits for the interval from the first push";
  time.Advance(milliseconds(19));  // not the deadline: the committer is not even woken
  EXPECT_EQ(Completed(f), 0);
  EXPECT_EQ(attempts.attempts(), 0);
  time.Advance(milliseconds(1));
  attempts.WaitForCommitted(3);  // without a Flush: the interval has passed
  EXPECT_EQ(Completed(f), 3);
  EXPECT_EQ(attempts.attempts(), 1) << "one group";
  EXPECT_TRUE(c.Close().ok());
}

TEST(ResultCommitter, CloseCommitsWhatIsStillQueued) {
  Fixture f = Make(5);
  {
    ResultCommitter c(f.store.get(), Sized(std::chrono::seconds(30), 512, 1000));
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
  ResultCommitter c(f.store.get(), Sized(milliseconds(5), 512, 1000));
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

// A committer's store whose writes another connection can block (busy timeout 0: while `blocker`
// holds the write lock, a commit fails at once with an I/O error), and a manual clock whose
// waiters show the committer's waits.
struct BlockedStore {
  explicit BlockedStore(int lines) : f(Make(lines)) {
    f.store->SetBusyTimeout(0);
    EXPECT_TRUE(Store::Open(f.path, &blocker).ok());
  }
  // Groups after 10 ms; a failed one retried after 100 ms, then backing off.
  ResultCommitter::Options Options() {
    ResultCommitter::Options o = ManualOptions(milliseconds(10), 512, &time, &attempts);
    o.retry_interval = milliseconds(100);
    return o;
  }
  // The committer's next wait on the clock, in ms (once it waits, its attempt before that wait
  // has been reported).
  int64_t Wait() {
    return std::chrono::duration_cast<milliseconds>(time.WaitForWaiter() - time.Now()).count();
  }
  void Pass() { time.Advance(time.WaitForWaiter() - time.Now()); }  // to the next wait's end

  Fixture f;
  std::unique_ptr<Store> blocker;
  testing::ManualTime time;
  Attempts attempts;
};

// A group that fails with an I/O error (here: another connection holds the write lock past the
// busy timeout) is kept and tried again, waiting retry_interval, then twice as long after each
// further failure, up to retry_max_interval; after a success the next failure waits
// retry_interval again. The waits are read off the manual clock's waiters.
TEST(ResultCommitter, AFailingGroupIsRetriedWithExponentialBackoffUntilItCommits) {
  BlockedStore b(3);
  Fixture& f = b.f;
  ResultCommitter::Options o = b.Options();
  o.retry_max_interval = milliseconds(350);
  ResultCommitter c(f.store.get(), o);
  auto& blocker = b.blocker;
  auto& attempts = b.attempts;
  auto wait = [&] { return b.Wait(); };
  auto pass = [&] { b.Pass(); };
  ASSERT_TRUE(blocker->Begin().ok());
  c.Push(MakeResult(f.job, 1));
  for (int64_t expected : {10, 100, 200, 350}) {  // the group's interval, then the backoff
    EXPECT_EQ(wait(), expected);
    pass();
  }
  EXPECT_EQ(wait(), 350) << "capped";
  EXPECT_EQ(attempts.attempts(), 4);
  EXPECT_EQ(Completed(f), 0);
  ASSERT_TRUE(blocker->Commit().ok());  // the lock is free: the next try commits
  pass();
  attempts.WaitForCommitted(1);
  EXPECT_EQ(attempts.attempts(), 5);
  EXPECT_EQ(Completed(f), 1);
  // A new failure starts from retry_interval again.
  ASSERT_TRUE(blocker->Begin().ok());
  c.Push(MakeResult(f.job, 2));
  for (int64_t expected : {10, 100}) {
    EXPECT_EQ(wait(), expected);
    pass();
  }
  EXPECT_EQ(wait(), 200);
  ASSERT_TRUE(blocker->Commit().ok());
  pass();
  attempts.WaitForCommitted(2);
  EXPECT_TRUE(c.Close().ok()) << "a retried group that commits leaves no error";
  EXPECT_EQ(Completed(f), 2);
}

// Close(retry_until): a group failing with an I/O error is retried, backing off, until that
// time: committed if the failure ends before it, else given up with the error then.
TEST(ResultCommitter, CloseRetriesAFailingGroupUntilItsTime) {
  for (const bool freed : {true, false}) {
    SCOPED_TRACE(freed ? "the lock is freed in time" : "the lock is never freed");
    BlockedStore b(1);
    Fixture& f = b.f;
    ResultCommitter c(f.store.get(), b.Options());
    auto& blocker = b.blocker;
    auto& attempts = b.attempts;
    auto& time = b.time;
    auto wait = [&] { return b.Wait(); };
    auto pass = [&] { b.Pass(); };
    ASSERT_TRUE(blocker->Begin().ok());
    c.Push(MakeResult(f.job, 1));
    EXPECT_EQ(wait(), 10);  // the group's interval, which only the close can end (time stands)
    Status closed;
    std::thread closer([&] { closed = c.Close(time.Now() + milliseconds(250)); });
    // The close ends the interval at once: the first attempt fails, and the committer waits the
    // first retry's 100 ms (until then the interval's wait may still be seen, ending).
    while (wait() != 100) {
    }
    pass();                  // +100: fails, and 200 more would pass the close's time:
    EXPECT_EQ(wait(), 150);  // the backoff stops there
    if (freed) {
      ASSERT_TRUE(blocker->Commit().ok());
    }
    pass();  // the close's time: the last attempt
    closer.join();
    EXPECT_EQ(attempts.attempts(), 3);
    EXPECT_EQ(Completed(f), freed ? 1 : 0);
    EXPECT_EQ(closed.ok(), freed) << closed.message();
    if (!freed) {
      EXPECT_EQ(closed.code(), Status::Code::kIoError) << closed.message();
      ASSERT_TRUE(blocker->Commit().ok());
    }
  }
}

// Time stands still: a Flush that waited for the interval would never return.
TEST(ResultCommitter, FlushWithNothingPushedReturnsAtOnce) {
  Fixture f = Make(1);
  testing::ManualTime time;
  Attempts attempts;
  ResultCommitter c(f.store.get(), ManualOptions(std::chrono::seconds(30), 512, &time, &attempts));
  EXPECT_TRUE(c.Flush().ok());
  EXPECT_EQ(attempts.attempts(), 0) << "nothing to commit: no transaction";
  EXPECT_TRUE(c.Close().ok());
  EXPECT_EQ(attempts.attempts(), 0);
}

}  // namespace
}  // namespace llmq::jobs
