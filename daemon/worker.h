// Worker: this llmq serve's presence on its queue (issue 27: many workers on one queue). Every
// serve is a worker: it registers under an id of its own, claims its work under leases
// (JobRunner, RunnerOptions::worker), renews them with its heartbeat, shows its state to
// `llmq workers`, and gives its leases back when it stops. A worker that dies stops renewing:
// its unfinished requests return to the other workers when their leases run out.
//
// The heartbeat runs on the daemon's event loop, with the loop's own Store connection: a worker
// whose loop stops (or whose host loses the queue) stops renewing, and so loses its leases.
// Thread-safety: one thread (the caller's Store's).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "jobs/store.h"

namespace llmq {

// This worker's id, from a slot of its state folder: the first of <root>/workers/0.lock, 1.lock,
// ... it can lock (flock, held through *fd until the process ends). The id is
// "<host>:<root>#<slot>" (cut to 200 bytes), so the same worker restarted (after a crash, a
// kill -9, a power cut) has the same id as before, and may take back at once what its last
// incarnation held (WorkerPresence::Register): the lock says that one is gone. Workers on one
// folder (one per GPU) get slots 0, 1, ...; workers of other hosts differ by host. IoError naming
// the folder when no slot can be made or locked.
[[nodiscard]] Status TakeWorkerSlot(const std::string& root, int* fd, std::string* id);

// The host name (gethostname), "" when it cannot be read.
std::string HostName();

class WorkerPresence {
 public:
  // `store`: the connection the presence writes with (the caller's, outliving this);
  // `lease_seconds`: how long a claim (and a job's finalize lease) lasts without a heartbeat.
  WorkerPresence(jobs::Store* store, jobs::WorkerInfo info, double lease_seconds)
      : store_(store), info_(std::move(info)), lease_seconds_(lease_seconds) {}

  const std::string& id() const { return info_.id; }
  double lease_seconds() const { return lease_seconds_; }
  // How often Beat should run: a third of the lease, so that two heartbeats may be missed (a
  // slow disk, a busy host) before the leases run out.
  double beat_seconds() const { return lease_seconds_ / 3; }

  // Records the worker (state "starting") and gives back every lease its id still holds: they
  // were its last incarnation's (TakeWorkerSlot), whose work died with it. *released
  // (optional): how many requests went back.
  [[nodiscard]] Status Register(int64_t* released = nullptr);
  // The heartbeat: renews every lease the worker holds (requests and finalize leases) and shows
  // its state, the job it works on (public id, "" when none) and its completion tokens/s.
  [[nodiscard]] Status Beat(const std::string& state, const std::string& current_job,
                            double tokens_per_second);
  // Stopping: every lease still held goes back (its requests are claimable at once) and the
  // worker shows "stopped". Call after the last result was committed. *released (optional):
  // how many requests went back.
  [[nodiscard]] Status Leave(int64_t* released = nullptr);
  // Finalizing or cancelling job `job` is this worker's alone: *mine says whether the job's
  // finalize lease is (now) held by this worker (Store::ClaimJobFinalize).
  [[nodiscard]] Status ClaimJob(int64_t job, bool* mine);

 private:
  jobs::Store* store_;
  jobs::WorkerInfo info_;
  double lease_seconds_;
};

}  // namespace llmq
