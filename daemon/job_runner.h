// JobRunner: the bridge between the store and the engine. It feeds the engine from the store in
// plan-rank order, a bounded window at a time (memory does not grow with the size of a job), runs
// its steps, and hands every finished request's output line to the result committer, which
// commits them in groups on its own thread (the engine never waits on fsync).
//
// Exactly once: a request is fed at most once per process (a rank cursor only moves forward);
// its result is committed at most once (the store ignores a second result); a request whose
// result was not committed when the process died is still pending and is fed again after restart.
// One thread calls Run or Serve; Wake, CancelJob, Drain and Stop may be called from any thread
// (the daemon's event loop) while Serve runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/backoff.h"
#include "daemon/request_builder.h"
#include "engine/core/llm_engine.h"
#include "jobs/result_committer.h"
#include "jobs/store.h"

namespace llmq {

struct RunnerOptions {
  // The engine is topped up to `window` requests (queued in it) whenever it falls below half.
  int window = 1024;
  // Serve calls `on_tick` on the engine thread at every pass of its loop (each step), and at
  // least every `tick_interval` while it waits for work (when > 0): the daemon's watchdog pings
  // only while these come, so a step that hangs stops them.
  std::function<void()> on_tick;
  std::chrono::milliseconds tick_interval{0};
  // Called on the engine thread with every output of the engine that becomes a result (metrics).
  std::function<void(const RequestOutput&)> on_output;
  // Claims under leases (issue 27: many workers on one queue). Empty: the runner feeds from
  // NextPending by plan rank, as the only process on its queue (`llmq run`). Else the worker id
  // it claims as: Feed takes whole plan groups with Store::ClaimNextGroup (up to `claim_max`
  // requests each, leased for `lease_seconds`; the daemon renews them with Store::Heartbeat) and
  // every result carries the lease generation it was claimed under (the committer must commit
  // with CommitLeasedResults as the same worker). When a hold's requests are dropped, the
  // worker's leases are given back (Store::ReleaseLeases) once the engine is idle or when the
  // hold is released, so that other workers may take them meanwhile.
  std::string worker;
  double lease_seconds = 60;
  int claim_max = 256;
  // The models the worker serves (model.served_names): it claims only groups of jobs naming one
  // of them or none (Store::ClaimNextGroup's filter). Empty: any model's.
  std::vector<std::string> models;
};

struct RunnerProgress {
  int64_t finished = 0;          // requests finished in this run (results handed on)
  int64_t failed = 0;            // of which failed
  int64_t tokens_generated = 0;  // completion tokens sampled in this run, finished or not
  int64_t prompt_tokens = 0, cached_tokens = 0, computed_tokens = 0;  // of finished requests
  double last_step_seconds = 0;  // the engine's last Step (metrics)
  // Seconds spent feeding the engine and stepping it, not waiting for work: the time a rate of
  // work is measured over (llmq status' ETA). The wall clock's seconds (wall_clock::Stopwatch:
  // the steady clock's, or a test clock's, scaled or step-driven).
  double busy_seconds = 0;
  // The runner's last look at the queue found nothing pending past what the engine holds: it
  // looks again only when woken (a new job, a release, a cancel), not while the engine finishes.
  bool fed_out = false;
};

class JobRunner {
 public:
  // `store` is the feeder's own connection (the committer has its own).
  JobRunner(const BuildContext& ctx, LlmEngine* engine, jobs::Store* store,
            jobs::ResultCommitter* committer, const RunnerOptions& opt);

  // Runs until no request is pending in the store and the engine is idle, or `stop()` returns
  // true (checked between steps; running sequences are abandoned, their requests stay pending).
  // `on_step` is called after every step. A failed step (backend error) fails its requests and
  // goes on; only a store error ends the run with an error.
  Status Run(const std::function<bool()>& stop, const std::function<void()>& on_step);

  // The daemon's loop: like Run, but when the store has nothing more it waits for Wake() instead
  // of returning. Returns after Stop(), or after Drain() once no admitted request is left.
  Status Serve(const std::function<void()>& on_step);
  // New jobs may be pending: look at the store again (any thread).
  void Wake();
  // Cancels the engine's requests of `job` (their results: "cancelled" error lines) (any thread).
  void CancelJob(int64_t job);
  // Stops admitting: requests the engine has not admitted yet are dropped (they stay pending in
  // the store and run after a restart); admitted ones run to their end (any thread).
  void Drain();
  // Ends Serve at the next step boundary; unfinished requests stay pending (any thread).
  void Stop();
  // Run windows (serve.run_windows): Hold(false) starts nothing new (requests the engine has not
  // admitted are dropped, as by Drain); Hold(true) also abandons the admitted ones. Dropped
  // requests stay pending in the store; Release() feeds them again, after what was finished is
  // committed, so nothing finished is computed twice (any thread). A hold is never lowered
  // (Hold(false) after Hold(true) changes nothing): only Release lifts it.
  void Hold(bool running_too);
  void Release();

  const RunnerProgress& progress() const { return progress_; }
  // Requests of `job` this runner ran to their result (a job's summary: finished_this_run) (any
  // thread).
  int64_t FinishedOfJob(int64_t job) const;
  // The completion tokens the engine's unfinished requests have sampled so far, summed by job
  // (public id, ascending), jobs without any left out (LlmEngine::ForEachInFlight). Engine
  // thread only (on_tick); O(requests fed).
  std::vector<std::pair<std::string, int64_t>> InFlightTokensByJob() const;

 private:
  struct Fed {  // a request handed to the engine, until its result is handed on
    int64_t job = 0, line = 0;
    int64_t generation = 0;  // the lease it runs under (claims only)
    jobs::BatchRequest req;
    double queued_before = 0;  // seconds from the job's acceptance to Add
  };
  struct JobInfo {
    std::string public_id, name;
    double created_at = 0;
  };
  Status Feed();
  // The feed's common body: hands `batch` (pending or claimed requests) to the engine, refusing
  // lines that cannot be built. A claimed request already in the engine (re-claimed after its
  // lease was given back) takes the new lease's generation instead of being fed twice.
  Status Admit(std::vector<jobs::PendingRequest>* batch);
  // Claims: gives the worker's leases back after committing what finished (see RunnerOptions).
  Status ReleaseLeases();
  Status Job(int64_t id, const JobInfo** out);
  void Finish(Fed& f, const RequestOutput& o);
  void HandleOutputs(const std::vector<RequestOutput>& done);
  // One engine step, its outputs handed on, progress updated (Run's and Serve's common body).
  void StepOnce(int64_t tokens_before, std::vector<RequestOutput>* done);
  void ApplyControls();  // with mu_ held: cancels, drain
  // With mu_ held: a control waits to be applied (stop, drain, a cancel, a changed hold); the
  // runner's waits end on it.
  bool ControlPending() const { return drain_ || stop_ || !cancels_.empty() || hold_ != held_; }
  // Commits a refused line's output (jobs::RefusedLine: HTTP 400, `param` the field at fault).
  void Refuse(int64_t job, int64_t line, int64_t generation, const std::string& custom_id,
              const std::string& msg, const std::string& param);

  BuildContext ctx_;
  LlmEngine* engine_;
  jobs::Store* store_;
  jobs::ResultCommitter* committer_;
  RunnerOptions opt_;
  int64_t cursor_ = 0;                                   // highest plan rank fed so far
  std::chrono::steady_clock::time_point feed_retry_at_;  // Feed failed: not before this
  // The wait after Feed's next failure: 0.5 s, doubling with each failure in a row up to 30 s
  // (a queue gone away is not hammered), back to 0.5 s once Feed succeeds.
  Backoff feed_retry_wait_{std::chrono::milliseconds(500), std::chrono::milliseconds(30000)};
  bool drained_ = false;  // the store had nothing more after cursor_ at the last look
  std::unordered_map<std::string, Fed> fed_;  // by engine request id
  std::unordered_map<int64_t, JobInfo> jobs_;
  RunnerProgress progress_;
  std::unordered_set<std::string> dropped_;  // drained: their outputs are not results

  mutable std::mutex mu_;  // guards the controls below, and finished_by_job_
  std::condition_variable cv_;
  bool wake_ = false, drain_ = false, stop_ = false;
  bool draining_ = false;       // the drain was applied (runner thread only)
  int hold_ = 0;                // 0 run, 1 hold new requests, 2 hold running ones too
  int held_ = 0;                // the hold applied (runner thread only)
  bool refeed_ = false;         // released, or a worker's Feed failed: Feed starts over
  bool leases_held_ = false;    // claims: a hold dropped requests whose leases are still ours
  bool idle_released_ = false;  // claims: given back what it held since it last claimed (Serve)
  std::chrono::steady_clock::time_point idle_since_;  // claims: idle since (Serve)
  std::vector<int64_t> cancels_;
  std::unordered_map<int64_t, int64_t> finished_by_job_;
};

// Seconds since the Unix epoch, as the store keeps times (base/wall_clock.h).
double UnixNow();

}  // namespace llmq
