// The systemd watchdog's verdict (WATCHDOG=1 or not), as pure logic over the times the daemon
// records: the event loop runs Check every quarter of the interval (WATCHDOG_USEC=), and pings
// only while the whole daemon is alive:
//  - the event loop runs (a call that blocks it, such as an open() that waits, delays Check: a
//    check that runs more than a quarter interval late is logged once the loop runs again);
//  - the engine thread ticked within half the interval (a step that hangs stops the pings);
//  - the queue answers (its poll has not been failing for half the interval).
// Each stale part is logged when it goes stale and when it comes back. No clock of its own: the
// caller gives the times, so every rule is tested directly (tests/watchdog_test.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace llmq {

class WatchdogMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  // `interval`: WATCHDOG_USEC=; `queue_path` names the queue in the log lines.
  WatchdogMonitor(Clock::duration interval, std::string queue_path)
      : interval_(interval), queue_path_(std::move(queue_path)) {}

  // How often the event loop calls Check.
  Clock::duration period() const { return interval_ / 4; }

  struct Verdict {
    bool ping = false;              // send WATCHDOG=1
    std::vector<std::string> logs;  // lines for the daemon's log
  };
  // The check that was due at `due` runs at `now`. `engine_tick`: the engine thread's last tick;
  // `queue_failing_since`: when the queue's poll started failing (time_point::max(): it answers).
  Verdict Check(Clock::time_point now, Clock::time_point due, Clock::time_point engine_tick,
                Clock::time_point queue_failing_since);

 private:
  Clock::duration interval_;
  std::string queue_path_;
  bool engine_stale_ = false, queue_stale_ = false;
};

}  // namespace llmq
