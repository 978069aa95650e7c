// SqliteStore: the queue in one SQLite file (the embedded default; jobs/store.h states the
// contracts). WAL mode, synchronous=FULL, busy_timeout, BEGIN IMMEDIATE for writes, prepared
// statements cached per connection, `PRAGMA quick_check` at the first open of a process.
// Invariants: db_ is open from Open until the destructor; every cached statement is reset after
// the call that used it (no read snapshot or lock outlives a call, except an explicit
// transaction's).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jobs/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace llmq::jobs {

class SqliteStore final : public Store {
 public:
  // Store::Open for a path (see there).
  [[nodiscard]] static Status Open(const std::string& path, std::unique_ptr<Store>* out,
                                   const OpenOptions& options);
  ~SqliteStore() override;

  const std::string& location() const override { return path_; }
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
  [[nodiscard]] Status StillAtLocation() const override;
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

 private:
  SqliteStore() = default;
  // The cached prepared statement for `sql` (a string constant: the cache is keyed by its
  // address), prepared on first use.
  [[nodiscard]] Status Prepare(const char* sql, sqlite3_stmt** out);
  // One or more statements, no rows.
  [[nodiscard]] Status Exec(const char* sql, const char* what);
  // Names path_, SQLite's and errno's reason.
  [[nodiscard]] Status Error(const std::string& what, int rc) const;
  // Own transaction unless one is open.
  [[nodiscard]] Status Transaction(const std::function<Status()>& body);
  [[nodiscard]] Status CheckIntegrity();
  store_internal::ResultSteps ResultStepsFor() override;
  [[nodiscard]] Status Migrate(const OpenOptions& options);
  [[nodiscard]] Status ReadSchemaVersion(int* version, bool* foreign_tables);
  // ClaimNextGroup's transaction.
  [[nodiscard]] Status ClaimInTransaction(const std::string& worker, double lease_seconds,
                                          int max_requests, const std::string& models_json,
                                          Claim* out);
  // The plan group ClaimNextGroup would lease now (*found false: none), filtered by
  // `models_json` (a JSON array; "": no filter).
  [[nodiscard]] Status NextClaimableGroup(double now, const std::string& models_json, bool* found,
                                          int64_t* group);
  // Every row, then reset.
  [[nodiscard]] Status StepJobs(sqlite3_stmt* bound, std::vector<JobRecord>* out);
  // kRegisterWorker or kUpdateWorker for `w` (checked first); *changed: the rows it changed.
  [[nodiscard]] Status WriteWorker(const char* sql, const WorkerInfo& w, int64_t* changed);
  // Runs `sql` with (worker $1, a time $2); *changed (optional): the rows it changed.
  [[nodiscard]] Status RunForWorker(const char* sql, const std::string& worker, double at,
                                    const std::string& what, int64_t* changed);

  std::string path_;
  dev_t dev_ = 0;  // the file opened (StillAtLocation)
  ino_t ino_ = 0;
  sqlite3* db_ = nullptr;
  int busy_timeout_ms_ = 5000;
  bool in_for_each_ = false;
  std::vector<std::pair<const char*, sqlite3_stmt*>> stmts_;  // the statement cache
};

}  // namespace llmq::jobs
