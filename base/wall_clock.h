// The time of day as llmq sees it: the queue's timestamps (accepted, started, finished), run
// windows, rates and ETAs. The real clock; or, for tests only, a scaled one, so that a test drives
// `llmq serve` through a week of nightly run windows in minutes:
//   LLMQ_TEST_CLOCK="<start>@<anchor>x<scale>"  (unix seconds: `start` at real time `anchor`,
//   running `scale` times as fast as the real clock; e.g. "1767218400@1780000000x3600")
// Every process that reads the same variable (the daemon, `llmq status`) sees the same time.
// Durations measured on the steady clock (settle, drain, latencies) stay real.
#pragma once

#include <chrono>
#include <string>

#include "base/status.h"

namespace llmq::wall_clock {

// Unix seconds now.
double Now();
// How many times as fast as the real clock this one runs (1: the real clock).
double Scale();
// The real time that passes while `seconds` of this clock do (at least 1 ns when positive).
std::chrono::nanoseconds RealFor(double seconds);

// A clock as LLMQ_TEST_CLOCK spells it (exposed for its tests).
struct Scaled {
  double start = 0, anchor = 0, scale = 1;
  double At(double real_unix_seconds) const { return start + (real_unix_seconds - anchor) * scale; }
};
[[nodiscard]] Status ParseScaled(const std::string& text, Scaled* out);

}  // namespace llmq::wall_clock
