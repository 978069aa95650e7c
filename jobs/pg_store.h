// PgStore: the queue in a PostgreSQL database, reached through libpq (jobs/store.h states the
// contracts; jobs/store_schema.h holds the schema, the same as SQLite's). Many hosts may share
// one queue: every connection is a Store.
//
// How SQLite's guarantees are kept:
//   - One writer at a time per database, like BEGIN IMMEDIATE: every write transaction first
//     takes a transaction-scoped advisory lock (pg_advisory_xact_lock(kWriteLockKey)), waiting at
//     most the busy timeout (lock_timeout). Readers take no lock (MVCC: they never wait).
//     Except the writes of workers and leases in their own transactions (RowTransaction): they
//     lock only the rows they change (requests in (job, line) order, then jobs by id, then
//     meta's data_version), so many workers claim, commit and beat at once, and never wait for
//     an ingest. What they write, no ingest reads to decide (ranks, counts of its own job).
//   - "A second result is ignored": INSERT ... ON CONFLICT (job, line) DO NOTHING.
//   - Ingest: InsertRequest's rows are sent in batches (RequestBatch), before any other statement
//     of the connection, so the transaction's reads see them.
//   - DataVersion: every write transaction bumps meta.data_version before COMMIT; this
//     connection tells its own bumps from others' (see DataVersion in store.h).
//   - Claims start from a claim floor (meta 'claim_floor', below which no request is pending), so
//     that they do not step over the index entries of every request finished since the last
//     vacuum (pg_store.cpp: kLowerClaimFloorPg).
//   - ForEachResult streams through a cursor (FETCH in pages) inside a REPEATABLE READ
//     transaction: one snapshot, bounded memory.
//   - A transaction's BEGIN goes with its first statement (libpq's pipeline mode): a worker's
//     result commit is two round trips (BEGIN + the group's statement, then the data_version
//     bump + COMMIT), a write transaction's first is BEGIN + the write lock.
// Connection loss: the statement that meets it fails (IoError naming the URL, password masked);
// the next call outside a transaction reconnects (PQreset) and prepares its statements again.
// Invariants: conn_ is non-null from Open to the destructor; write_locked_ implies wrote_, and
// wrote_ implies InTransaction(); prepared_ names statements prepared on the current connection
// only; a connection lost inside a transaction is not replaced until the caller rolls back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobs/store.h"

struct pg_conn;
struct pg_result;

namespace llmq::jobs {

// `url` with its password masked ("postgresql://u:***@h/db", "...?password=***"): what messages
// and logs may show of a queue URL.
std::string RedactPostgresUrl(std::string_view url);

class PgStore final : public Store {
 public:
  // Store::Open for a `postgresql://` URL (see there). InvalidArgument naming the (masked) URL
  // when libpq cannot parse it; IoError with libpq's reason when the server cannot be reached or
  // refuses the login.
  [[nodiscard]] static Status Open(const std::string& url, std::unique_ptr<Store>* out,
                                   const OpenOptions& options);
  ~PgStore() override;

  // The key of the advisory lock that serializes writers (per database).
  static constexpr int64_t kWriteLockKey = 0x6c6c6d7100000001;  // "llmq", 1

  const std::string& location() const override { return location_; }
  void SetBusyTimeout(int milliseconds) override;
  [[nodiscard]] Status SetCacheBytes(int64_t bytes) override;
  [[nodiscard]] Status Begin() override;
  [[nodiscard]] Status Commit() override;
  void Rollback() override;
  bool InTransaction() const override;
  [[nodiscard]] Status BeginRead() override;
  [[nodiscard]] Status InsertJob(JobRecord* job) override;
  [[nodiscard]] Status InsertRequest(int64_t job, const NewRequest& r) override;
  [[nodiscard]] Status FinishIngest(int64_t job, JobStatus status,
                                    const IngestTotals* totals = nullptr) override;
  [[nodiscard]] Status MaxPlanRank(int64_t* out) override;
  [[nodiscard]] Status FindJob(const std::string& name, const std::string& sha256,
                               std::optional<JobRecord>* out) override;
  [[nodiscard]] Status GetJob(int64_t id, JobRecord* out) override;
  [[nodiscard]] Status GetJobByPublicId(const std::string& id, JobRecord* out) override;
  [[nodiscard]] Status ListJobs(std::vector<JobRecord>* out) override;
  [[nodiscard]] Status SetJobStatus(int64_t id, JobStatus s,
                                    const std::string& error = "") override;
  [[nodiscard]] Status MarkJobStarted(int64_t id, double unix_seconds) override;
  [[nodiscard]] Status RequestCancel(int64_t id) override;
  [[nodiscard]] Status SetJobOptions(int64_t id, const std::string& options) override;
  [[nodiscard]] Status GetCustomId(int64_t job, int64_t line, std::string* out) override;
  [[nodiscard]] Status DataVersion(int64_t* out) override;
  [[nodiscard]] Status StillAtLocation() const override { return Status::Ok(); }
  [[nodiscard]] Status NextPending(int64_t after_rank, int limit,
                                   std::vector<PendingRequest>* out) override;
  [[nodiscard]] Status MarkAttempted(
      const std::vector<std::pair<int64_t, int64_t>>& job_lines) override;
  [[nodiscard]] Status CountPending(int64_t job, int64_t* out) override;
  [[nodiscard]] Status PendingOfJob(int64_t job, int64_t after_line, int limit,
                                    std::vector<PendingRequest>* out) override;
  [[nodiscard]] Status GetJobTotals(int64_t job, JobTotals* out) override;
  [[nodiscard]] Status RegisterWorker(const WorkerInfo& worker) override;
  [[nodiscard]] Status Heartbeat(const std::string& worker, double lease_seconds,
                                 int64_t* renewed = nullptr) override;
  [[nodiscard]] Status ListWorkers(std::vector<WorkerInfo>* out) override;
  using Store::ClaimNextGroup;
  [[nodiscard]] Status ClaimNextGroup(const std::string& worker, double lease_seconds,
                                      int max_requests, const std::vector<std::string>& models,
                                      Claim* out) override;
  [[nodiscard]] Status UpdateWorker(const WorkerInfo& worker) override;
  [[nodiscard]] Status ReleaseLeases(
      const std::string& worker, int64_t* released = nullptr,
      const std::vector<std::pair<int64_t, int64_t>>& keep = {}) override;
  [[nodiscard]] Status ClaimJobFinalize(const std::string& worker, int64_t job,
                                        double lease_seconds, bool* got) override;
  [[nodiscard]] Status ReleaseJobFinalize(const std::string& worker, int64_t job) override;
  [[nodiscard]] Status ForEachResult(int64_t job, const ResultVisitor& fn) override;

  // A one-dimensional array parameter in libpq's text format ("{1,2}", "{\"a\",\"b\"}"), built
  // element by element: one statement takes a whole group's rows (unnest).
  class Array {
   public:
    Array& Add(int64_t v);
    Array& Add(double v);            // as Params::Add
    Array& Add(std::string_view v);  // quoted, `"` and `\` escaped
    std::string Text() const { return text_ + "}"; }

   private:
    std::string text_ = "{";
  };
  // A statement's parameters, as text (libpq's text format; NULL where absent).
  class Params {
   public:
    Params& Add(int64_t v);
    Params& Add(double v);  // round-trips exactly (%.17g)
    Params& Add(std::string_view v);
    Params& Add(const Array& a) { return Add(std::string_view(a.Text())); }
    Params& AddNull();
    int size() const { return static_cast<int>(values_.size()); }
    // Pointers into this object: valid while it lives and is not added to.
    std::vector<const char*> Pointers() const;

   private:
    std::vector<std::string> values_;
    std::vector<bool> null_;
  };
  // A statement's result rows (owns the PGresult).
  class Rows {
   public:
    Rows() = default;
    explicit Rows(pg_result* r) : r_(r) {}
    ~Rows();
    Rows(Rows&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
    Rows& operator=(Rows&& o) noexcept;
    int size() const;
    int64_t Int(int row, int col) const;
    double Real(int row, int col) const;
    std::string_view Text(int row, int col) const;
    bool IsNull(int row, int col) const;
    int64_t Affected() const;  // rows an INSERT / UPDATE touched
    pg_result* raw() const { return r_; }

   private:
    pg_result* r_ = nullptr;
  };

 private:
  PgStore() = default;
  // Runs `sql` (a string constant: prepared once per connection, keyed by its address) with
  // `params`; `what` names the operation in errors. Reconnects first when the connection was lost
  // and no transaction is open.
  [[nodiscard]] Status Run(const char* sql, const Params& params, const std::string& what,
                           Rows* rows = nullptr);
  // One or more statements without parameters or prepared state (transaction control, DDL).
  [[nodiscard]] Status Exec(const std::string& sql, const std::string& what, Rows* rows = nullptr);
  // Exec for a query of several statements: every result, in order; the first failure.
  [[nodiscard]] Status ExecAll(const std::string& sql, const std::string& what,
                               std::vector<Rows>* out);
  // A failed result (or none: the connection's error) as a Status naming location_ and `what`.
  [[nodiscard]] Status Error(const std::string& what, pg_result* r) const;
  // Own transaction unless one is open; a write: takes the write lock first.
  [[nodiscard]] Status Transaction(const std::function<Status()>& body);
  // A write of workers and leases: its own transaction without the write lock (row locks order
  // it), or the caller's (which holds the write lock, as Transaction).
  [[nodiscard]] Status RowTransaction(const std::function<Status()>& body);
  // Opens a transaction (reconnecting first when the connection was lost), no lock taken. BEGIN
  // is deferred: sent with the transaction's first statement (RunAfterBegin), in one round trip.
  [[nodiscard]] Status BeginUnlocked();
  // Run's statement `name` (prepared) after the deferred BEGIN: both sent at once in libpq's
  // pipeline mode, then both results read; the statement's rows in *rows.
  [[nodiscard]] Status RunAfterBegin(const std::string& name, const Params& params,
                                     const std::string& what, Rows* rows);
  // Sends a deferred BEGIN on its own (before a simple query: Exec, ExecAll); a no-op otherwise.
  [[nodiscard]] Status SendDeferredBegin();
  // Sends the rows InsertRequest batched (a no-op when none are).
  [[nodiscard]] Status FlushRequests();
  // Raises the claim floor (pg_store.cpp: kLowerClaimFloorPg) to the lowest pending rank, in a
  // transaction of its own, unless an ingest holds the write lock.
  [[nodiscard]] Status RaiseClaimFloor();
  // sql::kRegisterWorker or kUpdateWorker for `w` (checked first) in a RowTransaction;
  // *changed: the rows it changed.
  [[nodiscard]] Status WriteWorker(const char* sql, const WorkerInfo& w, int64_t* changed);
  // Takes the write lock in the open transaction (once).
  [[nodiscard]] Status LockForWrite();
  [[nodiscard]] Status Reconnect();
  [[nodiscard]] Status Configure();  // per connection: notices off, lock_timeout
  [[nodiscard]] Status Migrate(const OpenOptions& options);
  store_internal::ResultSteps ResultStepsFor() override;
  [[nodiscard]] Status ReadSchemaVersion(int* version, bool* foreign_tables);
  [[nodiscard]] Status ReadJobs(const Rows& rows, std::vector<JobRecord>* out) const;
  [[nodiscard]] Status ReadDataCounter(int64_t* out);
  [[nodiscard]] Status NotFoundJob(int64_t id) const;

  std::string url_;       // as given: libpq connects with it (never shown)
  std::string location_;  // url_ with its password masked
  pg_conn* conn_ = nullptr;
  int busy_timeout_ms_ = 5000;
  bool write_locked_ = false;
  bool wrote_ = false;  // this transaction writes: Commit bumps meta.data_version
  // InsertRequest's rows not sent yet (pg_store.cpp: kInsertRequestsPg), as arrays: sent when
  // full, before any other statement of this connection and at Commit; dropped by Rollback.
  struct RequestBatch {
    Array job, line, custom_id, body, rank, status, group;
    Array error_job, error_line, error_output;  // the refused lines' error results
    int rows = 0, errors = 0;
    size_t bytes = 0;
    int64_t first_job = 0, first_line = 0, last_line = 0;  // for messages
  };
  std::unique_ptr<RequestBatch> batch_;
  static constexpr int64_t kNoRank = INT64_MAX;
  int64_t lowest_inserted_rank_ = kNoRank;  // of this transaction's pending requests
  int claims_since_floor_raise_ = 0;
  bool txn_open_ = false;  // Begin / BeginRead until Commit / Rollback
  // BeginUnlocked's BEGIN is not sent yet (implies txn_open_): it goes with the next statement.
  bool begin_deferred_ = false;
  bool in_for_each_ = false;
  // DataVersion: meta.data_version as this connection last knew it, and what it reports.
  int64_t known_counter_ = 0;
  int64_t reported_version_ = 0;
  int64_t pending_counter_ = -1;  // this transaction's bump, until COMMIT succeeds
  std::vector<std::pair<const char*, std::string>> prepared_;  // sql address -> statement name
};

}  // namespace llmq::jobs
