#include "daemon/status_page.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string>

#include "daemon/eta.h"
#include "jobs/report/html.h"

namespace llmq {

using json = nlohmann::json;
using jobs::report::Escape;
using jobs::report::Keyed;
using jobs::report::Num;

namespace {

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1200px}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.5em;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}"
    "th{background:#f4f4f4}.note{color:#555;font-size:.9em}"
    ".bar{display:inline-block;width:200px;height:.9em;background:#eee;vertical-align:middle;"
    "margin-right:.5em}.fill{display:block;height:100%;background:#3a7bd5}"
    ".failed .fill{background:#d9534f}";

// Reloads the page's <main id="live"> from the daemon every data-refresh-ms milliseconds; the
// page keeps its last numbers while the daemon does not answer. (No '<' nor '&': the page stays
// well-formed XML.)
constexpr const char* kScript =
    "(function () {\n"
    "  var ms = Number(document.body.getAttribute('data-refresh-ms'));\n"
    "  if (!(ms > 0)) return;\n"
    "  setInterval(function () {\n"
    "    fetch(location.pathname, {cache: 'no-store'})\n"
    "      .then(function (r) { return r.ok ? r.text() : null; })\n"
    "      .then(function (t) {\n"
    "        if (t === null) return;\n"
    "        var live = new DOMParser().parseFromString(t, 'text/html').getElementById('live');\n"
    "        if (live) document.getElementById('live').replaceWith(live);\n"
    "      })\n"
    "      .catch(function () {});\n"
    "  }, ms);\n"
    "})();\n";

std::string Section(const std::string& id, const std::string& title, const std::string& body) {
  return "<section id=\"" + id + "\"><h2>" + Escape(title) + "</h2>\n" + body + "</section>\n";
}

std::string Row(const std::string& name, const std::string& value_html) {
  return "<tr><th>" + Escape(name) + "</th><td>" + value_html + "</td></tr>";
}

int64_t Int(const json& o, const char* key) {
  return o.contains(key) && o[key].is_number() ? o[key].get<int64_t>() : 0;
}
double Real(const json& o, const char* key) {
  return o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0;
}
std::string Str(const json& o, const char* key) {
  return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
}

// A job's progress: a bar (done of total; red when some failed) and "done/total (failed)".
std::string Progress(const std::string& id, const json& counts) {
  const int64_t total = Int(counts, "total"), completed = Int(counts, "completed"),
                failed = Int(counts, "failed"), done = completed + failed;
  const double share = total > 0 ? std::clamp(double(done) / double(total), 0.0, 1.0) : 1.0;
  const std::string key = "job." + id + ".";
  return std::string("<span class=\"bar") + (failed > 0 ? " failed" : "") +
         "\" role=\"progressbar\" aria-valuemin=\"0\" aria-valuemax=\"" + std::to_string(total) +
         "\" aria-valuenow=\"" + std::to_string(done) +
         "\"><span class=\"fill\" style=\"width:" + Num(share * 100, "%.1f") +
         "%\"></span></span><span class=\"progress\" id=\"progress-" + Escape(id) + "\">" +
         Keyed(key + "done", double(done), std::to_string(done)) + "/" +
         Keyed(key + "total", double(total), std::to_string(total)) + " done (" +
         Keyed(key + "completed", double(completed), std::to_string(completed)) + " ok, " +
         Keyed(key + "failed", double(failed), std::to_string(failed)) + " failed)</span>";
}

std::string Eta(const std::string& key, const json& o) {
  if (!o.contains("eta_seconds") || !o["eta_seconds"].is_number()) return "-";
  const double secs = o["eta_seconds"].get<double>();
  std::string shown = FormatDuration(secs);
  if (o.contains("eta") && o["eta"].is_string()) shown += " (at " + Str(o, "eta") + ")";
  return Keyed(key + "eta_seconds", secs, shown);
}

// One table of jobs; `reports`: link each to its report where it has one.
std::string JobsTable(const std::vector<json>& jobs, const std::vector<std::string>& reports) {
  std::string out =
      "<table><thead><tr><th>job</th><th>name</th><th>status</th><th>progress</th>"
      "<th>tokens/s</th><th>cache hit rate</th><th>ETA</th><th>report</th></tr></thead><tbody>";
  for (const json& o : jobs) {
    const std::string id = Str(o, "id"), key = "job." + id + ".";
    const bool has_totals = o.contains("tokens_per_second");
    const bool has_report = std::find(reports.begin(), reports.end(), id) != reports.end();
    out += "<tr id=\"job-" + Escape(id) + "\"><td>" + Escape(id) + "</td><td>" +
           Escape(Str(o, "name")) + "</td><td>" + Escape(Str(o, "status")) +
           (o.value("cancel_requested", false) ? " (cancel requested)" : "") +
           (o.contains("waiting") ? " (waiting: " + Escape(Str(o, "waiting")) + ")" : "") +
           "</td><td>" + Progress(id, o["request_counts"]) + "</td><td>" +
           (has_totals ? Keyed(key + "tokens_per_second", Real(o, "tokens_per_second"),
                               Num(Real(o, "tokens_per_second"), "%.1f"))
                       : "-") +
           "</td><td>" +
           (has_totals ? Keyed(key + "cache_hit_rate", Real(o, "cache_hit_rate"),
                               Num(100 * Real(o, "cache_hit_rate"), "%.1f %%"))
                       : "-") +
           "</td><td>" + (has_totals ? Eta(key, o) : "-") + "</td><td>" +
           (has_report ? "<a href=\"/reports/" + Escape(id) + "\">report</a>" : "-") +
           "</td></tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string DaemonSection(const StatusPageData& d) {
  const json& g = d.daemon;
  const bool serving = g.value("serving", false);
  std::string current;
  for (const auto& [job, tokens] : d.in_engine) {
    std::string name;  // the job's file name, when it is among the unfinished ones
    for (const json& o : d.unfinished)
      if (Str(o, "id") == job) name = " " + Str(o, "name");
    current += (current.empty() ? "" : ", ") + Escape(job + name) + " (" + std::to_string(tokens) +
               " tokens in flight)";
  }
  std::string rows = Row("host", Escape(d.host)) + Row("backend", Escape(d.backend)) +
                     Row("model", Escape(d.model)) +
                     Row("current jobs", current.empty() ? "none" : current);
  if (serving) {
    rows += Row("requests running",
                Keyed("daemon.running", Real(g, "running"), std::to_string(Int(g, "running")))) +
            Row("requests queued in the engine",
                Keyed("daemon.queued", Real(g, "queued"), std::to_string(Int(g, "queued")))) +
            Row("tokens/s while working",
                Keyed("daemon.tokens_per_second", Real(g, "tokens_per_second"),
                      Num(Real(g, "tokens_per_second"), "%.1f"))) +
            Row("tokens generated since it started",
                Keyed("daemon.tokens_generated", Real(g, "tokens_generated"),
                      std::to_string(Int(g, "tokens_generated"))));
  }
  rows += Row("run windows", d.windows_line.empty() ? "none: always open" : Escape(d.windows_line));
  if (g.value("held", false)) rows += Row("state", "outside the run windows: nothing new starts");
  return Section("worker", "This daemon", "<table><tbody>" + rows + "</tbody></table>\n");
}

}  // namespace

void FillStatusPageJobs(const QueueSnapshot& q, const EtaContext& eta, size_t max_finished,
                        const std::function<bool(const jobs::JobRecord&)>& has_report,
                        StatusPageData* out) {
  out->unfinished.clear();
  out->finished.clear();
  out->reports.clear();
  out->finished_left_out = 0;
  const auto job_json = [&](const jobs::JobRecord& j) {
    const auto t = q.totals.find(j.id);
    json o = JobStatusJson(j, t == q.totals.end() ? nullptr : &t->second, &eta, q.now);
    AddWaiting(q, j.id, &o);
    return o;
  };
  for (const jobs::JobRecord& j : q.all)
    if (!jobs::IsTerminal(j.status)) out->unfinished.push_back(job_json(j));
  for (auto j = q.all.rbegin(); j != q.all.rend(); ++j) {
    if (!jobs::IsTerminal(j->status)) continue;
    if (out->finished.size() >= max_finished) {
      ++out->finished_left_out;
      continue;
    }
    out->finished.push_back(job_json(*j));
    if (has_report(*j)) out->reports.push_back(j->public_id);
  }
}

std::string RenderStatusPage(const StatusPageData& d) {
  const auto when = static_cast<std::time_t>(d.now);
  std::string live = "<main id=\"live\">\n<h1>llmq on " + Escape(d.host) +
                     "</h1>\n<p class=\"note\">As of " + Escape(LocalIso8601(when)) +
                     "; the page refreshes itself every " + Num(d.refresh_seconds, "%g") +
                     " s (with JavaScript; without, reload it). Prometheus metrics: "
                     "<a href=\"/metrics\">/metrics</a>.</p>\n";
  live += DaemonSection(d);
  live += Section(
      "unfinished", "Unfinished jobs (in the order they run)",
      d.unfinished.empty() ? "<p class=\"note\">None.</p>\n" : JobsTable(d.unfinished, d.reports));
  std::string finished =
      d.finished.empty() ? "<p class=\"note\">None.</p>\n" : JobsTable(d.finished, d.reports);
  if (d.finished_left_out > 0)
    finished += "<p class=\"note\">" + std::to_string(d.finished_left_out) +
                " older finished job(s) not shown (llmq list shows every job).</p>\n";
  live += Section("finished", "Finished jobs (newest first)", finished);
  live += "</main>\n";
  const double refresh_ms = std::max(0.0, std::round(d.refresh_seconds * 1000));
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>llmq: " +
         Escape(d.host) + "</title><style>" + kStyle + "</style></head>\n<body data-refresh-ms=\"" +
         Num(refresh_ms, "%.0f") + "\">\n" + live + "<script>\n" + kScript +
         "</script>\n</body></html>\n";
}

}  // namespace llmq
