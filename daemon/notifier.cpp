#include "daemon/notifier.h"

#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace llmq {
namespace {

int64_t MonotonicUsec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000 + ts.tv_nsec / 1000;
}

// A count that grows while the process works: CPU time in milliseconds, plus blocks read and
// major page faults (a load waiting on a disk or a network file system uses little CPU).
int64_t WorkDone() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const auto ms = [](const timeval& tv) { return int64_t{tv.tv_sec} * 1000 + tv.tv_usec / 1000; };
  return ms(ru.ru_utime) + ms(ru.ru_stime) + ru.ru_inblock + ru.ru_majflt;
}

// A TEST ONLY variable's milliseconds; 0 when unset.
int EnvMilliseconds(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : 0;
}

}  // namespace

Notifier::Notifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID is unset or names this process.
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0)
    watchdog_ = std::chrono::microseconds(usec);
}

void Notifier::Send(const std::string& message) {
  if (!enabled_) return;
  const int r = sd_notify(/*unset_environment=*/0, message.c_str());
  if (r < 0) std::fprintf(stderr, "llmq: sd_notify(%s): error %d\n", message.c_str(), -r);
}

void Notifier::Ready() {
  Send("READY=1");
}

void Notifier::SetStatus(const std::string& line) {
  if (!enabled_ || line == last_status_) return;
  last_status_ = line;
  Send("STATUS=" + line);
}

void Notifier::Watchdog() {
  if (!enabled_ || watchdog_.count() <= 0) return;
  const int64_t now = MonotonicUsec();
  if (now - last_ping_us_.load(std::memory_order_relaxed) < watchdog_.count() / 8) return;
  last_ping_us_.store(now, std::memory_order_relaxed);
  Send("WATCHDOG=1");
}

void Notifier::Stopping() {
  Send("STOPPING=1");
}

void Notifier::ExtendTimeout(std::chrono::microseconds usec) {
  Send("EXTEND_TIMEOUT_USEC=" + std::to_string(usec.count()));
}

void Notifier::Reloading() {
  // sd_notify(3): MONOTONIC_USEC lets the manager tell this reload from an earlier one.
  Send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(MonotonicUsec()));
}

TimeoutExtender::TimeoutExtender(Notifier* notifier, std::chrono::microseconds extension)
    : notifier_(notifier), extension_(extension) {
  if (!notifier_->enabled()) return;
  notifier_->ExtendTimeout(extension_);
  thread_ = std::thread([this] {
    int64_t work = WorkDone();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return done_; })) {
      const int64_t now = WorkDone();
      if (now == work) continue;  // no progress this second: no renewal
      work = now;
      notifier_->ExtendTimeout(extension_);
    }
  });
}

TimeoutExtender::~TimeoutExtender() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string ProgressLine(const std::vector<jobs::JobRecord>& jobs, const RunnerProgress& p,
                         double tokens_per_s) {
  int64_t open = 0, done = 0, total = 0;
  for (const jobs::JobRecord& j : jobs) {
    if (jobs::IsTerminal(j.status)) continue;
    ++open;
    done += j.completed + j.failed;
    total += j.total;
  }
  const double hit = p.prompt_tokens > 0 ? 100.0 * p.cached_tokens / p.prompt_tokens : 0.0;
  char b[256];
  std::snprintf(b, sizeof b, "%lld job(s), %lld/%lld requests done, %.1f tok/s, cache hit %.1f%%",
                static_cast<long long>(open), static_cast<long long>(done),
                static_cast<long long>(total), tokens_per_s, hit);
  return b;
}

void TestSlowLoad() {
  const char* v = std::getenv("LLMQ_TEST_SLOW_LOAD_MS");
  if (v == nullptr) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::atoi(v));
  while (std::chrono::steady_clock::now() < end) {
  }
}

int TestStallStepMs() {
  return EnvMilliseconds("LLMQ_TEST_STALL_STEP_MS");
}

int TestStallReloadMs() {
  return EnvMilliseconds("LLMQ_TEST_STALL_RELOAD_MS");
}

}  // namespace llmq
