// A real PostgreSQL server for the tests of the PostgreSQL queue (jobs/pg_store.h), and a fresh
// database per test on it.
//
// The server: the one ctest's pg_server fixture started (tests/CMakeLists.txt runs
// tests/pg_server.sh start before the tests whose names hold "Postgres", stop after them), else
// one this process starts with the same script on first use (a test binary run by hand, or
// $LLMQ_PG_BINDIR set: the binaries to use) and stops when it exits. It listens only on a Unix
// socket in its own folder.
// Without PostgreSQL's server binaries a test skips saying so, or fails under
// LLMQ_REQUIRE_REFERENCES=1 (LLMQ_SKIP_WITHOUT_POSTGRES).
#pragma once

#include <libpq-fe.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "tests/test_util.h"

namespace llmq::testing {

// Where ctest's fixture keeps its server (the folder tests/CMakeLists.txt gives pg_server.sh).
inline std::string SharedPgServerDir() {
  return std::string(LLMQ_TEST_TMP) + "/pgserver";
}

inline bool PgSocketIn(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/.s.PGSQL.5432", ec);
}

// Runs tests/pg_server.sh; its output (what it said) into *said.
inline int RunPgServerScript(const std::string& verb, const std::string& dir, std::string* said) {
  const std::string cmd = ShellQuote(std::string(LLMQ_SOURCE_DIR) + "/tests/pg_server.sh") + " " +
                          verb + " " + ShellQuote(dir) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) said->append(buf, n);
  return pclose(p);
}

class PgServer {
 public:
  // The socket folder of a running server, or "" with the reason in *why. With $LLMQ_PG_BINDIR
  // set, always this process's own server, from those binaries.
  static std::string SocketDir(std::string* why) {
    const char* bindir = std::getenv("LLMQ_PG_BINDIR");
    if ((bindir == nullptr || *bindir == '\0') && PgSocketIn(SharedPgServerDir()))
      return SharedPgServerDir();
    static Own own;  // after TmpRoot (used in its constructor): stopped before that is removed
    *why = own.why;
    return own.dir;
  }

  // Connects to the server's `postgres` database (for CREATE / DROP DATABASE).
  static std::string AdminUrl(const std::string& socket_dir) {
    return "postgresql:///postgres?host=" + socket_dir + "&user=postgres";
  }

 private:
  struct Own {
    std::string dir, why;
    Own() {
      const std::string d = (TmpRoot() / "pgserver").string();
      std::string said;
      const int rc = RunPgServerScript("start", d, &said);
      if (rc == 0 && PgSocketIn(d)) {
        dir = d;
        return;
      }
      why = "no PostgreSQL server for the tests: tests/pg_server.sh start said: " + said;
      while (!why.empty() && why.back() == '\n') why.pop_back();
    }
    ~Own() {
      if (dir.empty()) return;
      std::string said;
      RunPgServerScript("stop", dir, &said);
    }
  };
};

// Runs one SQL command on `url`; "" when it went well, else libpq's message.
inline std::string PgExec(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  std::string err;
  if (PQstatus(c) != CONNECTION_OK) {
    err = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) err = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  return err;
}

// The first column of the first row `sql` gives on `url` ("" when none or on error).
inline std::string PgQuery(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  std::string out;
  if (PQstatus(c) == CONNECTION_OK) {
    PGresult* r = PQexec(c, sql.c_str());
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) out = PQgetvalue(r, 0, 0);
    PQclear(r);
  }
  PQfinish(c);
  return out;
}

// A database of its own for one test, dropped (whoever is still connected) when it goes.
class PgTestDatabase {
 public:
  // url() is "" and why() says why when there is no server or the database cannot be made.
  PgTestDatabase() {
    std::string why;
    socket_dir_ = PgServer::SocketDir(&why);
    if (socket_dir_.empty()) {
      why_ = why;
      return;
    }
    static int counter = 0;
    name_ = "llmq_t" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    if (const std::string err = PgExec(PgServer::AdminUrl(socket_dir_), "CREATE DATABASE " + name_);
        !err.empty()) {
      why_ = "CREATE DATABASE " + name_ + " failed: " + err;
      return;
    }
    url_ = "postgresql:///" + name_ + "?host=" + socket_dir_ + "&user=postgres";
  }
  ~PgTestDatabase() {
    if (!url_.empty())
      PgExec(PgServer::AdminUrl(socket_dir_), "DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }
  PgTestDatabase(const PgTestDatabase&) = delete;
  PgTestDatabase& operator=(const PgTestDatabase&) = delete;

  const std::string& url() const { return url_; }
  const std::string& why() const { return why_; }
  const std::string& name() const { return name_; }
  const std::string& socket_dir() const { return socket_dir_; }

 private:
  std::string socket_dir_, name_, url_, why_;
};

// Ends the test (skip, or failure under LLMQ_REQUIRE_REFERENCES=1) when `db` (a PgTestDatabase)
// has no database.
#define LLMQ_SKIP_WITHOUT_POSTGRES(db)                             \
  do {                                                             \
    if ((db).url().empty()) LLMQ_SKIP_OR_FAIL_MISSING((db).why()); \
  } while (0)

}  // namespace llmq::testing
