// Chaos among `llmq serve` workers on one queue (issue 27, done-when 2 and 3), on the real binary,
// a tiny model and a real queue:
//   - four workers, each with its own state folder, on one PostgreSQL queue (a server of this
//     test's own, so that restarting it disturbs no other test), and
//   - two workers on one state folder (the per-GPU case, an SQLite queue),
// run one job of 4,000 requests (done-when 1's size) through 10 rounds of kill -9 of one or two
// random workers at random moments (from the first claims through steps and commits to the
// finalize), each killed worker restarted after a random delay; the PostgreSQL queue also has its
// server restarted (a fast shutdown, a random pause, a start) mid-job, while its workers run on. In
// the end: every request has exactly one result, the files equal a single worker's run in every
// field but ids, `created`, `cached_tokens` and timing, the job was finalized once, the committed
// count never went down, and no request was handed to an engine more than twice
// (`requests.attempts` <= 2).
//
// Why 2 holds: a request is handed to an engine again only when the worker that held it lost it
// (killed: its lease runs out, or its restart gives it back; or the server restart cut its
// connection long enough for its lease to lapse). A round waits, before its kill or restart,
// until every request that had been handed to an engine and was unfinished at the last round's
// event is finished; so each request lives through at most one such event: two hand-overs.
//
// The moments are driven by progress (the committed count, as `llmq list` shows it); the delays
// (before a kill, before a restart, the server's pause) are small and random, from a seeded
// std::mt19937 whose seed the test prints (LLMQ_CHAOS_SEED=<seed> replays a run's choices).
#include <signal.h>
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/pg_server.h"
#include "tests/serve_fixture.h"
#include "tests/serve_workers.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kRequests = 4000;  // issue 27 done-whens 1-3: a 4,000-request job
constexpr int kBadLines = 8;     // WriteMixedJob: i % 401 == 17, less two whose schema is replaced
// Requests of five times WriteMixedJob's length (those without a response_format): the job must
// outlast the rounds, each of which waits for the last one's killed requests to come back.
constexpr int kMaxTokensFactor = 5;
constexpr int kKillRounds = 10;
// Leases short enough that a killed worker's requests come back soon, long enough that a loaded
// machine does not let a live worker's lapse (a third hand-over without a kill).
constexpr double kLeaseSeconds = 2;

// A request's row in the queue: (job, line) -> {attempts, status}.
struct Row {
  int64_t attempts = 0;
  std::string status;
};
using Rows = std::map<std::string, Row>;

// "job:line attempts status" rows, one per line, into *rows.
void ParseRows(const std::string& text, Rows* rows) {
  std::istringstream in(text);
  std::string key, status;
  int64_t attempts = 0;
  while (in >> key >> attempts >> status) (*rows)[key] = {attempts, status};
}

// The requests of an SQLite queue (read-only; false while it cannot be read).
bool ReadSqliteRows(const std::string& path, Rows* rows) {
  sqlite3* db = nullptr;
  bool ok = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK;
  std::string text;
  sqlite3_stmt* st = nullptr;
  ok = ok && sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
       sqlite3_prepare_v2(db,
                          "SELECT job || ':' || line || ' ' || attempts || ' ' || status FROM "
                          "requests",
                          -1, &st, nullptr) == SQLITE_OK;
  int rc = SQLITE_DONE;
  while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW)
    text += std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) + "\n";
  ok = ok && rc == SQLITE_DONE;
  sqlite3_finalize(st);
  sqlite3_close(db);
  if (ok) ParseRows(text, rows);
  return ok;
}

// The requests of a PostgreSQL queue (false while the server does not answer).
bool ReadPgRows(const std::string& url, Rows* rows) {
  const std::string n = PgQuery(url, "SELECT count(*) FROM requests");
  if (n.empty()) return false;
  if (n == "0") return true;
  const std::string text = PgQuery(
      url,
      "SELECT string_agg(job || ':' || line || ' ' || attempts || ' ' || status, E'\\n') FROM "
      "requests");
  if (text.empty()) return false;
  ParseRows(text, rows);
  return true;
}

// The seed of this run: $LLMQ_CHAOS_SEED, else a fresh one.
uint32_t Seed() {
  if (const char* s = std::getenv("LLMQ_CHAOS_SEED"); s != nullptr && *s != '\0')
    return static_cast<uint32_t>(std::stoul(s));
  return std::random_device{}();
}

// The rounds of kills (and the server restart) over one job, and what they must not break.
class Chaos {
 public:
  // `read`: the queue's requests. `restart_server`: restarts the queue's server (null: none).
  Chaos(std::vector<Worker*> ws, std::function<bool(Rows*)> read,
        std::function<void(std::mt19937*)> restart_server)
      : ws_(std::move(ws)), read_(std::move(read)), restart_server_(std::move(restart_server)) {
    const uint32_t seed = Seed();
    rng_.seed(seed);
    std::printf("[ chaos    ] seed %u (LLMQ_CHAOS_SEED=%u replays its choices)\n", seed, seed);
    std::fflush(stdout);  // before any fork: a child would print it again
    ::testing::Test::RecordProperty("chaos_seed", std::to_string(seed));
  }

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double Uniform01() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  std::string Logs() const { return AllLogs(ws_) + "\n" + said_; }

  // The job's {committed, total} as `llmq list` shows it ({-1, -1} while it cannot tell).
  std::pair<int64_t, int64_t> Counts() { return Progress(*ws_[0]); }

  // Runs the rounds: kills at spread progress shares, the last one once every request is
  // committed (the finalize), the server restart (if any) early (four workers run fast). The killed
  // workers start again after their delays while the rounds go on (a worker still starting may be
  // killed again: its registration is one more moment); all serve again when it returns.
  void Run() {
    for (int round = 0; round < kKillRounds; ++round) {
      // Round 0 kills while the first groups are claimed; later ones through the run; the last
      // when the job is counted complete (its finalize runs).
      const double share =
          round == kKillRounds - 1 ? 1.0 : (round + Uniform01()) / (kKillRounds - 1) * 0.95;
      ASSERT_NO_FATAL_FAILURE(Settle());
      ASSERT_TRUE(WaitFor([&] { return Sample(share); }, 300))
          << "round " << round << ": never reached " << share << "\n"
          << Logs();
      // A random few results later (an event of the run, not a span of time): the kill lands
      // anywhere in the claim, step, commit cycle.
      if (share < 1.0) {
        const double later = share + Uniform01() * 0.01;
        ASSERT_TRUE(WaitFor([&] { return Sample(later); }, 300)) << Logs();
      }
      ASSERT_TRUE(WaitFor([&] { return Tend(), due_.size() < ws_.size(); }, 60));
      std::vector<Worker*> victims;
      for (Worker* w : ws_)
        if (!due_.count(w)) victims.push_back(w);
      std::shuffle(victims.begin(), victims.end(), rng_);
      victims.resize(std::min<size_t>(victims.size(), Uniform(1, 2)));
      const auto now = std::chrono::steady_clock::now();
      for (Worker* w : victims) {
        w->Kill();
        due_[w] = now + std::chrono::milliseconds(Uniform(0, 600));
      }
      said_ += "[ chaos    ] round " + std::to_string(round) + ": " + std::to_string(committed_) +
               " committed, killed " + std::to_string(victims.size()) + " worker(s)\n";
      ASSERT_NO_FATAL_FAILURE(Remember());
      if (restart_server_ && round == 1) {
        ASSERT_NO_FATAL_FAILURE(Settle());
        const double at = (round + 0.3 + 0.5 * Uniform01()) / (kKillRounds - 1) * 0.95;
        ASSERT_TRUE(WaitFor([&] { return Sample(at); }, 300)) << Logs();
        ASSERT_NO_FATAL_FAILURE(restart_server_(&rng_));
        said_ += "[ chaos    ] server restarted at " + std::to_string(committed_) + " committed\n";
        ASSERT_NO_FATAL_FAILURE(Remember());
      }
    }
    ASSERT_TRUE(WaitFor([&] { return Tend(), due_.empty(); }, 60));
    for (Worker* w : ws_)
      ASSERT_TRUE(WaitFor([&] { return w->Logged("serving"); }, 60)) << w->Logs();
  }

  // Every worker ran through the rounds but for the kills: none exited by itself (a lost
  // connection, a store error).
  void ExpectAllAlive() {
    for (Worker* w : ws_) EXPECT_TRUE(w->Alive()) << "a worker exited by itself\n" << Logs();
  }

  // The lines of the workers' logs that hold `text` (what they said of a lost queue).
  std::string Said(const std::string& text) const {
    std::string out, line;
    std::istringstream in(AllLogs(ws_));
    while (std::getline(in, line))
      if (line.find(text) != std::string::npos) out += line + "\n";
    return out;
  }

  // At most two hand-overs per request; every request finished.
  void ExpectAttempts() {
    Rows rows;
    ASSERT_TRUE(read_(&rows));
    ASSERT_EQ(rows.size(), size_t{kRequests});
    int64_t most = 0;
    for (const auto& [key, r] : rows) {
      EXPECT_NE(r.status, "pending") << key;
      EXPECT_LE(r.attempts, 2) << key << " was handed to an engine " << r.attempts << " times\n"
                               << said_;
      most = std::max(most, r.attempts);
    }
    std::printf("%s[ chaos    ] most hand-overs of one request: %lld\n", said_.c_str(),
                static_cast<long long>(most));
    std::fflush(stdout);
  }

 private:
  // Reads the job's counts; whether `share` of it is committed. The committed count never goes
  // down.
  bool Sample(double share) {
    Tend();
    const auto [done, total] = Counts();
    if (total <= 0) return false;
    EXPECT_GE(done, committed_) << "the committed count went down\n" << said_;
    committed_ = std::max(committed_, done);
    return done >= share * static_cast<double>(total);
  }
  // Starts the killed workers whose delay has passed.
  void Tend() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = due_.begin(); it != due_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      it->first->Spawn();
      it = due_.erase(it);
    }
  }
  // The requests handed to an engine and unfinished now: the next event waits for them.
  void Remember() {
    Rows rows;
    ASSERT_TRUE(WaitFor([&] { return read_(&rows); }, 120)) << "the queue does not answer";
    exposed_.clear();
    for (const auto& [key, r] : rows)
      if (r.status == "pending" && r.attempts >= 1) exposed_.insert(key);
  }
  // Waits until every request of the last event's exposed_ is finished.
  void Settle() {
    ASSERT_TRUE(WaitFor(
        [&] {
          Tend();
          Rows rows;
          if (!read_(&rows)) return false;
          for (const std::string& key : exposed_)
            if (rows[key].status == "pending") return false;
          return true;
        },
        300))
        << "requests exposed to the last event never finished\n"
        << Logs();
    exposed_.clear();
  }

  std::vector<Worker*> ws_;
  std::function<bool(Rows*)> read_;
  std::function<void(std::mt19937*)> restart_server_;
  std::mt19937 rng_;
  std::set<std::string> exposed_;
  std::map<Worker*, std::chrono::steady_clock::time_point> due_;  // restarts, when
  int64_t committed_ = 0;
  std::string said_;
};

// A PostgreSQL server of the test's own (tests/pg_server.sh in `dir`), stopped when it goes.
class PrivatePgServer {
 public:
  explicit PrivatePgServer(const std::string& dir) : dir_(dir) {
    std::string said;
    if (RunPgServerScript("start", dir_, &said) == 0 && PgSocketIn(dir_)) {
      if (const std::string err = PgExec(PgServer::AdminUrl(dir_), "CREATE DATABASE chaos");
          err.empty())
        url_ = "postgresql:///chaos?host=" + dir_ + "&user=postgres";
      else
        why_ = "CREATE DATABASE chaos: " + err;
    } else {
      why_ = "no PostgreSQL server for the tests: tests/pg_server.sh start said: " + said;
    }
  }
  ~PrivatePgServer() {
    std::string said;
    RunPgServerScript("stop", dir_, &said);
  }
  PrivatePgServer(const PrivatePgServer&) = delete;
  PrivatePgServer& operator=(const PrivatePgServer&) = delete;

  // A fast shutdown (every connection cut), then a start once `down` (the workers noticed) holds
  // or after `max_down_s`.
  void Restart(const std::function<bool()>& down, double max_down_s) {
    std::string said;
    ASSERT_EQ(RunPgServerScript("halt", dir_, &said), 0) << said;
    WaitFor(down, max_down_s);
    ASSERT_EQ(RunPgServerScript("resume", dir_, &said), 0) << said;
  }

  const std::string& url() const { return url_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_, url_, why_;
};

class ServeChaosTest : public WorkerSuite<kRequests, kBadLines, kMaxTokensFactor> {};

TEST_F(ServeChaosTest, FourWorkersOnPostgresSurviveKillsAndAServerRestart) {
  // Its own server (the shared one serves other tests, which a restart would disturb); the
  // socket path must stay short (108 bytes), hence a folder of the process's tmp root.
  PrivatePgServer server((TmpRoot() / "pgchaos").string());
  if (server.url().empty()) LLMQ_SKIP_OR_FAIL_MISSING(server.why());
  Reference();
  if (HasFatalFailure()) return;
  const std::string dir = CurrentTestDir();
  std::vector<Worker*> all;
  const auto ws = OwnFolderWorkers(4, dir, model_, server.url(), kLeaseSeconds, &all);
  for (Worker* w : all) ASSERT_TRUE(w->Start()) << w->Logs();
  Chaos chaos(
      all, [&](Rows* rows) { return ReadPgRows(server.url(), rows); },
      [&](std::mt19937* rng) {
        // Down until a worker has said it lost the queue (its next statement failed).
        static_cast<void>(rng);
        const auto said = [&] {
          const std::string logs = AllLogs(all);
          size_t n = 0;
          for (size_t at = logs.find("connect"); at != std::string::npos;
               at = logs.find("connect", at + 1))
            ++n;
          return n;
        };
        const size_t before = said();
        server.Restart([&] { return said() > before; }, 10);
      });
  all[0]->Drop("job.jsonl", ref_.job());
  chaos.Run();
  if (HasFatalFailure()) return;

  // Finalized by exactly one of them, into its own outbox.
  const auto summarized = [&] {
    std::vector<Worker*> out;
    for (Worker* w : all)
      if (fs::exists(w->outbox("job.summary.json"))) out.push_back(w);
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return !summarized().empty(); }, 300)) << chaos.Logs();
  ASSERT_TRUE(WaitFor([&] { return JobCompleted(*all[0]); }, 60)) << chaos.Logs();
  chaos.ExpectAllAlive();
  for (Worker* w : all) EXPECT_EQ(w->Stop(), 0) << w->Logs();
  const std::vector<Worker*> finalizers = summarized();
  ASSERT_EQ(finalizers.size(), 1u) << "finalized more than once\n" << chaos.Logs();
  ref_.Expect(finalizers[0]->outbox("job"), chaos.Logs());
  EXPECT_EQ(Names(finalizers[0]->state() + "/outbox"), ref_.outbox_names());
  chaos.ExpectAttempts();
  // What the server restart did to the workers' engine threads (a Feed cut short: its claims go
  // back, JobRunner::Serve).
  std::printf("[ chaos    ] on the server restart:\n%s", chaos.Said("feeding the engine").c_str());
}

TEST_F(ServeChaosTest, TwoWorkersOnOneSqliteFolderSurviveKills) {
  Reference();
  if (HasFatalFailure()) return;
  const std::string dir = CurrentTestDir(), state = dir + "/state";
  Worker a(dir + "/a", model_, state, "", kLeaseSeconds),
      b(dir + "/b", model_, state, "", kLeaseSeconds);
  const std::vector<Worker*> both = {&a, &b};
  ASSERT_TRUE(a.Start()) << a.Logs();
  ASSERT_TRUE(b.Start()) << b.Logs();
  Chaos chaos(
      both, [&](Rows* rows) { return ReadSqliteRows(state + "/queue.db", rows); }, nullptr);
  a.Drop("job.jsonl", ref_.job());
  chaos.Run();
  if (HasFatalFailure()) return;
  ASSERT_TRUE(WaitFor([&] { return fs::exists(a.outbox("job.summary.json")); }, 300))
      << chaos.Logs();
  chaos.ExpectAllAlive();
  for (Worker* w : both) EXPECT_EQ(w->Stop(), 0) << w->Logs();
  // One set of files: what one worker's run leaves, no more.
  ref_.Expect(a.outbox("job"), chaos.Logs());
  EXPECT_EQ(Names(state + "/outbox"), ref_.outbox_names());
  chaos.ExpectAttempts();
}

}  // namespace
}  // namespace llmq::testing
