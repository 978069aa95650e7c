// The time of day as llmq sees it: the queue's timestamps (accepted, started, finished), run
// windows, rates and ETAs. The real clock; or, for tests only, a scaled one, so that a test drives
// `llmq serve` through a week of nightly run windows in minutes:
//   LLMQ_TEST_CLOCK="<start>@<anchor>x<scale>"  (unix seconds: `start` at real time `anchor`,
//   running `scale` times as fast as the real clock; e.g. "1767218400@1780000000x3600")
// or a step-driven one, on which the time work takes is the test's, not the machine's pace:
//   LLMQ_TEST_CLOCK="<start>@<anchor>x<scale>,step=<seconds>,file=<path>"
//   runs as the scaled clock while the engine waits (outside the run windows, out of work); from
//   when it sets to work until it waits again, it stands still but for `step` seconds at each
//   engine step (Busy, Step, Idle: the daemon's engine thread). The process that steps it
//   publishes it to `file` at every change; the others read it there (StepClock).
// Every process that reads the same variable (the daemon, `llmq status`) sees the same time.
// Durations measured on the steady clock (settle, drain, latencies) stay real.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "base/status.h"

namespace llmq::wall_clock {

// Unix seconds now.
double Now();
// How many times as fast as the real clock this one runs (1: the real clock; while the engine
// waits, on a step-driven one).
double Scale();
// The real time that passes while `seconds` of this clock do (at least 1 ns when positive); on a
// step-driven clock, while the engine waits (at work, it is sooner or later: look again).
std::chrono::nanoseconds RealFor(double seconds);

// Whether the clock is step-driven (LLMQ_TEST_CLOCK with step=).
bool StepDriven();
// The engine sets to work, takes a step, waits: a step-driven clock stops, moves on by its step,
// runs with real time again. No-ops on the other clocks. The one thread that steps the engine
// calls these.
void Busy();
void Step();
void Idle();

// The seconds of this clock a span of work takes (the engine's busy time, a rate's divisor):
// steady-clock seconds (a change of the system's time does not count) times Scale(), or the
// seconds of the steps taken meanwhile on a step-driven clock.
class Stopwatch {
 public:
  Stopwatch();
  double Seconds() const;

 private:
  std::chrono::steady_clock::time_point start_;
  int64_t steps_;
};

// A clock as LLMQ_TEST_CLOCK spells it (exposed for its tests).
struct Scaled {
  double start = 0, anchor = 0, scale = 1;
  double step = 0;   // seconds per engine step; 0: not step-driven
  std::string file;  // where a step-driven clock is published
  double At(double real_unix_seconds) const { return start + (real_unix_seconds - anchor) * scale; }
};
[[nodiscard]] Status ParseScaled(const std::string& text, Scaled* out);

// A step-driven clock, at real times given (tests inject them). It starts as its spelling's scaled
// clock. The first call of Busy, Step or Idle makes this object its writer: from the time it read
// last, it publishes every change to the file (a record with a sequence number, written and read
// with pwrite/pread: a torn read is read again). Until then it reads the file at every Now (a
// missing one: the spelling's clock). Never goes back: Now is at least what it told before.
// Thread-safe.
class StepClock {
 public:
  explicit StepClock(Scaled spelling);
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  double Now(double real);
  [[nodiscard]] Status Busy(double real);
  [[nodiscard]] Status Step(double real);
  [[nodiscard]] Status Idle(double real);
  // The steps this object took.
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }

  // Its state: `daemon` seconds at real time `real`, running `rate` times as fast from there (0:
  // standing still, the engine at work).
  struct State {
    double daemon = 0, real = 0, rate = 0;
    double At(double r) const { return daemon + (r - real) * rate; }
  };

 private:
  double NowLocked(double real);         // with mu_ held
  [[nodiscard]] Status Set(State next);  // as the writer: publishes `next` (with mu_ held)
  bool Read(State* out);                 // the file's state; false: none yet

  const Scaled spelling_;
  std::mutex mu_;
  State state_;
  double told_ = -1e300;  // the latest time Now told
  bool writer_ = false;
  int fd_ = -1;
  uint64_t seq_ = 0;  // the record's sequence number: odd while it is being written
  std::atomic<int64_t> steps_{0};
};

}  // namespace llmq::wall_clock
