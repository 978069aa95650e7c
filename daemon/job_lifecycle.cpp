#include "daemon/job_lifecycle.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/json.h"
#include "base/log.h"
#include "daemon/request_builder.h"
#include "daemon/spool.h"
#include "jobs/batch_output.h"
#include "jobs/finalizer.h"

namespace llmq {

namespace fs = std::filesystem;
using json = nlohmann::json;

void JobLifecycle::CheckJobs(bool stopping) {
  std::vector<jobs::JobRecord> all;
  if (Status st = store_->ListJobs(&all); !st.ok()) {
    Log("%s", st.message().c_str());
    return;
  }
  for (const jobs::JobRecord& j : all) {
    if (jobs::IsTerminal(j.status)) continue;
    const bool cancel = j.cancel_requested || j.status == jobs::JobStatus::kCancelling;
    const bool finalize =
        j.status == jobs::JobStatus::kFinalizing ||
        (j.status == jobs::JobStatus::kInProgress && j.completed + j.failed >= j.total);
    if ((!cancel && !finalize) || (cancel && stopping)) continue;
    Status st;
    bool mine = true;
    if (hooks_.claim_job) st = hooks_.claim_job(j.id, &mine);
    if (!st.ok() || !mine) {
      if (!st.ok()) Log("%s (%s): %s", j.public_id.c_str(), j.name.c_str(), st.message().c_str());
      // Another worker cancels it: this one's engine only stops running its requests.
      if (cancel && hooks_.cancel_in_engine) hooks_.cancel_in_engine(j.id);
      continue;
    }
    st = cancel ? Cancel(j) : Finalize(j, jobs::JobStatus::kCompleted);
    if (!st.ok()) Log("%s (%s): %s", j.public_id.c_str(), j.name.c_str(), st.message().c_str());
  }
}

Status JobLifecycle::Cancel(const jobs::JobRecord& j) {
  if (j.status != jobs::JobStatus::kCancelling)
    LLMQ_RETURN_IF_ERROR(store_->SetJobStatus(j.id, jobs::JobStatus::kCancelling));
  if (hooks_.cancel_in_engine) hooks_.cancel_in_engine(j.id);
  if (hooks_.flush_results) LLMQ_RETURN_IF_ERROR(hooks_.flush_results());
  int64_t after = 0, cancelled = 0;
  for (;;) {
    std::vector<jobs::PendingRequest> page;
    LLMQ_RETURN_IF_ERROR(store_->PendingOfJob(j.id, after, 4096, &page));
    if (page.empty()) break;
    std::vector<jobs::Result> results;
    for (const jobs::PendingRequest& p : page) {
      jobs::Result r;
      r.job = j.id;
      r.line = p.line;
      r.is_error = true;
      r.output = jobs::ErrorLine(
          p.custom_id, p.line, RequestIdFor(j.public_id, p.line), jobs::kCancelledCode,
          j.name + ":" + std::to_string(p.line) + ": cancelled (llmq cancel) before it finished");
      results.push_back(std::move(r));
      after = p.line;
    }
    int64_t added = 0;
    LLMQ_RETURN_IF_ERROR(store_->CommitResults(results, &added));
    cancelled += added;
  }
  jobs::JobRecord now;
  LLMQ_RETURN_IF_ERROR(store_->GetJob(j.id, &now));
  Log("cancelled %s (%s): %lld requests cancelled, %lld finished before", j.public_id.c_str(),
      j.name.c_str(), static_cast<long long>(cancelled),
      static_cast<long long>(now.completed + now.failed - cancelled));
  return Finalize(now, jobs::JobStatus::kCancelled, cancelled);
}

Status JobLifecycle::Finalize(const jobs::JobRecord& j, jobs::JobStatus final_status,
                              int64_t cancelled) {
  if (j.status == jobs::JobStatus::kInProgress)
    LLMQ_RETURN_IF_ERROR(store_->SetJobStatus(j.id, jobs::JobStatus::kFinalizing));
  json opts = json::parse(j.options, nullptr, false);
  if (!opts.is_object()) opts = json::object();
  std::string stem = opts.value("outbox", std::string());
  if (stem.empty()) {  // chosen once, kept in the job, so a second finalize writes the same
    stem = spool::OutputStem(j.name, j.public_id);
    std::error_code ec;
    if (fs::exists(fs::path(outbox_) / (stem + ".summary.json"), ec)) stem += "." + j.public_id;
    opts["outbox"] = stem;
    LLMQ_RETURN_IF_ERROR(store_->SetJobOptions(j.id, DumpJson(opts)));
  }
  const fs::path base = fs::path(outbox_) / stem;
  jobs::FinalizeTargets t;
  t.results = base.string() + ".results.jsonl";
  t.errors = base.string() + ".errors.jsonl";
  t.summary = base.string() + ".summary.json";
  if (facts_.reports) t.report = base.string() + ".report.html";
  t.mode = 0640;  // the llmq group reads the results (README: llmq serve), whatever the umask
  jobs::JobSummary sum;
  sum.refused = j.refused;
  sum.finished_this_run = hooks_.finished_this_run ? hooks_.finished_this_run(j.id) : 0;
  sum.resumed =
      std::max<int64_t>(0, j.completed + j.failed - j.refused - cancelled - sum.finished_this_run);
  sum.model = facts_.model;
  sum.backend = facts_.backend;
  sum.cpu_threads = facts_.cpu_threads;
  sum.input = opts.value("archive", opts.value("path", j.name));
  const double end = j.finished_at > 0 ? j.finished_at : (hooks_.unix_now ? hooks_.unix_now() : 0);
  sum.wall_seconds = j.started_at > 0 && end > 0 ? end - j.started_at : 0;
  LLMQ_RETURN_IF_ERROR(jobs::FinalizeJob(store_, j.id, t, &sum));
  LLMQ_RETURN_IF_ERROR(store_->SetJobStatus(j.id, final_status));
  // A worker killed while it finalized (this job or another) leaves its temporaries: whoever
  // finalizes next sweeps those of writers no longer running. The spool's owner sweeps at start-up
  // too, but the killed worker may not be the owner, nor the owner be restarted after it.
  if (const int n = spool::RemoveStaleTemporaries(outbox_); n > 0)
    Log("%s: removed %d temporary file(s) left by an interrupted write", outbox_.c_str(), n);
  Log("finalized %s (%s) %s: %lld completed, %lld failed -> %s", j.public_id.c_str(),
      j.name.c_str(), jobs::JobStatusName(final_status), static_cast<long long>(sum.completed),
      static_cast<long long>(sum.failed), t.results.c_str());
  return Status::Ok();
}

}  // namespace llmq
