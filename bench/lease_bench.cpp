// The queue under many workers, without a model (issue 27, done-when 5: "the queue is not the
// bottleneck: claims and commits alone sustain >= 20,000 results/s on PostgreSQL and on SQLite").
// For each engine and each worker count: a fresh queue of --requests requests (one job, plan groups
// of --group in rank order, ~200-byte bodies) is ingested; then W workers (threads, each with its
// own Store connection, registered) loop ClaimNextGroup(--claim) -> CommitLeasedResults of made-up
// results (--output-bytes output lines) until nothing is left to claim. The clock runs from the
// workers' start to the last one's end; every request must be committed exactly once (checked).
//   lease_bench [--engines sqlite,postgres] [--workers 1,4] [--requests 100000] [--group 64]
//               [--claim 256] [--output-bytes 300] [--rounds 3] [--dir bench-models/lease-bench]
//               [--pg-url URL] [--unserved N]
// --unserved N: the job names model "served" and every worker claims with the model filter
// (model.served_names = [served]), behind a job of N requests of another model ranked first that
// no worker serves (issue 27: such a job must not slow the claims).
// Each configuration runs --rounds times, each on a fresh queue; the row shown is the median
// round's, with the slowest and fastest rounds' rates.
// PostgreSQL: without --pg-url, a throwaway server started with tests/pg_server.sh (Unix socket
// only; its settings are printed); with it, that database is used and EMPTIED of llmq's tables
// before each run.
#include <libpq-fe.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "jobs/store.h"

namespace fs = std::filesystem;
using namespace llmq::bench;
using llmq::Status;
using llmq::jobs::Store;

namespace {

struct Options {
  std::vector<std::string> engines = {"sqlite", "postgres"};
  std::vector<int> workers = {1, 4};
  int64_t requests = 100000;
  int group = 64, claim = 256, output_bytes = 300, rounds = 3;
  int64_t unserved = -1;  // -1: no model filter; else the size of the unserved job ahead
  std::string dir = "bench-models/lease-bench", pg_url;
};

// Ingests job `name` of `model`: `n` requests of ranks and lines from 1, plan groups of `group`,
// ranks after `rank_base`. Its id.
int64_t IngestJob(Store* s, const std::string& name, const std::string& model, int64_t n,
                  int64_t rank_base, int group) {
  Check(s->Begin(), "Begin");
  llmq::jobs::JobRecord job;
  job.name = name;
  job.sha256 = name;
  job.model = model;
  Check(s->InsertJob(&job), "InsertJob");
  llmq::jobs::NewRequest r;
  for (int64_t i = 1; i <= n; ++i) {
    r.line = i;
    r.custom_id = "request-" + std::to_string(i);
    r.body = "{\"custom_id\": \"" + r.custom_id + "\", " + std::string(160, 'b') + "}";
    r.plan_rank = rank_base + i;
    r.plan_group = rank_base + (i - 1) / group + 1;
    Check(s->InsertRequest(job.id, r), "InsertRequest");
  }
  Store::IngestTotals totals;
  totals.total = n;
  totals.max_rank = rank_base + n;
  Check(s->FinishIngest(job.id, llmq::jobs::JobStatus::kInProgress, &totals), "FinishIngest");
  Check(s->Commit(), "Commit");
  return job.id;
}

// Raw SQL on the PostgreSQL database (settings, emptying it); the first value of the first row.
std::string PgQuery(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  if (PQstatus(c) != CONNECTION_OK)
    Die("cannot connect to PostgreSQL: " + std::string(PQerrorMessage(c)));
  PGresult* r = PQexec(c, sql.c_str());
  const ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) Die(sql + ": " + PQresultErrorMessage(r));
  std::string out = st == PGRES_TUPLES_OK && PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(c);
  return out;
}

// A fresh queue: the location to open.
std::string FreshQueue(const Options& o, const std::string& engine, const std::string& pg_url) {
  if (engine == "sqlite") {
    const std::string db = fs::absolute(o.dir).string() + "/lease-bench.db";
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix, ec);
    return db;
  }
  PgQuery(pg_url,
          "SET client_min_messages = warning; DROP TABLE IF EXISTS results, requests, workers, "
          "jobs, meta CASCADE");
  return pg_url;
}

// One made-up output line of about `bytes` bytes, as a finished chat line looks.
std::string Output(int64_t line, int bytes) {
  std::string s = "{\"id\": \"batch_req_" + std::to_string(line) + "\", \"custom_id\": \"request-" +
                  std::to_string(line) +
                  "\", \"response\": {\"status_code\": 200, \"body\": {\"choices\": [{\"message\": "
                  "{\"role\": \"assistant\", \"content\": \"";
  const std::string tail = "\"}}]}}, \"error\": null}";
  while (static_cast<int>(s.size() + tail.size()) < bytes) s += "word ";
  return s + tail;
}

struct Row {
  std::string engine;
  int workers = 0;
  double ingest_s = 0, seconds = 0;
  double claim_s = 0, commit_s = 0;  // summed over the workers
  int64_t results = 0, claims = 0, fenced = 0;
};

Row RunOnce(const Options& o, const std::string& engine, int workers, const std::string& pg_url) {
  Row row;
  row.engine = engine;
  row.workers = workers;
  const std::string location = FreshQueue(o, engine, pg_url);
  int64_t job_id = 0;
  {
    std::unique_ptr<Store> s;
    Check(Store::Open(location, &s), "Store::Open");
    const int64_t ahead = std::max<int64_t>(0, o.unserved);
    if (ahead > 0) IngestJob(s.get(), "unserved.jsonl", "unserved", ahead, 0, o.group);
    const auto t0 = Clock::now();
    job_id = IngestJob(s.get(), "lease-bench.jsonl", o.unserved >= 0 ? "served" : "", o.requests,
                       ahead, o.group);
    row.ingest_s = Since(t0);
  }
  const std::vector<std::string> models =
      o.unserved >= 0 ? std::vector<std::string>{"served"} : std::vector<std::string>{};
  std::vector<std::unique_ptr<Store>> stores(workers);
  for (int w = 0; w < workers; ++w) {
    Check(Store::Open(location, &stores[w], Store::Check::kSkip), "Store::Open");
    stores[w]->SetBusyTimeout(60000);
    Check(stores[w]->SetCacheBytes(8 << 20), "SetCacheBytes");
    llmq::jobs::WorkerInfo info;
    info.id = "bench-" + std::to_string(w);
    info.host = "localhost";
    info.state = "running";
    Check(stores[w]->RegisterWorker(info), "RegisterWorker");
  }
  std::vector<int64_t> added(workers, 0), fenced(workers, 0), claims(workers, 0);
  std::vector<double> claim_s(workers, 0), commit_s(workers, 0);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      ready.fetch_add(1);
      while (ready.load() < workers) std::this_thread::yield();
      Store* s = stores[w].get();
      const std::string me = "bench-" + std::to_string(w);
      std::vector<llmq::jobs::LeasedResult> results;
      for (;;) {
        llmq::jobs::Claim c;
        const auto t_claim = Clock::now();
        Check(s->ClaimNextGroup(me, 300, o.claim, models, &c), "ClaimNextGroup");
        claim_s[w] += Since(t_claim);
        if (c.requests.empty()) return;
        ++claims[w];
        results.clear();
        for (const llmq::jobs::PendingRequest& p : c.requests) {
          llmq::jobs::LeasedResult lr;
          lr.result.job = p.job;
          lr.result.line = p.line;
          lr.result.output = Output(p.line, o.output_bytes);
          lr.result.metrics.prompt_tokens = 100;
          lr.result.metrics.completion_tokens = 50;
          lr.lease_generation = p.lease_generation;
          results.push_back(std::move(lr));
        }
        int64_t a = 0, f = 0;
        const auto t_commit = Clock::now();
        Check(s->CommitLeasedResults(me, results, &a, &f), "CommitLeasedResults");
        commit_s[w] += Since(t_commit);
        added[w] += a;
        fenced[w] += f;
      }
    });
  for (std::thread& t : threads) t.join();
  row.seconds = Since(t0);
  for (int w = 0; w < workers; ++w) {
    row.results += added[w];
    row.fenced += fenced[w];
    row.claims += claims[w];
    row.claim_s += claim_s[w];
    row.commit_s += commit_s[w];
  }
  llmq::jobs::JobRecord job;
  Check(stores[0]->GetJob(job_id, &job), "GetJob");
  if (row.results != o.requests || job.completed != o.requests || row.fenced != 0)
    Die(engine + ": " + std::to_string(row.results) + " results committed, job completed " +
        std::to_string(job.completed) + ", fenced " + std::to_string(row.fenced) + ", of " +
        std::to_string(o.requests) + " requests");
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  Flags(argc, argv,
        "usage: lease_bench [--engines sqlite,postgres] [--workers 1,4] [--requests 100000] "
        "[--group 64] [--claim 256] [--output-bytes 300] [--rounds 3] "
        "[--dir bench-models/lease-bench] [--pg-url URL] [--unserved N]")
      .Get("--engines", &o.engines)
      .Get("--workers", &o.workers)
      .Get("--requests", &o.requests)
      .Get("--group", &o.group)
      .Get("--claim", &o.claim)
      .Get("--output-bytes", &o.output_bytes)
      .Get("--rounds", &o.rounds)
      .Get("--dir", &o.dir)
      .Get("--pg-url", &o.pg_url)
      .Get("--unserved", &o.unserved)
      .Done();
  fs::create_directories(o.dir);
  std::string pg_url = o.pg_url, pg_dir;
  bool want_pg = false;
  for (const std::string& e : o.engines) want_pg |= e == "postgres";
  if (want_pg && pg_url.empty()) {
    pg_dir = fs::absolute(o.dir).string() + "/pgserver";
    const std::string cmd = std::string(LLMQ_SOURCE_DIR) + "/tests/pg_server.sh start " + pg_dir;
    if (std::system(cmd.c_str()) != 0 || !fs::exists(pg_dir + "/.s.PGSQL.5432"))
      Die("no PostgreSQL server (tests/pg_server.sh start " + pg_dir + ")");
    pg_url = "postgresql:///postgres?host=" + pg_dir + "&user=postgres";
  }

  std::printf("# lease_bench: %s\n\n", Stamp().c_str());
  std::printf(
      "%lld requests (one job, plan groups of %d, ~200-byte bodies); each worker a thread with its "
      "own connection: ClaimNextGroup(max %d) -> CommitLeasedResults of ~%d-byte output lines "
      "until nothing is left; seconds from the workers' start to the last one's end\n",
      static_cast<long long>(o.requests), o.group, o.claim, o.output_bytes);
  if (o.unserved >= 0)
    std::printf(
        "the job names model \"served\" and every claim filters by it (model.served_names), behind "
        "a job of %lld requests of a model no worker serves, ranked first\n",
        static_cast<long long>(o.unserved));
  for (const std::string& e : o.engines) {
    if (e == "sqlite")
      std::printf(
          "SQLite %s: a file in %s, WAL, synchronous=FULL (Store::Open's), 16 KiB pages, one "
          "writer at a time (BEGIN IMMEDIATE, busy_timeout)\n",
          sqlite3_libversion(), fs::absolute(o.dir).string().c_str());
    else if (e == "postgres")
      std::printf(
          "PostgreSQL %s over a Unix socket (%s): fsync=%s, synchronous_commit=%s, "
          "full_page_writes=%s, shared_buffers=%s\n",
          PgQuery(pg_url, "SHOW server_version").c_str(),
          pg_dir.empty() ? "--pg-url" : "tests/pg_server.sh", PgQuery(pg_url, "SHOW fsync").c_str(),
          PgQuery(pg_url, "SHOW synchronous_commit").c_str(),
          PgQuery(pg_url, "SHOW full_page_writes").c_str(),
          PgQuery(pg_url, "SHOW shared_buffers").c_str());
    else
      Die("unknown engine " + e);
  }
  std::printf("\n| %-8s | %7s | %5s | %7s | %6s | %8s | %7s | %9s | %9s | %9s | %-15s | %-11s |\n",
              "engine", "workers", "claim", "results", "claims", "ingest s", "seconds", "claim ms",
              "commit ms", "results/s", "rounds' range", ">= 20,000/s");
  std::printf(
      "|----------|---------|-------|---------|--------|----------|---------|-----------|----------"
      "-|"
      "-----------|-----------------|-------------|\n");
  std::fflush(stdout);
  for (const std::string& e : o.engines)
    for (int w : o.workers) {
      // Each configuration --rounds times on a fresh queue: the row of the median rate, with the
      // slowest and fastest rounds' rates beside it (the machine may be shared).
      std::vector<Row> rows;
      for (int i = 0; i < o.rounds; ++i) rows.push_back(RunOnce(o, e, w, pg_url));
      std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        return a.results / a.seconds < b.results / b.seconds;
      });
      const Row& r = rows[rows.size() / 2];
      const double rate = r.results / r.seconds;
      // claim ms, commit ms: the mean time of one call (per worker: calls overlap across workers).
      std::printf(
          "| %-8s | %7d | %5d | %7lld | %6lld | %8.2f | %7.2f | %9.2f | %9.2f | %9.0f | "
          "%7.0f-%-7.0f "
          "| %-11s |\n",
          r.engine.c_str(), r.workers, o.claim, static_cast<long long>(r.results),
          static_cast<long long>(r.claims), r.ingest_s, r.seconds, 1e3 * r.claim_s / r.claims,
          1e3 * r.commit_s / r.claims, rate, rows.front().results / rows.front().seconds,
          rows.back().results / rows.back().seconds, rate >= 20000 ? "met" : "MISSED");
      std::fflush(stdout);
    }
  if (!pg_dir.empty()) {
    const std::string cmd = std::string(LLMQ_SOURCE_DIR) + "/tests/pg_server.sh stop " + pg_dir;
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "lease_bench: stopping the server failed\n");
  }
  return 0;
}
