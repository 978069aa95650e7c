// `llmq serve` and its own state (issue 21), on the real binary: what someone who can touch the
// state folder (or the config file) does must not make it run work twice, lose the queue
// silently, hang, expose results or leave stale state behind:
//   - the lock is on the state folder itself: removing a lock file does not let a second daemon
//     run the same queue;
//   - serve.json does not outlive a daemon that failed to start;
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_sockets.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using testing::ReadText;
using testing::WaitFor;

// A running (or exited) `llmq serve`: its state folder, config, log and pid.
class ServeStateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("serve_state_model") + "/model";
    ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"})
                  .exit_code,
              0);
  }

  void SetUp() override {
    dir_ = testing::CurrentTestDir();
    Configure(dir_ + "/state");
  }

  void TearDown() override {
    for (pid_t& p : pids_) {
      if (p < 0) continue;
      kill(p, SIGKILL);
      testing::WaitExit(p);
    }
  }

  // Writes the config for state folder `state`.
  void Configure(const std::string& state) {
    state_ = state;
    config_ = dir_ + "/llmq.yaml";
    std::ofstream(config_) << "model:\n  path: " << model_
                           << "\nengine:\n  max_num_seqs: 4\nspool:\n  state_dir: " << state_
                           << "\n  settle_seconds: 0.2\n  rescan_seconds: 1\n"
                           << "  drain_seconds: 5\n  commit_interval_ms: 10\n";
  }

  // Starts `llmq serve` (the environment `env` added) logging to err_file(n); its index in
  // pids_. Waits until it serves when `wait` (false when it did not: its log says why).
  bool Start(size_t* n, const std::vector<std::pair<std::string, std::string>>& env = {},
             bool wait = true) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    *n = pids_.size();
    pids_.push_back(testing::SpawnLlmq({"serve", "--config", config_},
                                       dir_ + "/serve" + std::to_string(*n) + ".out",
                                       err_file(*n)));
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
    int status = 0;
    const bool exited =
        WaitFor([&] { return waitpid(pids_[n], &status, WNOHANG) == pids_[n]; }, seconds, 20);
    if (!exited) return false;
    pids_[n] = -1;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }

  int Stop(size_t n) {
    kill(pids_[n], SIGTERM);
    int code = -1;
    return ExitedWithin(n, 30, &code) ? code : -1;
  }

  void Drop(const std::string& name, const std::string& text) {
    const std::string tmp = dir_ + "/" + name + ".staging";
    std::ofstream(tmp, std::ios::binary) << text;
    fs::rename(tmp, state_ + "/inbox/" + name);
  }

  static std::string model_;
  std::string dir_, state_, config_;
  std::vector<pid_t> pids_;
};
std::string ServeStateTest::model_;

// Row 3: `rm serve.lock` while a daemon runs used to let a second one start on the same state
// folder, and both ran the queue (every request attempted twice).
TEST_F(ServeStateTest, ASecondDaemonIsRefusedEvenWhenTheLockFileIsRemoved) {
  size_t first = 0, second = 0;
  ASSERT_TRUE(Start(&first)) << ReadText(err_file(first));
  std::error_code ec;
  fs::remove(state_ + "/serve.lock", ec);  // the lock file of older versions, if any
  ASSERT_TRUE(Start(&second, {}, /*wait=*/false));
  int code = -1;
  const bool exited = ExitedWithin(second, 30, &code);
  ASSERT_TRUE(exited) << "a second daemon runs on the same state folder: "
                      << ReadText(err_file(second));
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(Logged(second, "another llmq serve is running on " + state_))
      << ReadText(err_file(second));
  EXPECT_FALSE(Logged(second, "serving"));
  // The refused daemon left the running one's serve.json alone.
  EXPECT_TRUE(fs::exists(state_ + "/serve.json"));
  EXPECT_EQ(Stop(first), 0) << ReadText(err_file(first));
}

// Row 10: metrics.http_port already in use: the daemon exits 1 as documented, and used to leave
// serve.json behind (llmq status then showed a daemon's run windows while none ran, until the
// pid was reused).
TEST_F(ServeStateTest, ServeJsonIsRemovedWhenTheStartFails) {
  const testing::HeldPort held;
  ASSERT_GT(held.port(), 0);
  std::ofstream(config_, std::ios::app) << "metrics:\n  http_port: " << held.port() << "\n";
  const auto r = testing::RunLlmqWith({}, {"serve", "--config", config_});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("metrics.http_port: cannot listen"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(state_ + "/queue.db"));  // it got that far
  EXPECT_FALSE(fs::exists(state_ + "/serve.json"));
}

}  // namespace
}  // namespace llmq
