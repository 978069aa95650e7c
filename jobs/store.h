// Store: the durable queue. Every job, every request and every result goes through one database
// (an SQLite file, or a PostgreSQL database shared by many hosts), so that nothing accepted is
// lost and nothing finished is done twice:
//   jobs      one row per accepted job file: name, content sha256, status, request counts, the
//             model its requests name (schema 6)
//   requests  one row per non-blank input line: the line's text, its status, its plan rank
//   results   one row per finished line: the output line (success or error) and its metrics
//   workers   one row per worker process on the queue (schema 4): host, device, model, heartbeat
//             (schema 5: its state, current job and tokens/s; schema 6: the models it serves);
//             a request's plan group and lease (who, which generation, until when) are in its
//             row, and a job's finalize lease (who, until when: schema 5) in the job's
//   meta      key/value: schema_version, the plan-rank high-water mark (and, on PostgreSQL, the
//             write counter behind DataVersion)
// A request is `pending` until its result is committed, in the same transaction that sets it
// `done` or `failed` and bumps the job's counts; a crash before that commit leaves it pending and
// it simply runs again. `schema_version` in table `meta` drives forward migrations (a database
// with a newer version is refused).
// SQLite (WAL, synchronous=FULL, busy_timeout, BEGIN IMMEDIATE for writes): Open runs
// `PRAGMA quick_check` (unless told to skip it) and refuses a damaged file. quick_check reads
// every page and checks the b-trees, free list and record formats in linear time;
// integrity_check also cross-checks every index entry against its table row, which costs more
// and grows faster with the database (100,000 requests, 27 MB: 0.12 s vs 0.16 s). Both read the
// whole file, so a very large queue opens more slowly.
//
// Plan ranks: the feeder pages through pending requests by rank (`NextPending(after_rank)`), so
// the ranks of pending requests must be unique: ingest gives each new request MaxPlanRank() + 1,
// + 2, ... (ties would be fed in (job, line) order but a page boundary between them skips some).
//
// Thread-safety: one Store object is used by one thread at a time (the caller serializes; the
// daemon gives the store its own thread). Several Store objects, in one process or several, may
// open the same queue: the write lock (SQLite's, with busy_timeout; PostgreSQL's advisory lock,
// with lock_timeout) serializes their writes, and readers never wait for the writer. (PostgreSQL:
// the writes of workers and leases take row locks instead; see "Workers and leases".)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

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
  // Schema 6: the model its requests name (body.model: one model per job, as OpenAI's Batch API
  // has it); "" when none names one. Only workers serving it (or serving any) claim its groups.
  std::string model;
};

// A request as ingest inserts it.
struct NewRequest {
  int64_t line = 0;       // 1-based line number in the file
  std::string custom_id;  // may be empty when the line could not give one
  std::string body;       // the whole input line's text, as read
  int64_t plan_rank = 0;  // feeding order across all jobs (ascending)
  // The plan group it is claimed with (ClaimNextGroup); 0: its own group (its plan_rank).
  int64_t plan_group = 0;
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
  // Read back by ClaimNextGroup only (0 elsewhere): its plan group, and the lease generation it
  // was claimed under (what CommitLeasedResults checks).
  int64_t plan_group = 0;
  int64_t lease_generation = 0;
};

// A worker process on a queue (issue 27): llmq workers shows them.
struct WorkerInfo {
  std::string id;           // unique per process, chosen by the worker (1 to 200 bytes)
  std::string host;         // its host name
  std::string device;       // "cpu", "cuda:0", ...
  std::string model;        // the model it serves
  double started_at = 0;    // unix seconds, first registered
  double heartbeat_at = 0;  // unix seconds, last heartbeat
  // Schema 5: what it is doing, as it last said (RegisterWorker, UpdateWorker).
  std::string state;        // "starting", "running", "draining", "stopped": free text, <= 32 bytes
  std::string current_job;  // the public id of the job it works on, or ""
  double tokens_per_second = 0;  // its recent output rate
  // Schema 6: the models it serves (model.served_names): it claims only groups of jobs naming one
  // of them or none (ClaimNextGroup); empty: any model.
  std::vector<std::string> served_models;
};

// What ClaimNextGroup leased: pending requests of one plan group, in plan_rank order, each with
// the generation of its lease; the lease runs until expires_at unless renewed by Heartbeat.
struct Claim {
  int64_t plan_group = 0;
  double expires_at = 0;
  std::vector<PendingRequest> requests;  // empty: nothing claimable now
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

// A result computed under a lease: accepted only while `lease_generation` is the request's
// current one and the lease is the committing worker's.
struct LeasedResult {
  Result result;
  int64_t lease_generation = 0;
};

namespace store_internal {
struct ResultSteps;  // below
}  // namespace store_internal

// The queue, behind one interface with two engines (selected by Store::Open's location):
//   SqliteStore (jobs/sqlite_store.h)  a file: the embedded default, one host
//   PgStore     (jobs/pg_store.h)      a PostgreSQL database (`postgresql://...`): many hosts
// Both hold the same schema (jobs/store_schema.h: the same tables, columns and version numbers,
// each migration written once per SQL dialect) and keep the same contracts, stated below; the
// typed tests in tests/store_test.cpp run every one of them on both engines. Where an engine
// differs, the method says so.
class Store {
 public:
  // Opens the queue at `location`: a `postgresql://` or `postgres://` URL (libpq's URI syntax:
  // host, port, user, database, `?sslmode=...`, `?host=/socket/folder`; a password comes from
  // the URL, PGPASSWORD or ~/.pgpass and is never written into a message or a log), else the
  // path of an SQLite file. Creates the schema when absent and migrates it forward.
  //
  // SQLite: creates the file (and its parent folder) when absent, and checks integrity. Errors:
  // IoError naming the path and strerror/SQLite's message; Corruption when the file is not a
  // database or integrity_check fails (the message says so and names the file: the daemon
  // refuses to start rather than guess).
  // A new database file is created 0600 whatever the umask: it holds every prompt and result,
  // the queue is its owner's alone (SQLite gives the -wal and -shm files the database file's
  // mode). An existing one keeps its mode.
  // The integrity check reads the whole file (see the top of this file): a process checks once,
  // with its first connection; its other connections, and the commands that only look at the
  // queue while the daemon runs (llmq status, list, cancel: every few seconds from a script on
  // a queue of months), pass Check::kSkip.
  // PostgreSQL: the database must exist (`llmq queue init` creates the schema in it; Open does
  // too); IoError naming the URL (password masked) and libpq's reason when the server cannot be
  // reached or refuses the login. `check` is ignored: the server keeps its own files whole.
  //
  // Both: Unsupported when the schema_version is newer than this build knows; a database that
  // has tables but no `meta` table (not llmq's) is refused with InvalidArgument and never
  // written to.
  enum class Check { kIntegrity, kSkip };
  [[nodiscard]] static Status Open(const std::string& location, std::unique_ptr<Store>* out,
                                   Check check = Check::kIntegrity);
  // What `llmq queue init|migrate` asks of Open besides.
  struct OpenOptions {
    Check check = Check::kIntegrity;
    // false: a database without llmq's schema (an absent SQLite file, an empty PostgreSQL
    // database) is NotFound ("no llmq queue ...") and nothing is created.
    bool create = true;
    int* found_version = nullptr;  // when set: the schema_version found before migrating (0: none)
  };
  [[nodiscard]] static Status Open(const std::string& location, std::unique_ptr<Store>* out,
                                   const OpenOptions& options);
  // Whether Open takes `location` as a PostgreSQL URL (else as an SQLite file's path).
  static bool IsPostgresUrl(std::string_view location);
  virtual ~Store() = default;  // rolls back an open transaction
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  // What messages name: the SQLite file's path, or the URL with its password masked.
  virtual const std::string& location() const = 0;
  // How long a write waits for another connection's write lock before failing (IoError naming
  // the queue, "locked" and the wait). 5000 ms from Open; tests shorten it.
  virtual void SetBusyTimeout(int milliseconds) = 0;
  // SQLite: the connection's page cache: 64 MiB from Open (ingest of a big job is faster with
  // it); a connection that only feeds or commits results needs little, and its pages are given
  // back. PostgreSQL: nothing (the server's cache is the server's).
  [[nodiscard]] virtual Status SetCacheBytes(int64_t bytes) = 0;
  // The schema version this build creates and migrates to.
  static int SchemaVersion();

  // --- Ingest: one transaction for everything accepted in one scan.
  // Every write method below runs in its own transaction when none is open, or inside the
  // caller's (then a failure leaves the caller to Rollback: on PostgreSQL a failed statement
  // spoils the whole transaction, so the caller must roll back; on SQLite it should).
  // Writers are serialized as SQLite's BEGIN IMMEDIATE does: one write transaction at a time
  // per queue (PostgreSQL: a transaction-scoped advisory lock taken first), so plan ranks and
  // counts read inside it cannot be raced. (PostgreSQL's worker and lease writes, in their own
  // transactions, take row locks only: see "Workers and leases".)
  [[nodiscard]] virtual Status Begin() = 0;  // a transaction must not be open (LLMQ_CHECK)
  // An error when none is open (SQLite rolls back by itself after some errors; PostgreSQL's
  // transaction after a failed statement is rolled back by COMMIT, and that is an error too).
  [[nodiscard]] virtual Status Commit() = 0;
  virtual void Rollback() = 0;  // no-op when no transaction is open
  virtual bool InTransaction() const = 0;
  // For reads only: every read until Commit sees the queue as the first one did, while other
  // connections go on writing (SQLite: deferred BEGIN in WAL mode; PostgreSQL: REPEATABLE READ).
  // A transaction must not be open already.
  [[nodiscard]] virtual Status BeginRead() = 0;
  // Inserts a job (status as given, usually `validating`); fills `job->id`, `job->public_id` (when
  // empty) and `job->created_at` (when 0). (name, sha256) is unique: the caller asks FindJob
  // first; a second insert of the same pair fails with InvalidArgument naming it.
  [[nodiscard]] virtual Status InsertJob(JobRecord* job) = 0;
  // A duplicate (job, line) or an unknown job fails with InvalidArgument. PostgreSQL: inside the
  // caller's transaction the rows go to the server in batches (one statement per 2,000), so that
  // failure may come from a later call of the transaction instead, at the latest from its Commit
  // (the caller rolls back, as after any failure); every read of the transaction sees every row
  // inserted before it.
  [[nodiscard]] virtual Status InsertRequest(int64_t job, const NewRequest& r) = 0;
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
    std::string model;     // the job's model (JobRecord::model); "" = keep InsertJob's
  };
  [[nodiscard]] virtual Status FinishIngest(int64_t job, JobStatus status,
                                            const IngestTotals* totals = nullptr) = 0;
  // The highest plan rank given to a request that is still pending or belongs to a finished
  // ingest (0 when none): new ranks continue after it.
  [[nodiscard]] virtual Status MaxPlanRank(int64_t* out) = 0;

  // --- Jobs.
  // The job with this name and sha256, if any (a file accepted twice is found here).
  [[nodiscard]] virtual Status FindJob(const std::string& name, const std::string& sha256,
                                       std::optional<JobRecord>* out) = 0;
  [[nodiscard]] virtual Status GetJob(int64_t id, JobRecord* out) = 0;  // NotFound when absent
  // NotFound when absent.
  [[nodiscard]] virtual Status GetJobByPublicId(const std::string& id, JobRecord* out) = 0;
  [[nodiscard]] virtual Status ListJobs(std::vector<JobRecord>* out) = 0;  // by id
  // A terminal status is final: changing it to another status fails with InvalidArgument (setting
  // the same one again is a no-op). Entering a terminal status sets finished_at (first time
  // only). A non-empty `error` replaces the job's error; an empty one keeps it. NotFound when
  // absent.
  [[nodiscard]] virtual Status SetJobStatus(int64_t id, JobStatus s,
                                            const std::string& error = "") = 0;
  // Only the first call counts.
  [[nodiscard]] virtual Status MarkJobStarted(int64_t id, double unix_seconds) = 0;
  // Sets cancel_requested (the store only records the flag; NextPending skips the job from now
  // on; the daemon moves it to cancelling/cancelled). NotFound when absent.
  [[nodiscard]] virtual Status RequestCancel(int64_t id) = 0;
  // Replaces JobRecord::options. NotFound when absent.
  [[nodiscard]] virtual Status SetJobOptions(int64_t id, const std::string& options) = 0;
  // The custom_id stored for a request (ingest confirms a duplicate with it); NotFound if none.
  [[nodiscard]] virtual Status GetCustomId(int64_t job, int64_t line, std::string* out) = 0;
  // Changes whenever ANOTHER connection commits a write: cheap polling. This object's own
  // commits do not change it. (SQLite: PRAGMA data_version; PostgreSQL: a counter in `meta`
  // that every write transaction moves, told apart from this connection's own moves.)
  [[nodiscard]] virtual Status DataVersion(int64_t* out) = 0;
  // SQLite: OK while `location()` still names the file this connection opened (same device and
  // inode). A connection to a file removed or replaced meanwhile goes on reading and writing the
  // old file, which no later Open sees: IoError "<path>: removed while it was open (...)" or
  // "<path>: replaced by another file while it was open (...)". PostgreSQL: always OK (a
  // database is not replaced under a connection; a lost connection fails the next statement).
  [[nodiscard]] virtual Status StillAtLocation() const = 0;

  // --- Feeding.
  // Up to `limit` pending requests with plan_rank > after_rank, of jobs that are in_progress and
  // not cancel_requested, in plan_rank order (then job, line). Streams nothing else into memory:
  // a partial index over the pending requests by rank serves it.
  [[nodiscard]] virtual Status NextPending(int64_t after_rank, int limit,
                                           std::vector<PendingRequest>* out) = 0;
  // attempts += 1 for these requests (they are being handed to an engine). PostgreSQL: their rows
  // are locked in (job, line) order, whatever the order given (a worker's heartbeat renews them
  // at the same time).
  [[nodiscard]] virtual Status MarkAttempted(
      const std::vector<std::pair<int64_t, int64_t>>& job_lines) = 0;
  [[nodiscard]] virtual Status CountPending(int64_t job, int64_t* out) = 0;
  // Up to `limit` pending requests of `job` with line > after_line, in line order, whatever the
  // job's status and cancel flag (cancelling writes their error lines).
  [[nodiscard]] virtual Status PendingOfJob(int64_t job, int64_t after_line, int limit,
                                            std::vector<PendingRequest>* out) = 0;
  // Token sums over the job's committed results: one row read (CommitResults keeps them in the
  // job's row, in the transaction that adds the results). NotFound for an unknown job.
  [[nodiscard]] virtual Status GetJobTotals(int64_t job, JobTotals* out) = 0;

  // --- Results: one transaction for the whole group. A result for a request that already has
  // one is ignored (never a duplicate, never an overwrite; of two for one line in a group, the
  // first counts); each new one sets its request done or failed and bumps its job's completed /
  // failed count. A result for a request that does not exist fails the whole group with
  // InvalidArgument. A pending request that has a result already (which no write of this store
  // leaves) is Corruption naming it. `*added` (optional): how many were new. (Written once for
  // both engines: store.cpp, with each engine's ResultSteps; PostgreSQL runs a constant number of
  // statements per group, under the write lock.)
  [[nodiscard]] Status CommitResults(const std::vector<Result>& results, int64_t* added = nullptr);

  // --- Workers and leases (issue 27: many workers on one queue).
  // PostgreSQL: the methods of this section take row locks only, never the write lock that
  // ingest holds (a heartbeat or a result does not wait behind a long ingest); rows of requests
  // are locked in (job, line) order. Each still moves DataVersion (ClaimNextGroup excepted).
  //
  // Records a worker, or updates its host, device, model, state, current_job and
  // tokens_per_second; its heartbeat is now (started_at is set by the first registration only).
  // An empty id, or one over 200 bytes, or a state over 32 bytes, is InvalidArgument.
  [[nodiscard]] virtual Status RegisterWorker(const WorkerInfo& worker) = 0;
  // Sets a registered worker's host, device, model, state, current_job and tokens_per_second
  // (started_at is kept) and its heartbeat to now. Does not touch its leases. NotFound for a
  // worker never registered; InvalidArgument as RegisterWorker.
  [[nodiscard]] virtual Status UpdateWorker(const WorkerInfo& worker) = 0;
  // The worker's heartbeat is now, every pending request it leases is leased for `lease_seconds`
  // more (*renewed, optional: how many), and so is every job finalize lease it holds
  // (ClaimJobFinalize; not counted in *renewed). Leases given back by ReleaseLeases or
  // ReleaseJobFinalize are not taken again. NotFound for a worker never registered.
  [[nodiscard]] virtual Status Heartbeat(const std::string& worker, double lease_seconds,
                                         int64_t* renewed = nullptr) = 0;
  [[nodiscard]] virtual Status ListWorkers(std::vector<WorkerInfo>* out) = 0;  // by id
  // Leases to `worker` the next plan group: the claimable request with the lowest plan rank (of
  // an in_progress job not cancel_requested; claimable: pending, and not leased or its lease
  // expired or released) picks the group, and up to `max_requests` claimable requests of that
  // group are leased (lease_generation + 1, expiring `lease_seconds` from now). Two workers never
  // hold the same request: SQLite serializes claims (BEGIN IMMEDIATE), PostgreSQL locks the rows
  // it takes and skips those another claim holds (FOR UPDATE SKIP LOCKED; under contention a
  // group may then be split between workers, never a request). One statement on PostgreSQL.
  // SQLite: the claim commits without waiting for the disk (synchronous=NORMAL for its
  // transaction; WAL keeps it whole through a crash of the process): a power loss may forget the
  // last claims (their requests are claimable again, as after an expiry, and the workers that
  // held them went down with the host); the next result commit (synchronous=FULL) makes every
  // earlier claim durable with it, so no result is ever durable without its lease.
  // Runs in its own transaction: none may be open (LLMQ_CHECK). out->requests empty: nothing to
  // claim.
  //
  // `models` (a worker's served names, WorkerInfo::served_models): when not empty, only groups of
  // jobs whose model (JobRecord::model) is one of them, or "", are claimed: the claimable request
  // with the lowest rank among those jobs' picks the group, and only the group's rows of such
  // jobs are leased (files ingested together are planned together: a group may span jobs of
  // several models). Empty: any job's, as above. Cost: without a filter the claim walks
  // requests_pending_by_rank from the claim floor (PostgreSQL) or its head (SQLite) and stops at
  // the first claimable row; with one it reads the in_progress jobs (jobs_in_progress) and, for
  // each job of a served model, its first claimable pending request by rank
  // (requests_pending_by_job: one index descent, plus the rows leased to others it steps over), so
  // a large job of a model this worker does not serve costs nothing, and the claim costs O(served
  // in_progress jobs) descents. PostgreSQL locks (SKIP LOCKED) each served job's first claimable
  // row until the statement ends, so a claim running at the same time on another worker may take a
  // later row of those jobs.
  [[nodiscard]] virtual Status ClaimNextGroup(const std::string& worker, double lease_seconds,
                                              int max_requests,
                                              const std::vector<std::string>& models,
                                              Claim* out) = 0;
  // Any model's (no filter).
  [[nodiscard]] Status ClaimNextGroup(const std::string& worker, double lease_seconds,
                                      int max_requests, Claim* out) {
    return ClaimNextGroup(worker, lease_seconds, max_requests, {}, out);
  }
  // CommitResults for results computed under a lease: a result is accepted only when its request
  // is still pending, leased to `worker`, under the result's lease_generation (an expired or
  // released lease that no one claimed since still counts); any other is fenced: not written,
  // counted in *fenced (optional), as is a second result for the same line in one group (the
  // first is the one weighed). A late worker can thus neither duplicate nor overwrite. A result
  // for a request that does not exist fails the group with InvalidArgument. PostgreSQL: a
  // constant number of statements per group, fenced by the request rows' locks (no write lock).
  [[nodiscard]] Status CommitLeasedResults(const std::string& worker,
                                           const std::vector<LeasedResult>& results,
                                           int64_t* added = nullptr, int64_t* fenced = nullptr);
  // Drain or shutdown: every pending request leased to `worker` is claimable at once (its lease
  // ends now; Heartbeat does not renew it), but those of `keep` ((job, line): the requests still
  // in the worker's engine, whose leases it goes on renewing: given back, another worker would
  // run them too). Its lease_generation is unchanged, so a result the worker commits later under
  // it is still accepted while no one has claimed the request since (CommitLeasedResults).
  // *released (optional): how many (a lease released already is not counted again). Job
  // finalize leases are kept (ReleaseJobFinalize gives those back). An unknown worker releases
  // nothing; InvalidArgument for an id CheckWorkerId refuses. PostgreSQL: the rows are locked in
  // (job, line) order.
  [[nodiscard]] virtual Status ReleaseLeases(
      const std::string& worker, int64_t* released = nullptr,
      const std::vector<std::pair<int64_t, int64_t>>& keep = {}) = 0;
  // The job's finalize lease (one worker writes a job's output files): *got = true when it was
  // free, expired, or `worker`'s already, and it is now `worker`'s until `lease_seconds` from now
  // (renewed by Heartbeat); false when another worker holds an unexpired one (nothing changes).
  // One conditional UPDATE: of two workers asking at once, exactly one gets it (SQLite: the
  // write lock; PostgreSQL: the job row's lock, the second re-reading the row the first wrote).
  // NotFound for an unknown job; InvalidArgument for a bad worker id.
  [[nodiscard]] virtual Status ClaimJobFinalize(const std::string& worker, int64_t job,
                                                double lease_seconds, bool* got) = 0;
  // Gives the job's finalize lease back if `worker` holds it (expired or not); a no-op otherwise
  // (another's lease, none, an unknown job).
  [[nodiscard]] virtual Status ReleaseJobFinalize(const std::string& worker, int64_t job) = 0;

  // --- Finalizing: the job's results in line order, streamed (bounded memory), from one
  // consistent snapshot. `fn` may call other methods of this Store but not ForEachResult
  // (LLMQ_CHECK); `output` is valid only during the call. A non-OK status from `fn` stops the
  // walk and is returned. (PostgreSQL: the walk is a cursor in a transaction, the caller's or
  // its own; what `fn` writes commits with it.)
  using ResultVisitor = std::function<Status(int64_t line, bool is_error, std::string_view output,
                                             const ResultMetrics& m)>;
  [[nodiscard]] virtual Status ForEachResult(int64_t job, const ResultVisitor& fn) = 0;

 protected:
  Store() = default;
  // The engine's statements for the result-commit protocols (CommitResults,
  // CommitLeasedResults).
  virtual store_internal::ResultSteps ResultStepsFor() = 0;
};

namespace schema {
struct Migration;  // jobs/store_schema.h
}  // namespace schema

// What the engines share (jobs/store.cpp).
namespace store_internal {
// "batch_<16 hex>" from getrandom.
[[nodiscard]] Status RandomPublicId(std::string* out);
// Unix seconds now (wall_clock::Now: LLMQ_TEST_CLOCK in tests).
double Now();
// Unix seconds now by the real clock (CLOCK_REALTIME), whatever LLMQ_TEST_CLOCK says: the time
// of workers' heartbeats and of leases. A lease is a worker's liveness, renewed by a timer of
// real time; measured on a test clock that runs thousands of times as fast (or moves by whole
// engine steps) it would run out between two heartbeats, and the worker's own requests would be
// claimed again under it.
double LeaseNow();
// An engine's part of migrating its schema forward (RunMigrations drives it).
struct MigrationSteps {
  const char* engine;                       // in messages: "an SQLite database"
  const char* schema::Migration::*dialect;  // &schema::Migration::sqlite or ::postgres
  // meta.schema_version (0: no meta table, or no version yet), and whether the database has
  // tables but no meta table (not llmq's).
  std::function<Status(int* version, bool* foreign)> read_version;
  // Runs `body` in a write transaction (the engine's write lock held), committing it if it is OK.
  std::function<Status(const std::function<Status()>& body)> write_transaction;
  // Runs the SQL of a migration step (schema::kMigrations[to - 1] in the engine's dialect).
  std::function<Status(const char* sql, const std::string& what)> exec;
  // Records `version` as meta.schema_version.
  std::function<Status(int version)> write_version;
};
// The one migration protocol: reads the version; when it is not the latest, takes the write lock,
// reads it again (another connection may have migrated meanwhile), refuses a foreign database
// (InvalidArgument), a newer version (Unsupported) and, when !options.create, a database without
// llmq's tables (NotFound), then runs each missing step and records its version, all in one
// transaction. Sets *options.found_version. Messages name `location`.
[[nodiscard]] Status RunMigrations(const std::string& location, const Store::OpenOptions& options,
                                   const MigrationSteps& steps);
// What one CommitResults group adds to one job's row.
struct AddedToJob {
  int64_t completed = 0, failed = 0;
  int64_t prompt = 0, cached = 0, computed = 0, completion = 0;
  void Add(const Result& r);
};
// An engine's part of committing a group of results (CommitResultGroup drives it). Each step
// takes the whole group, in (job, line) order with no line twice. SQLite gives finish, insert and
// bump, each a statement a row (in process, cheap); PostgreSQL gives finish_insert_bump, one
// statement for all three (arrays and unnest: one round trip). Both give missing.
struct ResultSteps {
  // Runs `body` in a write transaction (the caller's, or its own committed when `body` is OK).
  std::function<Status(const std::function<Status()>& body)> write_transaction;
  // The same for leased results (PostgreSQL: without the write lock; the rows' locks fence).
  std::function<Status(const std::function<Status()>& body)> leased_transaction;
  // Sets each request of `rs` done or failed where it is pending and, when `worker` is set, leased
  // to *worker under generations[i] (sql::kFencedFinish); (*finished)[i] says which were.
  std::function<Status(const std::vector<const Result*>& rs, const std::string* worker,
                       const std::vector<int64_t>& generations, std::vector<char>* finished)>
      finish;
  // The index in `rs` of the first result whose request does not exist, or -1.
  std::function<Status(const std::vector<const Result*>& rs, int64_t* first_missing)> missing;
  // Inserts the rows of `rs` (committed_at `now`, finished_at r.metrics.finished_at or `now`)
  // but for lines that have one already; *inserted: how many were written.
  std::function<Status(const std::vector<const Result*>& rs, double now, int64_t* inserted)> insert;
  // Adds `c` to job `job`'s counts and token sums.
  std::function<Status(int64_t job, const AddedToJob& c)> bump;
  // finish, then insert of the finished, then bump of their jobs (in id order) by what was
  // inserted, in one: (*finished)[i] as finish's, *inserted as insert's.
  std::function<Status(const std::vector<const Result*>& rs, const std::string* worker,
                       const std::vector<int64_t>& generations, double now,
                       std::vector<char>* finished, int64_t* inserted)>
      finish_insert_bump;
};
// Store::CommitResults (worker null) and Store::CommitLeasedResults (worker set, generations[i]
// for results[i]), the same on both engines: one transaction; the requests finished first (their
// rows locked, in (job, line) order), then the results of exactly those inserted, then one bump
// per job; only a request really finished moves its job's counts ("counted once"). A line given
// twice counts once. *added (optional): how many were new; *dropped (optional): how many were
// not (ignored, or fenced). Messages name `location`.
[[nodiscard]] Status CommitResultGroup(const std::string& location,
                                       const std::vector<const Result*>& results,
                                       const std::string* worker,
                                       const std::vector<int64_t>& generations, int64_t* added,
                                       int64_t* dropped, const ResultSteps& steps);
// InvalidArgument naming `location` for a worker id that is empty or over 200 bytes.
[[nodiscard]] Status CheckWorkerId(const std::string& location, const std::string& id);
// CheckWorkerId, and InvalidArgument for a state over 32 bytes or a served model name that is
// empty or over 200 bytes.
[[nodiscard]] Status CheckWorkerInfo(const std::string& location, const WorkerInfo& w);
// WorkerInfo::served_models as the workers.served_models column holds it (a JSON array), and
// back: text that is not an array of strings reads as none (any model).
std::string ServedModelsJson(const std::vector<std::string>& models);
std::vector<std::string> ParseServedModels(std::string_view json);
// Claimed requests in plan_rank order (RETURNING gives them in no order).
void SortClaimed(std::vector<PendingRequest>* requests);
// meta.schema_version's text as a version: Corruption naming `location` when it is not one.
[[nodiscard]] Status ParseSchemaVersion(const std::string& location, const std::string& text,
                                        int* version);
}  // namespace store_internal

}  // namespace llmq::jobs
