#include "daemon/metrics.h"

#include <cstdio>
#include <utility>

namespace llmq {
namespace {

std::string Num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string Num(int64_t v) {
  return std::to_string(v);
}

void Head(const std::string& name, const char* type, const std::string& help, std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// One metric family without labels.
template <typename T>
void Single(const std::string& name, const char* type, const std::string& help, T v,
            std::string* out) {
  Head(name, type, help, out);
  *out += name + " " + Num(v) + "\n";
}

// One family with a single label; `values` in the order given.
template <typename T>
void Labelled(const std::string& name, const char* type, const std::string& help,
              const std::string& label, const std::vector<std::pair<std::string, T>>& values,
              std::string* out) {
  Head(name, type, help, out);
  for (const auto& [l, v] : values) *out += name + "{" + label + "=\"" + l + "\"} " + Num(v) + "\n";
}

constexpr jobs::JobStatus kAllStatuses[] = {
    jobs::JobStatus::kValidating, jobs::JobStatus::kInProgress, jobs::JobStatus::kFinalizing,
    jobs::JobStatus::kCompleted,  jobs::JobStatus::kFailed,     jobs::JobStatus::kCancelling,
    jobs::JobStatus::kCancelled,  jobs::JobStatus::kExpired};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;  // le: v <= bound
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  Head(name, "histogram", help, out);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += name + "_bucket{le=\"" + Num(bounds_[i]) + "\"} " + Num(cumulative) + "\n";
  }
  *out += name + "_bucket{le=\"+Inf\"} " + Num(count_) + "\n";
  *out += name + "_sum " + Num(sum_) + "\n" + name + "_count " + Num(count_) + "\n";
}

EngineMetrics::EngineMetrics()
    : step_seconds_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      ttft_seconds_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}) {}

void EngineMetrics::SetGauges(const Gauges& g) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_ = g;
}

void EngineMetrics::SetInFlight(InFlight in_flight) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ = std::move(in_flight);
}

EngineMetrics::InFlight EngineMetrics::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void EngineMetrics::ObserveStep(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  step_seconds_.Observe(seconds);
}

void EngineMetrics::ObserveTtft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_seconds_.Observe(seconds);
}

EngineMetrics::Gauges EngineMetrics::gauges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gauges_;
}

void EngineMetrics::Render(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Gauges& g = gauges_;
  Labelled<int64_t>("llmq_engine_requests", "gauge",
                    "Requests inside the engine: admitted (running) or waiting for admission "
                    "(queued).",
                    "state", {{"running", g.running}, {"queued", g.queued}}, out);
  Labelled<int64_t>(
      "llmq_kv_blocks", "gauge",
      "KV cache blocks: used by sequences, free, or cached (evictable prefix cache).", "state",
      {{"used", g.kv_blocks_used}, {"free", g.kv_blocks_free}, {"cached", g.kv_blocks_cached}},
      out);
  step_seconds_.Render("llmq_step_duration_seconds", "Duration of one engine step.", out);
  ttft_seconds_.Render("llmq_time_to_first_token_seconds",
                       "Time from a request's admission to its first token.", out);
}

Status QueueTotals::Refresh(jobs::Store* store) {
  // Built aside and kept only when every read worked: a failed refresh leaves the last totals.
  std::vector<jobs::JobRecord> all;
  LLMQ_RETURN_IF_ERROR(store->ListJobs(&all));
  std::map<std::string, int64_t> by_status;
  int64_t completed = 0, failed = 0, pending = 0;
  jobs::JobTotals tokens;
  std::map<int64_t, jobs::JobTotals> terminal;
  for (const jobs::JobRecord& j : all) {
    ++by_status[jobs::JobStatusName(j.status)];
    completed += j.completed;
    failed += j.failed;
    if (!jobs::IsTerminal(j.status)) pending += j.total - j.completed - j.failed;
    jobs::JobTotals t;
    if (auto it = terminal_.find(j.id); it != terminal_.end()) {
      t = it->second;
    } else {
      LLMQ_RETURN_IF_ERROR(store->GetJobTotals(j.id, &t));
      if (jobs::IsTerminal(j.status)) terminal[j.id] = t;
    }
    tokens.prompt_tokens += t.prompt_tokens;
    tokens.cached_tokens += t.cached_tokens;
    tokens.computed_tokens += t.computed_tokens;
    tokens.completion_tokens += t.completion_tokens;
  }
  terminal_.merge(terminal);
  jobs_by_status_ = std::move(by_status);
  completed_ = completed;
  failed_ = failed;
  pending_ = pending;
  tokens_ = tokens;
  return Status::Ok();
}

void QueueTotals::Render(std::string* out) const {
  std::vector<std::pair<std::string, int64_t>> by_status;
  for (jobs::JobStatus s : kAllStatuses) {
    const auto it = jobs_by_status_.find(jobs::JobStatusName(s));
    by_status.emplace_back(jobs::JobStatusName(s), it == jobs_by_status_.end() ? 0 : it->second);
  }
  Labelled("llmq_jobs", "gauge", "Jobs in the queue by status.", "status", by_status, out);
  Labelled<int64_t>("llmq_requests_total", "counter",
                    "Requests of the queue's jobs with a committed result, by status.", "status",
                    {{"completed", completed_}, {"failed", failed_}}, out);
  Single("llmq_queue_depth", "gauge", "Requests of unfinished jobs still without a result.",
         pending_, out);
  Single("llmq_prompt_tokens_total", "counter", "Prompt tokens of the completed requests.",
         tokens_.prompt_tokens, out);
  Single("llmq_cached_prompt_tokens_total", "counter",
         "Prompt tokens of the completed requests served from the prefix cache.",
         tokens_.cached_tokens, out);
  Single("llmq_computed_prompt_tokens_total", "counter",
         "Prompt tokens of the completed requests that were computed.", tokens_.computed_tokens,
         out);
  Single("llmq_completion_tokens_total", "counter", "Completion tokens of the completed requests.",
         tokens_.completion_tokens, out);
  Single("llmq_cache_hit_ratio", "gauge",
         "Cached prompt tokens / prompt tokens over the completed requests (0 when none).",
         tokens_.prompt_tokens > 0 ? double(tokens_.cached_tokens) / tokens_.prompt_tokens : 0.0,
         out);
}

std::string RenderMetrics(const QueueTotals& queue, const EngineMetrics& engine,
                          double tokens_per_s) {
  std::string out;
  queue.Render(&out);
  Single("llmq_tokens_per_second", "gauge",
         "Tokens generated per second by this process over the last interval.", tokens_per_s, &out);
  engine.Render(&out);
  return out;
}

}  // namespace llmq
