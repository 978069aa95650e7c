// The queue as `llmq status` and the daemon's status page (daemon/status_page.h) show it: each
// job's counts, tokens/s, cache hit rate and ETA (daemon/eta.h), the run windows in effect and
// what the daemon is doing. One computation for both, so that the page's numbers are the
// command's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "config/run_windows.h"
#include "daemon/spool.h"
#include "jobs/store.h"

namespace llmq {

// Each job's token totals by id (the jobs whose totals could not be read are absent).
using TotalsById = std::map<int64_t, jobs::JobTotals>;

// The jobs and their totals from one snapshot of the queue (one read transaction), taken at `now`
// (base/wall_clock.h: LLMQ_TEST_CLOCK in tests).
struct QueueSnapshot {
  std::vector<jobs::JobRecord> all;  // every job, in the order they are fed
  TotalsById totals;
  double now = 0;
  // Why a job that has requests to run waits, by job id (JobWaiting); absent: it does not.
  std::map<int64_t, std::string> waiting;
};
// Reads the snapshot: the totals of every unfinished job and of the `finished_totals` newest
// finished ones (all by default; the status page shows only the newest), and the workers, whose
// heartbeats within `lease_seconds` (queue.lease_seconds, on the real clock) make them live.
[[nodiscard]] Status ReadQueueSnapshot(jobs::Store* store, QueueSnapshot* out,
                                       size_t finished_totals = std::numeric_limits<size_t>::max(),
                                       double lease_seconds = 60);
// Why job `j` waits, or "": an in_progress job (not cancelled) with requests left whose model no
// live worker serves (live: not stopped, heartbeat at most `lease_seconds` before `lease_now`; a
// worker with no served models serves every model): "no worker serves model X: start one with
// --served-model-name X".
std::string JobWaiting(const jobs::JobRecord& j, const std::vector<jobs::WorkerInfo>& workers,
                       double lease_now, double lease_seconds);
// Sets o["waiting"] when the snapshot says job `job` waits.
void AddWaiting(const QueueSnapshot& q, int64_t job, nlohmann::json* o);

// What is known about the queue as a whole: the daemon's progress, the run windows in effect (the
// daemon's, else the config's), and each unfinished job's expected finish.
struct EtaContext {
  bool serving = false;  // an llmq serve runs on this queue
  spool::ServeProgress progress;
  std::vector<RunWindow> windows;
  double now = 0;
  std::map<int64_t, double> finish;  // by job id, where it can be told
};
// `progress`: the daemon's (null: none serves the queue); `windows`: those in effect.
EtaContext EstimateQueue(const QueueSnapshot& q, const spool::ServeProgress* progress,
                         std::vector<RunWindow> windows);

// A job as `llmq status --json` prints it. `totals`: the job's token totals (null: not shown);
// `eta`: the queue's (null: no ETA); `now`: for the tokens/s of a job still running.
nlohmann::json JobStatusJson(const jobs::JobRecord& j, const jobs::JobTotals* totals,
                             const EtaContext* eta, double now);
// The job's line in `llmq status`.
std::string JobStatusLine(const nlohmann::json& o);

// The run windows in effect and where the moment stands against them; null when there are none.
// *text is the line `llmq status` prints ("" when none).
nlohmann::json RunWindowsJson(const EtaContext& c, std::string* text);

// What the daemon is doing ({"serving": false} when none runs); *text is `llmq status`'s line.
nlohmann::json DaemonJson(const EtaContext& c, std::string* text);

}  // namespace llmq
