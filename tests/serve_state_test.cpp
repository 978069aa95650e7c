// `llmq serve` and its own state (issue 21), on the real binary: what someone who can touch the
// state folder (or the config file) does must not make it run work twice, lose the queue
// silently, hang, expose results or leave stale state behind:
//   - the lock is on the state folder itself: removing a lock file does not let a second daemon
//     watch the same inbox (a second daemon is a second worker on the queue: nothing runs twice);
//   - queue.db removed (or replaced) under a running daemon: it stops, loudly, and accepts nothing
//     more;
//   - a config file replaced by a FIFO: SIGHUP does not block, the old settings stay;
//   - queue.db (and its -wal, -shm) are 0600 and the outbox files 0640, whatever the umask;
//   - serve.json does not outlive a daemon that failed to start;
//   - WATCHDOG=1 comes from the event loop, and only while the engine thread ticks: a stuck event
//     loop or a stuck engine step each stop the pings.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/serve_fixture.h"
#include "tests/test_sockets.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kWatchdogUsec = 1000000;

std::string Job(int count) {
  std::string s;
  for (int i = 0; i < count; ++i)
    s += CompletionLine("r" + std::to_string(i), "Count to " + std::to_string(i), 4,
                        /*ignore_eos=*/false);
  return s;
}

int ModeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

std::string Octal(int mode) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", mode);
  return b;
}

// A running (or exited) `llmq serve`: its state folder, config, log and pid.
class ServeStateTest : public TinyModelSuite {
 protected:
  void SetUp() override {
    dir_ = CurrentTestDir();
    Configure(dir_ + "/state");
  }

  void TearDown() override {
    for (pid_t& p : pids_) {
      if (p < 0) continue;
      kill(p, SIGKILL);
      WaitExit(p);
    }
  }

  // Writes the config for state folder `state`.
  void Configure(const std::string& state) {
    state_ = state;
    config_ = dir_ + "/llmq.yaml";
    WriteServeConfig(config_, {.model = model_, .state = state_, .engine = "  max_num_seqs: 4\n"});
  }

  // Starts `llmq serve` (the environment `env` added) logging to err_file(n); its index in
  // pids_. Waits until it serves when `wait` (false when it did not: its log says why).
  bool Start(size_t* n, const std::vector<std::pair<std::string, std::string>>& env = {},
             bool wait = true) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    *n = pids_.size();
    pids_.push_back(SpawnLlmq({"serve", "--config", config_},
                              dir_ + "/serve" + std::to_string(*n) + ".out", err_file(*n)));
    for (const auto& [k, v] : env) unsetenv(k.c_str());
    if (!wait) return true;
    return WaitFor([&] { return Logged(*n, "serving"); }, 30);
  }

  std::string err_file(size_t n) const { return dir_ + "/serve" + std::to_string(n) + ".err"; }
  bool Logged(size_t n, const std::string& text) const {
    return ReadText(err_file(n)).find(text) != std::string::npos;
  }

  // Whether daemon `n` exited within `seconds`; its exit status in *code.
  bool ExitedWithin(size_t n, double seconds, int* code) {
    if (!testing::ExitedWithin(pids_[n], seconds, code, 20)) return false;
    pids_[n] = -1;
    return true;
  }

  int Stop(size_t n) {
    kill(pids_[n], SIGTERM);
    int code = -1;
    return ExitedWithin(n, 30, &code) ? code : -1;
  }

  void Drop(const std::string& name, const std::string& text) {
    WriteAndRename(dir_ + "/" + name + ".staging", state_ + "/inbox/" + name, text);
  }

  std::string dir_, state_, config_;
  std::vector<pid_t> pids_;
};

// Row 3: `rm serve.lock` while a daemon runs used to let a second one start on the same state
// folder, and both ran the queue (every request attempted twice). The lock is on the folder
// itself; a second daemon there is now a second worker (issue 27): it claims its requests under
// leases, so no request runs twice, and it leaves the inbox and serve.json to the first.
TEST_F(ServeStateTest, ASecondDaemonIsASecondWorkerEvenWhenTheLockFileIsRemoved) {
  size_t first = 0, second = 0;
  ASSERT_TRUE(Start(&first)) << ReadText(err_file(first));
  std::error_code ec;
  fs::remove(state_ + "/serve.lock", ec);  // the lock file of older versions, if any
  ASSERT_TRUE(Start(&second)) << ReadText(err_file(second));
  EXPECT_TRUE(Logged(second, "another worker watches this folder's inbox"))
      << ReadText(err_file(second));
  EXPECT_TRUE(fs::exists(state_ + "/serve.json"));
  Drop("a.jsonl", Job(40));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 60))
      << ReadText(err_file(first)) << ReadText(err_file(second));
  const auto results = ReadJsonl(state_ + "/outbox/a.results.jsonl");
  std::set<std::string> ids;
  for (const json& o : results) EXPECT_TRUE(ids.insert(o["custom_id"]).second) << o.dump();
  EXPECT_EQ(ids.size(), 40u);
  EXPECT_EQ(Stop(first), 0) << ReadText(err_file(first));
  EXPECT_EQ(Stop(second), 0) << ReadText(err_file(second));
  EXPECT_FALSE(fs::exists(state_ + "/serve.json")) << "serve.json outlived both workers";
}

// Row 4: queue.db removed under a running daemon: it used to go on writing to the deleted file,
// logging nothing, and a restart found every job (and every "already accepted" record) gone.
TEST_F(ServeStateTest, ARemovedQueueStopsTheDaemonLoudly) {
  size_t n = 0;
  ASSERT_TRUE(Start(&n)) << ReadText(err_file(n));
  Drop("a.jsonl", Job(2));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 60))
      << ReadText(err_file(n));
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(state_ + "/queue.db" + suffix);
  const bool noticed = WaitFor([&] { return Logged(n, "queue.db: removed"); }, 10);
  EXPECT_TRUE(noticed) << ReadText(err_file(n));
  // Nothing is accepted after that: a file dropped now stays in inbox/.
  Drop("b.jsonl", Job(2));
  int code = -1;
  ASSERT_TRUE(ExitedWithin(n, 30, &code)) << ReadText(err_file(n));
  EXPECT_NE(code, 0);
  EXPECT_TRUE(fs::exists(state_ + "/inbox/b.jsonl")) << ReadText(err_file(n));
  EXPECT_FALSE(fs::exists(state_ + "/archive/b.jsonl"));
  EXPECT_FALSE(Logged(n, "accepted inbox/b.jsonl")) << ReadText(err_file(n));
}

// The same with queue.db replaced by another database (a restore from a backup, say, while the
// daemon runs): its connections would go on with the old file.
TEST_F(ServeStateTest, AReplacedQueueStopsTheDaemonLoudly) {
  size_t n = 0;
  ASSERT_TRUE(Start(&n)) << ReadText(err_file(n));
  const std::string db = state_ + "/queue.db";
  fs::copy_file(db, dir_ + "/copy.db");
  fs::rename(dir_ + "/copy.db", db);
  EXPECT_TRUE(WaitFor([&] { return Logged(n, "queue.db: replaced"); }, 10))
      << ReadText(err_file(n));
  int code = -1;
  ASSERT_TRUE(ExitedWithin(n, 30, &code)) << ReadText(err_file(n));
  EXPECT_NE(code, 0);
}

// Row 7: the config file replaced by a FIFO, then SIGHUP: the event loop used to block in open()
// until kill -9.
TEST_F(ServeStateTest, AConfigReplacedByAFifoIsRefusedOnReload) {
  size_t n = 0;
  ASSERT_TRUE(Start(&n)) << ReadText(err_file(n));
  const std::string good = ReadText(config_);
  fs::remove(config_);
  ASSERT_EQ(mkfifo(config_.c_str(), 0644), 0);
  kill(pids_[n], SIGHUP);
  ASSERT_TRUE(WaitFor([&] { return Logged(n, "SIGHUP: " + config_ + ": it is a FIFO"); }, 10))
      << ReadText(err_file(n));
  EXPECT_TRUE(Logged(n, "not a regular file; keeping settle 0.2s")) << ReadText(err_file(n));
  // The loop is alive: a good config is reloaded, a job runs, SIGTERM ends it.
  fs::remove(config_);
  std::ofstream(config_) << good << "  group_window_ms: 20\n";
  kill(pids_[n], SIGHUP);
  EXPECT_TRUE(WaitFor([&] { return Logged(n, "group window 20ms"); }, 10)) << ReadText(err_file(n));
  Drop("a.jsonl", Job(2));
  EXPECT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 60))
      << ReadText(err_file(n));
  EXPECT_EQ(Stop(n), 0) << ReadText(err_file(n));
}

// Row 9: `llmq serve` started by hand under umask 022 wrote queue.db (every prompt) and the
// outbox files 0644. Now the queue is the daemon's alone and the results its group's, whatever
// the umask.
TEST_F(ServeStateTest, TheQueueIsPrivateAndTheResultsGroupReadableWhateverTheUmask) {
  for (const mode_t umask_value : {mode_t{022}, mode_t{077}, mode_t{0}}) {
    SCOPED_TRACE("umask " + Octal(static_cast<int>(umask_value)));
    Configure(dir_ + "/state-" + Octal(static_cast<int>(umask_value)));
    const mode_t old = ::umask(umask_value);
    size_t n = 0;
    const bool started = Start(&n);
    ::umask(old);
    ASSERT_TRUE(started) << ReadText(err_file(n));
    Drop("a.jsonl", Job(2) + "{\"custom_id\": \"bad\"}\n");
    ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 60))
        << ReadText(err_file(n));
    // While the daemon runs its -wal and -shm exist; SQLite gives them queue.db's mode.
    for (const char* suffix : {"", "-wal", "-shm"})
      EXPECT_EQ(Octal(ModeOf(state_ + "/queue.db" + suffix)), "0600") << suffix;
    for (const char* suffix : {".results.jsonl", ".errors.jsonl", ".report.html", ".summary.json"})
      EXPECT_EQ(Octal(ModeOf(state_ + "/outbox/a" + suffix)), "0640") << suffix;
    EXPECT_EQ(Stop(n), 0) << ReadText(err_file(n));
  }
}

// Row 10: metrics.http_port already in use: the daemon exits 1 as documented, and used to leave
// serve.json behind (llmq status then showed a daemon's run windows while none ran, until the
// pid was reused).
TEST_F(ServeStateTest, ServeJsonIsRemovedWhenTheStartFails) {
  const HeldPort held;
  ASSERT_GT(held.port(), 0);
  std::ofstream(config_, std::ios::app) << "metrics:\n  http_port: " << held.port() << "\n";
  const auto r = RunLlmqWith({}, {"serve", "--config", config_});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("metrics.http_port: cannot listen"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(state_ + "/queue.db"));  // it got that far
  EXPECT_FALSE(fs::exists(state_ + "/serve.json"));
}

// --- The watchdog: WATCHDOG=1 from the event loop, only while the engine thread ticks.

class ServeWatchdogTest : public ServeStateTest {
 protected:
  void SetUp() override {
    ServeStateTest::SetUp();
    ASSERT_TRUE(sock_.bound());
  }
  // Starts `llmq serve` under a 1 s watchdog; the index of its READY=1 (-1: none came).
  int StartWatched(size_t* n, std::vector<std::pair<std::string, std::string>> env = {}) {
    env.push_back({"NOTIFY_SOCKET", sock_.address()});
    env.push_back({"WATCHDOG_USEC", std::to_string(kWatchdogUsec)});
    if (!Start(n, env, /*wait=*/false)) return -1;
    return sock_.WaitFor("READY=1", 0, 30);
  }
  // Waits for `count` pings after message `from`; the index of the last (-1: they did not come).
  int WaitForPings(size_t from, int count) {
    int at = static_cast<int>(from) - 1;
    for (int i = 0; i < count && at >= -1; ++i) at = sock_.WaitFor("WATCHDOG=1", at + 1, 5);
    return at;
  }
  NotifySocket sock_;
};

// An event loop stuck in a blocking call (a FIFO opened in ingest, a config file on a hung
// network file system) used to go unnoticed: the engine thread went on pinging.
TEST_F(ServeWatchdogTest, AStuckEventLoopStopsThePings) {
  size_t n = 0;
  const int ready = StartWatched(&n, {{"LLMQ_TEST_STALL_RELOAD_MS", "3000"}});
  ASSERT_GE(ready, 0) << ReadText(err_file(n));
  const int pinged = WaitForPings(ready, 3);  // idle: pinged
  ASSERT_GE(pinged, 0) << ReadText(err_file(n));
  // The reload blocks the event loop for 3 s (the engine thread idles and ticks meanwhile).
  kill(pids_[n], SIGHUP);
  const int reloading = sock_.WaitFor("RELOADING=1", pinged + 1, 10);
  ASSERT_GE(reloading, 0) << ReadText(err_file(n));
  const int back = sock_.WaitFor("READY=1", reloading + 1, 10);
  ASSERT_GE(back, 0) << ReadText(err_file(n));
  const int again = WaitForPings(back, 2);  // and the pings come back after it
  ASSERT_GE(again, 0) << ReadText(err_file(n));
  EXPECT_EQ(sock_.Count("WATCHDOG=1", reloading, back), 0)
      << "no ping while the event loop was blocked (between RELOADING=1 and READY=1)";
  EXPECT_TRUE(Logged(n, "watchdog: the event loop did not run for ")) << ReadText(err_file(n));
  EXPECT_EQ(Stop(n), 0) << ReadText(err_file(n));
}

// A stuck engine step: no pings (as before), and the log says which part is stale.
TEST_F(ServeWatchdogTest, AStalledEngineStepStopsThePingsAndIsNamed) {
  size_t n = 0;
  const int ready = StartWatched(&n, {{"LLMQ_TEST_STALL_STEP_MS", "3000"}});
  ASSERT_GE(ready, 0) << ReadText(err_file(n));
  const int pinged = WaitForPings(ready, 3);
  ASSERT_GE(pinged, 0) << ReadText(err_file(n));
  Drop("a.jsonl", Job(2));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 60))
      << ReadText(err_file(n));
  const int again = WaitForPings(sock_.size(), 2);
  ASSERT_GE(again, 0) << ReadText(err_file(n));
  // While it was stale no ping was sent (the verdict and its log line are one:
  // tests/watchdog_test.cpp).
  EXPECT_TRUE(Logged(n, "watchdog: the engine thread has not ticked for "))
      << ReadText(err_file(n));
  EXPECT_TRUE(Logged(n, "watchdog: the engine thread ticks again")) << ReadText(err_file(n));
  EXPECT_EQ(Stop(n), 0) << ReadText(err_file(n));
}

}  // namespace
}  // namespace llmq::testing
