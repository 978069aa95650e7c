// The daemon's status page (issue 29): what `GET /` on the metrics HTTP port answers
// (daemon/metrics_http.h), for an operator to see the night at a glance: this daemon (host,
// backend, model, the jobs in its engine, tokens/s), the run windows, every unfinished job with a
// progress bar, tokens/s, cache hit rate and ETA, and the newest finished jobs with links to their
// reports (GET /reports/<job id>).
//
// One HTML document, well-formed XML too (jobs/report/html.h's escaping), readable without
// JavaScript: no external asset, its style inline. A few lines of plain JavaScript fetch the page
// again every `refresh_seconds` (llmq serve: metrics.interval_seconds, the pace at which it renders
// a new one) and swap the new <main id="live"> in; without JavaScript the page is as rendered.
// Numbers are those of `llmq status --json` (daemon/queue_status.h), each in an element with
// data-key and data-value (%.17g), as in the job report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/queue_status.h"

namespace llmq {

struct StatusPageData {
  double now = 0;  // unix seconds, when the queue was read
  double refresh_seconds = 5;
  // This daemon.
  std::string host, backend, model;
  nlohmann::json daemon = nlohmann::json::object();  // DaemonJson
  std::string windows_line;  // RunWindowsJson's text ("" when there are none)
  // Jobs as JobStatusJson gives them: the unfinished ones in queue order, the finished ones newest
  // first, and how many older finished ones are left out.
  std::vector<nlohmann::json> unfinished, finished;
  int64_t finished_left_out = 0;
  // Completion tokens the engine's unfinished requests hold, by job public id: its current jobs.
  std::vector<std::pair<std::string, int64_t>> in_engine;
  // Public ids of the finished jobs whose report GET /reports/<id> serves.
  std::vector<std::string> reports;
};

// The page's jobs from a snapshot (ReadQueueSnapshot) and its estimate (EstimateQueue): every
// unfinished job, and the `max_finished` newest finished ones. `has_report` tells, for a finished
// job's record, whether its report can be served.
void FillStatusPageJobs(const QueueSnapshot& q, const EtaContext& eta, size_t max_finished,
                        const std::function<bool(const jobs::JobRecord&)>& has_report,
                        StatusPageData* out);

std::string RenderStatusPage(const StatusPageData& d);

}  // namespace llmq
