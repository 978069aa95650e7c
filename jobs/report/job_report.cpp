#include "jobs/report/job_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "jobs/report/html.h"
#include "jobs/report/svg_plot.h"
#include "jobs/shared_prefixes.h"

namespace llmq::jobs::report {
namespace {

using Timing = ReportCollector::Timing;

// A request's moments on the unix clock (see the header).
struct Moments {
  double accepted, admitted, first, finished;
};
Moments MomentsOf(const Timing& t) {
  Moments m;
  m.finished = t.finished_at;
  m.accepted = t.finished_at - t.latency;
  m.admitted = m.accepted + t.queue;
  m.first = std::min(m.admitted + t.ttft, m.finished);
  return m;
}

// Whether the request has a place on the timeline: a finish time, and finite timings (a damaged
// row is left out rather than stop the report).
bool OnTimeline(const Timing& t) {
  return t.finished_at > 0 && std::isfinite(t.finished_at) && std::isfinite(t.latency) &&
         std::isfinite(t.queue) && std::isfinite(t.ttft);
}

// The reason and message of an error line (OpenAI's two shapes: a top-level error with a code,
// or an HTTP response whose body holds the error).
void ReasonOf(std::string_view output, std::string* reason, std::string* message) {
  const auto j = nlohmann::json::parse(output, nullptr, false);
  *reason = "unknown";
  *message = std::string(output.substr(0, 200));
  if (j.is_discarded() || !j.is_object()) return;
  if (j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    if (e.contains("code") && e["code"].is_string()) *reason = e["code"].get<std::string>();
    if (e.contains("message") && e["message"].is_string())
      *message = e["message"].get<std::string>();
    return;
  }
  const nlohmann::json::json_pointer at("/response/body/error");
  if (j.contains(at) && j.at(at).is_object()) {
    const auto& e = j.at(at);
    const nlohmann::json::json_pointer status("/response/status_code");
    const bool numbered = j.contains(status) && j.at(status).is_number_integer();
    *reason = "HTTP " + (numbered ? std::to_string(j.at(status).get<int64_t>()) : "?");
    if (e.contains("type") && e["type"].is_string()) *reason += " " + e["type"].get<std::string>();
    if (e.contains("message") && e["message"].is_string())
      *message = e["message"].get<std::string>();
  }
}

std::string Seconds(double s) {
  if (s == 0) return "0 s";
  if (std::fabs(s) < 1e-3) return Num(s * 1e6, "%.1f us");
  if (std::fabs(s) < 1) return Num(s * 1e3, "%.2f ms");
  return Num(s, "%.3f s");
}

std::string Int(int64_t v) {
  return std::to_string(v);
}

std::string Section(const std::string& id, const std::string& title, const std::string& body) {
  return "<section id=\"" + id + "\"><h2>" + Escape(title) + "</h2>\n" + body + "</section>\n";
}

std::string Note(const std::string& text) {
  return "<p class=\"note\">" + Escape(text) + "</p>\n";
}

std::string Figure(const SvgPlot& plot, const std::string& caption) {
  return "<figure>" + plot.Render() + "<figcaption>" + Escape(caption) + "</figcaption></figure>\n";
}

std::string SummarySection(const JobSummary& s) {
  struct Row {
    std::string label, key;
    double value;
    std::string shown;
  };
  const double hit = s.prompt_tokens > 0 ? double(s.cached_tokens) / double(s.prompt_tokens) : 0;
  const std::vector<Row> rows = {
      {"requests", "requests", double(s.requests), Int(s.requests)},
      {"completed", "completed", double(s.completed), Int(s.completed)},
      {"failed", "failed", double(s.failed), Int(s.failed)},
      {"refused at validation (of failed)", "refused", double(s.refused), Int(s.refused)},
      {"resumed from an earlier run", "resumed", double(s.resumed), Int(s.resumed)},
      {"prompt tokens", "prompt_tokens", double(s.prompt_tokens), Int(s.prompt_tokens)},
      {"prompt tokens saved by the prefix cache", "cached_prompt_tokens", double(s.cached_tokens),
       Int(s.cached_tokens)},
      {"prompt tokens computed", "computed_prompt_tokens", double(s.computed_tokens),
       Int(s.computed_tokens)},
      {"prefix-cache hit rate", "cache_hit_rate", hit, Num(hit * 100, "%.1f %%")},
      {"generated tokens", "completion_tokens", double(s.completion_tokens),
       Int(s.completion_tokens)},
      {"wall time", "wall_seconds", s.wall_seconds, Seconds(s.wall_seconds)},
      {"generated tokens/s", "output_tokens_per_second", s.output_tokens_per_second,
       Num(s.output_tokens_per_second, "%.1f")},
      {"queue time p50", "queue_seconds_p50", s.queue_p50, Seconds(s.queue_p50)},
      {"queue time p95", "queue_seconds_p95", s.queue_p95, Seconds(s.queue_p95)},
      {"TTFT p50", "ttft_seconds_p50", s.ttft_p50, Seconds(s.ttft_p50)},
      {"TTFT p95", "ttft_seconds_p95", s.ttft_p95, Seconds(s.ttft_p95)},
      {"ITL p50", "itl_seconds_p50", s.itl_p50, Seconds(s.itl_p50)},
      {"ITL p95", "itl_seconds_p95", s.itl_p95, Seconds(s.itl_p95)},
      {"latency p50", "latency_seconds_p50", s.latency_p50, Seconds(s.latency_p50)},
      {"latency p95", "latency_seconds_p95", s.latency_p95, Seconds(s.latency_p95)},
  };
  std::string body = "<table class=\"kv\"><tbody>";
  for (const Row& r : rows)
    body +=
        "<tr><th>" + Escape(r.label) + "</th><td>" + Keyed(r.key, r.value, r.shown) + "</td></tr>";
  body += "</tbody></table>\n";
  std::string facts;
  if (!s.model.empty()) facts += "model " + s.model + "; ";
  if (!s.backend.empty()) facts += "backend " + s.backend + "; ";
  if (s.cpu_threads > 0) facts += "CPU threads " + Int(s.cpu_threads) + "; ";
  if (!s.input.empty()) facts += "input " + s.input + "; ";
  if (!s.output.empty()) facts += "results " + s.output;
  if (!facts.empty()) body += Note(facts);
  return Section("summary", "Summary", body);
}

std::string FailureSection(const ReportCollector& data) {
  const auto failures = data.Failures();
  if (failures.empty()) return Section("failures", "Failures", Note("No request failed."));
  std::string body =
      "<table><thead><tr><th>reason</th><th>requests</th><th>first messages</th>"
      "</tr></thead><tbody>";
  for (const auto& f : failures) {
    body += "<tr><td>" + Escape(f.reason) + "</td><td>" +
            Keyed("failures." + f.reason, double(f.count), Int(f.count)) + "</td><td>";
    for (const std::string& m : f.first) body += "<div class=\"msg\">" + Escape(m) + "</div>";
    body += "</td></tr>";
  }
  return Section("failures", "Failures by reason", body + "</tbody></table>\n");
}

// Tokens spread evenly over [a, b] (all at b when b <= a) into the bins.
void Spread(double tokens, double a, double b, double t0, double width, std::vector<double>* bins) {
  const int n = static_cast<int>(bins->size());
  auto bin_of = [&](double t) { return std::clamp(int((t - t0) / width), 0, n - 1); };
  if (b <= a) {
    (*bins)[bin_of(b)] += tokens;
    return;
  }
  for (int k = bin_of(a); k <= bin_of(b); ++k) {
    const double lo = std::max(a, t0 + k * width), hi = std::min(b, t0 + (k + 1) * width);
    if (hi > lo) (*bins)[k] += tokens * (hi - lo) / (b - a);
  }
}

std::string ThroughputSection(const std::vector<Timing>& ts) {
  double t0 = INFINITY, t1 = -INFINITY;
  for (const Timing& t : ts) {
    if (!OnTimeline(t)) continue;
    const Moments m = MomentsOf(t);
    t0 = std::min(t0, m.accepted);
    t1 = std::max(t1, m.finished);
  }
  SvgPlot plot("seconds since the first request was accepted", "tokens/s");
  if (t0 < t1) {
    const int n = 60;
    const double width = (t1 - t0) / n;
    std::vector<double> gen(n), prompt(n);
    for (const Timing& t : ts) {
      if (!OnTimeline(t)) continue;
      const Moments m = MomentsOf(t);
      Spread(double(t.completion_tokens), m.first, m.finished, t0, width, &gen);
      Spread(double(t.computed_tokens), m.admitted, m.first, t0, width, &prompt);
    }
    std::vector<Point> g, p;
    for (int k = 0; k < n; ++k) {
      g.push_back({(k + 0.5) * width, gen[k] / width});
      p.push_back({(k + 0.5) * width, prompt[k] / width});
    }
    plot.AddLine("generated tokens/s", std::move(g));
    plot.AddLine("prompt tokens/s (computed)", std::move(p));
  }
  return Section("throughput", "Throughput over time",
                 Figure(plot,
                        "Each request's generated tokens spread over its decode (first token to "
                        "finish), its computed prompt tokens over its prefill (admission to first "
                        "token); 60 bins."));
}

std::string DistributionSection(const std::vector<Timing>& ts) {
  struct Metric {
    const char* title;
    const char* key;
    double Timing::*field;
  };
  const Metric metrics[] = {{"Queue time", "queue_seconds", &Timing::queue},
                            {"Time to first token", "ttft_seconds", &Timing::ttft},
                            {"Inter-token latency", "itl_seconds", &Timing::itl},
                            {"Latency", "latency_seconds", &Timing::latency}};
  std::string body =
      "<table><thead><tr><th>metric</th><th>p50</th><th>p95</th><th>p99</th><th>max</th></tr>"
      "</thead><tbody>";
  std::string figures;
  for (const Metric& m : metrics) {
    std::vector<double> v;
    for (const Timing& t : ts) v.push_back(t.*m.field);
    const double p50 = NearestRankPercentile(v, 0.5), p95 = NearestRankPercentile(v, 0.95),
                 p99 = NearestRankPercentile(v, 0.99), max = NearestRankPercentile(v, 1.0);
    const std::string k = std::string("distribution.") + m.key;
    body += "<tr><td>" + Escape(m.title) + "</td><td>" + Keyed(k + "_p50", p50, Seconds(p50)) +
            "</td><td>" + Keyed(k + "_p95", p95, Seconds(p95)) + "</td><td>" +
            Keyed(k + "_p99", p99, Seconds(p99)) + "</td><td>" + Seconds(max) + "</td></tr>";
    SvgPlot plot(std::string(m.title) + " (s)", "requests");
    std::vector<double> finite = v;  // a damaged row must not stop the report
    std::erase_if(finite, [](double x) { return !std::isfinite(x); });
    if (!finite.empty()) {
      const double lo = *std::min_element(finite.begin(), finite.end());
      double hi = *std::max_element(finite.begin(), finite.end());
      if (hi <= lo) hi = lo + std::max(1e-6, std::fabs(lo) * 0.1);
      const int n = 30;
      std::vector<double> edges(n + 1), counts(n);
      for (int i = 0; i <= n; ++i) edges[i] = lo + (hi - lo) * i / n;
      for (double x : finite) counts[std::clamp(int((x - lo) / (hi - lo) * n), 0, n - 1)] += 1;
      plot.AddHistogram(std::move(edges), std::move(counts));
      plot.AddMarker(p50, "p50 " + Seconds(p50));
      plot.AddMarker(p95, "p95 " + Seconds(p95));
      plot.AddMarker(p99, "p99 " + Seconds(p99));
    }
    figures += Figure(plot, std::string(m.title) + " of the " + Int(int64_t(v.size())) +
                                " successful requests, p50 / p95 / p99 marked.");
  }
  body += "</tbody></table>\n";
  return Section("distributions", "Distributions", body + figures);
}

// A second measure shown per bucket of a RelationSection's table: its p50 over the points given
// (a subset of the section's x values: the buckets are the section's).
struct AlsoPerBucket {
  std::string name;
  std::vector<double> x, y;
};

// A scatter of (x, y), the buckets' p50 as a line, and the buckets as a table (with `also`'s p50
// per bucket when given).
std::string RelationSection(const std::string& id, const std::string& title,
                            const std::string& x_name, const std::string& y_name,
                            const std::vector<double>& x, const std::vector<double>& y,
                            const std::string& caption, const AlsoPerBucket* also = nullptr) {
  SvgPlot plot(x_name, y_name + " (s)");
  std::vector<Point> dots;
  for (size_t i = 0; i < x.size(); ++i) dots.push_back({x[i], y[i]});
  plot.AddScatter("requests", std::move(dots));
  const std::vector<Bucket> buckets = BucketBy(x, y, 8);
  std::map<double, double> also_p50;  // by bucket's lo
  if (also != nullptr && !x.empty())
    for (const Bucket& b : BucketBy(also->x, also->y, 8, *std::min_element(x.begin(), x.end()),
                                    *std::max_element(x.begin(), x.end())))
      also_p50[b.lo] = b.p50;
  std::vector<Point> line;
  std::vector<std::vector<std::string>> rows;
  for (const Bucket& b : buckets) {
    line.push_back({(b.lo + b.hi) / 2, b.p50});
    rows.push_back({Num(b.lo, "%.1f") + " - " + Num(b.hi, "%.1f"), Int(b.requests), Seconds(b.p50),
                    Seconds(b.p95)});
    if (also != nullptr)
      rows.back().push_back(also_p50.count(b.lo) ? Seconds(also_p50[b.lo]) : std::string("-"));
  }
  plot.AddLine(y_name + " p50 per bucket", std::move(line));
  std::vector<std::string> header = {x_name, "requests", y_name + " p50", y_name + " p95"};
  if (also != nullptr) header.push_back(also->name + " p50");
  return Section(id, title, Figure(plot, caption) + Table(header, rows));
}

// The planner's groups when ingest recorded them in the job's options (jobs/shared_prefixes.h);
// for a job ingested before that, requests grouped by the prompt tokens they took from the cache.
std::string PrefixSection(const std::vector<Timing>& ts, const std::string& job_options) {
  std::vector<SharedPrefix> groups;
  std::vector<std::vector<std::string>> cells;
  if (SharedPrefixesOf(job_options, &groups)) {
    for (const SharedPrefix& g : groups)
      cells.push_back({Int(g.shared_tokens), Int(g.requests), Int(g.Saved()), Int(g.depth)});
    std::string body = Note(
        "The prefix planner's groups of requests sharing a prompt prefix, found at ingest; the "
        "ten that save the most prompt tokens when their prefix is computed once (shared tokens "
        "x (requests - 1)). Groups nest: depth 1 is a top-level group, depth 2 a group inside "
        "one, and so on.");
    body +=
        cells.empty()
            ? Note("No two requests of the job share a prompt prefix.")
            : Table({"shared prefix (tokens)", "requests", "prompt tokens saved", "nesting depth"},
                    cells);
    return Section("prefixes", "Largest shared prefixes", body);
  }
  // Requests that reused the same number of prompt tokens from the cache, taken as sharing a
  // prefix of that length.
  std::map<int64_t, std::pair<int64_t, int64_t>> by_len;  // cached tokens -> (requests, saved)
  for (const Timing& t : ts)
    if (t.cached_tokens > 0) {
      auto& [n, saved] = by_len[t.cached_tokens];
      ++n;
      saved += t.cached_tokens;
    }
  std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> rows(by_len.begin(), by_len.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  if (rows.size() > 10) rows.resize(10);
  for (const auto& [len, v] : rows) cells.push_back({Int(len), Int(v.first), Int(v.second)});
  std::string body = Note(
      "This job was ingested before the planner's groups were recorded: requests grouped by the "
      "length of the prompt prefix they took from the prefix cache (a block-aligned shared "
      "prefix); the ten that saved the most prompt tokens.");
  body += cells.empty()
              ? Note("No request reused a cached prefix.")
              : Table({"shared prefix (tokens)", "requests", "prompt tokens saved"}, cells);
  return Section("prefixes", "Largest shared prefixes", body);
}

std::string ProfileSection(const JobSummary& s) {
  if (s.profile_seconds.empty())
    return Section("profile", "Per-phase profile",
                   Note("Not recorded (llmq run --profile records it)."));
  double total = 0;
  for (const auto& p : s.profile_seconds) total += p.second;
  std::string body =
      "<table><thead><tr><th>phase</th><th>seconds</th><th>share</th></tr></thead>"
      "<tbody>";
  for (const auto& [phase, secs] : s.profile_seconds) {
    const double share = total > 0 ? secs / total : 0;
    body += "<tr><td>" + Escape(phase) + "</td><td>" +
            Keyed("profile_seconds." + phase, secs, Num(secs, "%.4f")) +
            "</td><td><div class=\"bar\" style=\"width:" + Num(share * 300, "%.0f") +
            "px\"></div> " + Num(share * 100, "%.1f %%") + "</td></tr>";
  }
  return Section("profile", "Per-phase profile", body + "</tbody></table>\n");
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:2em;color:#222;max-width:72em}"
    "h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}"
    "table{border-collapse:collapse;margin:0.5em 0}th,td{border:1px solid #ddd;padding:2px 8px;"
    "text-align:left;vertical-align:top}table.kv th{font-weight:normal;color:#555}"
    "figure{display:inline-block;margin:0.5em}figcaption{font-size:0.85em;color:#555;"
    "max-width:640px}.note{color:#555}.msg{font-family:monospace;font-size:0.85em}"
    ".bar{display:inline-block;height:0.8em;background:#3182bd}";

}  // namespace

void ReportCollector::Add(bool is_error, std::string_view output, const ResultMetrics& m) {
  if (!is_error) {
    successes_.push_back({m.prompt_tokens, m.cached_tokens, m.computed_tokens, m.completion_tokens,
                          m.queue_seconds, m.ttft_seconds, m.itl_seconds, m.latency_seconds,
                          m.finished_at});
    return;
  }
  std::string reason, message;
  ReasonOf(output, &reason, &message);
  auto it = std::find_if(failures_.begin(), failures_.end(),
                         [&](const Failure& f) { return f.reason == reason; });
  if (it == failures_.end()) it = failures_.insert(failures_.end(), Failure{reason, 0, {}});
  ++it->count;
  if (it->first.size() < size_t{kFirstMessages}) it->first.push_back(std::move(message));
}

std::vector<ReportCollector::Failure> ReportCollector::Failures() const {
  std::vector<Failure> out = failures_;
  std::stable_sort(out.begin(), out.end(),
                   [](const Failure& a, const Failure& b) { return a.count > b.count; });
  return out;
}

std::vector<Bucket> BucketBy(const std::vector<double>& x, const std::vector<double>& y,
                             int max_buckets) {
  if (x.empty()) return {};
  return BucketBy(x, y, max_buckets, *std::min_element(x.begin(), x.end()),
                  *std::max_element(x.begin(), x.end()));
}

std::vector<Bucket> BucketBy(const std::vector<double>& x, const std::vector<double>& y,
                             int max_buckets, double lo, double hi) {
  LLMQ_CHECK(x.size() == y.size() && max_buckets >= 1 && lo <= hi);
  if (x.empty()) return {};
  const int n = hi > lo ? max_buckets : 1;
  std::vector<std::vector<double>> ys(n);
  for (size_t i = 0; i < x.size(); ++i)
    ys[std::clamp(int((x[i] - lo) / (hi - lo) * n), 0, n - 1)].push_back(y[i]);
  std::vector<Bucket> out;
  for (int k = 0; k < n; ++k) {
    if (ys[k].empty()) continue;
    Bucket b;
    b.lo = lo + (hi - lo) * k / n;
    b.hi = n == 1 ? hi : lo + (hi - lo) * (k + 1) / n;
    b.requests = int64_t(ys[k].size());
    b.p50 = NearestRankPercentile(ys[k], 0.5);
    b.p95 = NearestRankPercentile(ys[k], 0.95);
    out.push_back(b);
  }
  return out;
}

std::vector<double> MeanBatchSizes(const std::vector<Timing>& ts) {
  // The running count as a step function of time, and its integral at each event.
  std::vector<std::pair<double, int>> events;
  for (const Timing& t : ts) {
    if (!OnTimeline(t)) continue;
    const Moments m = MomentsOf(t);
    events.emplace_back(m.admitted, +1);
    events.emplace_back(m.finished, -1);
  }
  std::sort(events.begin(), events.end());
  std::vector<double> at, integral;  // at[k]: event time; integral up to it
  std::vector<int> running;          // from at[k] on
  int now = 0;
  double area = 0;
  for (const auto& [t, d] : events) {
    if (!at.empty()) area += running.back() * (t - at.back());
    now += d;
    if (!at.empty() && at.back() == t) {
      running.back() = now;
      continue;
    }
    at.push_back(t);
    integral.push_back(area);
    running.push_back(now);
  }
  auto F = [&](double t) {
    const size_t k = size_t(std::upper_bound(at.begin(), at.end(), t) - at.begin());
    if (k == 0) return 0.0;
    return integral[k - 1] + running[k - 1] * (t - at[k - 1]);
  };
  std::vector<double> out;
  for (const Timing& t : ts) {
    if (!OnTimeline(t)) {
      out.push_back(-1);
      continue;
    }
    const Moments m = MomentsOf(t);
    if (m.finished > m.first) {
      out.push_back((F(m.finished) - F(m.first)) / (m.finished - m.first));
    } else {
      const size_t k = size_t(std::upper_bound(at.begin(), at.end(), m.first) - at.begin());
      out.push_back(k == 0 ? 1.0 : std::max(1, running[k - 1]));
    }
  }
  return out;
}

std::string RenderJobReport(const JobSummary& summary, const ReportCollector& data,
                            const std::string& job_id, const std::string& job_name,
                            const std::string& job_options) {
  const std::vector<Timing>& ts = data.successes();
  std::vector<double> prompt, ttft, batch, itl;
  AlsoPerBucket itl_by_prompt{"ITL", {}, {}};  // the seed-004 table: ITL flat as TTFT rises
  const std::vector<double> sizes = MeanBatchSizes(ts);
  for (size_t i = 0; i < ts.size(); ++i) {
    prompt.push_back(double(ts[i].prompt_tokens));
    ttft.push_back(ts[i].ttft);
    if (ts[i].completion_tokens >= 2) {
      itl_by_prompt.x.push_back(double(ts[i].prompt_tokens));
      itl_by_prompt.y.push_back(ts[i].itl);
    }
    if (sizes[i] > 0 && ts[i].completion_tokens >= 2) {
      batch.push_back(sizes[i]);
      itl.push_back(ts[i].itl);
    }
  }
  const std::string title = "llmq job report: " + job_name;
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>" +
                     Escape(title) + "</title><style>" + kStyle + "</style></head>\n<body>\n<h1>" +
                     Escape(title) + "</h1>\n" + Note(job_id) + "\n";
  html += SummarySection(summary);
  html += FailureSection(data);
  html += ThroughputSection(ts);
  html += DistributionSection(ts);
  html += RelationSection("ttft-by-prompt", "TTFT against prompt length", "prompt tokens", "TTFT",
                          prompt, ttft,
                          "Time to first token of each successful request against its prompt "
                          "length; the line joins the buckets' medians. The table adds the ITL "
                          "of the bucket's requests with two tokens or more.",
                          &itl_by_prompt);
  html += RelationSection("itl-by-batch", "ITL against batch size", "batch size (mean running)",
                          "ITL", batch, itl,
                          "Mean inter-token latency of each request with two tokens or more "
                          "against the mean number of requests running during its decode.");
  html += PrefixSection(ts, job_options);
  html += ProfileSection(summary);
  return html + "</body></html>\n";
}

}  // namespace llmq::jobs::report
