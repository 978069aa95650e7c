// llmq queue init|migrate --url URL: makes a queue's tables, or brings them to this build's
// schema_version, before any worker uses it (issue 27). URL is a PostgreSQL URL (postgresql://...;
// the database must exist: CREATE DATABASE is the server administrator's) or an SQLite file's path.
//   init     creates the schema in a database that has none; one already at this version is left
//            as it is (exit 0); an older one is migrated
//   migrate  migrates an existing queue forward; a database without llmq's tables is refused
//            (a mistyped URL must not create a queue)
// Both refuse a database that is not llmq's and a schema newer than this build. Messages name the
// queue by Store::location(): a URL's password is never shown (libpq finds it in the URL,
// PGPASSWORD or ~/.pgpass; TLS is libpq's sslmode).
#include <cstdio>
#include <memory>
#include <string>

#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "jobs/store.h"

namespace llmq::cli {
namespace {

int InitOrMigrate(const CLI::App* cmd, const std::string& url, bool init) {
  int found = 0;
  jobs::Store::OpenOptions o;
  o.check = jobs::Store::Check::kIntegrity;
  o.create = init;
  o.found_version = &found;
  std::unique_ptr<jobs::Store> store;
  if (Status st = jobs::Store::Open(url, &store, o); !st.ok()) return Fail(cmd, st);
  const int now = jobs::Store::SchemaVersion();
  if (found == now)
    std::printf("%s: llmq's queue is at schema_version %d already; nothing to do\n",
                store->location().c_str(), now);
  else if (found == 0)
    std::printf("%s: created llmq's queue (schema_version %d)\n", store->location().c_str(), now);
  else
    std::printf("%s: migrated llmq's queue from schema_version %d to %d\n",
                store->location().c_str(), found, now);
  return 0;
}

}  // namespace

void AddQueueAdminCommand(CLI::App* app, int* rc) {
  CLI::App* queue = app->add_subcommand(
      "queue", "Create or migrate a queue's tables (PostgreSQL, shared by workers, or SQLite)");
  queue->require_subcommand(1);
  auto url = std::make_shared<std::string>();
  const char* url_help =
      "postgresql://[user@]host[:port]/database[?sslmode=...] (the database must exist; the "
      "password from ~/.pgpass or PGPASSWORD), or an SQLite file's path";
  CLI::App* init = queue->add_subcommand(
      "init", "Create the queue's tables (an existing queue is migrated, or left as it is)");
  init->add_option("--url", *url, url_help)->required();
  init->callback([init, url, rc] { *rc = InitOrMigrate(init, *url, /*init=*/true); });
  CLI::App* migrate = queue->add_subcommand(
      "migrate", "Bring an existing queue to this llmq's schema_version (refuses an empty one)");
  migrate->add_option("--url", *url, url_help)->required();
  migrate->callback([migrate, url, rc] { *rc = InitOrMigrate(migrate, *url, /*init=*/false); });
}

}  // namespace llmq::cli
