// Notifier: the daemon's side of systemd's notify protocol (sd_notify(3), through libsystemd).
// EXTEND_TIMEOUT_USEC= while the model loads (TimeoutExtender), READY=1 once it is loaded and the
// spool scanned, STATUS= a line of progress, WATCHDOG=1 (from the daemon's event loop, while the
// engine loop ticks and the queue answers: cli_serve.cpp, ArmWatchdog), STOPPING=1 and
// EXTEND_TIMEOUT_USEC= while draining and finishing, RELOADING=1 (with MONOTONIC_USEC) then
// READY=1 around SIGHUP.
//
// NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID are read once, when the object is built; without
// NOTIFY_SOCKET every call is a no-op (nothing is sent, nothing fails). The environment is left
// as it is. Every method may be called from any thread (each sd_notify call is one datagram).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/job_runner.h"
#include "jobs/store.h"

namespace llmq {

class Notifier {
 public:
  Notifier();

  bool enabled() const { return enabled_; }
  // WATCHDOG_USEC when systemd watches this process (WATCHDOG_PID unset or ours), else zero.
  std::chrono::microseconds watchdog_usec() const { return watchdog_; }

  void Ready();
  // STATUS=<line>; sent only when it differs from the last line sent.
  void SetStatus(const std::string& line);
  // WATCHDOG=1, at most once per watchdog_usec() / 8 (the daemon calls it every quarter of the
  // interval). A no-op without a watchdog.
  void Watchdog();
  void Stopping();
  // EXTEND_TIMEOUT_USEC=<usec>: the current start/stop phase may take that much longer.
  void ExtendTimeout(std::chrono::microseconds usec);
  void Reloading();

 private:
  void Send(const std::string& message);

  bool enabled_ = false;
  std::chrono::microseconds watchdog_{0};
  std::atomic<int64_t> last_ping_us_{0};  // CLOCK_MONOTONIC of the last WATCHDOG=1
  std::string last_status_;               // guarded by the callers: SetStatus has one caller
};

// While it lives, EXTEND_TIMEOUT_USEC=`extension` at once and then every second from a thread of
// its own, so that a long phase (the model load, the final commits after a drain) is not ended by
// TimeoutStartSec= / TimeoutStopSec=. A renewal is sent only when the process made progress since
// the last one (CPU time, blocks read or major page faults: getrusage), so a phase that hangs
// (waiting, using nothing) is still ended once the last extension runs out. Nothing without
// NOTIFY_SOCKET.
class TimeoutExtender {
 public:
  TimeoutExtender(Notifier* notifier, std::chrono::microseconds extension);
  ~TimeoutExtender();
  TimeoutExtender(const TimeoutExtender&) = delete;
  TimeoutExtender& operator=(const TimeoutExtender&) = delete;

 private:
  Notifier* notifier_;
  std::chrono::microseconds extension_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The STATUS= line: jobs not yet finished, their requests done / total, tokens/s (`tokens_per_s`,
// measured by the caller), and the cache hit rate of the requests finished in this run.
std::string ProgressLine(const std::vector<jobs::JobRecord>& jobs, const RunnerProgress& p,
                         double tokens_per_s);

// TEST ONLY: LLMQ_TEST_STALL_STEP_MS, read once when `llmq serve` starts: the engine thread sleeps
// that many milliseconds after its first step (a hung GPU step, for the watchdog test); 0 when
// unset. Not a setting: nothing else reads it.
int TestStallStepMs();

// TEST ONLY: LLMQ_TEST_STALL_RELOAD_MS, read once when `llmq serve` starts: the event loop sleeps
// that many milliseconds in the first SIGHUP reload (a config file on a hung network file system,
// for the watchdog test); 0 when unset. Not a setting: nothing else reads it.
int TestStallReloadMs();

// TEST ONLY: LLMQ_TEST_SLOW_LOAD_MS: `llmq serve` spins (using the CPU, as a load reading and
// converting weights does) that many milliseconds before it loads the model (a long load, for the
// EXTEND_TIMEOUT_USEC test); nothing when unset. Not a setting: nothing else reads it.
void TestSlowLoad();

}  // namespace llmq
