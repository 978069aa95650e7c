// A job's life after it is accepted, as the daemon drives it: cancel what was asked to be
// cancelled, finalize what has every result (write outbox/<stem>.results.jsonl, .errors.jsonl and
// .summary.json, and .report.html unless Facts::reports is off, then the terminal status).
// Everything is read from the queue each time, so the
// same calls finish what a crash interrupted: a job left `finalizing` is finalized again (to the
// same stem, kept in the job's options), one left `cancelling` is cancelled again (requests that
// got no result get a "cancelled" error line; those that did keep it), and a job whose counts are
// complete is finalized whatever its status says.
// The engine and the committer are reached through two injected calls, so the unit is tested on a
// real queue without an engine (tests/job_lifecycle_test.cpp).
// Thread-safety: one thread (the daemon's event loop), with its own Store connection.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "jobs/store.h"

namespace llmq {

class JobLifecycle {
 public:
  // What every summary says about the run (llmq serve's model and machine).
  struct Facts {
    std::string model;
    std::string backend;
    int cpu_threads = 0;
    bool reports = true;  // metrics.job_reports: outbox/<stem>.report.html beside the results
  };
  struct Hooks {
    // The engine drops the job's requests, running or queued (JobRunner::CancelJob); the results
    // it already produced are pushed to the committer.
    std::function<void(int64_t job)> cancel_in_engine;
    // Everything pushed to the committer so far is committed (ResultCommitter::Flush).
    std::function<Status()> flush_results;
    // Unix seconds now (a job without a finish time takes it as its end).
    std::function<double()> unix_now;
    // Requests of the job this process ran to their result (JobRunner::FinishedOfJob): the
    // summary's finished_this_run; the results committed before (by an earlier run of the
    // daemon, not refused, not cancelled now) are its `resumed`.
    std::function<int64_t(int64_t job)> finished_this_run;
    // Many workers on one queue: whether cancelling or finalizing the job is this worker's
    // (its finalize lease, WorkerPresence::ClaimJob); a job another worker holds is left to it.
    // Unset: always this process's.
    std::function<Status(int64_t job, bool* mine)> claim_job;
  };

  // `outbox`: the folder the result files go to (spool::Paths::outbox); `store`: the caller's
  // connection, outliving this.
  JobLifecycle(std::string outbox, jobs::Store* store, Facts facts, Hooks hooks)
      : outbox_(std::move(outbox)),
        store_(store),
        facts_(std::move(facts)),
        hooks_(std::move(hooks)) {}

  // Cancels and finalizes what is due, for every job not yet terminal (and this worker's:
  // Hooks::claim_job); failures are logged and tried again at the next call. While `stopping`,
  // cancellations wait for the next start (the engine is draining).
  void CheckJobs(bool stopping);

  // Cancels job `j` (any non-terminal status): cancelling, the engine drops its requests, results
  // already pushed are committed, every request still without a result gets a "cancelled" error
  // line, then it is finalized as cancelled.
  [[nodiscard]] Status Cancel(const jobs::JobRecord& j);

  // Writes the job's outbox files and sets `final_status`. The stem is chosen once (the file's
  // name, or with the job's id appended when that stem is taken) and kept in the job's options,
  // so a finalize interrupted by a crash writes the same files again.
  // Then removes the outbox's temporaries left by writers no longer running (a worker killed while
  // it finalized: spool::RemoveStaleTemporaries).
  // `cancelled`: the "cancelled" lines this process just wrote (Cancel).
  [[nodiscard]] Status Finalize(const jobs::JobRecord& j, jobs::JobStatus final_status,
                                int64_t cancelled = 0);

 private:
  std::string outbox_;
  jobs::Store* store_;
  Facts facts_;
  Hooks hooks_;
};

}  // namespace llmq
