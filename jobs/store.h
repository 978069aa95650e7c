// Store: the durable queue. Every job, every request and every result goes through one SQLite
// database (WAL, synchronous=FULL, busy_timeout, BEGIN IMMEDIATE for writes), so that nothing
// accepted is lost and nothing finished is done twice:
//   jobs      one row per accepted job file: name, content sha256, status, request counts
//   requests  one row per non-blank input line: the line's text, its status, its plan rank
//   results   one row per finished line: the output line (success or error) and its metrics
// A request is `pending` until its result is committed, in the same transaction that sets it
// `done` or `failed` and bumps the job's counts; a crash before that commit leaves it pending and
// it simply runs again. `schema_version` in table `meta` drives forward migrations (a database
// with a newer version is refused); Open runs `PRAGMA quick_check` (unless told to skip it) and
// refuses a damaged file.
// quick_check reads every page and checks the b-trees, free list and record formats in linear
// time; integrity_check also cross-checks every index entry against its table row, which costs
// more and grows faster with the database (100,000 requests, 27 MB: 0.12 s vs 0.16 s). Both read
// the whole file, so a very large queue opens more slowly.
//
// Plan ranks: the feeder pages through pending requests by rank (`NextPending(after_rank)`), so
// the ranks of pending requests must be unique: ingest gives each new request MaxPlanRank() + 1,
// + 2, ... (ties would be fed in (job, line) order but a page boundary between them skips some).
//
// Thread-safety: one Store object is used by one thread at a time (the caller serializes; the
// daemon gives the store its own thread). Several Store objects, in one process or several, may
// open the same file: SQLite's locking (busy_timeout) serializes their writes, and in WAL mode
// readers never wait for the writer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace llmq::jobs {

// The OpenAI Batch API's statuses.
enum class JobStatus {
  kValidating,
  kInProgress,
  kFinalizing,
  kCompleted,
  kFailed,
  kCancelling,
  kCancelled,
  kExpired
};
const char* JobStatusName(JobStatus s);  // "validating", "in_progress", ...
bool ParseJobStatus(std::string_view name, JobStatus* out);
// completed, failed, cancelled, expired: nothing more will happen to the job.
bool IsTerminal(JobStatus s);

struct JobRecord {
  int64_t id = 0;         // rowid
  std::string public_id;  // "batch_<16 hex>": unique, random, stable for the job's life
  std::string name;       // the file's name (or what the submitter calls it)
  std::string sha256;     // hex of the file's bytes
  JobStatus status = JobStatus::kValidating;
  int64_t total = 0;       // request_counts.total: non-blank lines
  int64_t completed = 0;   // results committed with success
  int64_t failed = 0;      // results committed with an error (refused at ingest or failed later)
  int64_t refused = 0;     // of `failed`: lines refused at validation, set by FinishIngest
  double created_at = 0;   // unix seconds (accepted)
  double started_at = 0;   // first request handed to the engine; 0 = not yet
  double finished_at = 0;  // reached a terminal status; 0 = not yet
  bool cancel_requested = false;
  std::string error;    // why the job failed, when it did
  std::string options;  // the submitter's JSON text (output paths, model, ...), opaque here
};

// A request as ingest inserts it.
struct NewRequest {
  int64_t line = 0;       // 1-based line number in the file
  std::string custom_id;  // may be empty when the line could not give one
  std::string body;       // the whole input line's text, as read
  int64_t plan_rank = 0;  // feeding order across all jobs (ascending)
  // A line refused at validation is inserted already finished: its error output line here.
  std::optional<std::string> error_output;
};

// A pending request, as the feeder reads it back.
struct PendingRequest {
  int64_t job = 0;  // JobRecord::id
  int64_t line = 0;
  int64_t plan_rank = 0;
  int64_t attempts = 0;  // times it was handed to an engine before (crashes, drains)
  std::string custom_id;
  std::string body;
};

// Per-request numbers kept with each result (for the summary).
struct ResultMetrics {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t computed_tokens = 0;    // prompt tokens run through the model
  int64_t completion_tokens = 0;  // over all n samples
  double queue_seconds = 0;       // accepted -> admitted by the engine
  double ttft_seconds = 0;        // admitted -> first token
  double itl_seconds = 0;         // mean inter-token latency
  double latency_seconds = 0;     // accepted -> finished
  // Unix seconds when it finished (the job report's timeline); 0 = the commit's time (an error
  // line written by the daemon, not by the engine).
  double finished_at = 0;
};

// Sums over a job's committed results (llmq status).
// Token sums over a job's committed results (kept in the job's row by CommitResults).
struct JobTotals {
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  int64_t computed_tokens = 0;
};

struct Result {
  int64_t job = 0;
  int64_t line = 0;
  bool is_error = false;
  std::string output;  // the whole output line (no newline)
  ResultMetrics metrics;
};

class Store {
 public:
  // Opens (creating when absent, with its parent folder) the database at `path`, migrates the
  // schema forward, and checks integrity. Errors: IoError naming the path and strerror/SQLite's
  // message; Corruption when the file is not a database or integrity_check fails (the message
  // says so and names the file: the daemon refuses to start rather than guess); Unsupported when
  // the schema_version is newer than this build knows.
  // A file that is an SQLite database but not llmq's (tables, no `meta`) is refused with
  // InvalidArgument: it is never written to.
  // A new database file is created 0600 whatever the umask: it holds every prompt and result,
  // the queue is its owner's alone (SQLite gives the -wal and -shm files the database file's
  // mode). An existing one keeps its mode.
  // The integrity check reads the whole file (see the top of this file): a process checks once,
  // with its first connection; its other connections, and the commands that only look at the
  // queue while the daemon runs (llmq status, list, cancel: every few seconds from a script on
  // a queue of months), pass Check::kSkip.
  enum class Check { kIntegrity, kSkip };
  static Status Open(const std::string& path, std::unique_ptr<Store>* out,
                     Check check = Check::kIntegrity);
  ~Store();  // rolls back an open transaction
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  const std::string& path() const { return path_; }
  // How long a write waits for another connection's write lock before failing (IoError naming
  // the file and the wait). 5000 ms from Open; tests shorten it.
  void SetBusyTimeout(int milliseconds);
  // The connection's page cache: 64 MiB from Open (ingest of a big job is faster with it); a
  // connection that only feeds or commits results needs little, and its pages are given back.
  Status SetCacheBytes(int64_t bytes);
  // The schema version this build creates and migrates to.
  static int SchemaVersion();

  // --- Ingest: one transaction for everything accepted in one scan.
  // Every write method below runs in its own transaction when none is open, or inside the
  // caller's (then a failure leaves the caller to Rollback).
  Status Begin();   // BEGIN IMMEDIATE; a transaction must not be open already (LLMQ_CHECK)
  Status Commit();  // an error when none is open (SQLite rolls back by itself after some errors)
  void Rollback();  // no-op when no transaction is open
  bool InTransaction() const;
  // BEGIN (deferred), for reads only: every read until Commit sees the queue as the first one did,
  // while other connections go on writing (WAL). A transaction must not be open already.
  Status BeginRead();
  // Inserts a job (status as given, usually `validating`); fills `job->id`, `job->public_id` (when
  // empty) and `job->created_at` (when 0). (name, sha256) is unique: the caller asks FindJob
  // first; a second insert of the same pair fails with InvalidArgument naming it.
  Status InsertJob(JobRecord* job);
  // A duplicate (job, line) or an unknown job fails with InvalidArgument.
  Status InsertRequest(int64_t job, const NewRequest& r);
  // Sets the job's counts and status (usually in_progress, as SetJobStatus does). Without
  // `totals` the counts are taken from the inserted rows (a scan); an ingester that counted what
  // it inserted passes them, with the file's sha256 when InsertJob had none (hashed while
  // reading). A sha256 that makes (name, sha256) collide with a recorded job is InvalidArgument:
  // the caller rolls back. NotFound when the job is absent.
  struct IngestTotals {
    int64_t total = 0;     // requests inserted
    int64_t failed = 0;    // of which refused at validation (inserted with an error output)
    int64_t max_rank = 0;  // highest plan rank given
    std::string sha256;    // "" = keep InsertJob's
  };
  Status FinishIngest(int64_t job, JobStatus status, const IngestTotals* totals = nullptr);
  // The highest plan rank given to a request that is still pending or belongs to a finished
  // ingest (0 when none): new ranks continue after it.
  Status MaxPlanRank(int64_t* out);

  // --- Jobs.
  // The job with this name and sha256, if any (a file accepted twice is found here).
  Status FindJob(const std::string& name, const std::string& sha256, std::optional<JobRecord>* out);
  Status GetJob(int64_t id, JobRecord* out);                       // NotFound when absent
  Status GetJobByPublicId(const std::string& id, JobRecord* out);  // NotFound when absent
  Status ListJobs(std::vector<JobRecord>* out);                    // by id
  // A terminal status is final: changing it to another status fails with InvalidArgument (setting
  // the same one again is a no-op). Entering a terminal status sets finished_at (first time
  // only). A non-empty `error` replaces the job's error; an empty one keeps it. NotFound when
  // absent.
  Status SetJobStatus(int64_t id, JobStatus s, const std::string& error = "");
  Status MarkJobStarted(int64_t id, double unix_seconds);  // only the first call counts
  // Sets cancel_requested (the store only records the flag; NextPending skips the job from now
  // on; the daemon moves it to cancelling/cancelled). NotFound when absent.
  Status RequestCancel(int64_t id);
  Status SetJobOptions(int64_t id, const std::string& options);  // replaces JobRecord::options
  // The custom_id stored for a request (ingest confirms a duplicate with it); NotFound if none.
  Status GetCustomId(int64_t job, int64_t line, std::string* out);
  // Changes whenever ANOTHER connection commits (PRAGMA data_version): cheap polling. This
  // object's own commits do not change it.
  Status DataVersion(int64_t* out);
  // OK while `path()` still names the file this connection opened (same device and inode). A
  // connection to a file removed or replaced meanwhile goes on reading and writing the old file,
  // which no later Open sees: IoError "<path>: removed while it was open (...)" or "<path>:
  // replaced by another file while it was open (...)".
  Status StillAtPath() const;

  // --- Feeding.
  // Up to `limit` pending requests with plan_rank > after_rank, of jobs that are in_progress and
  // not cancel_requested, in plan_rank order (then job, line). Streams nothing else into memory:
  // a partial index over the pending requests by rank serves it.
  Status NextPending(int64_t after_rank, int limit, std::vector<PendingRequest>* out);
  // attempts += 1 for these requests (they are being handed to an engine).
  Status MarkAttempted(const std::vector<std::pair<int64_t, int64_t>>& job_lines);
  Status CountPending(int64_t job, int64_t* out);
  // Up to `limit` pending requests of `job` with line > after_line, in line order, whatever the
  // job's status and cancel flag (cancelling writes their error lines).
  Status PendingOfJob(int64_t job, int64_t after_line, int limit, std::vector<PendingRequest>* out);
  // Token sums over the job's committed results: one row read (CommitResults keeps them in the
  // job's row, in the transaction that adds the results). NotFound for an unknown job.
  Status GetJobTotals(int64_t job, JobTotals* out);

  // --- Results: one transaction for the whole group. A result for a request that already has
  // one is ignored (never a duplicate, never an overwrite); each new one sets its request done or
  // failed and bumps its job's completed / failed count. A result for a request that does not
  // exist fails the whole group with InvalidArgument. `*added` (optional): how many were new.
  Status CommitResults(const std::vector<Result>& results, int64_t* added = nullptr);

  // --- Finalizing: the job's results in line order, streamed (bounded memory), from one
  // consistent snapshot. `fn` may call other methods of this Store but not ForEachResult
  // (LLMQ_CHECK); `output` is valid only during the call. A non-OK status from `fn` stops the
  // walk and is returned.
  Status ForEachResult(
      int64_t job, const std::function<Status(int64_t line, bool is_error, std::string_view output,
                                              const ResultMetrics& m)>& fn);

 private:
  Store() = default;
  // The cached prepared statement for `sql` (a string constant: the cache is keyed by its
  // address), prepared on first use.
  Status Prepare(const char* sql, sqlite3_stmt** out);
  Status Exec(const char* sql, const char* what);       // one or more statements, no rows
  Status Error(const std::string& what, int rc) const;  // names path_, SQLite's and errno's reason
  Status Transaction(const std::function<Status()>& body);  // own transaction unless one is open
  Status CheckIntegrity();
  Status Migrate();
  Status ReadSchemaVersion(int* version, bool* foreign_tables);
  Status StepJobs(sqlite3_stmt* bound, std::vector<JobRecord>* out);  // every row, then reset

  std::string path_;
  dev_t dev_ = 0;  // the file opened (StillAtPath)
  ino_t ino_ = 0;
  sqlite3* db_ = nullptr;
  int busy_timeout_ms_ = 5000;
  bool in_for_each_ = false;
  std::vector<std::pair<const char*, sqlite3_stmt*>> stmts_;  // the statement cache
};

}  // namespace llmq::jobs
