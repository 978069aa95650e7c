// The daemon's metrics in the Prometheus text exposition format (version 0.0.4), written
// atomically (WriteFileDurably) to a file for node_exporter's textfile collector:
// metrics.textfile, by default <state_dir>/metrics/llmq.prom, every metrics.interval_seconds and
// at shutdown; the same text is served over HTTP when metrics.http_port is set
// (daemon/metrics_http.h).
//
// Counters come from the queue (the committed results of every job the queue holds), so they
// agree with `llmq status --json` and survive restarts; gauges and histograms describe this
// process (the histograms start empty at each start).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "daemon/job_runner.h"
#include "jobs/store.h"

namespace llmq {

// A Prometheus histogram: fixed upper bounds (ascending), counts per bucket.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // `name`_bucket{le=...} (cumulative, ending with le="+Inf"), `name`_sum and `name`_count, after
  // its HELP and TYPE lines.
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // one per bound, then one for +Inf (not cumulative)
  double sum_ = 0;
  int64_t count_ = 0;
};

// What the engine thread reports; the event loop reads it (thread-safe).
class EngineMetrics {
 public:
  EngineMetrics();
  struct Gauges {
    RunnerProgress progress;
    int64_t running = 0, queued = 0;  // requests admitted / waiting inside the engine
    int kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_cached = 0;  // cached: evictable
  };
  // Engine thread.
  void SetGauges(const Gauges& g);
  // The completion tokens the engine's unfinished requests hold, by job (public id): the work in
  // flight (JobRunner::InFlightTokensByJob), refreshed less often than the gauges.
  using InFlight = std::vector<std::pair<std::string, int64_t>>;
  void SetInFlight(InFlight in_flight);
  InFlight in_flight() const;
  void ObserveStep(double seconds);
  void ObserveTtft(double seconds);
  // Any thread: renders the engine part (gauges and histograms) into *out.
  void Render(std::string* out) const;
  Gauges gauges() const;

 private:
  mutable std::mutex mu_;
  Gauges gauges_;
  InFlight in_flight_;
  Histogram step_seconds_, ttft_seconds_;
};

// Sums of the queue, for the counters. Totals of finished (terminal) jobs are kept once read:
// they never change, so a queue of months of jobs is not summed again every few seconds.
class QueueTotals {
 public:
  Status Refresh(jobs::Store* store);
  void Render(std::string* out) const;
  int64_t pending() const { return pending_; }

 private:
  std::map<int64_t, jobs::JobTotals> terminal_;  // by job id
  std::map<std::string, int64_t> jobs_by_status_;
  int64_t completed_ = 0, failed_ = 0, pending_ = 0;
  jobs::JobTotals tokens_;  // over every job
};

// The whole exposition: the queue's counters, tokens/s (`tokens_per_s`, measured by the caller)
// and the engine's gauges and histograms.
std::string RenderMetrics(const QueueTotals& queue, const EngineMetrics& engine,
                          double tokens_per_s);

}  // namespace llmq
