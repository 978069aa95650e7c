#include "jobs/pg_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "jobs/store_rows.h"
#include "jobs/store_schema.h"
#include "jobs/store_sql.h"

namespace llmq::jobs {
namespace {

constexpr const char* kEngine = "a PostgreSQL database";  // in messages

constexpr const char* kInsertJob =
    "INSERT INTO jobs (public_id, name, sha256, status, total, completed, failed, created_at, "
    "started_at, finished_at, cancel_requested, error, options, model) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id";
constexpr const char* kFinishIngestPg =
    "UPDATE jobs SET (total, completed, failed, refused) = "
    "(SELECT count(*), count(*) FILTER (WHERE status = 'done'), "
    "count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'failed') "
    "FROM requests WHERE job = $1) WHERE id = $1";
constexpr const char* kRaiseMaxRankToPg =
    "INSERT INTO meta (key, value) VALUES ('max_plan_rank', $1::bigint::text) "
    "ON CONFLICT (key) DO UPDATE SET "
    "value = greatest(meta.value::bigint, excluded.value::bigint)::text";
// The rank high-water mark of finished ingests (meta), so MaxPlanRank needs no full scan.
constexpr const char* kRaiseMaxRankPg =
    "INSERT INTO meta (key, value) SELECT 'max_plan_rank', greatest(coalesce(max(plan_rank), 0), "
    "coalesce((SELECT value::bigint FROM meta WHERE key = 'max_plan_rank'), 0))::text "
    "FROM requests WHERE job = $1 "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";
constexpr const char* kMaxPlanRankPg =
    "SELECT greatest(coalesce((SELECT value::bigint FROM meta WHERE key = 'max_plan_rank'), 0), "
    "coalesce((SELECT max(plan_rank) FROM requests WHERE status = 'pending'), 0))";
constexpr const char* kSetStatusPg =
    "UPDATE jobs SET status = $2, error = CASE WHEN $3::text <> '' THEN $3::text ELSE error END, "
    "finished_at = CASE WHEN $4::bigint <> 0 AND finished_at = 0 THEN $5::double precision "
    "ELSE finished_at END "
    "WHERE id = $1 AND (status = $2 OR status NOT IN "
    "('completed', 'failed', 'cancelled', 'expired'))";
// A worker's leased pending requests, their rows locked in (job, line) order (Heartbeat and
// ReleaseLeases, before their UPDATE: every writer of those rows locks them in that order).
const std::string kLockLeasedRequests = std::string(sql::kLeasedRequests) + " FOR UPDATE";
// The partial index requests_pending_by_rank serves the rank order and the LIMIT.
constexpr const char* kNextPendingPg =
    "SELECT r.job, r.line, r.plan_rank, r.attempts, r.custom_id, r.body "
    "FROM requests AS r JOIN jobs AS j ON j.id = r.job "
    "WHERE r.status = 'pending' AND r.plan_rank > $1 "
    "AND j.status = 'in_progress' AND j.cancel_requested = 0 "
    "ORDER BY r.plan_rank, r.job, r.line LIMIT $2";
// Followed by the job id and kDeclareResultsEnd (DECLARE is sent unprepared: the id, an
// integer, is written in).
constexpr const char* kDeclareResults =
    "DECLARE llmq_results NO SCROLL CURSOR FOR "
    "SELECT " LLMQ_RESULT_COLUMNS " FROM results WHERE job = ";
constexpr const char* kDeclareResultsEnd = " ORDER BY line";
constexpr int kFetchRows = 256;  // a walk holds at most this many results in memory
constexpr const char* kHasMetaPg =
    "SELECT count(*) FILTER (WHERE tablename = 'meta'), count(*) FROM pg_catalog.pg_tables "
    "WHERE schemaname = current_schema()";
// The claim floor (meta 'claim_floor'; absent: 0): no pending request has a lower rank. A claim
// starts its walk of requests_pending_by_rank there, not at the index's head, where the entries
// of finished requests pile up (dead row versions) until a vacuum removes them: without it every
// claim would step over every request finished since the last vacuum. Lowered by each ingest's
// commit to its lowest rank, raised now and then by a claim to the lowest pending rank; both under
// the write lock, so that no ingest commits rows under a floor being raised.
constexpr const char* kLowerClaimFloorPg =
    "INSERT INTO meta (key, value) VALUES ('claim_floor', least(0, $1::bigint)::text) "
    "ON CONFLICT (key) DO UPDATE SET value = least(meta.value::bigint, $1::bigint)::text";
constexpr const char* kRaiseClaimFloorPg =
    "WITH f AS (SELECT coalesce((SELECT value::bigint FROM meta WHERE key = 'claim_floor'), 0) "
    "AS floor) INSERT INTO meta (key, value) SELECT 'claim_floor', coalesce((SELECT "
    "min(plan_rank) FROM requests WHERE status = 'pending' AND plan_rank >= f.floor), "
    "f.floor)::text FROM f ON CONFLICT (key) DO UPDATE SET value = excluded.value";
constexpr const char* kTryLockForWrite = "SELECT pg_try_advisory_xact_lock($1)";
constexpr int kClaimsPerFloorRaise = 16;
// ClaimNextGroup ($1 worker, $2 now, $3 expiry, $4 most requests): the first claimable row (by
// rank, from the claim floor) that no other claim has locked picks the group (g); its claimable
// rows that no other claim has locked are leased: c, LLMQ_CLAIM_ROWS_PG then a condition on the
// rows (or none) then LLMQ_CLAIM_LEASE_PG.
#define LLMQ_CLAIM_FLOOR_PG \
  "coalesce((SELECT value::bigint FROM meta WHERE key = 'claim_floor'), 0)"
#define LLMQ_CLAIM_ROWS_PG                                                              \
  "c AS (SELECT job, line FROM requests WHERE plan_group = (SELECT plan_group FROM g) " \
  "AND status = 'pending' AND (lease_worker IS NULL OR lease_expires_at <= $2) "
#define LLMQ_CLAIM_LEASE_PG                                                                 \
  "ORDER BY plan_rank LIMIT $4 FOR UPDATE SKIP LOCKED) "                                    \
  "UPDATE requests AS r SET lease_worker = $1, lease_generation = r.lease_generation + 1, " \
  "lease_expires_at = $3 FROM c WHERE r.job = c.job AND r.line = c.line "                   \
  "RETURNING r.job, r.line, r.plan_rank, r.attempts, r.custom_id, r.body, r.plan_group, "   \
  "r.lease_generation"
constexpr const char* kClaimGroupPg =
    "WITH g AS (SELECT r.plan_group FROM requests AS r "
    "WHERE r.status = 'pending' AND (r.lease_worker IS NULL OR r.lease_expires_at <= $2) "
    "AND r.plan_rank >= " LLMQ_CLAIM_FLOOR_PG
    " "
    // A subquery, not a join: the walk stays requests_pending_by_rank's, in its order, stopping
    // at the first row, whatever the planner's statistics say.
    "AND (SELECT j.status = 'in_progress' AND j.cancel_requested = 0 FROM jobs AS j "
    "WHERE j.id = r.job) "
    "ORDER BY r.plan_rank, r.job, r.line LIMIT 1 FOR UPDATE SKIP LOCKED), " LLMQ_CLAIM_ROWS_PG
        LLMQ_CLAIM_LEASE_PG;
// The same among the jobs of the models in $5 (text[]) or of none: each such in_progress job's
// first claimable row by rank from the claim floor that no other claim has locked (a LATERAL
// walk of requests_pending_by_job, one per job, each locking its row until the statement ends),
// the lowest of those picks the group. A job of a model not served is never walked, and none of
// its rows is leased (a group planned over several files at once may span jobs of several
// models).
constexpr const char* kClaimGroupOfModelsPg =
    "WITH g AS (SELECT x.plan_group FROM jobs AS j CROSS JOIN LATERAL (SELECT r.plan_rank, "
    "r.plan_group FROM requests AS r WHERE r.job = j.id AND r.status = 'pending' "
    "AND r.lease_generation >= 0 "  // requests_pending_by_job's predicate (store_schema.h)
    "AND (r.lease_worker IS NULL OR r.lease_expires_at <= $2) "
    "AND r.plan_rank >= " LLMQ_CLAIM_FLOOR_PG
    " "
    "ORDER BY r.plan_rank LIMIT 1 FOR UPDATE SKIP LOCKED) AS x "
    "WHERE j.status = 'in_progress' AND j.cancel_requested = 0 "
    "AND (j.model = '' OR j.model = ANY ($5::text[])) ORDER BY x.plan_rank LIMIT "
    "1), " LLMQ_CLAIM_ROWS_PG
    "AND (SELECT j.model = '' OR j.model = ANY ($5::text[]) FROM jobs AS j "
    "WHERE j.id = requests.job) " LLMQ_CLAIM_LEASE_PG;
// A group's results in one statement (CommitResultGroup's finish_insert_bump), its rows as
// arrays: $1 jobs, $2 lines, $3 is_error, $4 outputs, $5-$8 token counts, $9-$12 seconds,
// $13 finished_at, $14 lease generations, $15 the worker or NULL, $16 now (committed_at).
//   l: the requests still pending (and, with a worker, held by it under that generation), locked
//      one by one in the arrays' (job, line) order, so that two commits never wait on each other
//      crosswise. Each is found by its key (a LATERAL subquery with FOR UPDATE is never flattened
//      into a join): the worker's entries in requests_leased include those of every request it
//      finished since the last vacuum.
//   f: those set done or failed;  i: their results inserted (but where a line has one);
//   b: the jobs' counts and token sums moved by what i inserted, the job rows locked in id order.
// Returns the rows of f, each with the count of i.
constexpr const char* kCommitGroupPg =
    "WITH v AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], "
    "$5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::float8[], $10::float8[], "
    "$11::float8[], $12::float8[], $13::float8[], $14::bigint[]) "
    "AS v (job, line, is_error, output, p, c, cp, cm, q, t, i, l, f, gen)), "
    "l AS (SELECT r.job, r.line FROM v CROSS JOIN LATERAL (SELECT job, line FROM requests "
    "WHERE job = v.job AND line = v.line AND status = 'pending' AND ($15::text IS NULL OR "
    "(lease_worker = $15::text AND lease_generation = v.gen)) FOR UPDATE) AS r), "
    "f AS (UPDATE requests AS r SET status = CASE WHEN v.is_error <> 0 THEN 'failed' ELSE 'done' "
    "END FROM l JOIN v ON v.job = l.job AND v.line = l.line WHERE r.job = l.job AND "
    "r.line = l.line RETURNING r.job, r.line), "
    "i AS (INSERT INTO results (job, line, is_error, output, prompt_tokens, cached_tokens, "
    "computed_tokens, completion_tokens, queue_seconds, ttft_seconds, itl_seconds, "
    "latency_seconds, committed_at, finished_at) SELECT v.job, v.line, v.is_error, v.output, v.p, "
    "v.c, v.cp, v.cm, v.q, v.t, v.i, v.l, $16::float8, v.f FROM v JOIN f ON f.job = v.job AND "
    "f.line = v.line ON CONFLICT (job, line) DO NOTHING RETURNING job, is_error, prompt_tokens, "
    "cached_tokens, computed_tokens, completion_tokens), "
    "s AS (SELECT job, count(*) FILTER (WHERE is_error = 0) AS ok, count(*) FILTER (WHERE "
    "is_error <> 0) AS bad, sum(prompt_tokens) AS p, sum(cached_tokens) AS c, "
    "sum(computed_tokens) AS cp, sum(completion_tokens) AS cm FROM i GROUP BY job), "
    "k AS (SELECT id FROM jobs WHERE id IN (SELECT job FROM s) ORDER BY id FOR UPDATE), "
    "b AS (UPDATE jobs SET completed = completed + s.ok, failed = failed + s.bad, "
    "prompt_tokens = prompt_tokens + s.p, cached_tokens = cached_tokens + s.c, "
    "computed_tokens = computed_tokens + s.cp, completion_tokens = completion_tokens + s.cm "
    "FROM s JOIN k ON k.id = s.job WHERE jobs.id = s.job RETURNING 1) "
    "SELECT f.job, f.line, (SELECT count(*) FROM i), (SELECT count(*) FROM b) FROM f";
// The 1-based position of the first (job $1[i], line $2[i]) that is no request.
constexpr const char* kFirstMissingPg =
    "SELECT v.i FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS v (job, line, i) "
    "WHERE NOT EXISTS (SELECT 1 FROM requests AS r WHERE r.job = v.job AND r.line = v.line) "
    "ORDER BY v.i LIMIT 1";
// A batch of InsertRequest's rows, and the error results of the refused ones among them.
constexpr const char* kInsertRequestsPg =
    "INSERT INTO requests (job, line, custom_id, body, plan_rank, status, plan_group) "
    "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], "
    "$6::text[], $7::bigint[])";
constexpr const char* kInsertErrorResultsPg =
    "INSERT INTO results (job, line, is_error, output, committed_at, finished_at) "
    "SELECT v.job, v.line, 1, v.output, $4, $4 FROM unnest($1::bigint[], $2::bigint[], "
    "$3::text[]) AS v (job, line, output) ON CONFLICT (job, line) DO NOTHING";
constexpr int kBatchRows = 2000;
constexpr size_t kBatchBytes = 8 << 20;
constexpr const char* kLockForWrite = "SELECT pg_advisory_xact_lock($1)";
constexpr const char* kBumpDataVersion =
    "INSERT INTO meta (key, value) VALUES ('data_version', '1') "
    "ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + 1)::text "
    "RETURNING value::bigint";
constexpr const char* kReadDataVersion =
    "SELECT coalesce((SELECT value::bigint FROM meta WHERE key = 'data_version'), 0)";

bool StartsWith(const char* s, const char* prefix) {
  return s != nullptr && std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// One row of a result, as jobs/store_rows.h reads rows.
class PgRow {
 public:
  PgRow(const PgStore::Rows& rows, int i) : rows_(rows), i_(i) {}
  int64_t Int(int col) const { return rows_.Int(i_, col); }
  double Real(int col) const { return rows_.Real(i_, col); }
  std::string_view Text(int col) const { return rows_.Text(i_, col); }

 private:
  const PgStore::Rows& rows_;
  int i_;
};

void ReadPendingRows(const PgStore::Rows& rows, std::vector<PendingRequest>* out) {
  for (int i = 0; i < rows.size(); ++i) out->push_back(store_rows::PendingFromRow(PgRow(rows, i)));
}

}  // namespace

std::string RedactPostgresUrl(std::string_view url) {
  std::string out(url);
  // userinfo: scheme://user:password@host
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    const size_t end = out.find_first_of("/?", start);
    const size_t at = out.rfind('@', end == std::string::npos ? out.size() : end);
    if (at != std::string::npos && at >= start) {
      const size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // ?password=...&...
  for (size_t q = out.find('?'); q != std::string::npos && q < out.size();) {
    const size_t key = q + 1;
    const size_t amp = out.find('&', key);
    const size_t stop = amp == std::string::npos ? out.size() : amp;
    if (out.compare(key, 9, "password=") == 0) out.replace(key + 9, stop - key - 9, "***");
    q = out.find('&', key);
  }
  return out;
}

// --- Params / Rows.

PgStore::Array& PgStore::Array::Add(int64_t v) {
  if (text_.size() > 1) text_ += ',';
  text_ += std::to_string(v);
  return *this;
}

PgStore::Array& PgStore::Array::Add(double v) {
  if (text_.size() > 1) text_ += ',';
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  text_ += buf;
  return *this;
}

PgStore::Array& PgStore::Array::Add(std::string_view v) {
  if (text_.size() > 1) text_ += ',';
  text_ += '"';
  for (const char c : v) {
    if (c == '"' || c == '\\') text_ += '\\';
    text_ += c;
  }
  text_ += '"';
  return *this;
}

PgStore::Params& PgStore::Params::Add(int64_t v) {
  values_.push_back(std::to_string(v));
  null_.push_back(false);
  return *this;
}

PgStore::Params& PgStore::Params::Add(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  values_.emplace_back(buf);
  null_.push_back(false);
  return *this;
}

PgStore::Params& PgStore::Params::Add(std::string_view v) {
  values_.emplace_back(v);
  null_.push_back(false);
  return *this;
}

PgStore::Params& PgStore::Params::AddNull() {
  values_.emplace_back();
  null_.push_back(true);
  return *this;
}

std::vector<const char*> PgStore::Params::Pointers() const {
  std::vector<const char*> p(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) p[i] = null_[i] ? nullptr : values_[i].c_str();
  return p;
}

PgStore::Rows::~Rows() {
  if (r_ != nullptr) PQclear(r_);
}

PgStore::Rows& PgStore::Rows::operator=(Rows&& o) noexcept {
  if (this != &o) {
    if (r_ != nullptr) PQclear(r_);
    r_ = std::exchange(o.r_, nullptr);
  }
  return *this;
}

int PgStore::Rows::size() const {
  return r_ != nullptr ? PQntuples(r_) : 0;
}

int64_t PgStore::Rows::Int(int row, int col) const {
  return std::strtoll(PQgetvalue(r_, row, col), nullptr, 10);
}

double PgStore::Rows::Real(int row, int col) const {
  return std::strtod(PQgetvalue(r_, row, col), nullptr);
}

std::string_view PgStore::Rows::Text(int row, int col) const {
  return std::string_view(PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col)));
}

bool PgStore::Rows::IsNull(int row, int col) const {
  return PQgetisnull(r_, row, col) != 0;
}

int64_t PgStore::Rows::Affected() const {
  const char* n = r_ != nullptr ? PQcmdTuples(r_) : "";
  return *n != '\0' ? std::strtoll(n, nullptr, 10) : 0;
}

// --- Connection.

PgStore::~PgStore() {
  // Closing the connection rolls back an open transaction (and frees its advisory lock).
  if (conn_ != nullptr) PQfinish(conn_);
}

Status PgStore::Open(const std::string& url, std::unique_ptr<Store>* out,
                     const OpenOptions& options) {
  std::unique_ptr<PgStore> s(new PgStore());
  s->url_ = url;
  s->location_ = RedactPostgresUrl(url);
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (opts == nullptr) {
    std::string why = err != nullptr ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::InvalidArgument(s->location_ + ": not a valid PostgreSQL URL: " + why);
  }
  PQconninfoFree(opts);
  s->conn_ = PQconnectdb(url.c_str());
  if (s->conn_ == nullptr)
    return Status::IoError(s->location_ + ": cannot connect: libpq is out of memory");
  if (PQstatus(s->conn_) != CONNECTION_OK) {
    std::string why = PQerrorMessage(s->conn_);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return Status::IoError(s->location_ + ": cannot connect: " + why);
  }
  LLMQ_RETURN_IF_ERROR(s->Configure());
  LLMQ_RETURN_IF_ERROR(s->Migrate(options));
  LLMQ_RETURN_IF_ERROR(s->ReadDataCounter(&s->known_counter_));
  *out = std::move(s);
  return Status::Ok();
}

Status PgStore::Configure() {
  // NOTICEs ("relation already exists, skipping") are not errors: libpq would print them.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  return Exec("SET lock_timeout = " + std::to_string(busy_timeout_ms_), "cannot set lock_timeout");
}

Status PgStore::Reconnect() {
  PQreset(conn_);
  prepared_.clear();  // a new server session: nothing is prepared there
  write_locked_ = false;
  begin_deferred_ = false;
  txn_open_ = false;
  if (PQstatus(conn_) != CONNECTION_OK) return Error("cannot reconnect", nullptr);
  LLMQ_RETURN_IF_ERROR(Configure());
  return Status::Ok();
}

void PgStore::SetBusyTimeout(int milliseconds) {
  busy_timeout_ms_ = milliseconds;
  // On failure the next statement reports the connection's state.
  Exec("SET lock_timeout = " + std::to_string(milliseconds), "cannot set lock_timeout")
      .IgnoreError();
}

Status PgStore::SetCacheBytes(int64_t) {
  return Status::Ok();  // the server's cache is the server's
}

Status PgStore::Error(const std::string& what, pg_result* r) const {
  std::string why = r != nullptr ? PQresultErrorMessage(r) : "";
  if (why.empty()) why = PQerrorMessage(conn_);
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  const std::string m = location_ + ": " + what + ": " + why;
  if (StartsWith(state, "55P03"))  // lock_not_available: lock_timeout ran out
    return Status::IoError(m + " (the queue is locked: another connection held its write lock " +
                           "for longer than the " + std::to_string(busy_timeout_ms_) +
                           " ms busy timeout)");
  if (StartsWith(state, "23")) return Status::InvalidArgument(m);  // integrity constraints
  if (PQstatus(conn_) == CONNECTION_BAD || StartsWith(state, "08"))
    return Status::IoError(m + " (the connection to the server is lost; the next call reconnects)");
  return Status::IoError(m);
}

Status PgStore::ExecAll(const std::string& sql, const std::string& what, std::vector<Rows>* out) {
  out->clear();
  if (batch_) LLMQ_RETURN_IF_ERROR(FlushRequests());
  LLMQ_RETURN_IF_ERROR(SendDeferredBegin());
  if (PQsendQuery(conn_, sql.c_str()) == 0) return Error(what, nullptr);
  Status first;
  while (pg_result* raw = PQgetResult(conn_)) {  // every result, until none is left
    const ExecStatusType st = PQresultStatus(raw);
    if (first.ok() && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) first = Error(what, raw);
    out->emplace_back(raw);
  }
  if (first.ok() && out->empty()) return Error(what, nullptr);
  return first;
}

Status PgStore::Exec(const std::string& sql, const std::string& what, Rows* rows) {
  if (batch_) LLMQ_RETURN_IF_ERROR(FlushRequests());
  LLMQ_RETURN_IF_ERROR(SendDeferredBegin());
  Rows r(PQexec(conn_, sql.c_str()));
  const ExecStatusType st = PQresultStatus(r.raw());
  if (r.raw() == nullptr || (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK))
    return Error(what, r.raw());
  if (rows != nullptr) *rows = std::move(r);
  return Status::Ok();
}

Status PgStore::SendDeferredBegin() {
  if (!begin_deferred_) return Status::Ok();
  begin_deferred_ = false;
  return Exec("BEGIN", "cannot begin a transaction");
}

Status PgStore::RunAfterBegin(const std::string& name, const Params& params,
                              const std::string& what, Rows* rows) {
  begin_deferred_ = false;
  const std::vector<const char*> values = params.Pointers();
  // BEGIN and the statement, then a sync point, in one write; their results in one read. (A
  // sync ends only an implicit transaction: the BEGIN's stays open.)
  const bool sent =
      PQenterPipelineMode(conn_) != 0 &&
      PQsendQueryParams(conn_, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0) != 0 &&
      PQsendQueryPrepared(conn_, name.c_str(), params.size(), values.data(), nullptr, nullptr, 0) !=
          0 &&
      PQpipelineSync(conn_) != 0;
  Status first = sent ? Status::Ok() : Error(what, nullptr);
  std::vector<Rows> results;  // BEGIN's, then the statement's
  for (int nulls = 0; sent && nulls < 2;) {
    pg_result* raw = PQgetResult(conn_);
    if (raw == nullptr) {  // the end of one query's results
      if (PQstatus(conn_) == CONNECTION_BAD) break;
      ++nulls;
      continue;
    }
    nulls = 0;
    const ExecStatusType st = PQresultStatus(raw);
    if (st == PGRES_PIPELINE_SYNC) {
      PQclear(raw);
      break;
    }
    // PGRES_PIPELINE_ABORTED: an earlier query failed; that one's error is the one reported.
    if (first.ok() && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) first = Error(what, raw);
    results.emplace_back(raw);
  }
  // Leaving pipeline mode fails only with results left unread, which only a lost connection
  // leaves: Reconnect (PQreset) ends pipeline mode with the old connection.
  if (PQexitPipelineMode(conn_) == 0 && first.ok()) first = Error(what, nullptr);
  if (first.ok() && results.size() != 2) first = Error(what, nullptr);
  LLMQ_RETURN_IF_ERROR(first);
  if (rows != nullptr) *rows = std::move(results.back());
  return Status::Ok();
}

Status PgStore::Run(const char* sql, const Params& params, const std::string& what, Rows* rows) {
  if (batch_) LLMQ_RETURN_IF_ERROR(FlushRequests());  // what follows sees those rows
  if (PQstatus(conn_) == CONNECTION_BAD && !InTransaction()) LLMQ_RETURN_IF_ERROR(Reconnect());
  const std::string* name = nullptr;
  for (const auto& [key, n] : prepared_)
    if (key == sql) name = &n;
  if (name == nullptr) {
    std::string n = "llmq_" + std::to_string(prepared_.size());
    Rows prep(PQprepare(conn_, n.c_str(), sql, 0, nullptr));
    if (PQresultStatus(prep.raw()) != PGRES_COMMAND_OK)
      return Error("cannot prepare a statement (" + what + ")", prep.raw());
    prepared_.emplace_back(sql, std::move(n));
    name = &prepared_.back().second;
  }
  if (begin_deferred_) return RunAfterBegin(*name, params, what, rows);
  const std::vector<const char*> values = params.Pointers();
  Rows r(PQexecPrepared(conn_, name->c_str(), params.size(), values.data(), nullptr, nullptr, 0));
  const ExecStatusType st = PQresultStatus(r.raw());
  if (r.raw() == nullptr || (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK))
    return Error(what, r.raw());
  if (rows != nullptr) *rows = std::move(r);
  return Status::Ok();
}

// --- Transactions.

bool PgStore::InTransaction() const {
  if (begin_deferred_) return true;  // opened here; the server hears of it with a statement
  // A connection lost inside a transaction took the transaction with it, but the caller still has
  // to roll back (its Commit fails): the transaction stays open here until then.
  if (PQstatus(conn_) == CONNECTION_BAD) return txn_open_;
  const PGTransactionStatusType t = PQtransactionStatus(conn_);
  return t == PQTRANS_INTRANS || t == PQTRANS_INERROR || t == PQTRANS_ACTIVE;
}

Status PgStore::LockForWrite() {
  if (write_locked_) return Status::Ok();
  LLMQ_RETURN_IF_ERROR(
      Run(kLockForWrite, Params().Add(kWriteLockKey), "cannot take the queue's write lock"));
  write_locked_ = true;
  wrote_ = true;
  return Status::Ok();
}

Status PgStore::BeginUnlocked() {
  LLMQ_CHECK(!InTransaction());
  if (PQstatus(conn_) == CONNECTION_BAD) LLMQ_RETURN_IF_ERROR(Reconnect());
  // BEGIN goes with the transaction's first statement (Run: one round trip for both).
  begin_deferred_ = true;
  txn_open_ = true;
  return Status::Ok();
}

Status PgStore::Begin() {
  LLMQ_RETURN_IF_ERROR(BeginUnlocked());
  if (Status s = LockForWrite(); !s.ok()) {
    Rollback();
    return s;
  }
  return Status::Ok();
}

Status PgStore::BeginRead() {
  LLMQ_CHECK(!InTransaction());
  if (PQstatus(conn_) == CONNECTION_BAD) LLMQ_RETURN_IF_ERROR(Reconnect());
  LLMQ_RETURN_IF_ERROR(
      Exec("BEGIN ISOLATION LEVEL REPEATABLE READ", "cannot begin a read transaction"));
  txn_open_ = true;
  return Status::Ok();
}

Status PgStore::Commit() {
  if (!InTransaction()) return Status::IoError(location_ + ": commit: no transaction is open");
  if (PQtransactionStatus(conn_) == PQTRANS_INERROR) {
    Rollback();
    return Status::IoError(location_ +
                           ": commit: a statement of this transaction failed; it was rolled back");
  }
  if (Status s = FlushRequests(); !s.ok()) {
    Rollback();
    return s;
  }
  if (begin_deferred_) {  // no statement ran: the server has no transaction to end
    Rollback();
    return Status::Ok();
  }
  if (lowest_inserted_rank_ != kNoRank) {  // under the write lock (InsertRequest took it)
    const Status s = Run(kLowerClaimFloorPg, Params().Add(lowest_inserted_rank_),
                         "cannot lower the claim floor");
    if (!s.ok()) {
      Rollback();
      return s;
    }
  }
  // DataVersion: others see that this transaction wrote. The count and COMMIT go as one query
  // (one round trip: the rows this transaction locked are held a round trip less).
  std::vector<Rows> results;
  if (Status s = ExecAll(wrote_ ? std::string(kBumpDataVersion) + "; COMMIT" : "COMMIT",
                         "commit failed", &results);
      !s.ok()) {
    Rollback();
    return s;
  }
  const int64_t bumped = wrote_ ? results.front().Int(0, 0) : -1;
  const Rows& r = results.back();
  write_locked_ = false;
  wrote_ = false;
  txn_open_ = false;
  lowest_inserted_rank_ = kNoRank;
  if (std::strcmp(PQcmdStatus(r.raw()), "COMMIT") != 0)
    return Status::IoError(location_ + ": commit: the server rolled the transaction back");
  if (bumped >= 0) {
    // Another connection committed between what this one last saw and its own bump: that change
    // is still to be reported.
    if (bumped - 1 != known_counter_) ++reported_version_;
    known_counter_ = bumped;
  }
  return Status::Ok();
}

void PgStore::Rollback() {
  batch_.reset();                                         // never sent
  const bool open = InTransaction() && !begin_deferred_;  // the server's transaction
  begin_deferred_ = false;
  write_locked_ = false;
  wrote_ = false;
  txn_open_ = false;
  lowest_inserted_rank_ = kNoRank;
  // Best effort: a transaction on a lost connection is gone already.
  if (open && PQstatus(conn_) == CONNECTION_OK) Exec("ROLLBACK", "rollback").IgnoreError();
}

Status PgStore::Transaction(const std::function<Status()>& body) {
  if (InTransaction()) {  // the caller's transaction: the caller commits
    LLMQ_RETURN_IF_ERROR(LockForWrite());
    return body();
  }
  LLMQ_RETURN_IF_ERROR(Begin());
  Status s = body();
  if (s.ok()) s = Commit();
  if (!s.ok()) Rollback();
  return s;
}

Status PgStore::RaiseClaimFloor() {
  LLMQ_RETURN_IF_ERROR(BeginUnlocked());
  Rows r;
  Status s = Run(kTryLockForWrite, Params().Add(kWriteLockKey), "cannot try the write lock", &r);
  // Behind an ingest: not now (the floor only saves work).
  if (s.ok() && r.Text(0, 0) == "t")
    s = Run(kRaiseClaimFloorPg, Params(), "cannot raise the claim floor");
  if (s.ok()) s = Commit();  // not counted as a write: the floor is no data
  if (!s.ok()) Rollback();
  return s;
}

Status PgStore::RowTransaction(const std::function<Status()>& body) {
  if (InTransaction()) return Transaction(body);
  LLMQ_RETURN_IF_ERROR(BeginUnlocked());
  wrote_ = true;
  Status s = body();
  if (s.ok()) s = Commit();
  if (!s.ok()) Rollback();
  return s;
}

Status PgStore::ReadDataCounter(int64_t* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(kReadDataVersion, Params(), "cannot read data_version", &r));
  *out = r.Int(0, 0);
  return Status::Ok();
}

Status PgStore::DataVersion(int64_t* out) {
  int64_t counter = 0;
  LLMQ_RETURN_IF_ERROR(ReadDataCounter(&counter));
  if (counter != known_counter_) {
    ++reported_version_;
    known_counter_ = counter;
  }
  *out = reported_version_;
  return Status::Ok();
}

// --- Schema.

Status PgStore::ReadSchemaVersion(int* version, bool* foreign_tables) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(kHasMetaPg, Params(), "cannot read the schema", &r));
  const bool has_meta = r.Int(0, 0) != 0;
  *foreign_tables = !has_meta && r.Int(0, 1) != 0;
  *version = 0;
  if (!has_meta) return Status::Ok();
  LLMQ_RETURN_IF_ERROR(Run(sql::kReadVersion, Params(), "cannot read schema_version", &r));
  if (r.size() == 0) return Status::Ok();  // meta created, first migration not committed
  return store_internal::ParseSchemaVersion(location_, std::string(r.Text(0, 0)), version);
}

Status PgStore::Migrate(const OpenOptions& options) {
  store_internal::MigrationSteps steps;
  steps.engine = kEngine;
  steps.dialect = &schema::Migration::postgres;
  steps.read_version = [this](int* v, bool* foreign) { return ReadSchemaVersion(v, foreign); };
  steps.write_transaction = [this](const std::function<Status()>& body) {
    return Transaction(body);
  };
  steps.exec = [this](const char* sql, const std::string& what) { return Exec(sql, what); };
  steps.write_version = [this](int version) {
    return Run(sql::kWriteVersion, Params().Add(std::to_string(version)),
               "cannot record schema_version");
  };
  return store_internal::RunMigrations(location_, options, steps);
}

// --- Ingest.

Status PgStore::InsertJob(JobRecord* job) {
  if (job->public_id.empty()) LLMQ_RETURN_IF_ERROR(store_internal::RandomPublicId(&job->public_id));
  if (job->created_at == 0) job->created_at = store_internal::Now();
  return Transaction([&]() -> Status {
    Params p;
    p.Add(job->public_id).Add(job->name);
    if (job->sha256.empty())
      p.AddNull();  // until FinishIngest sets it
    else
      p.Add(job->sha256);
    p.Add(std::string_view(JobStatusName(job->status)));
    p.Add(job->total).Add(job->completed).Add(job->failed);
    p.Add(job->created_at).Add(job->started_at).Add(job->finished_at);
    p.Add(int64_t{job->cancel_requested}).Add(job->error).Add(job->options).Add(job->model);
    Rows r;
    const Status s = Run(kInsertJob, p, "cannot insert job \"" + job->name + "\"", &r);
    if (!s.ok()) {
      if (s.code() == Status::Code::kInvalidArgument)  // the unique (name, sha256)
        return Status::InvalidArgument(location_ + ": job \"" + job->name + "\" with sha256 " +
                                       job->sha256 + " is already recorded");
      return s;
    }
    job->id = r.Int(0, 0);
    return Status::Ok();
  });
}

Status PgStore::InsertRequest(int64_t job, const NewRequest& r) {
  // Into the batch, sent when full, before any other statement, and at Commit (in its own
  // transaction: at once): one round trip per kBatchRows rows, not per row.
  return Transaction([&]() -> Status {
    if (!batch_) batch_ = std::make_unique<RequestBatch>();
    RequestBatch& b = *batch_;
    b.job.Add(job);
    b.line.Add(r.line);
    b.custom_id.Add(std::string_view(r.custom_id));
    b.body.Add(std::string_view(r.body));
    b.rank.Add(r.plan_rank);
    b.status.Add(std::string_view(r.error_output ? "failed" : "pending"));
    b.group.Add(r.plan_group != 0 ? r.plan_group : r.plan_rank);
    if (r.error_output) {  // refused at validation: finished already, its error line its result
      b.error_job.Add(job);
      b.error_line.Add(r.line);
      b.error_output.Add(std::string_view(*r.error_output));
      ++b.errors;
    } else {
      lowest_inserted_rank_ = std::min(lowest_inserted_rank_, r.plan_rank);
    }
    if (b.rows++ == 0) {
      b.first_job = job;
      b.first_line = r.line;
    }
    b.last_line = r.line;
    b.bytes += r.body.size() + r.custom_id.size() + (r.error_output ? r.error_output->size() : 0);
    if (b.rows >= kBatchRows || b.bytes >= kBatchBytes) return FlushRequests();
    return Status::Ok();
  });
}

Status PgStore::FlushRequests() {
  const std::unique_ptr<RequestBatch> b = std::move(batch_);  // Run below must not flush it again
  if (!b) return Status::Ok();
  const std::string where = "requests (job " + std::to_string(b->first_job) + ", lines " +
                            std::to_string(b->first_line) + " to " + std::to_string(b->last_line) +
                            ")";
  Params p;
  p.Add(b->job).Add(b->line).Add(b->custom_id).Add(b->body).Add(b->rank).Add(b->status);
  p.Add(b->group);
  LLMQ_RETURN_IF_ERROR(Run(kInsertRequestsPg, p, "cannot insert " + where));
  if (b->errors == 0) return Status::Ok();
  Params e;
  e.Add(b->error_job).Add(b->error_line).Add(b->error_output).Add(store_internal::Now());
  return Run(kInsertErrorResultsPg, e, "cannot insert the error results of " + where);
}

Status PgStore::FinishIngest(int64_t job, JobStatus status, const IngestTotals* totals) {
  return Transaction([&]() -> Status {
    Params p;
    p.Add(job);
    if (totals) {
      p.Add(totals->total).Add(totals->failed);
      if (totals->sha256.empty())
        p.AddNull();
      else
        p.Add(totals->sha256);
      p.Add(totals->model);
    }
    Rows r;
    const Status s = Run(totals ? sql::kFinishIngestCounted : kFinishIngestPg, p,
                         "cannot count the requests of job " + std::to_string(job), &r);
    if (!s.ok()) {
      if (totals && s.code() == Status::Code::kInvalidArgument)
        return Status::InvalidArgument(location_ + ": a job with the same name and sha256 " +
                                       totals->sha256 + " is already recorded");
      return s;
    }
    if (r.Affected() == 0) return NotFoundJob(job);
    LLMQ_RETURN_IF_ERROR(Run(totals ? kRaiseMaxRankToPg : kRaiseMaxRankPg,
                             Params().Add(totals ? totals->max_rank : job),
                             "cannot record the highest plan rank"));
    return SetJobStatus(job, status);
  });
}

Status PgStore::MaxPlanRank(int64_t* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(kMaxPlanRankPg, Params(), "cannot read the highest plan rank", &r));
  *out = r.Int(0, 0);
  return Status::Ok();
}

// --- Jobs.

Status PgStore::NotFoundJob(int64_t id) const {
  return Status::NotFound(location_ + ": no job " + std::to_string(id));
}

Status PgStore::ReadJobs(const Rows& rows, std::vector<JobRecord>* out) const {
  for (int i = 0; i < rows.size(); ++i)
    LLMQ_RETURN_IF_ERROR(store_rows::JobFromRow(PgRow(rows, i), location_, &out->emplace_back()));
  return Status::Ok();
}

Status PgStore::FindJob(const std::string& name, const std::string& sha256,
                        std::optional<JobRecord>* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(sql::kFindJob, Params().Add(name).Add(sha256), "cannot read jobs", &r));
  std::vector<JobRecord> jobs;
  LLMQ_RETURN_IF_ERROR(ReadJobs(r, &jobs));
  out->reset();
  if (!jobs.empty()) *out = std::move(jobs.front());
  return Status::Ok();
}

Status PgStore::GetJob(int64_t id, JobRecord* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(sql::kGetJob, Params().Add(id), "cannot read jobs", &r));
  std::vector<JobRecord> jobs;
  LLMQ_RETURN_IF_ERROR(ReadJobs(r, &jobs));
  if (jobs.empty()) return NotFoundJob(id);
  *out = std::move(jobs.front());
  return Status::Ok();
}

Status PgStore::GetJobByPublicId(const std::string& id, JobRecord* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(sql::kGetJobByPublicId, Params().Add(id), "cannot read jobs", &r));
  std::vector<JobRecord> jobs;
  LLMQ_RETURN_IF_ERROR(ReadJobs(r, &jobs));
  if (jobs.empty()) return Status::NotFound(location_ + ": no job " + id);
  *out = std::move(jobs.front());
  return Status::Ok();
}

Status PgStore::ListJobs(std::vector<JobRecord>* out) {
  out->clear();
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(sql::kListJobs, Params(), "cannot read jobs", &r));
  return ReadJobs(r, out);
}

Status PgStore::SetJobStatus(int64_t id, JobStatus s, const std::string& error) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Transaction([&]() -> Status {
    Params p;
    p.Add(id).Add(std::string_view(JobStatusName(s))).Add(error);
    p.Add(int64_t{IsTerminal(s)}).Add(store_internal::Now());
    return Run(kSetStatusPg, p, "cannot set the status of job " + std::to_string(id), &r);
  }));
  if (r.Affected() == 1) return Status::Ok();
  // Nothing changed: the job is absent, or already in another terminal status.
  JobRecord job;
  LLMQ_RETURN_IF_ERROR(GetJob(id, &job));
  return Status::InvalidArgument(location_ + ": job " + job.public_id + " is already " +
                                 JobStatusName(job.status) + ": it cannot become " +
                                 JobStatusName(s));
}

Status PgStore::MarkJobStarted(int64_t id, double unix_seconds) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Transaction([&]() -> Status {
    return Run(sql::kMarkStarted, Params().Add(id).Add(unix_seconds),
               "cannot mark job " + std::to_string(id) + " started", &r);
  }));
  if (r.Affected() == 1) return Status::Ok();
  JobRecord job;
  return GetJob(id, &job);  // started before (OK), or absent (NotFound)
}

Status PgStore::RequestCancel(int64_t id) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Transaction([&]() -> Status {
    return Run(sql::kRequestCancel, Params().Add(id),
               "cannot request cancelling job " + std::to_string(id), &r);
  }));
  return r.Affected() == 0 ? NotFoundJob(id) : Status::Ok();
}

Status PgStore::SetJobOptions(int64_t id, const std::string& options) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(Transaction([&]() -> Status {
    return Run(sql::kSetJobOptions, Params().Add(id).Add(options),
               "cannot set the options of job " + std::to_string(id), &r);
  }));
  return r.Affected() == 0 ? NotFoundJob(id) : Status::Ok();
}

Status PgStore::GetCustomId(int64_t job, int64_t line, std::string* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(
      Run(sql::kGetCustomId, Params().Add(job).Add(line), "cannot read a request's custom_id", &r));
  if (r.size() == 0)
    return Status::NotFound(location_ + ": no request at line " + std::to_string(line) +
                            " of job " + std::to_string(job));
  *out = std::string(r.Text(0, 0));
  return Status::Ok();
}

// --- Feeding.

Status PgStore::NextPending(int64_t after_rank, int limit, std::vector<PendingRequest>* out) {
  out->clear();
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(kNextPendingPg, Params().Add(after_rank).Add(int64_t{limit}),
                           "cannot read pending requests", &r));
  ReadPendingRows(r, out);
  return Status::Ok();
}

Status PgStore::MarkAttempted(const std::vector<std::pair<int64_t, int64_t>>& job_lines) {
  // In (job, line) order, as every writer of a worker's request rows locks them (Heartbeat,
  // CommitLeasedResults): in claim order, it deadlocked with the worker's own heartbeat.
  std::vector<std::pair<int64_t, int64_t>> sorted = job_lines;
  std::sort(sorted.begin(), sorted.end());
  return Transaction([&]() -> Status {
    for (const auto& [job, line] : sorted)
      LLMQ_RETURN_IF_ERROR(
          Run(sql::kMarkAttempted, Params().Add(job).Add(line), "cannot count an attempt"));
    return Status::Ok();
  });
}

Status PgStore::CountPending(int64_t job, int64_t* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(
      Run(sql::kCountPending, Params().Add(job), "cannot count pending requests", &r));
  *out = r.Int(0, 0);
  return Status::Ok();
}

Status PgStore::PendingOfJob(int64_t job, int64_t after_line, int limit,
                             std::vector<PendingRequest>* out) {
  out->clear();
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(sql::kPendingOfJob,
                           Params().Add(job).Add(after_line).Add(int64_t{limit}),
                           "cannot read a job's pending requests", &r));
  ReadPendingRows(r, out);
  return Status::Ok();
}

Status PgStore::GetJobTotals(int64_t job, JobTotals* out) {
  Rows r;
  LLMQ_RETURN_IF_ERROR(
      Run(sql::kJobTotals, Params().Add(job), "cannot read a job's token totals", &r));
  if (r.size() == 0) return NotFoundJob(job);
  *out = store_rows::TotalsFromRow(PgRow(r, 0));
  return Status::Ok();
}

// --- Results.

namespace {

// The index in `rs` (sorted by (job, line), each once) of each (job, line) row in `rows`.
void MarkReturned(const PgStore::Rows& rows, const std::vector<const Result*>& rs,
                  std::vector<char>* marks) {
  marks->assign(rs.size(), 0);
  for (int i = 0; i < rows.size(); ++i) {
    const auto key = std::make_pair(rows.Int(i, 0), rows.Int(i, 1));
    const auto it = std::lower_bound(rs.begin(), rs.end(), key, [](const Result* r, const auto& k) {
      return std::make_pair(r->job, r->line) < k;
    });
    if (it != rs.end() && (*it)->job == key.first && (*it)->line == key.second)
      (*marks)[it - rs.begin()] = 1;
  }
}

}  // namespace

store_internal::ResultSteps PgStore::ResultStepsFor() {
  store_internal::ResultSteps steps;
  steps.write_transaction = [this](const std::function<Status()>& body) {
    return Transaction(body);
  };
  steps.leased_transaction = [this](const std::function<Status()>& body) {
    return RowTransaction(body);
  };
  // One statement for the whole group, whatever its size; a second to name a missing request.
  steps.finish_insert_bump = [this](const std::vector<const Result*>& rs, const std::string* worker,
                                    const std::vector<int64_t>& generations, double now,
                                    std::vector<char>* finished, int64_t* inserted) -> Status {
    Array cols[14];  // kCommitGroupPg's arrays, $1..$14
    for (size_t k = 0; k < rs.size(); ++k) {
      const Result* x = rs[k];
      const ResultMetrics& m = x->metrics;
      cols[0].Add(x->job);
      cols[1].Add(x->line);
      cols[2].Add(int64_t{x->is_error});
      cols[3].Add(std::string_view(x->output));
      cols[4].Add(m.prompt_tokens);
      cols[5].Add(m.cached_tokens);
      cols[6].Add(m.computed_tokens);
      cols[7].Add(m.completion_tokens);
      cols[8].Add(m.queue_seconds);
      cols[9].Add(m.ttft_seconds);
      cols[10].Add(m.itl_seconds);
      cols[11].Add(m.latency_seconds);
      cols[12].Add(m.finished_at > 0 ? m.finished_at : now);
      cols[13].Add(generations[k]);
    }
    Params p;
    for (const Array& a : cols) p.Add(a);
    if (worker != nullptr)
      p.Add(*worker);
    else
      p.AddNull();
    p.Add(now);
    Rows r;
    LLMQ_RETURN_IF_ERROR(Run(kCommitGroupPg, p, "cannot commit results", &r));
    MarkReturned(r, rs, finished);
    *inserted = r.size() == 0 ? 0 : r.Int(0, 2);
    return Status::Ok();
  };
  steps.missing = [this](const std::vector<const Result*>& rs, int64_t* first) -> Status {
    Array jobs, lines;
    for (const Result* x : rs) {
      jobs.Add(x->job);
      lines.Add(x->line);
    }
    Rows r;
    LLMQ_RETURN_IF_ERROR(Run(kFirstMissingPg, Params().Add(jobs).Add(lines),
                             "cannot look for the requests of results", &r));
    *first = r.size() == 0 ? -1 : r.Int(0, 0) - 1;
    return Status::Ok();
  };
  return steps;
}

// --- Workers and leases.

Status PgStore::WriteWorker(const char* sql, const WorkerInfo& w, int64_t* changed) {
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerInfo(location_, w));
  return RowTransaction([&]() -> Status {
    Params p;
    p.Add(w.id).Add(w.host).Add(w.device).Add(w.model).Add(store_internal::LeaseNow());
    p.Add(w.state).Add(w.current_job).Add(w.tokens_per_second);
    p.Add(store_internal::ServedModelsJson(w.served_models));
    Rows r;
    LLMQ_RETURN_IF_ERROR(Run(sql, p, "cannot record worker " + w.id, &r));
    *changed = r.Affected();
    return Status::Ok();
  });
}

Status PgStore::RegisterWorker(const WorkerInfo& w) {
  int64_t changed = 0;
  return WriteWorker(sql::kRegisterWorker, w, &changed);
}

Status PgStore::UpdateWorker(const WorkerInfo& w) {
  int64_t changed = 0;
  LLMQ_RETURN_IF_ERROR(WriteWorker(sql::kUpdateWorker, w, &changed));
  if (changed == 0)
    return Status::NotFound(location_ + ": no worker " + w.id + " (RegisterWorker first)");
  return Status::Ok();
}

Status PgStore::Heartbeat(const std::string& worker, double lease_seconds, int64_t* renewed) {
  return RowTransaction([&]() -> Status {
    const double now = store_internal::LeaseNow();
    Rows r;
    LLMQ_RETURN_IF_ERROR(Run(sql::kTouchWorker, Params().Add(worker).Add(now),
                             "cannot record the heartbeat of worker " + worker, &r));
    if (r.Affected() == 0)
      return Status::NotFound(location_ + ": no worker " + worker + " (RegisterWorker first)");
    // The leased rows locked in (job, line) order first (one UPDATE locks them in scan order).
    LLMQ_RETURN_IF_ERROR(Run(kLockLeasedRequests.c_str(), Params().Add(worker),
                             "cannot renew the leases of worker " + worker));
    LLMQ_RETURN_IF_ERROR(Run(sql::kRenewLeases, Params().Add(worker).Add(now + lease_seconds),
                             "cannot renew the leases of worker " + worker, &r));
    if (renewed != nullptr) *renewed = r.Affected();
    return Run(sql::kRenewFinalize, Params().Add(worker).Add(now + lease_seconds),
               "cannot renew the finalize leases of worker " + worker);
  });
}

Status PgStore::ReleaseLeases(const std::string& worker, int64_t* released,
                              const std::vector<std::pair<int64_t, int64_t>>& keep) {
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerId(location_, worker));
  const std::set<std::pair<int64_t, int64_t>> kept(keep.begin(), keep.end());
  return RowTransaction([&]() -> Status {
    const std::string what = "cannot release the leases of worker " + worker;
    Rows leased;
    LLMQ_RETURN_IF_ERROR(Run(kLockLeasedRequests.c_str(), Params().Add(worker), what, &leased));
    if (kept.empty()) {
      Rows r;
      LLMQ_RETURN_IF_ERROR(Run(sql::kReleaseLeases, Params().Add(worker), what, &r));
      if (released != nullptr) *released = r.Affected();
      return Status::Ok();
    }
    int64_t n = 0;
    for (int i = 0; i < leased.size(); ++i) {
      const int64_t job = leased.Int(i, 0), line = leased.Int(i, 1);
      if (kept.count({job, line})) continue;
      Rows r;
      LLMQ_RETURN_IF_ERROR(
          Run(sql::kReleaseLease, Params().Add(job).Add(line).Add(worker), what, &r));
      n += r.Affected();
    }
    if (released != nullptr) *released = n;
    return Status::Ok();
  });
}

Status PgStore::ClaimJobFinalize(const std::string& worker, int64_t job, double lease_seconds,
                                 bool* got) {
  *got = false;
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerId(location_, worker));
  return RowTransaction([&]() -> Status {
    const double now = store_internal::LeaseNow();
    Rows r;
    LLMQ_RETURN_IF_ERROR(Run(sql::kClaimFinalize,
                             Params().Add(job).Add(worker).Add(now).Add(now + lease_seconds),
                             "cannot claim the finalize lease of job " + std::to_string(job), &r));
    *got = r.Affected() == 1;
    if (*got) return Status::Ok();
    JobRecord unused;
    return GetJob(job, &unused);  // another's lease (OK), or no such job (NotFound)
  });
}

Status PgStore::ReleaseJobFinalize(const std::string& worker, int64_t job) {
  return RowTransaction([&]() -> Status {
    return Run(sql::kReleaseFinalize, Params().Add(job).Add(worker),
               "cannot release the finalize lease of job " + std::to_string(job));
  });
}

Status PgStore::ListWorkers(std::vector<WorkerInfo>* out) {
  out->clear();
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(sql::kListWorkers, Params(), "cannot read workers", &r));
  for (int i = 0; i < r.size(); ++i) out->push_back(store_rows::WorkerFromRow(PgRow(r, i)));
  return Status::Ok();
}

Status PgStore::ClaimNextGroup(const std::string& worker, double lease_seconds, int max_requests,
                               const std::vector<std::string>& models, Claim* out) {
  LLMQ_CHECK(!InTransaction());
  *out = Claim();
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerId(location_, worker));
  if (++claims_since_floor_raise_ >= kClaimsPerFloorRaise) {
    claims_since_floor_raise_ = 0;
    LLMQ_RETURN_IF_ERROR(RaiseClaimFloor());
  }
  // One statement, its own transaction, without the write lock: claims by other workers run at
  // the same time, each skipping the rows another holds.
  const double now = store_internal::LeaseNow();
  out->expires_at = now + lease_seconds;
  Params p;
  p.Add(worker).Add(now).Add(out->expires_at).Add(int64_t{max_requests});
  if (!models.empty()) {
    Array served;
    for (const std::string& m : models) served.Add(std::string_view(m));
    p.Add(served);
  }
  Rows r;
  LLMQ_RETURN_IF_ERROR(Run(models.empty() ? kClaimGroupPg : kClaimGroupOfModelsPg, p,
                           "cannot claim a plan group", &r));
  for (int i = 0; i < r.size(); ++i)
    out->requests.push_back(store_rows::ClaimedFromRow(PgRow(r, i)));
  store_internal::SortClaimed(&out->requests);
  if (!out->requests.empty()) out->plan_group = out->requests.front().plan_group;
  return Status::Ok();
}

// --- Finalizing.

Status PgStore::ForEachResult(int64_t job, const ResultVisitor& fn) {
  LLMQ_CHECK(!in_for_each_);  // the cursor is in use by the outer walk
  const bool own = !InTransaction();
  if (own) LLMQ_RETURN_IF_ERROR(BeginRead());
  in_for_each_ = true;
  const std::string what = "cannot read the results of job " + std::to_string(job);
  Status s = Exec(kDeclareResults + std::to_string(job) + kDeclareResultsEnd, what);
  while (s.ok()) {
    Rows r;
    s = Exec("FETCH FORWARD " + std::to_string(kFetchRows) + " FROM llmq_results", what, &r);
    if (!s.ok() || r.size() == 0) break;
    for (int i = 0; s.ok() && i < r.size(); ++i) s = store_rows::VisitResultRow(PgRow(r, i), fn);
  }
  in_for_each_ = false;
  // Best effort: a failed transaction has no cursor left, and COMMIT closes it anyway.
  if (PQtransactionStatus(conn_) == PQTRANS_INTRANS)
    Exec("CLOSE llmq_results", "closing the results cursor").IgnoreError();
  if (own) {
    if (s.ok()) return Commit();
    Rollback();
  }
  return s;
}

}  // namespace llmq::jobs
