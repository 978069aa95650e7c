// The engines' shared reading of rows (internal to jobs/: sqlite_store.cpp, pg_store.cpp): one
// mapping from the columns of a SELECT to the records of jobs/store.h, whatever the engine. `Row`
// is an engine's cursor on one row: Int(col), Real(col) and Text(col) (a string_view valid while
// the row is).
#pragma once

#include <string>

#include "jobs/store.h"

namespace llmq::jobs::store_rows {

// The columns every job SELECT lists, in this order (JobFromRow reads them by position).
#define LLMQ_JOB_COLUMNS                                                                    \
  "id, public_id, name, sha256, status, total, completed, failed, created_at, started_at, " \
  "finished_at, cancel_requested, error, options, refused, model"

// A row of LLMQ_JOB_COLUMNS. Corruption naming `location` for a status this build does not know.
template <class Row>
[[nodiscard]] Status JobFromRow(const Row& row, const std::string& location, JobRecord* j) {
  j->id = row.Int(0);
  j->public_id = row.Text(1);
  j->name = row.Text(2);
  j->sha256 = row.Text(3);
  if (!ParseJobStatus(row.Text(4), &j->status))
    return Status::Corruption(location + ": job " + std::to_string(j->id) +
                              " has unknown status \"" + std::string(row.Text(4)) + "\"");
  j->total = row.Int(5);
  j->completed = row.Int(6);
  j->failed = row.Int(7);
  j->created_at = row.Real(8);
  j->started_at = row.Real(9);
  j->finished_at = row.Real(10);
  j->cancel_requested = row.Int(11) != 0;
  j->error = row.Text(12);
  j->options = row.Text(13);
  j->refused = row.Int(14);
  j->model = row.Text(15);
  return Status::Ok();
}

// A row of (job, line, plan_rank, attempts, custom_id, body).
template <class Row>
PendingRequest PendingFromRow(const Row& row) {
  PendingRequest p;
  p.job = row.Int(0);
  p.line = row.Int(1);
  p.plan_rank = row.Int(2);
  p.attempts = row.Int(3);
  p.custom_id = row.Text(4);
  p.body = row.Text(5);
  return p;
}

// A row of LLMQ_CLAIM_COLUMNS (jobs/store_sql.h).
template <class Row>
PendingRequest ClaimedFromRow(const Row& row) {
  PendingRequest p = PendingFromRow(row);
  p.plan_group = row.Int(6);
  p.lease_generation = row.Int(7);
  return p;
}

// A row of (id, host, device, model, started_at, heartbeat_at, state, current_job,
// tokens_per_second, served_models).
template <class Row>
WorkerInfo WorkerFromRow(const Row& row) {
  WorkerInfo w;
  w.id = row.Text(0);
  w.host = row.Text(1);
  w.device = row.Text(2);
  w.model = row.Text(3);
  w.started_at = row.Real(4);
  w.heartbeat_at = row.Real(5);
  w.state = row.Text(6);
  w.current_job = row.Text(7);
  w.tokens_per_second = row.Real(8);
  w.served_models = store_internal::ParseServedModels(row.Text(9));
  return w;
}

// A row of (prompt_tokens, cached_tokens, completion_tokens, computed_tokens).
template <class Row>
JobTotals TotalsFromRow(const Row& row) {
  JobTotals t;
  t.prompt_tokens = row.Int(0);
  t.cached_tokens = row.Int(1);
  t.completion_tokens = row.Int(2);
  t.computed_tokens = row.Int(3);
  return t;
}

// The columns of a ForEachResult walk, in this order.
#define LLMQ_RESULT_COLUMNS                                                 \
  "line, is_error, output, prompt_tokens, cached_tokens, computed_tokens, " \
  "completion_tokens, queue_seconds, ttft_seconds, itl_seconds, latency_seconds, finished_at"

// Calls `fn` with a row of LLMQ_RESULT_COLUMNS.
template <class Row>
[[nodiscard]] Status VisitResultRow(const Row& row, const Store::ResultVisitor& fn) {
  ResultMetrics m;
  m.prompt_tokens = row.Int(3);
  m.cached_tokens = row.Int(4);
  m.computed_tokens = row.Int(5);
  m.completion_tokens = row.Int(6);
  m.queue_seconds = row.Real(7);
  m.ttft_seconds = row.Real(8);
  m.itl_seconds = row.Real(9);
  m.latency_seconds = row.Real(10);
  m.finished_at = row.Real(11);
  return fn(row.Int(0), row.Int(1) != 0, row.Text(2), m);
}

}  // namespace llmq::jobs::store_rows
