#include "daemon/watchdog.h"

#include <cstdio>

namespace llmq {
namespace {

double Secs(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string Format(const char* fmt, double secs, const std::string& path = "") {
  char b[512];
  if (path.empty())
    std::snprintf(b, sizeof b, fmt, secs);
  else
    std::snprintf(b, sizeof b, fmt, path.c_str(), secs);
  return b;
}

}  // namespace

WatchdogMonitor::Verdict WatchdogMonitor::Check(Clock::time_point now, Clock::time_point due,
                                                Clock::time_point engine_tick,
                                                Clock::time_point queue_failing_since) {
  Verdict v;
  const Clock::duration quarter = interval_ / 4, half = interval_ / 2;
  if (now - due > quarter)
    v.logs.push_back(
        Format("watchdog: the event loop did not run for %.1fs (no WATCHDOG=1 meanwhile)",
               Secs(now - due + quarter)));
  const Clock::duration engine_age = now - engine_tick;
  const bool engine_stale = engine_age > half;
  const bool queue_stale = now > queue_failing_since && now - queue_failing_since > half;
  if (engine_stale && !engine_stale_)
    v.logs.push_back(Format(
        "watchdog: the engine thread has not ticked for %.1fs (a step that does not return?): "
        "no WATCHDOG=1 until it does",
        Secs(engine_age)));
  if (!engine_stale && engine_stale_) v.logs.push_back("watchdog: the engine thread ticks again");
  if (queue_stale && !queue_stale_)
    v.logs.push_back(
        Format("watchdog: the queue (%s) has not answered for %.1fs: no WATCHDOG=1 until it does",
               Secs(now - queue_failing_since), queue_path_));
  if (!queue_stale && queue_stale_)
    v.logs.push_back("watchdog: the queue (" + queue_path_ + ") answers again");
  engine_stale_ = engine_stale;
  queue_stale_ = queue_stale;
  v.ping = !engine_stale && !queue_stale;
  return v;
}

}  // namespace llmq
