#include "jobs/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "jobs/store_rows.h"
#include "jobs/store_schema.h"
#include "jobs/store_sql.h"

namespace llmq::jobs {
namespace {

constexpr const char* kEngine = "an SQLite database";  // in messages

using namespace sql;  // the statements both engines run (jobs/store_sql.h)

constexpr const char* kInsertJob =
    "INSERT INTO jobs (public_id, name, sha256, status, total, completed, failed, created_at, "
    "started_at, finished_at, cancel_requested, error, options, model) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
constexpr const char* kFinishIngest =
    "UPDATE jobs SET total = (SELECT count(*) FROM requests WHERE job = ?1), "
    "completed = (SELECT count(*) FROM requests WHERE job = ?1 AND status = 'done'), "
    "failed = (SELECT count(*) FROM requests WHERE job = ?1 AND status = 'failed'), "
    "refused = (SELECT count(*) FROM requests WHERE job = ?1 AND status = 'failed') "
    "WHERE id = ?1";
constexpr const char* kRaiseMaxRankTo =
    "INSERT INTO meta (key, value) VALUES ('max_plan_rank', ?1) "
    "ON CONFLICT (key) DO UPDATE SET "
    "value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))";  // TEXT > any INTEGER
// The rank high-water mark of finished ingests (meta), so MaxPlanRank needs no full scan.
constexpr const char* kRaiseMaxRank =
    "INSERT INTO meta (key, value) VALUES ('max_plan_rank', "
    "  (SELECT max(coalesce(max(plan_rank), 0), "
    "     coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'max_plan_rank'), 0)) "
    "   FROM requests WHERE job = ?1)) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";
constexpr const char* kMaxPlanRank =
    "SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'max_plan_rank'), 0),"
    " coalesce((SELECT max(plan_rank) FROM requests WHERE status = 'pending'), 0))";
constexpr const char* kSetStatus =
    "UPDATE jobs SET status = ?2, error = CASE WHEN ?3 <> '' THEN ?3 ELSE error END, "
    "finished_at = CASE WHEN ?4 AND finished_at = 0 THEN ?5 ELSE finished_at END "
    "WHERE id = ?1 AND (status = ?2 OR status NOT IN "
    "('completed', 'failed', 'cancelled', 'expired'))";
constexpr const char* kDataVersion = "PRAGMA data_version";
// CROSS JOIN keeps `requests` the outer loop and INDEXED BY pins the partial index, so the walk
// is in rank order and stops after `limit` rows, whatever the planner's statistics say.
constexpr const char* kNextPending =
    "SELECT r.job, r.line, r.plan_rank, r.attempts, r.custom_id, r.body "
    "FROM requests AS r INDEXED BY requests_pending_by_rank CROSS JOIN jobs AS j "
    "WHERE r.status = 'pending' AND r.plan_rank > ?1 AND j.id = r.job "
    "AND j.status = 'in_progress' AND j.cancel_requested = 0 "
    "ORDER BY r.plan_rank, r.job, r.line LIMIT ?2";
// The plan group of the claimable request with the lowest rank (ClaimNextGroup; ?1: now).
constexpr const char* kNextClaimableGroup =
    "SELECT r.plan_group FROM requests AS r INDEXED BY requests_pending_by_rank "
    "CROSS JOIN jobs AS j WHERE r.status = 'pending' "
    "AND (r.lease_worker IS NULL OR r.lease_expires_at <= ?1) AND j.id = r.job "
    "AND j.status = 'in_progress' AND j.cancel_requested = 0 "
    "ORDER BY r.plan_rank, r.job, r.line LIMIT 1";
// The same among the jobs of the models in ?2 (a JSON array) or of none: each such in_progress
// job's first claimable request by rank (requests_pending_by_job), the lowest of those. A job of
// a model not served is never walked.
constexpr const char* kNextClaimableGroupOfModels =
    "SELECT r.plan_group FROM (SELECT j.id AS job, (SELECT p.plan_rank FROM requests AS p "
    "INDEXED BY requests_pending_by_job WHERE p.job = j.id AND p.status = 'pending' "
    "AND p.lease_generation >= 0 "
    "AND (p.lease_worker IS NULL OR p.lease_expires_at <= ?1) ORDER BY p.plan_rank LIMIT 1) "
    "AS rank FROM jobs AS j INDEXED BY jobs_in_progress WHERE j.status = 'in_progress' "
    "AND j.cancel_requested = 0 AND (j.model = '' OR j.model IN (SELECT value FROM "
    "json_each(?2)))) AS f CROSS JOIN requests AS r INDEXED BY requests_pending_by_job "
    "WHERE f.rank IS NOT NULL AND r.job = f.job AND r.plan_rank = f.rank "
    "AND r.status = 'pending' AND r.lease_generation >= 0 ORDER BY f.rank LIMIT 1";
// kLeaseGroup of the rows of jobs of the models in $6 (a JSON array) or of none: a group planned
// over several files at once may hold jobs of other models too.
constexpr const char* kLeaseGroupOfModels = LLMQ_LEASE_GROUP_HEAD
    "AND (SELECT j.model = '' OR j.model IN (SELECT value FROM "
    "json_each($6)) FROM jobs AS j WHERE j.id = requests.job) " LLMQ_LEASE_GROUP_TAIL;
constexpr const char* kForEachResult =
    "SELECT " LLMQ_RESULT_COLUMNS " FROM results WHERE job = ?1 ORDER BY line";
constexpr const char* kHasMeta =
    "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'), "
    "(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%')";

// A cached statement in use: binds, steps, and resets on scope exit so that the statement never
// holds a read snapshot (or the write lock) open past the call that used it.
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  ~Stmt() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& Bind(int i, int64_t v) { return Check(sqlite3_bind_int64(s_, i, v)); }
  Stmt& Bind(int i, double v) { return Check(sqlite3_bind_double(s_, i, v)); }
  Stmt& Bind(int i, std::string_view v) {
    // SQLITE_TRANSIENT is not needed: every bound string outlives the step that reads it.
    return Check(sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8));
  }
  // SQLITE_ROW, SQLITE_DONE, or the error (a failed bind, e.g. a string over SQLite's limit).
  int Step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(s_); }

  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  std::string_view Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p ? std::string_view(p, static_cast<size_t>(sqlite3_column_bytes(s_, col)))
             : std::string_view();
  }
  sqlite3_stmt* raw() const { return s_; }

 private:
  Stmt& Check(int rc) {
    LLMQ_CHECK(rc != SQLITE_RANGE);  // a placeholder number that the SQL does not have
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }
  sqlite3_stmt* s_;
  int bind_rc_ = SQLITE_OK;
};

// Steps a statement selecting (job, line, plan_rank, attempts, custom_id, body) through every
// row into *out; returns the last step's result code (SQLITE_DONE when all went well).
int ReadPendingRows(Stmt& st, std::vector<PendingRequest>* out) {
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out->push_back(store_rows::PendingFromRow(st));
  return rc;
}

}  // namespace

Status SqliteStore::Error(const std::string& what, int rc) const {
  std::string m = path_ + ": " + what + ": ";
  m += db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  const int primary = rc & 0xff;
  const int sys = db_ != nullptr ? sqlite3_system_errno(db_) : 0;
  if (sys != 0 && (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_FULL))
    m += std::string(" (") + std::strerror(sys) + ")";
  switch (primary) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status::Corruption(m +
                                ": the file is not an llmq database or is damaged; refusing "
                                "to use it (restore it from a backup or move it away)");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::IoError(m + " (another connection held it for longer than the " +
                             std::to_string(busy_timeout_ms_) + " ms busy timeout)");
    case SQLITE_CONSTRAINT:
      return Status::InvalidArgument(m);
    default:
      return Status::IoError(m);
  }
}

Status SqliteStore::Prepare(const char* sql, sqlite3_stmt** out) {
  for (const auto& [key, stmt] : stmts_) {
    if (key == sql) {
      *out = stmt;
      return Status::Ok();
    }
  }
  // jobs/store_sql.h numbers parameters as PostgreSQL does ($1); SQLite's own spelling is ?1.
  std::string text(sql);
  for (size_t i = 0; i + 1 < text.size(); ++i)
    if (text[i] == '$' && text[i + 1] >= '0' && text[i + 1] <= '9') text[i] = '?';
  const int rc = sqlite3_prepare_v3(db_, text.c_str(), -1, SQLITE_PREPARE_PERSISTENT, out, nullptr);
  // Preparing reads the schema: a file that is not a database (or is damaged) fails here first.
  if (rc != SQLITE_OK) return Error("cannot read the database schema", rc);
  stmts_.emplace_back(sql, *out);
  return Status::Ok();
}

Status SqliteStore::Exec(const char* sql, const char* what) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::Ok() : Error(what, rc);
}

bool SqliteStore::InTransaction() const {
  return sqlite3_get_autocommit(db_) == 0;
}

Status SqliteStore::Begin() {
  LLMQ_CHECK(!InTransaction());
  return Exec("BEGIN IMMEDIATE", "cannot begin a write transaction");
}

Status SqliteStore::BeginRead() {
  LLMQ_CHECK(!InTransaction());
  return Exec("BEGIN", "cannot begin a read transaction");
}

Status SqliteStore::Commit() {
  if (!InTransaction())
    return Status::IoError(path_ +
                           ": commit: no transaction is open (SQLite rolled it back after an "
                           "earlier error)");
  return Exec("COMMIT", "commit failed");
}

void SqliteStore::Rollback() {
  // After some errors (disk full, I/O) SQLite has rolled back already: nothing to do then.
  if (InTransaction()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

Status SqliteStore::Transaction(const std::function<Status()>& body) {
  if (InTransaction()) return body();  // the caller's transaction: the caller commits
  LLMQ_RETURN_IF_ERROR(Begin());
  Status s = body();
  if (s.ok()) s = Commit();
  if (!s.ok()) Rollback();
  return s;
}

Status SqliteStore::SetCacheBytes(int64_t bytes) {
  const std::string sql =
      "PRAGMA cache_size = -" + std::to_string(std::max<int64_t>(bytes, 1024) / 1024);
  LLMQ_RETURN_IF_ERROR(Exec(sql.c_str(), "setting the page cache size"));
  sqlite3_db_release_memory(db_);  // pages over the new size go back now, not when reused
  return Status::Ok();
}

void SqliteStore::SetBusyTimeout(int milliseconds) {
  busy_timeout_ms_ = milliseconds;
  sqlite3_busy_timeout(db_, milliseconds);
}

SqliteStore::~SqliteStore() {
  for (const auto& entry : stmts_) sqlite3_finalize(entry.second);
  // Closing rolls back an open transaction; the last connection checkpoints the WAL.
  if (db_ != nullptr) sqlite3_close(db_);
}

Status SqliteStore::Open(const std::string& path, std::unique_ptr<Store>* out,
                         const OpenOptions& options) {
  // SQLite would take "" as a private temporary database: nothing would be durable.
  if (path.empty()) return Status::InvalidArgument("empty database path");
  if (std::error_code ec; !options.create && !std::filesystem::exists(path, ec))
    return Status::NotFound(path +
                            ": no llmq queue here (no such file; `llmq queue init` makes one)");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec)
      return Status::IoError(path + ": cannot create folder " + parent.string() + ": " +
                             ec.message());
  }
  // A new queue is created here, 0600 whatever the umask (SQLite would create it 0644 less the
  // umask); SQLite takes an empty file as an empty database.
  if (const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600); fd >= 0) {
    const bool chmodded = ::fchmod(fd, 0600) == 0;
    const int err = errno;
    ::close(fd);
    if (!chmodded)
      return Status::IoError(path + ": cannot set its mode to 0600: " + std::strerror(err));
  } else if (errno != EEXIST) {
    return Status::IoError(path + ": cannot create: " + std::strerror(errno));
  }
  std::unique_ptr<SqliteStore> s(new SqliteStore());
  s->path_ = path;
  int rc =
      sqlite3_open_v2(path.c_str(), &s->db_,
                      // NOMUTEX: one thread at a time uses a Store (see the header), so SQLite's
                      // own per-call locking would be pure cost.
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) return s->Error("cannot open the database", rc);
  sqlite3_busy_timeout(s->db_, s->busy_timeout_ms_);
  // 16 KiB pages for a new database (an existing one keeps its own; a WAL database cannot change
  // it, so this comes first): request rows are whole input lines (~1 KB), and an ingest commit
  // writes every page through the WAL, so 4x fewer, larger frames cut a 100,000-line commit by
  // about a third. Only a hint: a failure here shows up, named, in the next statement.
  sqlite3_exec(s->db_, "PRAGMA page_size = 16384", nullptr, nullptr, nullptr);
  // The first statement reads the header: a file that is not a database fails here (NOTADB).
  // Switching a new database to WAL takes its exclusive lock, and SQLite answers BUSY at once,
  // without its busy handler, when another connection opening it holds a shared lock (workers
  // starting together on one empty queue): the switch is tried again, within the busy timeout.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(s->busy_timeout_ms_);
  for (int wait_ms = 1;; wait_ms = std::min(2 * wait_ms, 50)) {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(s->Prepare("PRAGMA journal_mode = WAL", &raw));
    Stmt st(raw);
    rc = st.Step();
    if (rc == SQLITE_BUSY && std::chrono::steady_clock::now() < deadline) {
      sqlite3_sleep(wait_ms);
      continue;
    }
    if (rc != SQLITE_ROW) return s->Error("cannot switch to WAL mode", rc);
    if (st.Text(0) != "wal")
      return Status::IoError(path + ": cannot switch to WAL mode (journal mode stays \"" +
                             std::string(st.Text(0)) + "\"; is the file system local?)");
    break;
  }
  // A 64 MiB page cache (the default is 2 MiB) keeps a 100,000-request ingest from spilling
  // half-built index pages into the WAL before its commit.
  LLMQ_RETURN_IF_ERROR(
      s->Exec("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA cache_size = -65536",
              "cannot set pragmas"));
  // The file SQLite opened, for StillAtLocation.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status::IoError(path + ": gone just after it was opened: " + std::strerror(errno));
  s->dev_ = st.st_dev;
  s->ino_ = st.st_ino;
  if (options.check == Check::kIntegrity) LLMQ_RETURN_IF_ERROR(s->CheckIntegrity());
  LLMQ_RETURN_IF_ERROR(s->Migrate(options));
  *out = std::move(s);
  return Status::Ok();
}

Status SqliteStore::StillAtLocation() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return Status::IoError(path_ + ": cannot check it: " + std::strerror(errno));
    return Status::IoError(path_ +
                           ": removed while it was open (what is written now goes to the deleted "
                           "file, which no later start reads)");
  }
  if (st.st_dev != dev_ || st.st_ino != ino_)
    return Status::IoError(path_ +
                           ": replaced by another file while it was open (what is written now goes "
                           "to the old file, which no later start reads)");
  return Status::Ok();
}

Status SqliteStore::CheckIntegrity() {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare("PRAGMA quick_check(20)", &raw));
  Stmt st(raw);
  std::string problems;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    if (st.Text(0) == "ok") continue;
    problems += problems.empty() ? "" : "; ";
    problems += st.Text(0);
  }
  if (rc != SQLITE_DONE) return Error("integrity check (PRAGMA quick_check) failed", rc);
  if (!problems.empty())
    return Status::Corruption(path_ + ": the database is damaged (PRAGMA quick_check: " + problems +
                              "); refusing to use it (restore it from a backup or move it away)");
  return Status::Ok();
}

Status SqliteStore::ReadSchemaVersion(int* version, bool* foreign_tables) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kHasMeta, &raw));
  bool has_meta;
  {
    Stmt st(raw);
    const int rc = st.Step();
    if (rc != SQLITE_ROW) return Error("cannot read the schema", rc);
    has_meta = st.Int(0) != 0;
    *foreign_tables = !has_meta && st.Int(1) != 0;
  }
  *version = 0;
  if (!has_meta) return Status::Ok();
  LLMQ_RETURN_IF_ERROR(Prepare(kReadVersion, &raw));
  Stmt st(raw);
  const int rc = st.Step();
  if (rc == SQLITE_DONE) return Status::Ok();  // meta created, first migration not committed
  if (rc != SQLITE_ROW) return Error("cannot read schema_version", rc);
  return store_internal::ParseSchemaVersion(path_, std::string(st.Text(0)), version);
}

Status SqliteStore::Migrate(const OpenOptions& options) {
  store_internal::MigrationSteps steps;
  steps.engine = kEngine;
  steps.dialect = &schema::Migration::sqlite;
  steps.read_version = [this](int* v, bool* foreign) { return ReadSchemaVersion(v, foreign); };
  steps.write_transaction = [this](const std::function<Status()>& body) {
    return Transaction(body);
  };
  steps.exec = [this](const char* sql, const std::string& what) { return Exec(sql, what.c_str()); };
  steps.write_version = [this](int version) -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kWriteVersion, &raw));
    Stmt st(raw);
    const int rc = st.Bind(1, std::to_string(version)).Step();
    return rc == SQLITE_DONE ? Status::Ok() : Error("cannot record schema_version", rc);
  };
  return store_internal::RunMigrations(path_, options, steps);
}

// --- Ingest.

Status SqliteStore::InsertJob(JobRecord* job) {
  if (job->public_id.empty()) LLMQ_RETURN_IF_ERROR(store_internal::RandomPublicId(&job->public_id));
  if (job->created_at == 0) job->created_at = store_internal::Now();
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kInsertJob, &raw));
  Stmt st(raw);
  st.Bind(1, job->public_id).Bind(2, job->name);
  if (!job->sha256.empty()) st.Bind(3, job->sha256);  // else NULL until FinishIngest sets it
  st.Bind(4, std::string_view(JobStatusName(job->status)));
  st.Bind(5, job->total).Bind(6, job->completed).Bind(7, job->failed);
  st.Bind(8, job->created_at).Bind(9, job->started_at).Bind(10, job->finished_at);
  st.Bind(11, int64_t{job->cancel_requested}).Bind(12, job->error).Bind(13, job->options);
  st.Bind(14, job->model);
  const int rc = st.Step();
  if (rc != SQLITE_DONE) {
    if ((rc & 0xff) == SQLITE_CONSTRAINT && std::strstr(sqlite3_errmsg(db_), "jobs.name"))
      return Status::InvalidArgument(path_ + ": job \"" + job->name + "\" with sha256 " +
                                     job->sha256 + " is already recorded");
    return Error("cannot insert job \"" + job->name + "\"", rc);
  }
  job->id = sqlite3_last_insert_rowid(db_);
  return Status::Ok();
}

Status SqliteStore::InsertRequest(int64_t job, const NewRequest& r) {
  return Transaction([&]() -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kInsertRequest, &raw));
    {
      Stmt st(raw);
      st.Bind(1, job).Bind(2, r.line).Bind(3, r.custom_id).Bind(4, r.body).Bind(5, r.plan_rank);
      st.Bind(6, std::string_view(r.error_output ? "failed" : "pending"));
      st.Bind(7, r.plan_group != 0 ? r.plan_group : r.plan_rank);
      const int rc = st.Step();
      if (rc != SQLITE_DONE)
        return Error("cannot insert request (job " + std::to_string(job) + ", line " +
                         std::to_string(r.line) + ")",
                     rc);
    }
    if (!r.error_output) return Status::Ok();
    // Refused at validation: finished already, its error line is its result.
    LLMQ_RETURN_IF_ERROR(Prepare(kInsertResult, &raw));
    Stmt st(raw);
    st.Bind(1, job).Bind(2, r.line).Bind(3, int64_t{1}).Bind(4, *r.error_output);
    for (int i = 5; i <= 8; ++i) st.Bind(i, int64_t{0});
    for (int i = 9; i <= 12; ++i) st.Bind(i, 0.0);
    const double now = store_internal::Now();
    const int rc = st.Bind(13, now).Bind(14, now).Step();
    if (rc != SQLITE_DONE)
      return Error("cannot insert the error result of line " + std::to_string(r.line), rc);
    return Status::Ok();
  });
}

Status SqliteStore::FinishIngest(int64_t job, JobStatus status, const IngestTotals* totals) {
  return Transaction([&]() -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(totals ? kFinishIngestCounted : kFinishIngest, &raw));
    {
      Stmt st(raw);
      st.Bind(1, job);
      if (totals) {
        st.Bind(2, totals->total).Bind(3, totals->failed);
        if (!totals->sha256.empty()) st.Bind(4, totals->sha256);
        st.Bind(5, totals->model);
      }
      const int rc = st.Step();
      if (rc != SQLITE_DONE) {
        if (totals && (rc & 0xff) == SQLITE_CONSTRAINT)
          return Status::InvalidArgument(path_ + ": a job with the same name and sha256 " +
                                         totals->sha256 + " is already recorded");
        return Error("cannot count the requests of job " + std::to_string(job), rc);
      }
      if (sqlite3_changes(db_) == 0)
        return Status::NotFound(path_ + ": no job " + std::to_string(job));
    }
    LLMQ_RETURN_IF_ERROR(Prepare(totals ? kRaiseMaxRankTo : kRaiseMaxRank, &raw));
    {
      Stmt st(raw);
      const int rc = st.Bind(1, totals ? totals->max_rank : job).Step();
      if (rc != SQLITE_DONE) return Error("cannot record the highest plan rank", rc);
    }
    return SetJobStatus(job, status);
  });
}

Status SqliteStore::MaxPlanRank(int64_t* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kMaxPlanRank, &raw));
  Stmt st(raw);
  const int rc = st.Step();
  if (rc != SQLITE_ROW) return Error("cannot read the highest plan rank", rc);
  *out = st.Int(0);
  return Status::Ok();
}

// --- Jobs.

Status SqliteStore::StepJobs(sqlite3_stmt* bound, std::vector<JobRecord>* out) {
  Stmt st(bound);  // already bound by the caller; reset here
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    out->emplace_back();
    LLMQ_RETURN_IF_ERROR(store_rows::JobFromRow(st, path_, &out->back()));
  }
  return rc == SQLITE_DONE ? Status::Ok() : Error("cannot read jobs", rc);
}

Status SqliteStore::FindJob(const std::string& name, const std::string& sha256,
                            std::optional<JobRecord>* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kFindJob, &raw));
  sqlite3_bind_text64(raw, 1, name.data(), name.size(), SQLITE_STATIC, SQLITE_UTF8);
  sqlite3_bind_text64(raw, 2, sha256.data(), sha256.size(), SQLITE_STATIC, SQLITE_UTF8);
  std::vector<JobRecord> jobs;
  LLMQ_RETURN_IF_ERROR(StepJobs(raw, &jobs));
  out->reset();
  if (!jobs.empty()) *out = std::move(jobs.front());
  return Status::Ok();
}

Status SqliteStore::GetJob(int64_t id, JobRecord* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kGetJob, &raw));
  sqlite3_bind_int64(raw, 1, id);
  std::vector<JobRecord> jobs;
  LLMQ_RETURN_IF_ERROR(StepJobs(raw, &jobs));
  if (jobs.empty()) return Status::NotFound(path_ + ": no job " + std::to_string(id));
  *out = std::move(jobs.front());
  return Status::Ok();
}

Status SqliteStore::GetJobByPublicId(const std::string& id, JobRecord* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kGetJobByPublicId, &raw));
  sqlite3_bind_text64(raw, 1, id.data(), id.size(), SQLITE_STATIC, SQLITE_UTF8);
  std::vector<JobRecord> jobs;
  LLMQ_RETURN_IF_ERROR(StepJobs(raw, &jobs));
  if (jobs.empty()) return Status::NotFound(path_ + ": no job " + id);
  *out = std::move(jobs.front());
  return Status::Ok();
}

Status SqliteStore::ListJobs(std::vector<JobRecord>* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kListJobs, &raw));
  out->clear();
  return StepJobs(raw, out);
}

Status SqliteStore::SetJobStatus(int64_t id, JobStatus s, const std::string& error) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kSetStatus, &raw));
  {
    Stmt st(raw);
    st.Bind(1, id).Bind(2, std::string_view(JobStatusName(s))).Bind(3, error);
    const int rc = st.Bind(4, int64_t{IsTerminal(s)}).Bind(5, store_internal::Now()).Step();
    if (rc != SQLITE_DONE) return Error("cannot set the status of job " + std::to_string(id), rc);
    if (sqlite3_changes(db_) == 1) return Status::Ok();
  }
  // Nothing changed: the job is absent, or already in another terminal status.
  JobRecord job;
  LLMQ_RETURN_IF_ERROR(GetJob(id, &job));
  return Status::InvalidArgument(path_ + ": job " + job.public_id + " is already " +
                                 JobStatusName(job.status) + ": it cannot become " +
                                 JobStatusName(s));
}

Status SqliteStore::MarkJobStarted(int64_t id, double unix_seconds) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kMarkStarted, &raw));
  {
    Stmt st(raw);
    const int rc = st.Bind(1, id).Bind(2, unix_seconds).Step();
    if (rc != SQLITE_DONE) return Error("cannot mark job " + std::to_string(id) + " started", rc);
    if (sqlite3_changes(db_) == 1) return Status::Ok();
  }
  JobRecord job;
  return GetJob(id, &job);  // started before (OK), or absent (NotFound)
}

Status SqliteStore::RequestCancel(int64_t id) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kRequestCancel, &raw));
  Stmt st(raw);
  const int rc = st.Bind(1, id).Step();
  if (rc != SQLITE_DONE) return Error("cannot request cancelling job " + std::to_string(id), rc);
  if (sqlite3_changes(db_) == 0) return Status::NotFound(path_ + ": no job " + std::to_string(id));
  return Status::Ok();
}

Status SqliteStore::SetJobOptions(int64_t id, const std::string& options) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kSetJobOptions, &raw));
  Stmt st(raw);
  const int rc = st.Bind(1, id).Bind(2, options).Step();
  if (rc != SQLITE_DONE) return Error("cannot set the options of job " + std::to_string(id), rc);
  if (sqlite3_changes(db_) == 0) return Status::NotFound(path_ + ": no job " + std::to_string(id));
  return Status::Ok();
}

Status SqliteStore::GetCustomId(int64_t job, int64_t line, std::string* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kGetCustomId, &raw));
  Stmt st(raw);
  const int rc = st.Bind(1, job).Bind(2, line).Step();
  if (rc == SQLITE_DONE)
    return Status::NotFound(path_ + ": no request at line " + std::to_string(line) + " of job " +
                            std::to_string(job));
  if (rc != SQLITE_ROW) return Error("cannot read a request's custom_id", rc);
  *out = std::string(st.Text(0));
  return Status::Ok();
}

Status SqliteStore::DataVersion(int64_t* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kDataVersion, &raw));
  Stmt st(raw);
  const int rc = st.Step();
  if (rc != SQLITE_ROW) return Error("cannot read data_version", rc);
  *out = st.Int(0);
  return Status::Ok();
}

// --- Feeding.

Status SqliteStore::NextPending(int64_t after_rank, int limit, std::vector<PendingRequest>* out) {
  out->clear();
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kNextPending, &raw));
  Stmt st(raw);
  st.Bind(1, after_rank).Bind(2, int64_t{limit});
  const int rc = ReadPendingRows(st, out);
  return rc == SQLITE_DONE ? Status::Ok() : Error("cannot read pending requests", rc);
}

Status SqliteStore::MarkAttempted(const std::vector<std::pair<int64_t, int64_t>>& job_lines) {
  return Transaction([&]() -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kMarkAttempted, &raw));
    for (const auto& [job, line] : job_lines) {
      Stmt st(raw);
      const int rc = st.Bind(1, job).Bind(2, line).Step();
      if (rc != SQLITE_DONE) return Error("cannot count an attempt", rc);
    }
    return Status::Ok();
  });
}

Status SqliteStore::CountPending(int64_t job, int64_t* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kCountPending, &raw));
  Stmt st(raw);
  const int rc = st.Bind(1, job).Step();
  if (rc != SQLITE_ROW) return Error("cannot count pending requests", rc);
  *out = st.Int(0);
  return Status::Ok();
}

Status SqliteStore::PendingOfJob(int64_t job, int64_t after_line, int limit,
                                 std::vector<PendingRequest>* out) {
  out->clear();
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kPendingOfJob, &raw));
  Stmt st(raw);
  st.Bind(1, job).Bind(2, after_line).Bind(3, int64_t{limit});
  const int rc = ReadPendingRows(st, out);
  return rc == SQLITE_DONE ? Status::Ok() : Error("cannot read a job's pending requests", rc);
}

Status SqliteStore::GetJobTotals(int64_t job, JobTotals* out) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kJobTotals, &raw));
  Stmt st(raw);
  const int rc = st.Bind(1, job).Step();
  if (rc == SQLITE_DONE) return Status::NotFound(path_ + ": no job " + std::to_string(job));
  if (rc != SQLITE_ROW) return Error("cannot read a job's token totals", rc);
  *out = store_rows::TotalsFromRow(st);
  return Status::Ok();
}

// --- Results.

store_internal::ResultSteps SqliteStore::ResultStepsFor() {
  store_internal::ResultSteps steps;
  steps.write_transaction = [this](const std::function<Status()>& body) {
    return Transaction(body);
  };
  steps.leased_transaction = steps.write_transaction;  // one writer at a time, whatever it writes
  // A statement a row: in process, each costs little.
  steps.finish = [this](const std::vector<const Result*>& rs, const std::string* worker,
                        const std::vector<int64_t>& generations,
                        std::vector<char>* finished) -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(worker != nullptr ? kFencedFinish : kFinishRequest, &raw));
    finished->assign(rs.size(), 0);
    for (size_t i = 0; i < rs.size(); ++i) {
      Stmt st(raw);
      st.Bind(1, rs[i]->job).Bind(2, rs[i]->line);
      st.Bind(3, std::string_view(rs[i]->is_error ? "failed" : "done"));
      if (worker != nullptr) st.Bind(4, *worker).Bind(5, generations[i]);
      const int rc = st.Step();
      if (rc != SQLITE_DONE) return Error("cannot finish a request", rc);
      (*finished)[i] = sqlite3_changes(db_) == 1;
    }
    return Status::Ok();
  };
  steps.missing = [this](const std::vector<const Result*>& rs, int64_t* first) -> Status {
    *first = -1;
    for (size_t i = 0; i < rs.size() && *first < 0; ++i) {
      std::string custom_id;
      if (const Status s = GetCustomId(rs[i]->job, rs[i]->line, &custom_id); !s.ok()) {
        if (s.code() != Status::Code::kNotFound) return s;
        *first = static_cast<int64_t>(i);
      }
    }
    return Status::Ok();
  };
  steps.insert = [this](const std::vector<const Result*>& rs, double now,
                        int64_t* inserted) -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kInsertResult, &raw));
    *inserted = 0;
    for (const Result* r : rs) {
      Stmt st(raw);
      const ResultMetrics& m = r->metrics;
      st.Bind(1, r->job).Bind(2, r->line).Bind(3, int64_t{r->is_error}).Bind(4, r->output);
      st.Bind(5, m.prompt_tokens).Bind(6, m.cached_tokens).Bind(7, m.computed_tokens);
      st.Bind(8, m.completion_tokens).Bind(9, m.queue_seconds).Bind(10, m.ttft_seconds);
      st.Bind(11, m.itl_seconds).Bind(12, m.latency_seconds).Bind(13, now);
      st.Bind(14, m.finished_at > 0 ? m.finished_at : now);
      const int rc = st.Step();
      if (rc != SQLITE_DONE)
        return Error("cannot insert the result for job " + std::to_string(r->job) + " line " +
                         std::to_string(r->line),
                     rc);
      *inserted += sqlite3_changes(db_);
    }
    return Status::Ok();
  };
  steps.bump = [this](int64_t job, const store_internal::AddedToJob& c) -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kBumpCounts, &raw));
    Stmt st(raw);
    st.Bind(1, job).Bind(2, c.completed).Bind(3, c.failed).Bind(4, c.prompt).Bind(5, c.cached);
    const int rc = st.Bind(6, c.computed).Bind(7, c.completion).Step();
    return rc == SQLITE_DONE ? Status::Ok()
                             : Error("cannot update the counts of job " + std::to_string(job), rc);
  };
  return steps;
}

// --- Workers and leases.

// kRegisterWorker or kUpdateWorker (the same parameters) in a write transaction.
Status SqliteStore::WriteWorker(const char* sql, const WorkerInfo& w, int64_t* changed) {
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerInfo(path_, w));
  return Transaction([&]() -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(sql, &raw));
    Stmt st(raw);
    st.Bind(1, w.id).Bind(2, w.host).Bind(3, w.device).Bind(4, w.model);
    st.Bind(5, store_internal::LeaseNow()).Bind(6, w.state).Bind(7, w.current_job);
    const std::string served = store_internal::ServedModelsJson(w.served_models);
    const int rc = st.Bind(8, w.tokens_per_second).Bind(9, served).Step();
    if (rc != SQLITE_DONE) return Error("cannot record worker " + w.id, rc);
    *changed = sqlite3_changes(db_);
    return Status::Ok();
  });
}

Status SqliteStore::RegisterWorker(const WorkerInfo& w) {
  int64_t changed = 0;
  return WriteWorker(kRegisterWorker, w, &changed);
}

Status SqliteStore::UpdateWorker(const WorkerInfo& w) {
  int64_t changed = 0;
  LLMQ_RETURN_IF_ERROR(WriteWorker(kUpdateWorker, w, &changed));
  if (changed == 0)
    return Status::NotFound(path_ + ": no worker " + w.id + " (RegisterWorker first)");
  return Status::Ok();
}

// Runs a statement of (worker $1, a time $2) and tells how many rows it changed.
Status SqliteStore::RunForWorker(const char* sql, const std::string& worker, double at,
                                 const std::string& what, int64_t* changed) {
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(sql, &raw));
  Stmt st(raw);
  const int rc = st.Bind(1, worker).Bind(2, at).Step();
  if (rc != SQLITE_DONE) return Error(what + " of worker " + worker, rc);
  if (changed != nullptr) *changed = sqlite3_changes(db_);
  return Status::Ok();
}

Status SqliteStore::Heartbeat(const std::string& worker, double lease_seconds, int64_t* renewed) {
  return Transaction([&]() -> Status {
    const double now = store_internal::LeaseNow();
    int64_t changed = 0;
    LLMQ_RETURN_IF_ERROR(
        RunForWorker(kTouchWorker, worker, now, "cannot record the heartbeat", &changed));
    if (changed == 0)
      return Status::NotFound(path_ + ": no worker " + worker + " (RegisterWorker first)");
    LLMQ_RETURN_IF_ERROR(RunForWorker(kRenewLeases, worker, now + lease_seconds,
                                      "cannot renew the leases", renewed));
    return RunForWorker(kRenewFinalize, worker, now + lease_seconds,
                        "cannot renew the finalize leases", nullptr);
  });
}

Status SqliteStore::ReleaseLeases(const std::string& worker, int64_t* released,
                                  const std::vector<std::pair<int64_t, int64_t>>& keep) {
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerId(path_, worker));
  const std::set<std::pair<int64_t, int64_t>> kept(keep.begin(), keep.end());
  return Transaction([&]() -> Status {
    const std::string what = "cannot release the leases of worker " + worker;
    sqlite3_stmt* raw = nullptr;
    if (kept.empty()) {
      LLMQ_RETURN_IF_ERROR(Prepare(kReleaseLeases, &raw));
      Stmt st(raw);
      const int rc = st.Bind(1, worker).Step();
      if (rc != SQLITE_DONE) return Error(what, rc);
      if (released != nullptr) *released = sqlite3_changes(db_);
      return Status::Ok();
    }
    std::vector<std::pair<int64_t, int64_t>> leased;
    LLMQ_RETURN_IF_ERROR(Prepare(kLeasedRequests, &raw));
    {
      Stmt st(raw);
      st.Bind(1, worker);
      int rc;
      while ((rc = st.Step()) == SQLITE_ROW) leased.emplace_back(st.Int(0), st.Int(1));
      if (rc != SQLITE_DONE) return Error(what, rc);
    }
    int64_t n = 0;
    LLMQ_RETURN_IF_ERROR(Prepare(kReleaseLease, &raw));
    for (const auto& [job, line] : leased) {
      if (kept.count({job, line})) continue;
      Stmt st(raw);
      const int rc = st.Bind(1, job).Bind(2, line).Bind(3, worker).Step();
      if (rc != SQLITE_DONE) return Error(what, rc);
      n += sqlite3_changes(db_);
    }
    if (released != nullptr) *released = n;
    return Status::Ok();
  });
}

Status SqliteStore::ClaimJobFinalize(const std::string& worker, int64_t job, double lease_seconds,
                                     bool* got) {
  *got = false;
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerId(path_, worker));
  return Transaction([&]() -> Status {
    const double now = store_internal::LeaseNow();
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kClaimFinalize, &raw));
    {
      Stmt st(raw);
      st.Bind(1, job).Bind(2, worker).Bind(3, now).Bind(4, now + lease_seconds);
      const int rc = st.Step();
      if (rc != SQLITE_DONE)
        return Error("cannot claim the finalize lease of job " + std::to_string(job), rc);
      *got = sqlite3_changes(db_) == 1;
    }
    if (*got) return Status::Ok();
    JobRecord unused;
    return GetJob(job, &unused);  // another's lease (OK), or no such job (NotFound)
  });
}

Status SqliteStore::ReleaseJobFinalize(const std::string& worker, int64_t job) {
  return Transaction([&]() -> Status {
    sqlite3_stmt* raw = nullptr;
    LLMQ_RETURN_IF_ERROR(Prepare(kReleaseFinalize, &raw));
    Stmt st(raw);
    const int rc = st.Bind(1, job).Bind(2, worker).Step();
    return rc == SQLITE_DONE
               ? Status::Ok()
               : Error("cannot release the finalize lease of job " + std::to_string(job), rc);
  });
}

Status SqliteStore::ListWorkers(std::vector<WorkerInfo>* out) {
  out->clear();
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kListWorkers, &raw));
  Stmt st(raw);
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out->push_back(store_rows::WorkerFromRow(st));
  return rc == SQLITE_DONE ? Status::Ok() : Error("cannot read workers", rc);
}

Status SqliteStore::NextClaimableGroup(double now, const std::string& models_json, bool* found,
                                       int64_t* group) {
  const bool filtered = !models_json.empty();
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(filtered ? kNextClaimableGroupOfModels : kNextClaimableGroup, &raw));
  Stmt st(raw);
  st.Bind(1, now);
  if (filtered) st.Bind(2, models_json);
  const int rc = st.Step();
  *found = rc == SQLITE_ROW;
  if (rc == SQLITE_DONE) return Status::Ok();  // nothing claimable
  if (rc != SQLITE_ROW) return Error("cannot find a group to claim", rc);
  *group = st.Int(0);
  return Status::Ok();
}

Status SqliteStore::ClaimNextGroup(const std::string& worker, double lease_seconds,
                                   int max_requests, const std::vector<std::string>& models,
                                   Claim* out) {
  LLMQ_CHECK(!InTransaction());
  *out = Claim();
  LLMQ_RETURN_IF_ERROR(store_internal::CheckWorkerId(path_, worker));
  const std::string models_json = models.empty() ? "" : store_internal::ServedModelsJson(models);
  // A look without the write lock first (a read in WAL mode waits for no writer): a worker woken
  // with nothing to claim (every commit of another connection wakes it) neither waits behind
  // another connection's fsync nor makes others wait behind its own.
  bool found = false;
  int64_t group = 0;
  LLMQ_RETURN_IF_ERROR(NextClaimableGroup(store_internal::LeaseNow(), models_json, &found, &group));
  if (!found) return Status::Ok();
  // A claim's commit does not wait for the disk (see ClaimNextGroup in store.h): synchronous is
  // NORMAL for its transaction only, FULL again after it, whatever happened.
  LLMQ_RETURN_IF_ERROR(Exec("PRAGMA synchronous = NORMAL", "cannot set synchronous for a claim"));
  const Status claimed = ClaimInTransaction(worker, lease_seconds, max_requests, models_json, out);
  const Status full = Exec("PRAGMA synchronous = FULL", "cannot set synchronous back to FULL");
  return claimed.ok() ? full : claimed;
}

Status SqliteStore::ClaimInTransaction(const std::string& worker, double lease_seconds,
                                       int max_requests, const std::string& models_json,
                                       Claim* out) {
  // BEGIN IMMEDIATE: one claim at a time, so the group chosen is still claimable when leased.
  return Transaction([&]() -> Status {
    const double now = store_internal::LeaseNow();
    bool found = false;
    LLMQ_RETURN_IF_ERROR(NextClaimableGroup(now, models_json, &found, &out->plan_group));
    if (!found) return Status::Ok();  // nothing claimable
    out->expires_at = now + lease_seconds;
    sqlite3_stmt* raw = nullptr;
    const bool filtered = !models_json.empty();
    LLMQ_RETURN_IF_ERROR(Prepare(filtered ? kLeaseGroupOfModels : kLeaseGroup, &raw));
    Stmt st(raw);
    st.Bind(1, worker).Bind(2, now).Bind(3, out->expires_at).Bind(4, out->plan_group);
    st.Bind(5, int64_t{max_requests});
    if (filtered) st.Bind(6, models_json);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) out->requests.push_back(store_rows::ClaimedFromRow(st));
    if (rc != SQLITE_DONE)
      return Error("cannot lease plan group " + std::to_string(out->plan_group), rc);
    store_internal::SortClaimed(&out->requests);
    return Status::Ok();
  });
}

// --- Finalizing.

Status SqliteStore::ForEachResult(int64_t job, const ResultVisitor& fn) {
  LLMQ_CHECK(!in_for_each_);  // the cached statement is in use by the outer walk
  sqlite3_stmt* raw = nullptr;
  LLMQ_RETURN_IF_ERROR(Prepare(kForEachResult, &raw));
  in_for_each_ = true;
  Stmt st(raw);
  st.Bind(1, job);
  int rc = SQLITE_DONE;
  Status s;
  while (s.ok() && (rc = st.Step()) == SQLITE_ROW) s = store_rows::VisitResultRow(st, fn);
  in_for_each_ = false;
  if (!s.ok()) return s;
  return rc == SQLITE_DONE ? Status::Ok()
                           : Error("cannot read the results of job " + std::to_string(job), rc);
}

}  // namespace llmq::jobs
