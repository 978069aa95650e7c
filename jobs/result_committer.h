// ResultCommitter: moves finished results from the engine thread into the Store in groups, on a
// thread of its own, so that the engine never waits on an fsync. A group is committed when
// `max_batch` results are waiting or `interval` has passed since the oldest waiting one arrived,
// whichever comes first (and at once on Flush / Close). One group is one Store transaction.
//
// Ownership: the committer borrows `store`; from construction until Close() returns, the Store is
// used by the committer's thread only. Anyone else (the feeder, status queries) opens a second
// Store on the same file: in WAL mode readers never wait for this writer, and SQLite's locking
// serializes writers.
//
// Errors: a failed group stays uncommitted (its requests stay pending: they are run again after a
// restart, never lost and never counted twice). The first error is kept and returned by every
// later Flush and by Close; later groups are still attempted. With `retry_interval` set, a group
// that failed with an I/O error (the database locked by another process past the busy timeout,
// a full disk, a PostgreSQL server restarting or out of reach) is kept and tried again until it
// commits (Flush waits for it), instead: a long-running daemon must not drop results over a
// transient failure. The waits back off exponentially: retry_interval after the first failure,
// doubling after each further one up to `retry_max_interval`, back to retry_interval after a
// success (many workers whose queue went away do not all hammer it as it comes back). Close
// tries once more and then gives up with the error, or, given a time to retry until, goes on
// retrying (backing off) until then: a worker stopping while its queue is out of reach does not
// drop what it computed while there is time left.
//
// Thread-safety: Push and Flush may be called from any threads. Close (and the destructor) is
// called once, by the owner, after every other thread has stopped pushing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/status.h"
#include "base/time_source.h"
#include "jobs/store.h"

namespace llmq::jobs {

struct ResultCommitterOptions {
  std::chrono::milliseconds interval{50};  // the longest a result waits before its group commits
  size_t max_batch = 512;                  // the most results in one transaction
  size_t max_queue =
      65536;  // Push blocks while this many wait (a store far slower than the engine)
  std::chrono::milliseconds retry_interval{0};          // 0: a failed group is dropped (see above)
  std::chrono::milliseconds retry_max_interval{30000};  // the backoff's cap (>= retry_interval)
  // The time `interval` and `retry_interval` are measured in; null: TimeSource::Steady(). Tests
  // pass a manual one (tests/manual_time.h). Must outlive the committer.
  TimeSource* time = nullptr;
  // Called on the committer's thread after each commit attempt, with its status and committed()
  // after it (a retried group is reported at each attempt). Runs with the committer's lock held:
  // it must be short and must not call the committer. For tests, which wait on it instead of
  // polling; null: nothing is called.
  std::function<void(const Status& attempt, int64_t committed)> after_attempt = nullptr;
  // Results computed under leases (issue 27): the worker id they were claimed by. Groups are
  // then committed with Store::CommitLeasedResults as that worker, each result under the
  // generation given to Push; a result whose lease another worker took meanwhile is fenced
  // (counted in fenced(), never written). Empty: Store::CommitResults.
  std::string worker;
};

class ResultCommitter {
 public:
  using Options = ResultCommitterOptions;

  // Starts the committer thread. `store` must outlive the committer.
  explicit ResultCommitter(Store* store, Options options = Options());
  ~ResultCommitter();  // Close() when not closed yet (its error is then lost: call Close)
  ResultCommitter(const ResultCommitter&) = delete;
  ResultCommitter& operator=(const ResultCommitter&) = delete;

  // Queues a result. Never waits on I/O; waits only while `max_queue` results are queued.
  // Pushing after Close is a programmer error (LLMQ_CHECK). `lease_generation`: the lease the
  // result was computed under (Options::worker set); ignored otherwise.
  void Push(Result r, int64_t lease_generation = 0);
  // Waits until every result pushed before this call has been through a commit attempt; returns
  // the first commit error so far (OK when none).
  Status Flush();
  // Commits everything still queued, stops the thread, and returns the first commit error.
  // With retry_interval set, a group failing with an I/O error is retried until `retry_until`
  // (by the time source; the default: tried once more). Calling it again returns the same status.
  Status Close(TimeSource::time_point retry_until = TimeSource::time_point::min());

  // Changes the interval from the next group on (the daemon's SIGHUP reload). Any thread.
  void SetInterval(std::chrono::milliseconds interval);

  // Results committed so far (new ones, as CommitResults counts them); for tests and progress.
  int64_t committed() const;
  // Commit attempts that failed so far (retried or not); for logs and tests.
  int64_t failed_attempts() const;
  // Leased results not written because their lease was no longer this worker's.
  int64_t fenced() const;

 private:
  void Run();

  // Waits on work_cv_ until `done()` holds or `deadline` (by the time source) passes.
  template <class Done>
  void WaitUntil(std::unique_lock<std::mutex>* lock, TimeSource::time_point deadline,
                 const Done& done);

  Store* const store_;
  Options opt_;  // interval: guarded by mu_ (SetInterval)
  TimeSource* const time_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;      // to the thread: results, a flush, or closing
  std::condition_variable done_cv_;      // from the thread: a group is through
  std::condition_variable not_full_cv_;  // from the thread: room in the queue
  std::deque<LeasedResult> queue_;
  TimeSource::time_point oldest_;  // when the oldest queued result arrived
  int64_t pushed_ = 0;             // results ever pushed
  int64_t done_ = 0;               // results through a commit attempt (committed or failed)
  int64_t flush_target_ = 0;       // a Flush waits for done_ to reach this
  int64_t committed_ = 0;
  int64_t failed_attempts_ = 0;
  int64_t fenced_ = 0;
  Status error_;  // the first commit error
  bool closing_ = false;
  TimeSource::time_point close_retry_until_ = TimeSource::time_point::min();  // Close's
  bool closed_ = false;
  std::thread thread_;  // last: started once every other member is ready
};

}  // namespace llmq::jobs
