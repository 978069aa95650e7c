// llmq queue init|migrate --url (daemon/cli_queue.cpp) against a real PostgreSQL server
// (tests/pg_server.h) and on an SQLite file: created once, migrated forward, an empty database
// never created by `migrate`, a newer schema refused, and a password never printed.
#include <gtest/gtest.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "jobs/store.h"
#include "tests/pg_server.h"
#include "tests/store_util.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using testing::RunLlmq;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PostgresQueueCommand, InitCreatesMigrateMovesForwardAndThePasswordIsNeverShown) {
  testing::PgTestDatabase db;
  LLMQ_SKIP_WITHOUT_POSTGRES(db);
  // Trust authentication ignores the password: it is there to be kept out of every message.
  const std::string url = "postgresql://postgres:s3cret@/" + db.name() + "?host=" + db.socket_dir();
  const std::string shown = "postgresql://postgres:***@/" + db.name();
  const std::string version = std::to_string(jobs::Store::SchemaVersion());

  // migrate on an empty database: refused, nothing created.
  testing::RunResult r = RunLlmq({"queue", "migrate", "--url", url});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Has(r.err, "no llmq queue here")) << r.err;
  EXPECT_TRUE(Has(r.err, "llmq queue init")) << r.err;
  EXPECT_TRUE(Has(r.err, shown)) << r.err;
  EXPECT_FALSE(Has(r.out + r.err, "s3cret")) << r.out << r.err;
  EXPECT_EQ(testing::PgQuery(db.url(), "SELECT count(*) FROM meta"), "") << "no table made";

  r = RunLlmq({"queue", "init", "--url", url});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, shown + "?host=" + db.socket_dir() +
                             ": created llmq's queue (schema_version " + version + ")"))
      << r.out;
  EXPECT_FALSE(Has(r.out + r.err, "s3cret")) << r.out << r.err;
  EXPECT_EQ(testing::PgQuery(db.url(), "SELECT value FROM meta WHERE key = 'schema_version'"),
            version);
  EXPECT_EQ(testing::PgQuery(db.url(), "SELECT count(*) FROM requests"), "0");

  r = RunLlmq({"queue", "init", "--url", url});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "at schema_version " + version + " already; nothing to do")) << r.out;

  // Back to schema 2, as the previous release left it: migrate takes it forward.
  ASSERT_EQ(
      testing::PgExec(db.url(),
                      std::string(jobs::kBackToSchemaFour) +
                          "DROP TABLE workers; DROP INDEX requests_pending_by_group; "
                          "DROP INDEX requests_leased; "
                          "ALTER TABLE requests DROP COLUMN plan_group, DROP COLUMN lease_worker, "
                          "DROP COLUMN lease_generation, DROP COLUMN lease_expires_at; "
                          "ALTER TABLE results DROP COLUMN finished_at; "
                          "UPDATE meta SET value = '2' WHERE key = 'schema_version'"),
      "");
  r = RunLlmq({"queue", "migrate", "--url", url});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "migrated llmq's queue from schema_version 2 to " + version)) << r.out;
  EXPECT_EQ(testing::PgQuery(db.url(), "SELECT count(finished_at) FROM results"), "0");

  // A newer schema than this build knows: refused by both, left as it is.
  ASSERT_EQ(testing::PgExec(db.url(), "UPDATE meta SET value = '99' WHERE key = 'schema_version'"),
            "");
  for (const char* verb : {"init", "migrate"}) {
    r = RunLlmq({"queue", verb, "--url", url});
    EXPECT_EQ(r.exit_code, 1) << verb << r.out << r.err;
    EXPECT_TRUE(Has(r.err, "schema_version 99 is newer than this llmq knows")) << r.err;
  }
  EXPECT_EQ(testing::PgQuery(db.url(), "SELECT value FROM meta WHERE key = 'schema_version'"),
            "99");
}

// queue.url in the config: the queue commands read the PostgreSQL queue (its jobs, not a state
// folder's queue.db).
TEST(PostgresQueueCommand, ListAndCancelUseTheConfiguredQueue) {
  testing::PgTestDatabase db;
  LLMQ_SKIP_WITHOUT_POSTGRES(db);
  int64_t id = 0;
  std::string public_id;
  {
    std::unique_ptr<jobs::Store> s = jobs::OpenOrDie(db.url());
    ASSERT_TRUE(s);
    id = jobs::Ingest(s.get(), "night.jsonl", {1, 2, 3});
    jobs::JobRecord j;
    ASSERT_TRUE(s->GetJob(id, &j).ok());
    public_id = j.public_id;
  }
  const std::string dir = testing::CurrentTestDir();
  const std::string config = dir + "/llmq.yaml";
  std::ofstream(config) << "spool:\n  state_dir: " << dir << "/state\nqueue:\n  url: " << db.url()
                        << "\n";
  testing::RunResult r = RunLlmq({"list", "--config", config, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, public_id)) << r.out;
  EXPECT_TRUE(Has(r.out, "night.jsonl")) << r.out;
  r = RunLlmq({"cancel", "--config", config, public_id});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::unique_ptr<jobs::Store> s = jobs::OpenOrDie(db.url());
  jobs::JobRecord j;
  ASSERT_TRUE(s->GetJob(id, &j).ok());
  EXPECT_TRUE(j.cancel_requested);
  EXPECT_FALSE(std::filesystem::exists(dir + "/state/queue.db")) << "no SQLite queue was made";
}

// Without PostgreSQL's server binaries the PostgreSQL tests skip saying why, and fail instead under
// LLMQ_REQUIRE_REFERENCES=1 (CI): this test binary run again on one such test, with
// LLMQ_PG_BINDIR naming a folder without them.
TEST(QueueCommand, WithoutServerBinariesPostgresTestsSkipOrFailUnderRequireReferences) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string empty = testing::CurrentTestDir();
  for (const char* require : {"0", "1"}) {
    const std::string cmd =
        "env LLMQ_PG_BINDIR=" + testing::ShellQuote(empty) + " LLMQ_REQUIRE_REFERENCES=" + require +
        " " + testing::ShellQuote(self) +
        " --gtest_filter=PostgresQueueCommand.ListAndCancelUseTheConfiguredQueue"
        " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    EXPECT_TRUE(Has(out, "PostgreSQL's server binaries (initdb, pg_ctl) are absent")) << out;
    if (std::string(require) == "1") {
      EXPECT_NE(status, 0) << out;
      EXPECT_TRUE(Has(out, "missing reference (LLMQ_REQUIRE_REFERENCES=1)")) << out;
      EXPECT_TRUE(Has(out, "[  FAILED  ]")) << out;
    } else {
      EXPECT_EQ(status, 0) << out;
      EXPECT_TRUE(Has(out, "[  SKIPPED ]")) << out;
    }
  }
}

TEST(QueueCommand, SqliteFilesAndBadUrls) {
  const std::string dir = testing::CurrentTestDir();
  const std::string path = dir + "/q/queue.db";
  testing::RunResult r = RunLlmq({"queue", "migrate", "--url", path});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Has(r.err, path + ": no llmq queue here")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path)) << "migrate creates nothing";
  r = RunLlmq({"queue", "init", "--url", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, path + ": created llmq's queue")) << r.out;
  r = RunLlmq({"queue", "migrate", "--url", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "already; nothing to do")) << r.out;

  r = RunLlmq({"queue", "init", "--url", "postgresql://u:s3cret@h/q?no_such_option=1"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Has(r.err, "not a valid PostgreSQL URL")) << r.err;
  EXPECT_TRUE(Has(r.err, "no_such_option")) << r.err;
  EXPECT_FALSE(Has(r.out + r.err, "s3cret")) << r.err;
  r = RunLlmq({"queue", "init"});
  EXPECT_EQ(r.exit_code, 2) << "--url is required: " << r.err;
}

}  // namespace
}  // namespace llmq
