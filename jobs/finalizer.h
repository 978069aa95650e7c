// Finalizer: turns a finished job's results in the Store into its output files and a summary.
// The results are streamed in line order (Store::ForEachResult) into DurableFiles: memory holds
// one output line at a time plus four doubles per successful request (for the percentiles).
// Each file appears whole or not at all; the summary file is written last, so its presence means
// the outputs are complete.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/durable_file.h"
#include "base/status.h"
#include "jobs/store.h"

namespace llmq::jobs {

struct FinalizeTargets {
  std::string results;  // every output line (and the error lines when `errors` is "")
  std::string errors;   // "" = error lines go into `results`, in place, in line order
  std::string summary;  // "" = none; else JobSummary::ToJson()
  // The permission bits of the files (DurableFile::Open's `mode`): llmq serve's outbox
  // files are 0640 whatever the umask; the default keeps a replaced file's bits and gives a new
  // one 0666 less the umask (llmq run's outputs).
  int mode = DurableFile::kUmaskMode;
  // "" = none; else the job report (jobs/report/job_report.h), written before the summary (with
  // `mode` too).
  std::string report = {};
};

struct JobSummary {
  // Counted by FinalizeJob.
  int64_t requests = 0;   // the job's request count (JobRecord::total)
  int64_t completed = 0;  // success lines written
  int64_t failed = 0;     // error lines written
  int64_t prompt_tokens = 0, cached_tokens = 0, computed_tokens = 0, completion_tokens = 0;
  // Percentiles over the successful requests (0 when none).
  double queue_p50 = 0, queue_p95 = 0, ttft_p50 = 0, ttft_p95 = 0;
  double itl_p50 = 0, itl_p95 = 0, latency_p50 = 0, latency_p95 = 0;
  // Set by the caller before FinalizeJob (kept as given).
  int64_t resumed = 0;            // results kept from an interrupted run, not computed again
  int64_t refused = 0;            // lines refused at validation (among `failed`)
  int64_t finished_this_run = 0;  // requests run to their result by this process
  double wall_seconds = 0;        // this process's run
  std::string model, input;
  std::string backend;  // the backend that ran it ("cpu", "cuda (bf16)"); "" = not said
  int cpu_threads = 0;  // the CPU kernels' threads (kernels/cpu/thread_pool.h); 0 = not said
  // Output paths: FinalizeJob fills them from the targets when left empty.
  std::string output, errors;
  // Tokens generated per second: the caller's figure when set (a resumed run generated only
  // part of completion_tokens), else completion_tokens / wall_seconds (0 without wall_seconds).
  double output_tokens_per_second = 0;
  // Set by the caller (llmq run): the engine's preemptions (-1: not said, left out of the JSON)
  // and where its time went, (phase, seconds) (empty: left out; `llmq run --profile`).
  int64_t preemptions = -1;
  // Set by the caller (llmq run; -1: left out): the KV pool's high-water mark of blocks in use
  // (EngineStats::peak_blocks_in_use) and the distinct blocks that ever held content
  // (BlockManager::num_touched: in use, cached or freed; the pool memory the process touched).
  int64_t kv_blocks_peak = -1, kv_blocks_touched = -1;
  std::vector<std::pair<std::string, double>> profile_seconds;
  // Structured outputs (issue 24), set by the caller (llmq run; constrained_requests -1: left
  // out): requests with a response_format grammar, tokens their masks forced (one token allowed),
  // schemas compiled and the time that took, and the mask time per constrained row.
  int64_t constrained_requests = -1, forced_tokens = 0, schemas_compiled = 0;
  double compile_seconds = 0, compile_seconds_max = 0;
  double mask_seconds_p50 = 0, mask_seconds_p99 = 0;
  // Tool calls (issue 25), counted by FinalizeJob from the success lines: requests with a choice
  // whose message carries calls, and the calls of all their choices ("tool_calls" in the JSON only
  // when some request called a tool).
  int64_t tool_call_requests = 0, tool_calls = 0;

  std::string ToJson() const;  // nlohmann ordered_json, 2-space indent, no trailing newline
  std::string ToText() const;  // one line, for stderr / the journal
};

// Writes `job`'s results to the targets and fills `summary` (in/out: see JobSummary). Targets
// that name the same file are refused (InvalidArgument) before anything is written; every file
// is checked writable (CheckWritable) first, so an unwritable summary path does not leave the
// results written and the summary missing. Errors name the file and the reason.
[[nodiscard]] Status FinalizeJob(Store* store, int64_t job, const FinalizeTargets& targets,
                                 JobSummary* summary);

// The walk FinalizeJob makes, without writing anything: fills the fields of `summary` that
// FinalizeJob counts (requests, completed, failed, tokens, tool calls, percentiles) and the
// tokens/s when left 0, calling `each` (null: none) with every result in line order. `llmq
// report` computes a finished job's numbers with it, as the finalizer did.
using ResultFn = std::function<Status(int64_t line, bool is_error, std::string_view output,
                                      const ResultMetrics& m)>;
[[nodiscard]] Status SummarizeJob(Store* store, int64_t job, JobSummary* summary,
                                  const ResultFn& each);

// The caller-set fields of a summary read back from its JSON (JobSummary::ToJson): model,
// backend, cpu_threads, input, output, errors, resumed, refused, finished_this_run,
// wall_seconds, output_tokens_per_second, profile_seconds. Others are left as they are.
// InvalidArgument when `json` is not a JSON object.
[[nodiscard]] Status ReadSummaryFacts(std::string_view json, JobSummary* summary);

// The summary's p50 / p95 fields from the successful requests' timings (one value each per
// request), as SummarizeJob sets them.
void SetPercentiles(const std::vector<double>& queue, const std::vector<double>& ttft,
                    const std::vector<double>& itl, const std::vector<double>& latency,
                    JobSummary* s);

// Nearest-rank percentile: the value at rank ceil(p * n) (1-based, clamped to [1, n]) of the
// sorted values; 0 for none.
double NearestRankPercentile(std::vector<double> values, double p);

}  // namespace llmq::jobs
