// `llmq serve` and systemd's notify protocol (issue 8, done-when 2), on the real binary: the test
// owns the NOTIFY_SOCKET (an abstract AF_UNIX datagram socket) and gives WATCHDOG_USEC, and checks
// READY=1 after start-up, STATUS= updates while a job runs, WATCHDOG=1 at least every half
// interval, RELOADING=1 (with MONOTONIC_USEC) then READY=1 on SIGHUP, STOPPING=1 on SIGTERM; and
// that a stalled engine step (LLMQ_TEST_STALL_STEP_MS, a test-only hook) stops the pings.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::ReadText;
using testing::WaitFor;

constexpr int64_t kWatchdogUsec = 1000000;

// The test's end of NOTIFY_SOCKET: every datagram, with when it came.
class NotifySocket {
 public:
  struct Message {
    Clock::time_point at;
    std::string text;
  };

  NotifySocket() {
    name_ = "llmq-notify-test-" + std::to_string(getpid());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name_.data(), name_.size());  // abstract: sun_path[0] == 0
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name_.size();
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0;
    timeval tv{0, 50000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    reader_ = std::thread([this] {
      char buf[4096];
      while (!done_) {
        const ssize_t n = recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) continue;
        std::lock_guard<std::mutex> lock(mu_);
        messages_.push_back({Clock::now(), std::string(buf, n)});
      }
    });
  }
  ~NotifySocket() {
    done_ = true;
    reader_.join();
    close(fd_);
  }

  bool bound() const { return bound_; }
  std::string address() const { return "@" + name_; }  // sd_notify's spelling of abstract
  std::vector<Message> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  // Index of the first message at or after `from` that contains `text`; -1 if none.
  int Find(const std::string& text, size_t from = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = from; i < messages_.size(); ++i)
      if (messages_[i].text.find(text) != std::string::npos) return static_cast<int>(i);
    return -1;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }
  int WaitFor(const std::string& text, size_t from, double seconds) {
    int i = -1;
    testing::WaitFor([&] { return (i = Find(text, from)) >= 0; }, seconds);
    return i;
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
  std::atomic<bool> done_{false};
  std::thread reader_;
  std::mutex mu_;
  std::vector<Message> messages_;
};

// The longest gap between WATCHDOG=1 pings received in [from, to), in seconds, counting from
// `from` itself.
double LongestPingGap(const std::vector<NotifySocket::Message>& m, size_t from, size_t to) {
  Clock::time_point last = m[from].at;
  double gap = 0;
  for (size_t i = from; i < to && i < m.size(); ++i) {
    if (m[i].text != "WATCHDOG=1") continue;
    gap = std::max(gap, std::chrono::duration<double>(m[i].at - last).count());
    last = m[i].at;
  }
  return gap;
}

std::string Job(int count, int max_tokens) {
  std::string s;
  for (int i = 0; i < count; ++i)
    s += json{{"custom_id", "r" + std::to_string(i)},
              {"method", "POST"},
              {"url", "/v1/completions"},
              {"body",
               {{"prompt", "Count to " + std::to_string(i)},
                {"max_tokens", max_tokens},
                {"ignore_eos", true}}}}
             .dump() +
         "\n";
  return s;
}

class ServeNotifyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("serve_notify_model") + "/model";
    ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"})
                  .exit_code,
              0);
  }

  void SetUp() override {
    dir_ = testing::CurrentTestDir();
    state_ = dir_ + "/state";
    config_ = dir_ + "/llmq.yaml";
    std::ofstream(config_) << "model:\n  path: " << model_
                           << "\nengine:\n  max_num_seqs: 4\nspool:\n  state_dir: " << state_
                           << "\n  settle_seconds: 0.2\n  rescan_seconds: 1\n"
                           << "  drain_seconds: 5\n  commit_interval_ms: 10\n";
    ASSERT_TRUE(sock_.bound());
  }

  void TearDown() override {
    if (pid_ < 0) return;
    kill(pid_, SIGKILL);
    testing::WaitExit(pid_);
  }

  // Starts `llmq serve` with NOTIFY_SOCKET and WATCHDOG_USEC (and `extra` NAME=VALUE) set.
  void Start(const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"NOTIFY_SOCKET", sock_.address()}, {"WATCHDOG_USEC", std::to_string(kWatchdogUsec)}};
    env.insert(env.end(), extra.begin(), extra.end());
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    pid_ = testing::SpawnLlmq({"serve", "--config", config_}, dir_ + "/serve.out", err_file());
    for (const auto& [k, v] : env) unsetenv(k.c_str());
  }

  void Drop(const std::string& name, const std::string& text) {
    const std::string tmp = dir_ + "/" + name + ".staging";
    std::ofstream(tmp, std::ios::binary) << text;
    fs::rename(tmp, state_ + "/inbox/" + name);
  }

  int Stop() {
    kill(pid_, SIGTERM);
    const int rc = testing::WaitExit(pid_);
    pid_ = -1;
    return rc;
  }

  std::string err_file() const { return dir_ + "/serve.err"; }

  static std::string model_;
  std::string dir_, state_, config_;
  NotifySocket sock_;
  pid_t pid_ = -1;
};
std::string ServeNotifyTest::model_;

TEST_F(ServeNotifyTest, ReadyStatusWatchdogReloadAndStopping) {
  Start();
  const int ready = sock_.WaitFor("READY=1", 0, 30);
  ASSERT_GE(ready, 0) << ReadText(err_file());
  // Ready only once the spool is scanned and served.
  EXPECT_NE(ReadText(err_file()).find("serving"), std::string::npos);

  const size_t before_job = sock_.size();
  Drop("a.jsonl", Job(384, 64));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 120))
      << ReadText(err_file());
  // STATUS= lines while the job ran: more than one, with the job's progress.
  std::set<std::string> statuses;
  for (const auto& m : sock_.messages())
    if (m.text.rfind("STATUS=1 job(s), ", 0) == 0) statuses.insert(m.text);
  EXPECT_GE(statuses.size(), 2u) << "distinct STATUS= lines while the job ran";
  EXPECT_GE(sock_.Find("/384 requests done", before_job), 0);

  // SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1.
  const size_t before_hup = sock_.size();
  kill(pid_, SIGHUP);
  const int reloading = sock_.WaitFor("RELOADING=1", before_hup, 10);
  ASSERT_GE(reloading, 0);
  EXPECT_NE(sock_.messages()[reloading].text.find("\nMONOTONIC_USEC="), std::string::npos);
  EXPECT_GE(sock_.WaitFor("READY=1", reloading + 1, 10), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // idle pings too

  // WATCHDOG=1 at least every half interval, idle and while the job ran.
  const size_t before_stop = sock_.size();
  const auto all = sock_.messages();
  EXPECT_LE(LongestPingGap(all, ready, before_stop), kWatchdogUsec / 2 / 1e6);

  EXPECT_EQ(Stop(), 0) << ReadText(err_file());
  EXPECT_GE(sock_.Find("STOPPING=1", before_stop), 0);
}

TEST_F(ServeNotifyTest, AStalledEngineStepStopsTheWatchdogPings) {
  Start({{"LLMQ_TEST_STALL_STEP_MS", "3000"}});
  const int ready = sock_.WaitFor("READY=1", 0, 30);
  ASSERT_GE(ready, 0) << ReadText(err_file());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_LE(LongestPingGap(sock_.messages(), ready, sock_.size()), kWatchdogUsec / 2 / 1e6)
      << "idle: pinged";
  const size_t before_job = sock_.size();
  Drop("a.jsonl", Job(4, 8));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/outbox/a.summary.json"); }, 60))
      << ReadText(err_file());
  // The first step slept 3 s: no ping for that long (systemd would have killed the service).
  EXPECT_GE(LongestPingGap(sock_.messages(), before_job, sock_.size()), 2.5);
  // And the pings came back once the step returned.
  const size_t after = sock_.size();
  EXPECT_GE(sock_.WaitFor("WATCHDOG=1", after, 5), 0);
  EXPECT_EQ(Stop(), 0) << ReadText(err_file());
}

}  // namespace
}  // namespace llmq
