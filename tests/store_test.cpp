// Tests for jobs/store: every statement on both engines (StoreTest/Sqlite.*, StoreTest/Postgres.*:
// an SQLite file per test, a database per test on a real PostgreSQL server), reopened, shared by
// two connections and by threads, locked, migrated, and a 100,000-request ingest; then what only
// one engine has (a damaged SQLite file, an unreachable server, a lost connection).
#include "jobs/store.h"
#include "jobs/pg_store.h"
#include "tests/store_util.h"
#include "tests/test_util.h"

#include <sqlite3.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace llmq::jobs {
namespace {

namespace fs = std::filesystem;

// Raw SQL on an SQLite file (the tests of what only SQLite has).
std::string RawQuery(const std::string& path, const std::string& sql) {
  return SqliteQueue(path).RawQuery(sql);
}

TYPED_TEST_SUITE(StoreTest, Engines, EngineName);

// Every pending request, page by page of `page` rows.
std::vector<PendingRequest> AllPending(Store* s, int page) {
  std::vector<PendingRequest> all, batch;
  int64_t after = 0;
  for (;;) {
    const Status st = s->NextPending(after, page, &batch);
    EXPECT_TRUE(st.ok()) << st.message();
    if (batch.empty()) return all;
    EXPECT_LE(batch.size(), static_cast<size_t>(page));
    after = batch.back().plan_rank;
    all.insert(all.end(), batch.begin(), batch.end());
  }
}

TEST(Store, OpenCreatesTheFileItsFolderAndTheSchema) {
  const std::string path = DbPath();
  auto s = OpenOrDie(path);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->location(), path);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(RawQuery(path, "SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
  EXPECT_EQ(Store::SchemaVersion(), 6);
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "wal");
  // The schema itself, on both engines: StoreTest.OpenOnAnEmptyDatabaseMigratesFromNothing.
}

TEST(Store, StillAtLocationTellsARemovedOrReplacedFile) {
  const std::string path = DbPath();
  auto s = OpenOrDie(path);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->StillAtLocation().ok());
  fs::copy_file(path, path + ".copy");
  fs::rename(path + ".copy", path);
  Status st = s->StillAtLocation();
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_EQ(st.message().rfind(path + ": replaced by another file while it was open", 0), 0u)
      << st.message();
  fs::remove(path);
  st = s->StillAtLocation();
  EXPECT_EQ(st.message().rfind(path + ": removed while it was open", 0), 0u) << st.message();
}

TYPED_TEST(StoreTest, ReopenKeepsEverything) {
  int64_t id = 0;
  JobRecord before;
  {
    auto s = this->Open();
    id = Ingest(s.get(), "a.jsonl", {1, 2, 3}, {2});
    ASSERT_TRUE(s->CommitResults({MakeResult(id, 1)}).ok());
    ASSERT_TRUE(s->MarkJobStarted(id, 1234.5).ok());
    ASSERT_TRUE(s->GetJob(id, &before).ok());
  }
  auto s = this->Open();
  JobRecord after;
  ASSERT_TRUE(s->GetJob(id, &after).ok());
  EXPECT_EQ(after.public_id, before.public_id);
  EXPECT_EQ(after.name, "a.jsonl");
  EXPECT_EQ(after.sha256, "sha-of-a.jsonl");
  EXPECT_EQ(after.status, JobStatus::kInProgress);
  EXPECT_EQ(after.total, 3);
  EXPECT_EQ(after.completed, 1);
  EXPECT_EQ(after.failed, 1);
  EXPECT_EQ(after.created_at, before.created_at);
  EXPECT_EQ(after.started_at, 1234.5);
  const auto pending = AllPending(s.get(), 10);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].line, 3);
  EXPECT_EQ(pending[0].custom_id, "a.jsonl-3");
  EXPECT_EQ(pending[0].body, "{\"custom_id\": \"a.jsonl-3\"}");
  std::vector<int64_t> lines;
  ASSERT_TRUE(s->ForEachResult(id, [&](int64_t line, bool, std::string_view, const ResultMetrics&) {
                 lines.push_back(line);
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(lines, (std::vector<int64_t>{1, 2}));
}

TYPED_TEST(StoreTest, NewerSchemaIsRefused) {
  this->Open();
  this->RawExec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  std::unique_ptr<Store> s;
  const Status st = Store::Open(this->Location(), &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find(this->Location()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("99"), std::string::npos) << st.message();
  EXPECT_FALSE(s);
}

TEST(Store, GarbageFileIsCorruption) {
  const std::string path = DbPath();
  fs::create_directories(fs::path(path).parent_path());
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 8192; ++i) f.put(static_cast<char>((i * 7919) % 251));
  }
  std::unique_ptr<Store> s;
  const Status st = Store::Open(path, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.message();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_EQ(fs::file_size(path), 8192u) << "a refused file is never written";
}

// A queue of one job of 3000 requests at `path`, closed (its WAL checkpointed into the file).
void WriteBigQueue(const std::string& path) {
  auto s = OpenOrDie(path);
  std::vector<int64_t> ranks(3000);
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int64_t>(i) + 1;
  Ingest(s.get(), "big.jsonl", ranks);
}

TEST(Store, TruncatedDatabaseIsCorruption) {
  const std::string path = DbPath();
  WriteBigQueue(path);  // closed: the WAL is checkpointed into the file and removed
  ASSERT_FALSE(fs::exists(path + "-wal"));
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 64u * 1024);
  fs::resize_file(path, size / 2);
  std::unique_ptr<Store> s;
  const Status st = Store::Open(path, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.message();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

// A page damaged in the middle of the requests: the check refuses the file; an open that skips
// it (a second connection, llmq status) does not read every page, and the jobs still read.
TEST(Store, OnlyTheCheckedOpenReadsEveryPage) {
  const std::string path = DbPath();
  WriteBigQueue(path);
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size * 3 / 4 / 16384 * 16384));  // a page's start
    for (int i = 0; i < 16384; ++i) f.put(static_cast<char>((i * 7919) % 251));
  }
  std::unique_ptr<Store> s;
  const Status st = Store::Open(path, &s);
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.message();
  ASSERT_TRUE(Store::Open(path, &s, Store::Check::kSkip).ok());
  std::vector<JobRecord> jobs;
  ASSERT_TRUE(s->ListJobs(&jobs).ok());
  EXPECT_EQ(jobs.size(), 1u);
}

// A database with tables but no meta table is someone else's: never written to.
TYPED_TEST(StoreTest, ForeignDatabaseIsRefused) {
  this->RawExec("CREATE TABLE photos (id INTEGER PRIMARY KEY)");
  std::unique_ptr<Store> s;
  const Status st = Store::Open(this->Location(), &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("not llmq's"), std::string::npos) << st.message();
  EXPECT_EQ(this->RawQuery("SELECT count(*) FROM photos"), "0");
  EXPECT_EQ(this->RawQuery("SELECT count(*) FROM meta"), "") << "no meta table was made";
  EXPECT_EQ(this->RawQuery("SELECT count(*) FROM jobs"), "") << "no jobs table was made";
}

TEST(Store, UnopenablePathsAreRefused) {
  std::unique_ptr<Store> s;
  Status st = Store::Open("/etc/passwd/queue.db", &s);  // fails for root too
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("/etc/passwd/queue.db"), std::string::npos) << st.message();
  const std::string dir = testing::CurrentTestDir();
  st = Store::Open(dir, &s);  // a folder where the file should be
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(dir), std::string::npos) << st.message();
  st = Store::Open("/proc/version", &s);  // not writable, for root too
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/proc/version"), std::string::npos) << st.message();
  EXPECT_EQ(Store::Open("", &s).code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(s);
}

TYPED_TEST(StoreTest, IngestAndDuplicateDetection) {
  auto s = this->Open();
  const int64_t id = Ingest(s.get(), "docs.jsonl", {5, 6, 7, 8}, {3});
  JobRecord job;
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_TRUE(std::regex_match(job.public_id, std::regex("batch_[0-9a-f]{16}"))) << job.public_id;
  EXPECT_GT(job.created_at, 1.6e9);
  EXPECT_EQ(job.total, 4);
  EXPECT_EQ(job.failed, 1);
  EXPECT_EQ(job.completed, 0);

  std::optional<JobRecord> found;
  ASSERT_TRUE(s->FindJob("docs.jsonl", "sha-of-docs.jsonl", &found).ok());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, id);
  ASSERT_TRUE(s->FindJob("docs.jsonl", "another-sha", &found).ok());
  EXPECT_FALSE(found.has_value()) << "same name, new content: a new job";

  JobRecord again;
  again.name = "docs.jsonl";
  again.sha256 = "sha-of-docs.jsonl";
  const Status st = s->InsertJob(&again);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("docs.jsonl"), std::string::npos) << st.message();

  JobRecord by_public;
  ASSERT_TRUE(s->GetJobByPublicId(job.public_id, &by_public).ok());
  EXPECT_EQ(by_public.id, id);
  EXPECT_EQ(s->GetJobByPublicId("batch_0000000000000000", &by_public).code(),
            Status::Code::kNotFound);

  // The refused line is finished already: its error line is its result.
  std::string output;
  ASSERT_TRUE(s->ForEachResult(id, [&](int64_t line, bool is_error, std::string_view out,
                                       const ResultMetrics&) {
                 EXPECT_EQ(line, 3);
                 EXPECT_TRUE(is_error);
                 output = out;
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(output, "{\"error\": \"line 3\"}");
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(id, &pending).ok());
  EXPECT_EQ(pending, 3);
  int64_t rank = 0;
  ASSERT_TRUE(s->MaxPlanRank(&rank).ok());
  EXPECT_EQ(rank, 8);
}

TYPED_TEST(StoreTest, DuplicateLineAndUnknownJobAreRefused) {
  auto s = this->Open();
  const int64_t id = Ingest(s.get(), "a.jsonl", {1});
  NewRequest r;
  r.line = 1;
  r.plan_rank = 2;
  Status st = s->InsertRequest(id, r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  st = s->InsertRequest(id + 100, r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  EXPECT_FALSE(s->InTransaction());
}

// Inside the ingest's transaction, what InsertRequest wrote is seen by the transaction's own reads
// (PostgreSQL sends the rows in batches: a read sends what is waiting first), and a duplicate line
// fails the transaction at the latest at its Commit.
TYPED_TEST(StoreTest, AnIngestSeesItsOwnRequestsAndADuplicateFailsItByCommit) {
  constexpr int kLines = 2500;  // more than one PostgreSQL batch
  auto s = this->Open();
  ASSERT_TRUE(s->Begin().ok());
  JobRecord job;
  job.name = "big.jsonl";
  job.sha256 = "big";
  ASSERT_TRUE(s->InsertJob(&job).ok());
  NewRequest r;
  for (int i = 1; i <= kLines; ++i) {
    r.line = i;
    r.custom_id = "c" + std::to_string(i);
    r.body = "{\"quote\": \"\\\"\", \"n\": " + std::to_string(i) + "}";
    r.plan_rank = i;
    r.error_output.reset();
    if (i == 7) r.error_output = "{\"error\": \"refused\"}";
    ASSERT_TRUE(s->InsertRequest(job.id, r).ok());
  }
  std::string id;
  ASSERT_TRUE(s->GetCustomId(job.id, kLines, &id).ok());
  EXPECT_EQ(id, "c" + std::to_string(kLines));
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(job.id, &pending).ok());
  EXPECT_EQ(pending, kLines - 1);
  std::vector<PendingRequest> first;
  ASSERT_TRUE(s->PendingOfJob(job.id, 0, 1, &first).ok());
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].body, "{\"quote\": \"\\\"\", \"n\": 1}");
  // A duplicate line: refused by InsertRequest, or by the Commit after it.
  r.line = 5;
  r.error_output.reset();
  Status st = s->InsertRequest(job.id, r);
  if (st.ok()) st = s->Commit();
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  s->Rollback();
  EXPECT_FALSE(s->InTransaction());
  std::vector<JobRecord> all;
  ASSERT_TRUE(s->ListJobs(&all).ok());
  EXPECT_TRUE(all.empty()) << "rolled back as one";
  // The same ingest without the duplicate commits, the refused line with its error result.
  const int64_t again = Ingest(s.get(), "small.jsonl", {1, 2, 3}, {2});
  ASSERT_TRUE(s->CountPending(again, &pending).ok());
  EXPECT_EQ(pending, 2);
  ASSERT_TRUE(s->GetJob(again, &job).ok());
  EXPECT_EQ(job.failed, 1);
}

TYPED_TEST(StoreTest, RolledBackIngestLeavesNothing) {
  auto s = this->Open();
  ASSERT_TRUE(s->Begin().ok());
  EXPECT_TRUE(s->InTransaction());
  JobRecord job;
  job.name = "x";
  job.sha256 = "y";
  ASSERT_TRUE(s->InsertJob(&job).ok());
  s->Rollback();
  s->Rollback();  // none open: no-op
  std::vector<JobRecord> jobs;
  ASSERT_TRUE(s->ListJobs(&jobs).ok());
  EXPECT_TRUE(jobs.empty());
  EXPECT_FALSE(s->Commit().ok()) << "no transaction is open";
}

TYPED_TEST(StoreTest, NextPendingPagesByRankAcrossJobs) {
  auto s = this->Open();
  // Interleaved ranks: the feeding order crosses jobs.
  const int64_t a = Ingest(s.get(), "a.jsonl", {1, 4, 5, 9, 10});
  const int64_t b = Ingest(s.get(), "b.jsonl", {2, 3, 6, 7, 8}, {4});  // rank 7 refused
  const auto all = AllPending(s.get(), 2);
  std::vector<int64_t> ranks;
  for (const auto& p : all) ranks.push_back(p.plan_rank);
  EXPECT_EQ(ranks, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 8, 9, 10}));
  EXPECT_EQ(all[1].job, b);
  EXPECT_EQ(all[1].line, 1);
  EXPECT_EQ(all[0].job, a);

  // Attempts are counted and read back.
  ASSERT_TRUE(s->MarkAttempted({{a, 1}, {b, 1}, {a, 1}}).ok());
  std::vector<PendingRequest> page;
  ASSERT_TRUE(s->NextPending(0, 2, &page).ok());
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].attempts, 2);
  EXPECT_EQ(page[1].attempts, 1);

  // A cancel request hides job a; a job not in progress is hidden too.
  ASSERT_TRUE(s->RequestCancel(a).ok());
  ranks.clear();
  for (const auto& p : AllPending(s.get(), 3)) ranks.push_back(p.plan_rank);
  EXPECT_EQ(ranks, (std::vector<int64_t>{2, 3, 6, 8}));
  JobRecord job;
  ASSERT_TRUE(s->GetJob(a, &job).ok());
  EXPECT_TRUE(job.cancel_requested);
  ASSERT_TRUE(s->SetJobStatus(b, JobStatus::kFinalizing).ok());
  EXPECT_TRUE(AllPending(s.get(), 3).empty());
  const int64_t c = Ingest(s.get(), "c.jsonl", {11}, {}, JobStatus::kValidating);
  EXPECT_TRUE(AllPending(s.get(), 3).empty()) << "validating: not fed yet";
  ASSERT_TRUE(s->SetJobStatus(c, JobStatus::kInProgress).ok());
  EXPECT_EQ(AllPending(s.get(), 3).size(), 1u);
}

TYPED_TEST(StoreTest, CommitResultsCountsEachResultOnce) {
  auto s = this->Open();
  const int64_t id = Ingest(s.get(), "a.jsonl", {1, 2, 3, 4}, {4});
  int64_t added = -1;
  ASSERT_TRUE(s->CommitResults({MakeResult(id, 1), MakeResult(id, 2, true)}, &added).ok());
  EXPECT_EQ(added, 2);
  // The same results again, a duplicate inside one group, and the ingest-refused line 4.
  Result changed = MakeResult(id, 1);
  changed.output = "a different output";
  ASSERT_TRUE(s->CommitResults({changed, MakeResult(id, 2, true), MakeResult(id, 3),
                                MakeResult(id, 3), MakeResult(id, 4)},
                               &added)
                  .ok());
  EXPECT_EQ(added, 1);
  JobRecord job;
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.completed, 2);
  EXPECT_EQ(job.failed, 2);
  EXPECT_EQ(job.total, 4);
  int64_t pending = -1;
  ASSERT_TRUE(s->CountPending(id, &pending).ok());
  EXPECT_EQ(pending, 0);
  std::vector<std::string> outputs;
  ASSERT_TRUE(s->ForEachResult(id, [&](int64_t, bool, std::string_view out, const ResultMetrics&) {
                 outputs.emplace_back(out);
                 return Status::Ok();
               }).ok());
  ASSERT_EQ(outputs.size(), 4u);
  EXPECT_EQ(outputs[0], "{\"line\": 1}") << "never an overwrite";
}

// The job's token totals move with its results, once per new result, in the same transaction.
TYPED_TEST(StoreTest, JobTotalsCountEachNewResultOnce) {
  auto s = this->Open();
  const int64_t a = Ingest(s.get(), "a.jsonl", {1, 2, 3});
  const int64_t b = Ingest(s.get(), "b.jsonl", {4, 5});
  auto with_cache = [](Result r) {
    r.metrics.cached_tokens = 3 * r.line;
    r.metrics.computed_tokens = 7 * r.line;
    return r;
  };
  ASSERT_TRUE(
      s->CommitResults({with_cache(MakeResult(a, 1)), with_cache(MakeResult(b, 2))}, nullptr).ok());
  // Line 1 of a again (ignored), line 3 of a new (an error line counts its tokens too).
  ASSERT_TRUE(
      s->CommitResults({with_cache(MakeResult(a, 1)), with_cache(MakeResult(a, 3, true))}, nullptr)
          .ok());
  JobTotals t;
  ASSERT_TRUE(s->GetJobTotals(a, &t).ok());
  EXPECT_EQ(t.prompt_tokens, 10 + 30);
  EXPECT_EQ(t.completion_tokens, 1 + 3);
  EXPECT_EQ(t.cached_tokens, 3 + 9);
  EXPECT_EQ(t.computed_tokens, 7 + 21);
  ASSERT_TRUE(s->GetJobTotals(b, &t).ok());
  EXPECT_EQ(t.prompt_tokens, 20);
  EXPECT_EQ(t.completion_tokens, 2);
  // A group that fails as a whole moves nothing.
  EXPECT_FALSE(s->CommitResults({MakeResult(b, 1), MakeResult(b, 99)}, nullptr).ok());
  ASSERT_TRUE(s->GetJobTotals(b, &t).ok());
  EXPECT_EQ(t.prompt_tokens, 20);
  EXPECT_EQ(s->GetJobTotals(12345, &t).code(), Status::Code::kNotFound);
}

// A read transaction sees one snapshot: the jobs' counts and their totals, read apart, agree while
// another connection commits results (llmq status divides the one by the other).
TYPED_TEST(StoreTest, AReadTransactionSeesOneSnapshot) {
  auto reader = this->Open();
  auto writer = this->Open();
  const int64_t a = Ingest(writer.get(), "a.jsonl", {1, 2, 3});
  ASSERT_TRUE(writer->CommitResults({MakeResult(a, 1)}).ok());
  ASSERT_TRUE(reader->BeginRead().ok());
  std::vector<JobRecord> all;
  ASSERT_TRUE(reader->ListJobs(&all).ok());
  ASSERT_TRUE(writer->CommitResults({MakeResult(a, 2), MakeResult(a, 3)}).ok())
      << "a reader does not hold the writer up";
  JobTotals t;
  ASSERT_TRUE(reader->GetJobTotals(a, &t).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].completed, 1);
  EXPECT_EQ(t.completion_tokens, 1) << "the totals as they were with the counts read";
  ASSERT_TRUE(reader->Commit().ok());
  ASSERT_TRUE(reader->GetJobTotals(a, &t).ok());
  EXPECT_EQ(t.completion_tokens, 1 + 2 + 3);
}

// A store of schema 4 back to schema 3: no workers, no plan groups, no leases (the same SQL on
// both engines; kBackToSchemaFour first).
constexpr const char* kBackToSchemaThree = LLMQ_BACK_TO_SCHEMA_FOUR
    "DROP TABLE workers; DROP INDEX requests_pending_by_group; DROP INDEX requests_leased; "
    "ALTER TABLE requests DROP COLUMN plan_group; ALTER TABLE requests DROP COLUMN lease_worker; "
    "ALTER TABLE requests DROP COLUMN lease_generation; "
    "ALTER TABLE requests DROP COLUMN lease_expires_at; ";

// A store of schema 3 gets its workers table, and each request its own plan group (its rank) and
// no lease.
TYPED_TEST(StoreTest, MigrationToSchemaFourGivesEachRequestItsOwnGroupAndNoLease) {
  {
    auto s = this->Open();
    Ingest(s.get(), "a.jsonl", {7, 8});
  }
  this->RawExec(std::string(kBackToSchemaThree) +
                "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  auto s = this->Open();
  EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
  EXPECT_EQ(this->RawQuery("SELECT count(*) FROM requests WHERE plan_group = plan_rank "
                           "AND lease_worker IS NULL AND lease_generation = 0"),
            "2");
  std::vector<WorkerInfo> workers;
  ASSERT_TRUE(s->ListWorkers(&workers).ok());
  EXPECT_TRUE(workers.empty());
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 60, 10, &c).ok());
  ASSERT_EQ(c.requests.size(), 1u) << "a request of its own group";
  EXPECT_EQ(c.requests[0].plan_rank, 7);
}

// A store of schema 1 (no totals in the jobs row) gets them summed from its results on open.
TYPED_TEST(StoreTest, MigrationToSchemaTwoSumsTheResultsIntoTheJobs) {
  int64_t a = 0;
  {
    auto s = this->Open();
    a = Ingest(s.get(), "a.jsonl", {1, 2, 3}, {3});
    ASSERT_TRUE(s->CommitResults({MakeResult(a, 1), MakeResult(a, 2)}, nullptr).ok());
  }
  // Back to schema 1, as a store written by the previous release is.
  this->RawExec(
      std::string(kBackToSchemaThree) +
      "ALTER TABLE jobs DROP COLUMN prompt_tokens; ALTER TABLE jobs DROP COLUMN cached_tokens; "
      "ALTER TABLE jobs DROP COLUMN computed_tokens; "
      "ALTER TABLE jobs DROP COLUMN completion_tokens; "
      "ALTER TABLE results DROP COLUMN finished_at; "
      "UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  auto s = this->Open();
  EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
  JobTotals t;
  ASSERT_TRUE(s->GetJobTotals(a, &t).ok());
  EXPECT_EQ(t.prompt_tokens, 10 + 20);
  EXPECT_EQ(t.completion_tokens, 1 + 2);
  ASSERT_TRUE(s->CommitResults({MakeResult(a, 1), MakeResult(a, 2), MakeResult(a, 3)}, nullptr)
                  .ok());  // line 3 was refused at ingest: it already has its (error) result
  ASSERT_TRUE(s->GetJobTotals(a, &t).ok());
  EXPECT_EQ(t.prompt_tokens, 30);
}

// Each result keeps when its request finished (the caller's time, else the commit's); a store of
// schema 2 gets its results' commit times.
TYPED_TEST(StoreTest, ResultsKeepWhenTheyFinishedAndMigrationToSchemaThreeTakesTheCommitTime) {
  int64_t a = 0;
  {
    auto s = this->Open();
    a = Ingest(s.get(), "a.jsonl", {1, 2, 3});
    Result r1 = MakeResult(a, 1);
    r1.metrics.finished_at = 1234.5;
    ASSERT_TRUE(s->CommitResults({r1, MakeResult(a, 2)}, nullptr).ok());
    std::vector<double> finished;
    ASSERT_TRUE(s->ForEachResult(a, [&](int64_t, bool, std::string_view, const ResultMetrics& m) {
                   finished.push_back(m.finished_at);
                   return Status::Ok();
                 }).ok());
    ASSERT_EQ(finished.size(), 2u);
    EXPECT_EQ(finished[0], 1234.5);
    EXPECT_EQ(this->RawQuery("SELECT CASE WHEN finished_at = committed_at THEN 1 ELSE 0 END "
                             "FROM results WHERE line = 2"),
              "1")
        << "no time given: the commit's";
  }
  this->RawExec(std::string(kBackToSchemaThree) +
                "ALTER TABLE results DROP COLUMN finished_at; "
                "UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  auto s = this->Open();
  EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
  EXPECT_EQ(this->RawQuery("SELECT count(*) FROM results WHERE finished_at = committed_at"), "2");
}

TYPED_TEST(StoreTest, ResultForNoRequestFailsTheWholeGroup) {
  auto s = this->Open();
  const int64_t id = Ingest(s.get(), "a.jsonl", {1, 2});
  const Status st = s->CommitResults({MakeResult(id, 1), MakeResult(id, 99)});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("line 99"), std::string::npos) << st.message();
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(id, &pending).ok());
  EXPECT_EQ(pending, 2) << "the group is rolled back as one";
  EXPECT_FALSE(s->InTransaction());
}

TYPED_TEST(StoreTest, StatusTransitionsAndTimes) {
  auto s = this->Open();
  const int64_t id = Ingest(s.get(), "a.jsonl", {1}, {}, JobStatus::kValidating);
  JobRecord job;
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.status, JobStatus::kValidating);
  EXPECT_EQ(job.started_at, 0);
  ASSERT_TRUE(s->SetJobStatus(id, JobStatus::kInProgress).ok());
  ASSERT_TRUE(s->MarkJobStarted(id, 100).ok());
  ASSERT_TRUE(s->MarkJobStarted(id, 200).ok());
  ASSERT_TRUE(s->SetJobStatus(id, JobStatus::kFinalizing).ok());
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.started_at, 100) << "only the first start counts";
  EXPECT_EQ(job.finished_at, 0);
  ASSERT_TRUE(s->SetJobStatus(id, JobStatus::kFailed, "disk full").ok());
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.status, JobStatus::kFailed);
  EXPECT_EQ(job.error, "disk full");
  EXPECT_GT(job.finished_at, 0);
  const double finished = job.finished_at;
  ASSERT_TRUE(s->SetJobStatus(id, JobStatus::kFailed).ok()) << "the same terminal status again";
  const Status st = s->SetJobStatus(id, JobStatus::kInProgress);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("failed"), std::string::npos) << st.message();
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.status, JobStatus::kFailed);
  EXPECT_EQ(job.error, "disk full") << "an empty error keeps the old one";
  EXPECT_EQ(job.finished_at, finished);

  EXPECT_EQ(s->GetJob(id + 1, &job).code(), Status::Code::kNotFound);
  EXPECT_EQ(s->SetJobStatus(id + 1, JobStatus::kCompleted).code(), Status::Code::kNotFound);
  EXPECT_EQ(s->MarkJobStarted(id + 1, 1).code(), Status::Code::kNotFound);
  EXPECT_EQ(s->RequestCancel(id + 1).code(), Status::Code::kNotFound);
  EXPECT_EQ(s->FinishIngest(id + 1, JobStatus::kInProgress).code(), Status::Code::kNotFound);
}

TEST(Store, JobStatusNamesRoundTrip) {
  for (JobStatus st : {JobStatus::kValidating, JobStatus::kInProgress, JobStatus::kFinalizing,
                       JobStatus::kCompleted, JobStatus::kFailed, JobStatus::kCancelling,
                       JobStatus::kCancelled, JobStatus::kExpired}) {
    JobStatus back;
    ASSERT_TRUE(ParseJobStatus(JobStatusName(st), &back));
    EXPECT_EQ(back, st);
  }
  JobStatus out;
  EXPECT_FALSE(ParseJobStatus("done", &out));
  EXPECT_EQ(std::string(JobStatusName(JobStatus::kInProgress)), "in_progress");
  EXPECT_TRUE(IsTerminal(JobStatus::kCancelled));
  EXPECT_FALSE(IsTerminal(JobStatus::kCancelling));
}

TYPED_TEST(StoreTest, ForEachResultStreamsInLineOrderAndStopsOnError) {
  auto s = this->Open();
  const int64_t id = Ingest(s.get(), "a.jsonl", {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(s->CommitResults({MakeResult(id, 5), MakeResult(id, 2)}).ok());
  ASSERT_TRUE(
      s->CommitResults({MakeResult(id, 6), MakeResult(id, 1, true), MakeResult(id, 3)}).ok());
  std::vector<int64_t> lines;
  ASSERT_TRUE(s->ForEachResult(id, [&](int64_t line, bool is_error, std::string_view,
                                       const ResultMetrics& m) {
                 lines.push_back(line);
                 EXPECT_EQ(is_error, line == 1);
                 EXPECT_EQ(m.prompt_tokens, 10 * line);
                 EXPECT_DOUBLE_EQ(m.ttft_seconds, 0.001 * static_cast<double>(line));
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(lines, (std::vector<int64_t>{1, 2, 3, 5, 6}));
  int calls = 0;
  const Status st =
      s->ForEachResult(id, [&](int64_t, bool, std::string_view, const ResultMetrics&) {
        ++calls;
        return calls == 2 ? Status::IoError("stop here") : Status::Ok();
      });
  EXPECT_EQ(st.message(), "stop here");
  EXPECT_EQ(calls, 2);
  // The walk's statement is reset: the store is usable (and writable) afterwards.
  ASSERT_TRUE(s->CommitResults({MakeResult(id, 4)}).ok());
}

TYPED_TEST(StoreTest, TwoConnectionsSeeEachOthersCommits) {
  auto reader = this->Open();
  auto writer = this->Open();
  int64_t v0 = 0, v1 = 0, w0 = 0, w1 = 0;
  ASSERT_TRUE(reader->DataVersion(&v0).ok());
  ASSERT_TRUE(writer->DataVersion(&w0).ok());
  const int64_t id = Ingest(writer.get(), "a.jsonl", {1, 2});
  ASSERT_TRUE(reader->DataVersion(&v1).ok());
  ASSERT_TRUE(writer->DataVersion(&w1).ok());
  EXPECT_NE(v1, v0) << "another connection committed";
  EXPECT_EQ(w1, w0) << "a connection's own commits do not count";
  JobRecord job;
  ASSERT_TRUE(reader->GetJob(id, &job).ok());
  EXPECT_EQ(job.total, 2);
  EXPECT_EQ(AllPending(reader.get(), 10).size(), 2u);
  ASSERT_TRUE(reader->CommitResults({MakeResult(id, 1)}).ok());
  ASSERT_TRUE(writer->GetJob(id, &job).ok());
  EXPECT_EQ(job.completed, 1);
}

TYPED_TEST(StoreTest, LockedDatabaseFailsClearlyAfterTheBusyTimeout) {
  auto holder = this->Open();
  auto other = this->Open();
  ASSERT_TRUE(holder->Begin().ok());  // BEGIN IMMEDIATE: the write lock, held
  other->SetBusyTimeout(150);
  JobRecord job;
  job.name = "late.jsonl";
  job.sha256 = "x";
  // How long it waited is not asserted (the suite bounds no wall-clock time): the message names
  // the busy timeout this connection set.
  const Status st = other->InsertJob(&job);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find(this->Location()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("locked"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("150 ms"), std::string::npos) << st.message();
  // Reads never wait for the writer in WAL mode.
  std::vector<JobRecord> jobs;
  EXPECT_TRUE(other->ListJobs(&jobs).ok());
  holder->Rollback();
  ASSERT_TRUE(other->InsertJob(&job).ok());
}

// (How fast: queue_bench's "store" measure.)
TYPED_TEST(StoreTest, HundredThousandRequestIngestInOneTransaction) {
  auto s = this->Open();
  constexpr int kRequests = 100000;
  const std::string body(200, 'b');
  ASSERT_TRUE(s->Begin().ok());
  JobRecord job;
  job.name = "big.jsonl";
  job.sha256 = "big";
  ASSERT_TRUE(s->InsertJob(&job).ok());
  NewRequest r;
  r.body = body;
  for (int i = 1; i <= kRequests; ++i) {
    r.line = i;
    r.custom_id = "req-" + std::to_string(i);
    // Ranks in a shuffled order, so that the index, not the insertion order, gives the order.
    r.plan_rank = (static_cast<int64_t>(i) * 7919) % kRequests + 1;
    const Status st = s->InsertRequest(job.id, r);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  ASSERT_TRUE(s->FinishIngest(job.id, JobStatus::kInProgress).ok());
  ASSERT_TRUE(s->Commit().ok());

  std::vector<PendingRequest> page;
  ASSERT_TRUE(s->NextPending(50000, 1000, &page).ok());
  ASSERT_EQ(page.size(), 1000u);
  EXPECT_EQ(page.front().plan_rank, 50001);
  EXPECT_EQ(page.back().plan_rank, 51000);

  std::vector<Result> results;
  for (int i = 1; i <= kRequests; i += 2) results.push_back(MakeResult(job.id, i));
  int64_t added = 0;
  ASSERT_TRUE(s->CommitResults(results, &added).ok());
  EXPECT_EQ(added, kRequests / 2);
  JobRecord after;
  ASSERT_TRUE(s->GetJob(job.id, &after).ok());
  EXPECT_EQ(after.total, kRequests);
  EXPECT_EQ(after.completed, kRequests / 2);
  int64_t max_rank = 0;
  ASSERT_TRUE(s->MaxPlanRank(&max_rank).ok());
  EXPECT_EQ(max_rank, kRequests);
}

}  // namespace
}  // namespace llmq::jobs

namespace llmq::jobs {
namespace {

// The ingester's path: the job is inserted before its file is hashed (one pass), and the counts
// and the highest rank come from the ingester; jobs finished out of rank order keep the mark up.
TYPED_TEST(StoreTest, CountedIngestSetsTheHashAfterwardsAndKeepsTheHighestRank) {
  auto s = this->Open();
  auto ingest = [&](const std::string& name, std::vector<int64_t> ranks, int refused) {
    EXPECT_TRUE(s->Begin().ok());
    JobRecord job;
    job.name = name;  // sha256 unknown yet
    EXPECT_TRUE(s->InsertJob(&job).ok());
    for (size_t i = 0; i < ranks.size(); ++i) {
      NewRequest r;
      r.line = static_cast<int64_t>(i) + 1;
      r.custom_id = "c" + std::to_string(r.line);
      r.body = "{}";
      r.plan_rank = ranks[i];
      if (static_cast<int>(i) < refused) r.error_output = "{\"error\": 1}";
      EXPECT_TRUE(s->InsertRequest(job.id, r).ok());
    }
    Store::IngestTotals t;
    t.total = static_cast<int64_t>(ranks.size());
    t.failed = refused;
    t.max_rank = *std::max_element(ranks.begin(), ranks.end());
    t.sha256 = "sha-" + name;
    const Status st = s->FinishIngest(job.id, JobStatus::kInProgress, &t);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(s->Commit().ok());
    return job.id;
  };
  const int64_t a = ingest("a.jsonl", {1, 50, 3}, 1);
  ingest("b.jsonl", {20, 2}, 0);  // finished after a, with lower ranks
  int64_t rank = 0;
  ASSERT_TRUE(s->MaxPlanRank(&rank).ok());
  EXPECT_GE(rank, 50);
  std::optional<JobRecord> found;
  ASSERT_TRUE(s->FindJob("a.jsonl", "sha-a.jsonl", &found).ok());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, a);
  EXPECT_EQ(found->total, 3);
  EXPECT_EQ(found->failed, 1);
  EXPECT_EQ(found->refused, 1);
  // The same (name, sha256) again: refused at FinishIngest, and the caller rolls back.
  ASSERT_TRUE(s->Begin().ok());
  JobRecord again;
  again.name = "a.jsonl";
  ASSERT_TRUE(s->InsertJob(&again).ok());
  Store::IngestTotals t;
  t.sha256 = "sha-a.jsonl";
  EXPECT_EQ(s->FinishIngest(again.id, JobStatus::kInProgress, &t).code(),
            Status::Code::kInvalidArgument);
  s->Rollback();
  std::vector<JobRecord> all;
  ASSERT_TRUE(s->ListJobs(&all).ok());
  EXPECT_EQ(all.size(), 2u);
}

TYPED_TEST(StoreTest, WorkersRegisterAndBeatAndBadIdsAreRefused) {
  auto s = this->Open();
  WorkerInfo w;
  w.id = "gpu-host-1/0";
  w.host = "gpu-host-1";
  w.device = "cuda:0";
  w.model = "llama";
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  w.model = "qwen";  // a restart with another model: the same row, updated
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  std::vector<WorkerInfo> all;
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].id, "gpu-host-1/0");
  EXPECT_EQ(all[0].host, "gpu-host-1");
  EXPECT_EQ(all[0].device, "cuda:0");
  EXPECT_EQ(all[0].model, "qwen");
  EXPECT_GT(all[0].started_at, 0);
  EXPECT_GE(all[0].heartbeat_at, all[0].started_at);
  int64_t renewed = -1;
  ASSERT_TRUE(s->Heartbeat(w.id, 30, &renewed).ok());
  EXPECT_EQ(renewed, 0) << "it leases nothing";
  const Status st = s->Heartbeat("nobody", 30);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.message();
  EXPECT_NE(st.message().find("nobody"), std::string::npos) << st.message();
  WorkerInfo bad;
  EXPECT_EQ(s->RegisterWorker(bad).code(), Status::Code::kInvalidArgument);
  bad.id = std::string(201, 'x');
  EXPECT_EQ(s->RegisterWorker(bad).code(), Status::Code::kInvalidArgument);
}

// Claims take whole plan groups in rank order, each request under a new lease generation, and
// never a request another worker holds.
TYPED_TEST(StoreTest, AClaimLeasesAWholeGroupInRankOrderAndNoOtherWorkerGetsIt) {
  auto s = this->Open();
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {3, 1, 2, 5, 4, 6}, {10, 10, 10, 20, 20, 30});
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &c).ok());
  EXPECT_EQ(c.plan_group, 10);
  EXPECT_EQ(Lines(c), (std::vector<int64_t>{2, 3, 1})) << "rank order";
  for (const PendingRequest& p : c.requests) {
    EXPECT_EQ(p.job, a);
    EXPECT_EQ(p.lease_generation, 1);
    EXPECT_EQ(p.plan_group, 10);
    EXPECT_EQ(p.custom_id, "a.jsonl-" + std::to_string(p.line));
  }
  EXPECT_GT(c.expires_at, 0);
  auto other = this->Open(Store::Check::kSkip);
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &c).ok());
  EXPECT_EQ(c.plan_group, 20);
  EXPECT_EQ(Lines(c), (std::vector<int64_t>{5, 4}));
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &c).ok());
  EXPECT_EQ(Lines(c), (std::vector<int64_t>{6}));
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &c).ok());
  EXPECT_TRUE(c.requests.empty()) << "everything is held";

  // A cancelled job's requests are not claimed; a group larger than max_requests is taken in
  // parts, the next claim continuing it.
  const int64_t b = IngestGroups(s.get(), "b.jsonl", {7, 8, 9}, {40, 40, 40});
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 2, &c).ok());
  EXPECT_EQ(Lines(c), (std::vector<int64_t>{1, 2}));
  ASSERT_TRUE(s->ClaimNextGroup("w2", 3600, 2, &c).ok());
  EXPECT_EQ(Lines(c), (std::vector<int64_t>{3}));
  EXPECT_EQ(c.plan_group, 40);
  const int64_t d = IngestGroups(s.get(), "d.jsonl", {10}, {50});
  ASSERT_TRUE(s->RequestCancel(d).ok());
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 2, &c).ok());
  EXPECT_TRUE(c.requests.empty());
  EXPECT_NE(b, d);
}

// The fence: a worker whose lease expired and was claimed again commits nothing; the new holder
// commits once; nothing is written twice or overwritten.
TYPED_TEST(StoreTest, ALateWorkerIsFencedAndTheCurrentHolderCommitsOnce) {
  auto s = this->Open();
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {1, 2}, {10, 10});
  Claim late, current;
  // Leased for 0 seconds: expired at once (no clock to wait for).
  ASSERT_TRUE(s->ClaimNextGroup("w1", 0, 100, &late).ok());
  ASSERT_EQ(late.requests.size(), 2u);
  auto other = this->Open(Store::Check::kSkip);
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &current).ok());
  ASSERT_EQ(Lines(current), (std::vector<int64_t>{1, 2})) << "the expired lease, claimed again";
  EXPECT_EQ(current.requests[0].lease_generation, 2);

  int64_t added = -1, fenced = -1;
  ASSERT_TRUE(
      s->CommitLeasedResults("w1", {Leased(late.requests[0], "late")}, &added, &fenced).ok());
  EXPECT_EQ(added, 0);
  EXPECT_EQ(fenced, 1);
  // The current holder, under the old generation (a stale copy), is fenced too.
  ASSERT_TRUE(
      other->CommitLeasedResults("w2", {Leased(late.requests[0], "stale")}, &added, &fenced).ok());
  EXPECT_EQ(fenced, 1);
  ASSERT_TRUE(other
                  ->CommitLeasedResults("w2",
                                        {Leased(current.requests[0], "current"),
                                         Leased(current.requests[0], "current again")},
                                        &added, &fenced)
                  .ok());
  EXPECT_EQ(added, 1);
  EXPECT_EQ(fenced, 1) << "a second result for the line, in the same group";
  // Late again, after the line is done: still nothing.
  ASSERT_TRUE(
      s->CommitLeasedResults("w1", {Leased(late.requests[0], "late")}, &added, &fenced).ok());
  EXPECT_EQ(added, 0);
  EXPECT_EQ(fenced, 1);
  std::vector<std::string> outputs;
  ASSERT_TRUE(s->ForEachResult(a, [&](int64_t, bool, std::string_view out, const ResultMetrics&) {
                 outputs.emplace_back(out);
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(outputs, (std::vector<std::string>{"current"}));
  JobRecord job;
  ASSERT_TRUE(s->GetJob(a, &job).ok());
  EXPECT_EQ(job.completed, 1);
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(a, &pending).ok());
  EXPECT_EQ(pending, 1);
  // A result for no request fails the whole group, leased or not.
  LeasedResult none = Leased(current.requests[1], "x");
  none.result.line = 99;
  EXPECT_EQ(other->CommitLeasedResults("w2", {Leased(current.requests[1], "y"), none}).code(),
            Status::Code::kInvalidArgument);
  ASSERT_TRUE(s->CountPending(a, &pending).ok());
  EXPECT_EQ(pending, 1) << "rolled back as one";
  // Line 2 stays w2's while its lease runs.
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &late).ok());
  EXPECT_TRUE(late.requests.empty()) << "line 2 is w2's until its lease ends";
}

// A heartbeat renews the worker's leases: an expired one renewed is not claimed by another.
TYPED_TEST(StoreTest, AHeartbeatKeepsTheLeasesOfItsWorker) {
  auto s = this->Open();
  IngestGroups(s.get(), "a.jsonl", {1, 2, 3}, {10, 10, 20});
  WorkerInfo w;
  w.id = "w1";
  w.host = "h";
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 0, 100, &c).ok());  // expired at once
  ASSERT_EQ(c.requests.size(), 2u);
  // An expired lease that no one claimed since still counts: w1 commits line 1 under it.
  int64_t added = 0;
  ASSERT_TRUE(s->CommitLeasedResults("w1", {Leased(c.requests[0], "a")}, &added).ok());
  EXPECT_EQ(added, 1);
  int64_t renewed = 0;
  ASSERT_TRUE(s->Heartbeat("w1", 3600, &renewed).ok());
  EXPECT_EQ(renewed, 1) << "line 2: line 1 is done";
  auto other = this->Open(Store::Check::kSkip);
  Claim taken;
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &taken).ok());
  EXPECT_EQ(Lines(taken), (std::vector<int64_t>{3})) << "group 10 stays w1's";
  ASSERT_TRUE(s->CommitLeasedResults("w1", {Leased(c.requests[1], "b")}, &added).ok());
  EXPECT_EQ(added, 1);
}

// Workers on several connections claim and commit at once: every request is claimed by exactly
// one of them and committed exactly once.
TYPED_TEST(StoreTest, ConcurrentClaimsNeverShareARequest) {
  constexpr int kRequests = 120, kThreads = 4;
  std::vector<int64_t> ranks(kRequests), groups(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    ranks[i] = i + 1;
    groups[i] = i / 3 + 1;  // groups of three
  }
  int64_t id = 0;
  {
    auto s = this->Open();
    id = IngestGroups(s.get(), "many.jsonl", ranks, groups);
  }
  std::vector<std::unique_ptr<Store>> stores;
  for (int t = 0; t < kThreads; ++t) {
    stores.push_back(this->Open(Store::Check::kSkip));
    stores.back()->SetBusyTimeout(60000);
  }
  std::vector<std::vector<int64_t>> claimed(kThreads);
  std::vector<int64_t> added(kThreads, 0), fenced(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const std::string me = "w" + std::to_string(t);
      for (;;) {
        Claim c;
        if (Status st = stores[t]->ClaimNextGroup(me, 3600, 2, &c); !st.ok()) {
          errors[t] = st.message();
          return;
        }
        if (c.requests.empty()) return;
        std::vector<LeasedResult> results;
        for (const PendingRequest& p : c.requests) {
          claimed[t].push_back(p.line);
          results.push_back(Leased(p, me));
        }
        int64_t a = 0, f = 0;
        if (Status st = stores[t]->CommitLeasedResults(me, results, &a, &f); !st.ok()) {
          errors[t] = st.message();
          return;
        }
        added[t] += a;
        fenced[t] += f;
      }
    });
  for (std::thread& t : threads) t.join();
  std::vector<int64_t> all;
  int64_t total_added = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "worker " << t;
    EXPECT_EQ(fenced[t], 0) << "worker " << t;
    total_added += added[t];
    all.insert(all.end(), claimed[t].begin(), claimed[t].end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want(kRequests);
  for (int i = 0; i < kRequests; ++i) want[i] = i + 1;
  EXPECT_EQ(all, want) << "each request claimed once, by one worker";
  EXPECT_EQ(total_added, kRequests);
  JobRecord job;
  ASSERT_TRUE(stores[0]->GetJob(id, &job).ok());
  EXPECT_EQ(job.completed, kRequests);
}

// Open on an empty database creates the whole schema, at the version this build knows.
TYPED_TEST(StoreTest, OpenOnAnEmptyDatabaseMigratesFromNothing) {
  auto s = this->Open();
  ASSERT_TRUE(s);
  EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
  for (const char* table : {"jobs", "requests", "results"})
    EXPECT_EQ(this->RawQuery(std::string("SELECT count(*) FROM ") + table), "0") << table;
  // The columns of every migration are there.
  EXPECT_EQ(this->RawQuery("SELECT count(completion_tokens) FROM jobs"), "0");
  EXPECT_EQ(this->RawQuery("SELECT count(finished_at) FROM results"), "0");
  std::vector<JobRecord> jobs;
  ASSERT_TRUE(s->ListJobs(&jobs).ok());
  EXPECT_TRUE(jobs.empty());
  int64_t rank = -1;
  ASSERT_TRUE(s->MaxPlanRank(&rank).ok());
  EXPECT_EQ(rank, 0);
  // A second open finds the schema current and changes nothing.
  auto again = this->Open();
  ASSERT_TRUE(again);
  EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
}

// Several connections opening one empty queue at once: the schema is made once (the migration
// runs under the write lock and looks again there), and every open succeeds.
TYPED_TEST(StoreTest, ConcurrentOpensOfAnEmptyQueueMigrateOnce) {
  constexpr int kOpeners = 4;
  std::vector<std::unique_ptr<Store>> stores(kOpeners);
  std::vector<Status> statuses(kOpeners);
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i)
    threads.emplace_back(
        [&, i] { statuses[i] = Store::Open(this->Location(), &stores[i], Store::Check::kSkip); });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kOpeners; ++i) ASSERT_TRUE(statuses[i].ok()) << statuses[i].message();
  EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(Store::SchemaVersion()));
  const int64_t id = Ingest(stores[0].get(), "a.jsonl", {1});
  JobRecord job;
  ASSERT_TRUE(stores[kOpeners - 1]->GetJob(id, &job).ok());
}

// A transaction is all or nothing, and what it wrote is seen by others only once committed.
TYPED_TEST(StoreTest, ATransactionIsSeenWholeAfterCommitAndNotAtAllAfterRollback) {
  auto writer = this->Open();
  auto reader = this->Open();
  ASSERT_TRUE(writer->Begin().ok());
  JobRecord job;
  job.name = "t.jsonl";
  job.sha256 = "t";
  ASSERT_TRUE(writer->InsertJob(&job).ok());
  NewRequest r;
  r.line = 1;
  r.custom_id = "c1";
  r.body = "{}";
  r.plan_rank = 1;
  ASSERT_TRUE(writer->InsertRequest(job.id, r).ok());
  ASSERT_TRUE(writer->FinishIngest(job.id, JobStatus::kInProgress).ok());
  EXPECT_TRUE(writer->InTransaction());
  std::vector<JobRecord> seen;
  ASSERT_TRUE(reader->ListJobs(&seen).ok());
  EXPECT_TRUE(seen.empty()) << "not committed yet";
  JobRecord own;
  ASSERT_TRUE(writer->GetJob(job.id, &own).ok()) << "a transaction sees its own writes";
  EXPECT_EQ(own.total, 1);
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_FALSE(writer->InTransaction());
  ASSERT_TRUE(reader->ListJobs(&seen).ok());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].total, 1);
  EXPECT_EQ(AllPending(reader.get(), 10).size(), 1u);

  // Results in the caller's transaction, rolled back: nothing moved.
  ASSERT_TRUE(writer->Begin().ok());
  ASSERT_TRUE(writer->CommitResults({MakeResult(job.id, 1)}).ok());
  ASSERT_TRUE(writer->SetJobStatus(job.id, JobStatus::kCompleted).ok());
  writer->Rollback();
  EXPECT_FALSE(writer->InTransaction());
  ASSERT_TRUE(reader->GetJob(job.id, &own).ok());
  EXPECT_EQ(own.completed, 0);
  EXPECT_EQ(own.status, JobStatus::kInProgress);
  int64_t pending = 0;
  ASSERT_TRUE(reader->CountPending(job.id, &pending).ok());
  EXPECT_EQ(pending, 1);
}

// Connections on several threads commit overlapping groups of results at once (the daemon's
// committer, a second worker, a cancel): every line gets exactly one result, counted once.
TYPED_TEST(StoreTest, ConcurrentConnectionsCommitEachResultExactlyOnce) {
  constexpr int kLines = 240, kThreads = 4, kGroup = 20;
  std::vector<int64_t> ranks(kLines);
  for (int i = 0; i < kLines; ++i) ranks[i] = i + 1;
  int64_t id = 0;
  {
    auto s = this->Open();
    id = Ingest(s.get(), "many.jsonl", ranks);
  }
  std::vector<std::unique_ptr<Store>> stores;
  for (int t = 0; t < kThreads; ++t) {
    stores.push_back(this->Open(Store::Check::kSkip));
    stores.back()->SetBusyTimeout(60000);  // they wait for each other, never give up here
  }
  std::vector<int64_t> added(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      // Each thread commits every line, in its own order of groups: all of them overlap.
      for (int g = 0; g < kLines / kGroup; ++g) {
        const int group = (g + t * 3) % (kLines / kGroup);
        std::vector<Result> results;
        for (int i = 0; i < kGroup; ++i) results.push_back(MakeResult(id, group * kGroup + i + 1));
        int64_t n = 0;
        const Status st = stores[t]->CommitResults(results, &n);
        if (!st.ok()) errors[t] = st.message();
        added[t] += n;
      }
    });
  for (std::thread& t : threads) t.join();
  int64_t total_added = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    total_added += added[t];
  }
  EXPECT_EQ(total_added, kLines) << "each line added once, whoever added it";
  auto s = this->Open();
  JobRecord job;
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.completed, kLines);
  JobTotals totals;
  ASSERT_TRUE(s->GetJobTotals(id, &totals).ok());
  EXPECT_EQ(totals.completion_tokens, int64_t{kLines} * (kLines + 1) / 2);
  EXPECT_EQ(this->RawQuery("SELECT count(*) FROM results"), std::to_string(kLines));
  int64_t pending = -1;
  ASSERT_TRUE(s->CountPending(id, &pending).ok());
  EXPECT_EQ(pending, 0);
}

// A walk inside the caller's read transaction sees that transaction's snapshot, and leaves the
// transaction open for the caller.
TYPED_TEST(StoreTest, ForEachResultInsideTheCallersTransactionLeavesItOpen) {
  auto s = this->Open();
  auto other = this->Open();
  const int64_t id = Ingest(s.get(), "a.jsonl", {1, 2, 3});
  ASSERT_TRUE(s->CommitResults({MakeResult(id, 1)}).ok());
  ASSERT_TRUE(s->BeginRead().ok());
  JobRecord job;
  ASSERT_TRUE(s->GetJob(id, &job).ok());  // the snapshot is taken
  ASSERT_TRUE(other->CommitResults({MakeResult(id, 2), MakeResult(id, 3)}).ok());
  int rows = 0;
  ASSERT_TRUE(s->ForEachResult(id, [&](int64_t, bool, std::string_view, const ResultMetrics&) {
                 ++rows;
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(rows, 1) << "the caller's snapshot";
  EXPECT_TRUE(s->InTransaction());
  ASSERT_TRUE(s->Commit().ok());
  rows = 0;
  ASSERT_TRUE(s->ForEachResult(id, [&](int64_t, bool, std::string_view, const ResultMetrics&) {
                 ++rows;
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(rows, 3);
  EXPECT_FALSE(s->InTransaction()) << "its own transaction is closed after the walk";
}

}  // namespace
}  // namespace llmq::jobs

// What only PostgreSQL has: URLs, an unreachable server, a lost connection.
namespace llmq::jobs {
namespace {

TEST(StoreUrl, PasswordsAreMaskedAndOnlyPostgresUrlsGoToPostgres) {
  EXPECT_EQ(RedactPostgresUrl("postgresql://llmq:s3cret@db.example:5432/queue?sslmode=require"),
            "postgresql://llmq:***@db.example:5432/queue?sslmode=require");
  EXPECT_EQ(RedactPostgresUrl("postgres://llmq@db/queue"), "postgres://llmq@db/queue");
  EXPECT_EQ(RedactPostgresUrl("postgresql:///queue?host=/run/pg&password=s3cret&user=u"),
            "postgresql:///queue?host=/run/pg&password=***&user=u");
  EXPECT_EQ(RedactPostgresUrl("postgresql://u:p%40ss@h/q?password=x"),
            "postgresql://u:***@h/q?password=***");
  EXPECT_EQ(RedactPostgresUrl("postgresql://h/q?a=b@c:d"), "postgresql://h/q?a=b@c:d")
      << "an @ after the host is no user info";
  EXPECT_TRUE(Store::IsPostgresUrl("postgresql://h/q"));
  EXPECT_TRUE(Store::IsPostgresUrl("postgres://h/q"));
  EXPECT_FALSE(Store::IsPostgresUrl("/var/lib/llmq/queue.db"));
  EXPECT_FALSE(Store::IsPostgresUrl("postgresql.db"));
}

TEST(StoreUrl, AnUnreachableServerIsAnIoErrorThatNeverShowsThePassword) {
  const std::string dir = testing::CurrentTestDir();  // no server listens here
  std::unique_ptr<Store> s;
  Status st = Store::Open("postgresql://llmq:s3cret@/queue?host=" + dir, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.message();
  EXPECT_NE(st.message().find("postgresql://llmq:***@/queue?host=" + dir), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("cannot connect"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("s3cret"), std::string::npos) << st.message();
  EXPECT_FALSE(s);
  st = Store::Open("postgresql://h/q?password=s3cret&no_such_option=1", &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("no_such_option"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("s3cret"), std::string::npos) << st.message();
}

// The server ends the connection (a restart, a network cut, an administrator): the call that
// meets it fails, naming the queue; the next one reconnects and works.
TEST(PostgresStore, ALostConnectionFailsOneCallAndTheNextReconnects) {
  testing::PgTestDatabase db;
  LLMQ_SKIP_WITHOUT_POSTGRES(db);
  auto s = OpenOrDie(db.url());
  ASSERT_TRUE(s);
  const int64_t id = Ingest(s.get(), "a.jsonl", {1, 2});
  // pg_terminate_backend(pid, timeout) returns once the backend has exited.
  ASSERT_EQ(testing::PgQuery(testing::PgServer::AdminUrl(db.socket_dir()),
                             "SELECT bool_and(pg_terminate_backend(pid, 60000)) "
                             "FROM pg_stat_activity WHERE datname = '" +
                                 db.name() + "'"),
            "t");
  JobRecord job;
  const Status st = s->GetJob(id, &job);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.message();
  EXPECT_NE(st.message().find(db.url()), std::string::npos) << st.message();
  ASSERT_TRUE(s->GetJob(id, &job).ok()) << "reconnected";
  EXPECT_EQ(job.total, 2);
  ASSERT_TRUE(s->CommitResults({MakeResult(id, 1)}).ok()) << "statements prepared again";
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(id, &pending).ok());
  EXPECT_EQ(pending, 1);
}

// A worker's result commit sends its BEGIN with its first statement (one round trip, libpq's
// pipeline mode). A connection lost before it, or that statement failing, fails the whole commit
// and leaves nothing half done; the connection works afterwards (out of pipeline mode, no
// transaction left open), and the next commit of the same results is accepted.
TEST(PostgresStore, ACommitSentWithItsBeginFailsWholeAndTheConnectionWorksAfter) {
  testing::PgTestDatabase db;
  LLMQ_SKIP_WITHOUT_POSTGRES(db);
  auto s = OpenOrDie(db.url());
  ASSERT_TRUE(s);
  const int64_t id = IngestGroups(s.get(), "a.jsonl", {1, 2}, {7, 7});
  WorkerInfo w;
  w.id = "w1";
  w.host = "h";
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  Claim claim;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 10, &claim).ok());
  ASSERT_EQ(claim.requests.size(), 2u);
  std::vector<LeasedResult> results;
  for (const PendingRequest& r : claim.requests) results.push_back(Leased(r, "out"));
  // The statement fails (a result for no request): the group is refused whole.
  std::vector<LeasedResult> with_stranger = results;
  PendingRequest stranger;
  stranger.job = id;
  stranger.line = 99;
  with_stranger.push_back(Leased(stranger, "x"));
  Status st = s->CommitLeasedResults("w1", with_stranger);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(id, &pending).ok()) << "no transaction or pipeline left behind";
  EXPECT_EQ(pending, 2);
  // The connection is lost: the commit that meets it fails, naming the queue.
  ASSERT_EQ(testing::PgQuery(testing::PgServer::AdminUrl(db.socket_dir()),
                             "SELECT bool_and(pg_terminate_backend(pid, 60000)) "
                             "FROM pg_stat_activity WHERE datname = '" +
                                 db.name() + "'"),
            "t");
  st = s->CommitLeasedResults("w1", results);
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.message();
  EXPECT_NE(st.message().find(db.url()), std::string::npos) << st.message();
  // The next one reconnects, and the lease still holds: both are accepted, once.
  int64_t added = 0, fenced = 0;
  st = s->CommitLeasedResults("w1", results, &added, &fenced);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(added, 2);
  EXPECT_EQ(fenced, 0);
  ASSERT_TRUE(s->CountPending(id, &pending).ok());
  EXPECT_EQ(pending, 0);
  JobRecord job;
  ASSERT_TRUE(s->GetJob(id, &job).ok());
  EXPECT_EQ(job.completed, 2);
}

}  // namespace
}  // namespace llmq::jobs
