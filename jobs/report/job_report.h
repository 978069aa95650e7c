// The job report (issue 29): one self-contained HTML file per job, `<name>.report.html`, for an
// operator to see how a night went. No network: no script, no stylesheet link, no external URL;
// the plots are inline SVG (svg_plot.h); readable without JavaScript.
// Sections: the summary, throughput over time, the distributions of queue time / TTFT / ITL /
// latency (p50 / p95 / p99 marked), TTFT against prompt length and ITL against batch size (plot
// and table), the largest shared prefixes, failures by reason, the per-phase profile when recorded.
//
// Numbers: the summary's (JobSummary, as FinalizeJob / SummarizeJob computed it) are shown as
// they are, each in an element with data-key (the summary JSON's key) and data-value (the exact
// value, %.17g); the distributions' percentiles are NearestRankPercentile (finalizer.h) over the
// same successful requests, so they equal the summary's.
// Derived from the stored timings (ResultMetrics), per successful request: accepted at
// finished_at - latency, admitted queue seconds later, first token ttft seconds after admission.
// Its batch size is the mean number of requests running (admitted, not finished) over its
// decode (first token to finished); requests without a finish time (0) are left out of the
// timeline and of the batch sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/finalizer.h"
#include "jobs/store.h"

namespace llmq::jobs::report {

// What a report needs of each result, gathered during the walk over them (FinalizeJob's or
// SummarizeJob's): the successes' timings, the failures by reason with their first messages.
// Memory: ten numbers per successful request, at most kFirstMessages messages per reason.
class ReportCollector {
 public:
  static constexpr int kFirstMessages = 3;
  struct Timing {
    int64_t prompt_tokens = 0, cached_tokens = 0, computed_tokens = 0, completion_tokens = 0;
    double queue = 0, ttft = 0, itl = 0, latency = 0, finished_at = 0;
  };
  struct Failure {
    std::string reason;  // the error's code ("engine_error", "batch_cancelled") or "HTTP 400 ..."
    int64_t count = 0;
    std::vector<std::string> first;  // the first kFirstMessages messages, in line order
  };

  // One result line, as ForEachResult gives it.
  void Add(bool is_error, std::string_view output, const ResultMetrics& m);

  const std::vector<Timing>& successes() const { return successes_; }
  // By count, largest first (ties by first appearance).
  std::vector<Failure> Failures() const;

 private:
  std::vector<Timing> successes_;
  std::vector<Failure> failures_;  // in order of first appearance
};

// The whole HTML document. `job_id` / `job_name` / `job_options`: the job's batch_ id, file name
// and options (JobRecord::options: the largest shared prefixes come from its "prefix_groups",
// jobs/shared_prefixes.h; without it, from the cached tokens of the results).
std::string RenderJobReport(const JobSummary& summary, const ReportCollector& data,
                            const std::string& job_id, const std::string& job_name,
                            const std::string& job_options);

// The report's derived series, exposed for the tests.
struct Bucket {
  double lo = 0, hi = 0;  // the bucket's range of x (prompt tokens, batch size)
  int64_t requests = 0;
  double p50 = 0, p95 = 0;  // of y (TTFT, ITL)
};
// Requests bucketed by `x` into at most `max_buckets` equal-width buckets over [lo, hi] (default:
// [min x, max x]; x outside it goes to the nearest end bucket), empty buckets left out; y's
// percentiles per bucket. The same range gives the same bucket bounds whatever the values.
std::vector<Bucket> BucketBy(const std::vector<double>& x, const std::vector<double>& y,
                             int max_buckets);
std::vector<Bucket> BucketBy(const std::vector<double>& x, const std::vector<double>& y,
                             int max_buckets, double lo, double hi);
// Each successful timing's mean batch size over its decode (see the top); -1 where it has no
// finish time (or a timing that is not finite).
std::vector<double> MeanBatchSizes(const std::vector<ReportCollector::Timing>& t);

}  // namespace llmq::jobs::report
