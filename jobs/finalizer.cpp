#include "jobs/finalizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/durable_file.h"
#include "base/json.h"
#include "jobs/report/job_report.h"

namespace llmq::jobs {

double NearestRankPercentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

void SetPercentiles(const std::vector<double>& queue, const std::vector<double>& ttft,
                    const std::vector<double>& itl, const std::vector<double>& latency,
                    JobSummary* s) {
  s->queue_p50 = NearestRankPercentile(queue, 0.5);
  s->queue_p95 = NearestRankPercentile(queue, 0.95);
  s->ttft_p50 = NearestRankPercentile(ttft, 0.5);
  s->ttft_p95 = NearestRankPercentile(ttft, 0.95);
  s->itl_p50 = NearestRankPercentile(itl, 0.5);
  s->itl_p95 = NearestRankPercentile(itl, 0.95);
  s->latency_p50 = NearestRankPercentile(latency, 0.5);
  s->latency_p95 = NearestRankPercentile(latency, 0.95);
}

std::string JobSummary::ToJson() const {
  nlohmann::ordered_json j{{"requests", requests},
                           {"completed", completed},
                           {"failed", failed},
                           {"resumed", resumed},
                           {"refused", refused},
                           {"finished_this_run", finished_this_run},
                           {"prompt_tokens", prompt_tokens},
                           {"cached_prompt_tokens", cached_tokens},
                           {"computed_prompt_tokens", computed_tokens},
                           {"completion_tokens", completion_tokens},
                           {"wall_seconds", wall_seconds},
                           {"output_tokens_per_second", output_tokens_per_second},
                           {"queue_seconds_p50", queue_p50},
                           {"queue_seconds_p95", queue_p95},
                           {"ttft_seconds_p50", ttft_p50},
                           {"ttft_seconds_p95", ttft_p95},
                           {"itl_seconds_p50", itl_p50},
                           {"itl_seconds_p95", itl_p95},
                           {"latency_seconds_p50", latency_p50},
                           {"latency_seconds_p95", latency_p95},
                           {"model", model},
                           {"backend", backend},
                           {"cpu_threads", cpu_threads},
                           {"input", input},
                           {"output", output},
                           {"errors", errors}};
  if (preemptions >= 0) j["preemptions"] = preemptions;
  if (kv_blocks_peak >= 0) j["kv_blocks_peak"] = kv_blocks_peak;
  if (kv_blocks_touched >= 0) j["kv_blocks_touched"] = kv_blocks_touched;
  if (constrained_requests >= 0)
    j["structured_outputs"] = {
        {"constrained_requests", constrained_requests}, {"forced_tokens", forced_tokens},
        {"schemas_compiled", schemas_compiled},         {"compile_seconds", compile_seconds},
        {"compile_seconds_max", compile_seconds_max},   {"mask_seconds_p50", mask_seconds_p50},
        {"mask_seconds_p99", mask_seconds_p99}};
  if (tool_call_requests > 0)
    j["tool_calls"] = {{"requests", tool_call_requests}, {"calls", tool_calls}};
  if (!profile_seconds.empty()) {
    nlohmann::ordered_json p = nlohmann::ordered_json::object();
    for (const auto& [phase, s] : profile_seconds) p[phase] = s;
    j["profile_seconds"] = p;
  }
  return DumpJson(j, 2);
}

std::string JobSummary::ToText() const {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "requests %lld (completed %lld, failed %lld, resumed %lld) | prompt tokens %lld: "
                "cached %lld, computed %lld | completion tokens %lld | %.2f s, %.1f output tok/s "
                "| queue p50 %.3f s p95 %.3f s | TTFT p50 %.3f s p95 %.3f s | ITL p50 %.4f s "
                "p95 %.4f s | latency p50 %.3f s p95 %.3f s",
                static_cast<long long>(requests), static_cast<long long>(completed),
                static_cast<long long>(failed), static_cast<long long>(resumed),
                static_cast<long long>(prompt_tokens), static_cast<long long>(cached_tokens),
                static_cast<long long>(computed_tokens), static_cast<long long>(completion_tokens),
                wall_seconds, output_tokens_per_second, queue_p50, queue_p95, ttft_p50, ttft_p95,
                itl_p50, itl_p95, latency_p50, latency_p95);
  std::string text(buf);
  if (tool_call_requests > 0)
    text += " | tool calls " + std::to_string(tool_calls) + " in " +
            std::to_string(tool_call_requests) + " requests";
  if (!backend.empty()) text += " | backend " + backend;
  if (cpu_threads > 0) text += " | cpu threads " + std::to_string(cpu_threads);
  if (constrained_requests > 0) {
    std::snprintf(buf, sizeof buf,
                  " | constrained %lld (forced tokens %lld, %lld schema(s) compiled in %.1f ms, "
                  "mask p50 %.0f us p99 %.0f us)",
                  static_cast<long long>(constrained_requests),
                  static_cast<long long>(forced_tokens), static_cast<long long>(schemas_compiled),
                  compile_seconds * 1e3, mask_seconds_p50 * 1e6, mask_seconds_p99 * 1e6);
    text += buf;
  }
  return text;
}

namespace {

// A success line's tool calls into the summary: a chat message's tool_calls, a Response's
// function_call items. Only lines that hold the key ("tool_calls":) or the item type
// ("type":"function_call") are parsed: in a line's JSON a quote inside a string is escaped, so
// neither can come from a string.
void CountToolCalls(std::string_view line, JobSummary* s) {
  const bool chat = line.find("\"tool_calls\":") != std::string_view::npos;
  if (!chat && line.find("\"type\":\"function_call\"") == std::string_view::npos) return;
  const auto j = nlohmann::json::parse(line, nullptr, false);
  const nlohmann::json::json_pointer at(chat ? "/response/body/choices" : "/response/body/output");
  if (j.is_discarded() || !j.contains(at) || !j.at(at).is_array()) return;
  int64_t calls = 0;
  for (const auto& c : j.at(at)) {
    if (!c.is_object()) continue;
    if (!chat) {
      calls += c.value("type", "") == "function_call";
    } else if (c.contains("message") && c["message"].is_object() &&
               c["message"].contains("tool_calls") && c["message"]["tool_calls"].is_array()) {
      calls += static_cast<int64_t>(c["message"]["tool_calls"].size());
    }
  }
  if (calls == 0) return;
  ++s->tool_call_requests;
  s->tool_calls += calls;
}

}  // namespace

Status SummarizeJob(Store* store, int64_t job, JobSummary* summary, const ResultFn& each) {
  LLMQ_CHECK(store != nullptr && summary != nullptr);
  JobRecord record;
  LLMQ_RETURN_IF_ERROR(store->GetJob(job, &record));
  JobSummary& s = *summary;
  s.requests = record.total;
  s.completed = s.failed = 0;
  s.tool_call_requests = s.tool_calls = 0;
  s.prompt_tokens = s.cached_tokens = s.computed_tokens = s.completion_tokens = 0;
  std::vector<double> queue, ttft, itl, latency;
  LLMQ_RETURN_IF_ERROR(store->ForEachResult(
      job,
      [&](int64_t line, bool is_error, std::string_view output, const ResultMetrics& m) -> Status {
        if (each) LLMQ_RETURN_IF_ERROR(each(line, is_error, output, m));
        s.prompt_tokens += m.prompt_tokens;
        s.cached_tokens += m.cached_tokens;
        s.computed_tokens += m.computed_tokens;
        s.completion_tokens += m.completion_tokens;
        if (is_error) {
          ++s.failed;
          return Status::Ok();
        }
        ++s.completed;
        CountToolCalls(output, &s);
        queue.push_back(m.queue_seconds);
        ttft.push_back(m.ttft_seconds);
        itl.push_back(m.itl_seconds);
        latency.push_back(m.latency_seconds);
        return Status::Ok();
      }));
  SetPercentiles(queue, ttft, itl, latency, &s);
  if (s.output_tokens_per_second == 0 && s.wall_seconds > 0)
    s.output_tokens_per_second = static_cast<double>(s.completion_tokens) / s.wall_seconds;
  return Status::Ok();
}

Status ReadSummaryFacts(std::string_view json, JobSummary* summary) {
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("a summary that is not a JSON object");
  JobSummary& s = *summary;
  auto str = [&](const char* key, std::string* out) {
    if (j.contains(key) && j[key].is_string()) *out = j[key].get<std::string>();
  };
  auto num = [&](const char* key, auto* out) {
    if (j.contains(key) && j[key].is_number()) *out = j[key].get<std::decay_t<decltype(*out)>>();
  };
  str("model", &s.model);
  str("backend", &s.backend);
  str("input", &s.input);
  str("output", &s.output);
  str("errors", &s.errors);
  num("cpu_threads", &s.cpu_threads);
  num("resumed", &s.resumed);
  num("refused", &s.refused);
  num("finished_this_run", &s.finished_this_run);
  num("wall_seconds", &s.wall_seconds);
  num("output_tokens_per_second", &s.output_tokens_per_second);
  if (j.contains("profile_seconds") && j["profile_seconds"].is_object()) {
    s.profile_seconds.clear();
    for (const auto& [phase, secs] : j["profile_seconds"].items())
      if (secs.is_number()) s.profile_seconds.emplace_back(phase, secs.get<double>());
  }
  return Status::Ok();
}

Status FinalizeJob(Store* store, int64_t job, const FinalizeTargets& targets, JobSummary* summary) {
  LLMQ_CHECK(store != nullptr && summary != nullptr && !targets.results.empty());
  // Two targets naming one file would overwrite each other's content: refuse before writing.
  // Standard output and devices are streams, not files to replace: sharing them is fine.
  const std::string* named[] = {&targets.results, &targets.errors, &targets.summary,
                                &targets.report};
  constexpr int kNamed = static_cast<int>(std::size(named));
  auto is_stream = [](const std::string& p) { return p == "-" || p.rfind("/dev/", 0) == 0; };
  for (int a = 0; a < kNamed; ++a) {
    if (named[a]->empty()) continue;
    LLMQ_RETURN_IF_ERROR(CheckWritable(*named[a]));
    for (int b = a + 1; b < kNamed; ++b) {
      if (!named[b]->empty() && !is_stream(*named[a]) && SameFile(*named[a], *named[b]))
        return Status::InvalidArgument(*named[a] +
                                       ": named as two of results, errors, summary and "
                                       "report; each needs a file of its own");
    }
  }
  JobRecord record;
  LLMQ_RETURN_IF_ERROR(store->GetJob(job, &record));

  DurableFile results, errors;
  const bool split = !targets.errors.empty();
  LLMQ_RETURN_IF_ERROR(results.Open(targets.results, targets.mode));
  if (split) LLMQ_RETURN_IF_ERROR(errors.Open(targets.errors, targets.mode));

  report::ReportCollector collected;
  const bool with_report = !targets.report.empty();
  LLMQ_RETURN_IF_ERROR(SummarizeJob(
      store, job, summary,
      [&](int64_t, bool is_error, std::string_view line, const ResultMetrics& m) -> Status {
        DurableFile& to = is_error && split ? errors : results;
        LLMQ_RETURN_IF_ERROR(to.Append(line));
        LLMQ_RETURN_IF_ERROR(to.Append("\n"));
        if (with_report) collected.Add(is_error, line, m);
        return Status::Ok();
      }));
  LLMQ_RETURN_IF_ERROR(results.Commit());
  if (split) LLMQ_RETURN_IF_ERROR(errors.Commit());

  JobSummary& s = *summary;
  if (s.output.empty()) s.output = targets.results;
  if (s.errors.empty()) s.errors = targets.errors;
  if (with_report)
    LLMQ_RETURN_IF_ERROR(WriteFileDurably(
        targets.report,
        report::RenderJobReport(s, collected, record.public_id, record.name, record.options),
        targets.mode));
  if (targets.summary.empty()) return Status::Ok();
  return WriteFileDurably(targets.summary, s.ToJson() + "\n", targets.mode);
}

}  // namespace llmq::jobs
