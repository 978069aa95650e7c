#include "daemon/queue_status.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>

#include "base/wall_clock.h"
#include "daemon/eta.h"

namespace llmq {

using json = nlohmann::json;

Status ReadQueueSnapshot(jobs::Store* store, QueueSnapshot* out, size_t finished_totals,
                         double lease_seconds) {
  *out = QueueSnapshot();
  // A job's completion tokens per request (the ETA's) are its totals over its counts, and its ETA
  // the work left at `now` from `now`, however long the reader takes (the daemon commits
  // meanwhile; a test clock runs thousands of times as fast as the real one).
  LLMQ_RETURN_IF_ERROR(store->BeginRead());
  out->now = wall_clock::Now();
  Status st = store->ListJobs(&out->all);
  size_t finished = 0;
  for (auto j = out->all.rbegin(); st.ok() && j != out->all.rend(); ++j) {
    if (jobs::IsTerminal(j->status) && finished++ >= finished_totals) continue;
    if (jobs::JobTotals t; store->GetJobTotals(j->id, &t).ok()) out->totals.emplace(j->id, t);
  }
  std::vector<jobs::WorkerInfo> workers;
  if (st.ok()) st = store->ListWorkers(&workers);
  const double lease_now = jobs::store_internal::LeaseNow();  // heartbeats are on the real clock
  for (const jobs::JobRecord& j : out->all)
    if (std::string w = JobWaiting(j, workers, lease_now, lease_seconds); !w.empty())
      out->waiting.emplace(j.id, std::move(w));
  if (!st.ok()) {
    store->Rollback();
    return st;
  }
  return store->Commit();  // the snapshot's end
}

std::string JobWaiting(const jobs::JobRecord& j, const std::vector<jobs::WorkerInfo>& workers,
                       double lease_now, double lease_seconds) {
  if (j.status != jobs::JobStatus::kInProgress || j.cancel_requested || j.model.empty() ||
      j.total - j.completed - j.failed <= 0)
    return "";
  for (const jobs::WorkerInfo& w : workers) {
    const bool live = w.state != "stopped" && lease_now - w.heartbeat_at <= lease_seconds;
    const auto& m = w.served_models;
    if (live && (m.empty() || std::find(m.begin(), m.end(), j.model) != m.end())) return "";
  }
  return "no worker serves model " + j.model + ": start one with --served-model-name " + j.model;
}

void AddWaiting(const QueueSnapshot& q, int64_t job, json* o) {
  if (const auto w = q.waiting.find(job); w != q.waiting.end()) (*o)["waiting"] = w->second;
}

EtaContext EstimateQueue(const QueueSnapshot& q, const spool::ServeProgress* progress,
                         std::vector<RunWindow> windows) {
  EtaContext c;
  c.windows = std::move(windows);
  c.serving = progress != nullptr;
  c.now = q.now;
  if (!c.serving) return c;
  c.progress = *progress;
  const std::map<std::string, int64_t> in_flight(c.progress.in_flight_tokens.begin(),
                                                 c.progress.in_flight_tokens.end());
  // Completion tokens a request takes: its job's mean once some succeeded, else (filled in
  // below) the mean over the unfinished jobs' successes.
  std::vector<EtaJob> eta;
  std::vector<int64_t> ids;
  int64_t tokens = 0, done = 0;
  for (const jobs::JobRecord& j : q.all) {
    if (jobs::IsTerminal(j.status) || j.cancel_requested) continue;
    EtaJob e{std::max<int64_t>(0, j.total - j.completed - j.failed), 0, 0};
    if (const auto t = q.totals.find(j.id); j.completed > 0 && t != q.totals.end()) {
      e.tokens_per_request =
          static_cast<double>(t->second.completion_tokens) / static_cast<double>(j.completed);
      tokens += t->second.completion_tokens;
      done += j.completed;
    }
    if (const auto f = in_flight.find(j.public_id); f != in_flight.end())
      e.in_flight_tokens = f->second;
    eta.push_back(e);
    ids.push_back(j.id);
  }
  const double overall = done > 0 ? static_cast<double>(tokens) / static_cast<double>(done) : 0;
  for (EtaJob& e : eta)
    if (e.tokens_per_request <= 0) e.tokens_per_request = overall;
  const std::vector<double> finish =
      EstimateFinishes(c.windows, c.now, c.progress.tokens_per_second, eta);
  for (size_t i = 0; i < ids.size(); ++i)
    if (finish[i] >= 0) c.finish[ids[i]] = finish[i];
  return c;
}

json JobStatusJson(const jobs::JobRecord& j, const jobs::JobTotals* totals, const EtaContext* eta,
                   double now) {
  json o{{"id", j.public_id},
         {"name", j.name},
         {"status", jobs::JobStatusName(j.status)},
         {"request_counts", {{"total", j.total}, {"completed", j.completed}, {"failed", j.failed}}},
         {"created_at", j.created_at},
         {"started_at", j.started_at > 0 ? json(j.started_at) : json(nullptr)},
         {"finished_at", j.finished_at > 0 ? json(j.finished_at) : json(nullptr)},
         {"cancel_requested", j.cancel_requested}};
  if (!j.error.empty()) o["error"] = j.error;
  o["model"] = j.model.empty() ? json(nullptr) : json(j.model);
  if (totals != nullptr) {
    const jobs::JobTotals& t = *totals;
    const double end = j.finished_at > 0 ? j.finished_at : now;
    const double secs = j.started_at > 0 ? end - j.started_at : 0;
    o["completion_tokens"] = t.completion_tokens;
    o["tokens_per_second"] = secs > 0 ? t.completion_tokens / secs : 0.0;
    o["cache_hit_rate"] = t.prompt_tokens > 0 ? double(t.cached_tokens) / t.prompt_tokens : 0.0;
    const int64_t left = j.total - j.completed - j.failed;
    o["eta_seconds"] = nullptr;
    if (jobs::IsTerminal(j.status) || left == 0) {
      o["eta_seconds"] = 0.0;
    } else if (eta != nullptr) {
      if (const auto f = eta->finish.find(j.id); f != eta->finish.end()) {
        o["eta_seconds"] = f->second - eta->now;
        o["eta"] = LocalIso8601(static_cast<std::time_t>(f->second));
      }
    }
  }
  const json opts = json::parse(j.options, nullptr, false);
  if (opts.is_object() && opts.contains("outbox")) o["outbox"] = opts["outbox"];
  return o;
}

std::string JobStatusLine(const json& o) {
  std::string eta = "-";
  if (o.contains("eta_seconds") && o["eta_seconds"].is_number()) {
    eta = FormatDuration(o["eta_seconds"].get<double>());
    if (o.contains("eta")) eta += " (at " + o["eta"].get<std::string>() + ")";
  }
  const json& c = o["request_counts"];
  char b[512];
  std::snprintf(b, sizeof b, "%s  %-12s  %lld/%lld done (%lld failed)",
                o["id"].get<std::string>().c_str(), o["status"].get<std::string>().c_str(),
                static_cast<long long>(c["completed"].get<int64_t>() + c["failed"].get<int64_t>()),
                static_cast<long long>(c["total"].get<int64_t>()),
                static_cast<long long>(c["failed"].get<int64_t>()));
  std::string s = b;
  if (o.contains("tokens_per_second")) {
    std::snprintf(b, sizeof b, "  %.1f tok/s  cache hit %.1f%%  ETA %s",
                  o["tokens_per_second"].get<double>(), 100 * o["cache_hit_rate"].get<double>(),
                  eta.c_str());
    s += b;
  }
  if (o.contains("model") && o["model"].is_string())
    s += "  model " + o["model"].get<std::string>();
  s += "  " + o["name"].get<std::string>();
  if (o.contains("waiting")) s += "  waiting: " + o["waiting"].get<std::string>();
  return s;
}

// Those the running llmq serve publishes (so a reload shows at once), else the config's (what the
// next start uses).
json RunWindowsJson(const EtaContext& c, std::string* text) {
  const std::vector<RunWindow>& windows = c.windows;
  const bool from_serve = c.serving;
  text->clear();
  if (windows.empty()) return nullptr;
  const auto now = static_cast<std::time_t>(c.now);  // LLMQ_TEST_CLOCK in tests
  const RunWindowState st = RunWindowStateAt(windows, now);
  const auto iso = [](std::time_t t) { return t < 0 ? json(nullptr) : json(LocalIso8601(t)); };
  json o{{"windows", json::array()},
         {"source", from_serve ? "serve" : "config"},
         {"open", st.open},
         {"next_open", iso(st.next_open)},
         {"next_close", iso(st.next_close)}};
  *text = "run windows";
  for (const RunWindow& w : windows) {
    o["windows"].push_back(FormatRunWindow(w));
    *text += " " + FormatRunWindow(w);
  }
  *text += from_serve ? " (local time, in effect in llmq serve): "
                      : " (local time, from the config; llmq serve is not running): ";
  const auto when = [now](std::time_t t) {
    std::tm tm{};
    localtime_r(&t, &tm);
    char b[64];
    std::strftime(b, sizeof b, tm.tm_sec ? "%Y-%m-%d %H:%M:%S" : "%Y-%m-%d %H:%M", &tm);
    const long left = static_cast<long>(t - now);
    char in[32];
    if (left >= 3600)
      std::snprintf(in, sizeof in, "%ldh%02ldm", left / 3600, left / 60 % 60);
    else if (left >= 60)
      std::snprintf(in, sizeof in, "%ldm", left / 60);
    else
      std::snprintf(in, sizeof in, "%lds", left);
    return std::string(b) + " (in " + in + ")";
  };
  if (st.next_open < 0)
    *text += "always open";
  else if (st.open)
    *text += "inside a window now, until " + when(st.next_close);
  else
    *text += "outside a window now; next opens " + when(st.next_open);
  return o;
}

json DaemonJson(const EtaContext& c, std::string* text) {
  json daemon = json{{"serving", c.serving}};
  *text = "no llmq serve is serving this queue: nothing runs until one starts";
  if (!c.serving) return daemon;
  daemon["running"] = c.progress.running;
  daemon["queued"] = c.progress.queued;
  daemon["tokens_per_second"] = c.progress.tokens_per_second;
  daemon["tokens_generated"] = c.progress.tokens_generated;
  daemon["held"] = c.progress.held;
  char b[256];
  std::snprintf(b, sizeof b,
                "llmq serve: %lld request(s) running, %lld queued in the engine, %lld tokens "
                "generated since it started, %.1f tok/s while working%s",
                static_cast<long long>(c.progress.running),
                static_cast<long long>(c.progress.queued),
                static_cast<long long>(c.progress.tokens_generated), c.progress.tokens_per_second,
                c.progress.held ? " (outside the run windows: nothing new starts)" : "");
  *text = b;
  return daemon;
}

}  // namespace llmq
