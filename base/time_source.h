// TimeSource: the time a component reads and waits on, so that a test can move it by hand
// (tests/manual_time.h) instead of sleeping, and assert what happens before and at a deadline
// without any bound on the wall clock. Production code uses TimeSource::Steady(), which is
// std::chrono::steady_clock and condition_variable::wait_until, nothing more.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace llmq {

class TimeSource {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  virtual ~TimeSource() = default;

  virtual time_point Now() = 0;
  // As cv->wait_until(*lock, deadline): releases `lock` (held on entry, a lock on the mutex that
  // guards what `cv` signals), blocks until `cv` is notified or Now() reaches `deadline`, and
  // takes `lock` again. May return early (a spurious wakeup): callers wait in a loop on their
  // predicate and on Now() < deadline.
  virtual void WaitUntil(std::condition_variable* cv, std::unique_lock<std::mutex>* lock,
                         time_point deadline) = 0;

  // std::chrono::steady_clock. Never null; lives as long as the process.
  static TimeSource* Steady();
};

}  // namespace llmq
