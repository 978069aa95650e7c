// Helpers for tests over a real queue (jobs/store.h): a database per test, jobs ingested with
// one request per rank, results made up; and StoreTest, the typed fixture that runs a test on
// both engines (an SQLite file, a database on a real PostgreSQL server: tests/pg_server.h).
#pragma once

#include <sqlite3.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "jobs/store.h"
#include "tests/pg_server.h"
#include "tests/test_util.h"

namespace llmq::jobs {

inline std::string DbPath() {
  return testing::CurrentTestDir() + "/state/queue.db";
}

inline std::unique_ptr<Store> OpenOrDie(const std::string& path,
                                        Store::Check check = Store::Check::kIntegrity) {
  std::unique_ptr<Store> s;
  const Status st = Store::Open(path, &s, check);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

// Ingests a job named `name` with one request per rank (line i + 1 gets ranks[i]); lines listed
// in `bad` are refused at validation.
inline int64_t Ingest(Store* s, const std::string& name, const std::vector<int64_t>& ranks,
                      const std::vector<int64_t>& bad = {},
                      JobStatus status = JobStatus::kInProgress) {
  EXPECT_TRUE(s->Begin().ok());
  JobRecord job;
  job.name = name;
  job.sha256 = "sha-of-" + name;
  Status st = s->InsertJob(&job);
  EXPECT_TRUE(st.ok()) << st.message();
  for (size_t i = 0; i < ranks.size(); ++i) {
    NewRequest r;
    r.line = static_cast<int64_t>(i) + 1;
    r.custom_id = name + "-" + std::to_string(r.line);
    r.body = "{\"custom_id\": \"" + r.custom_id + "\"}";
    r.plan_rank = ranks[i];
    if (std::find(bad.begin(), bad.end(), r.line) != bad.end())
      r.error_output = "{\"error\": \"line " + std::to_string(r.line) + "\"}";
    st = s->InsertRequest(job.id, r);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  st = s->FinishIngest(job.id, status);
  EXPECT_TRUE(st.ok()) << st.message();
  st = s->Commit();
  EXPECT_TRUE(st.ok()) << st.message();
  return job.id;
}

inline Result MakeResult(int64_t job, int64_t line, bool is_error = false) {
  Result r;
  r.job = job;
  r.line = line;
  r.is_error = is_error;
  r.output = "{\"line\": " + std::to_string(line) + (is_error ? ", \"error\": 1}" : "}");
  r.metrics.prompt_tokens = 10 * line;
  r.metrics.completion_tokens = line;
  r.metrics.ttft_seconds = 0.001 * static_cast<double>(line);
  return r;
}

// Ingests one job whose lines i + 1 have rank ranks[i] and plan group groups[i].
inline int64_t IngestGroups(Store* s, const std::string& name, const std::vector<int64_t>& ranks,
                            const std::vector<int64_t>& groups, const std::string& model = "") {
  EXPECT_TRUE(s->Begin().ok());
  JobRecord job;
  job.name = name;
  job.model = model;
  job.sha256 = "sha-of-" + name;
  EXPECT_TRUE(s->InsertJob(&job).ok());
  for (size_t i = 0; i < ranks.size(); ++i) {
    NewRequest r;
    r.line = static_cast<int64_t>(i) + 1;
    r.custom_id = name + "-" + std::to_string(r.line);
    r.body = "{}";
    r.plan_rank = ranks[i];
    r.plan_group = groups[i];
    const Status st = s->InsertRequest(job.id, r);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  EXPECT_TRUE(s->FinishIngest(job.id, JobStatus::kInProgress).ok());
  EXPECT_TRUE(s->Commit().ok());
  return job.id;
}

// The lines of a claim, in its order.
inline std::vector<int64_t> Lines(const Claim& c) {
  std::vector<int64_t> lines;
  for (const PendingRequest& p : c.requests) lines.push_back(p.line);
  return lines;
}

// MakeResult for a claimed request, with `output`, under its lease generation.
inline LeasedResult Leased(const PendingRequest& p, const std::string& output) {
  LeasedResult lr;
  lr.result = MakeResult(p.job, p.line);
  lr.result.output = output;
  lr.lease_generation = p.lease_generation;
  return lr;
}

// A store of schema 6 back to schema 5: no job model, no served models (the same SQL on both
// engines).
#define LLMQ_BACK_TO_SCHEMA_FIVE                                      \
  "DROP INDEX requests_pending_by_job; DROP INDEX jobs_in_progress; " \
  "ALTER TABLE jobs DROP COLUMN model; ALTER TABLE workers DROP COLUMN served_models; "
inline constexpr const char* kBackToSchemaFive = LLMQ_BACK_TO_SCHEMA_FIVE;
// A store of schema 6 back to schema 4: besides, no worker state, no finalize leases.
#define LLMQ_BACK_TO_SCHEMA_FOUR                                                              \
  LLMQ_BACK_TO_SCHEMA_FIVE                                                                    \
  "DROP INDEX jobs_finalizing; ALTER TABLE jobs DROP COLUMN finalize_worker; "                \
  "ALTER TABLE jobs DROP COLUMN finalize_expires_at; ALTER TABLE workers DROP COLUMN state; " \
  "ALTER TABLE workers DROP COLUMN current_job; ALTER TABLE workers DROP COLUMN "             \
  "tokens_per_second; "
inline constexpr const char* kBackToSchemaFour = LLMQ_BACK_TO_SCHEMA_FOUR;

// The engines of the typed tests: a queue for the running test, and raw SQL on it (what another
// tool would do). RawQuery gives the first column of the first row as text ("" when none).
struct SqliteQueue {
  static constexpr const char* kName = "Sqlite";
  SqliteQueue() : location(DbPath()) {}  // a fresh folder for the running test
  explicit SqliteQueue(std::string path) : location(std::move(path)) {}  // an existing file
  std::string location;
  std::string why;  // never set: SQLite is always there
  std::string RawExec(const std::string& sql) const {
    std::filesystem::create_directories(std::filesystem::path(location).parent_path());
    sqlite3* db = nullptr;
    std::string err;
    if (sqlite3_open(location.c_str(), &db) != SQLITE_OK) err = sqlite3_errmsg(db);
    char* msg = nullptr;
    if (err.empty() && sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK)
      err = msg != nullptr ? msg : "failed";
    sqlite3_free(msg);
    sqlite3_close(db);
    return err;
  }
  std::string RawQuery(const std::string& sql) const {
    sqlite3* db = nullptr;
    std::string out;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_open(location.c_str(), &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr)
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }
};

struct PostgresQueue {
  static constexpr const char* kName = "Postgres";
  testing::PgTestDatabase db;  // its own database, dropped after the test
  std::string location = db.url();
  std::string why = db.why();
  std::string RawExec(const std::string& sql) const { return testing::PgExec(location, sql); }
  std::string RawQuery(const std::string& sql) const { return testing::PgQuery(location, sql); }
};

// A test of the store itself, run on both engines: TYPED_TEST(StoreTest, Name) makes
// StoreTest/Sqlite.Name and StoreTest/Postgres.Name (ctest starts the PostgreSQL server for the
// names that hold "Postgres"; without one they skip, or fail under LLMQ_REQUIRE_REFERENCES=1).
template <class Queue>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (q_.location.empty()) LLMQ_SKIP_OR_FAIL_MISSING(q_.why);
  }
  const std::string& Location() const { return q_.location; }
  std::unique_ptr<Store> Open(Store::Check check = Store::Check::kIntegrity) const {
    return OpenOrDie(q_.location, check);
  }
  void RawExec(const std::string& sql) const {
    const std::string err = q_.RawExec(sql);
    EXPECT_EQ(err, "") << sql;
  }
  std::string RawQuery(const std::string& sql) const { return q_.RawQuery(sql); }
  Queue q_;
};

struct EngineName {
  template <class Queue>
  static std::string GetName(int) {
    return Queue::kName;
  }
};
using Engines = ::testing::Types<SqliteQueue, PostgresQueue>;

}  // namespace llmq::jobs
