// ManualTime: a TimeSource (base/time_source.h) that moves only when a test says so, so that a
// test asserts what happens before and at a deadline by moving time, never by sleeping or by
// bounding the wall clock. A component waiting on it (WaitUntil) wakes when Advance reaches its
// deadline, or when its own condition variable is notified; a test learns that a component waits
// (and for which deadline) from WaitForWaiter, an event.
//
// Thread-safety: every method may be called from any thread. Advance must not run while an
// object waiting on this clock is being destroyed (it notifies the waiter's condition variable).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "base/time_source.h"

namespace llmq::testing {

class ManualTime final : public TimeSource {
 public:
  // Starts at an arbitrary fixed point (not the steady clock's now: nothing may depend on it).
  ManualTime() : now_(std::chrono::hours(1000)) {}

  time_point Now() override {
    std::lock_guard<std::mutex> l(mu_);
    return now_;
  }

  void WaitUntil(std::condition_variable* cv, std::unique_lock<std::mutex>* lock,
                 time_point deadline) override {
    const Waiter me{cv, lock->mutex(), deadline};
    {
      std::lock_guard<std::mutex> l(mu_);
      if (now_ >= deadline) return;
      waiters_.push_back(me);
      waiter_cv_.notify_all();
    }
    // Advance notifies `cv` holding the waiter's mutex, which this thread holds until wait()
    // releases it: a deadline reached after the check above cannot be missed.
    cv->wait(*lock);
    std::lock_guard<std::mutex> l(mu_);
    const auto it = std::find(waiters_.begin(), waiters_.end(), me);
    if (it != waiters_.end()) waiters_.erase(it);  // woken by its own cv, not by Advance
  }

  // Moves time forward by `d` and wakes every waiter whose deadline it reaches (the others keep
  // waiting: they are not even woken).
  void Advance(std::chrono::steady_clock::duration d) {
    std::vector<Waiter> due;
    {
      std::lock_guard<std::mutex> l(mu_);
      now_ += d;
      const auto reached = [&](const Waiter& w) { return w.deadline <= now_; };
      std::copy_if(waiters_.begin(), waiters_.end(), std::back_inserter(due), reached);
      waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), reached), waiters_.end());
    }
    for (const Waiter& w : due) {
      std::lock_guard<std::mutex> l(*w.mu);
      w.cv->notify_all();
    }
  }

  // Blocks until some thread waits on this clock for a deadline not reached yet; returns the
  // earliest such deadline. (No bound on how long: a test that never sees its waiter hangs, and
  // ctest's TIMEOUT reports it.)
  time_point WaitForWaiter() {
    std::unique_lock<std::mutex> l(mu_);
    waiter_cv_.wait(l, [&] { return !waiters_.empty(); });
    time_point first = time_point::max();
    for (const Waiter& w : waiters_) first = std::min(first, w.deadline);
    return first;
  }

 private:
  struct Waiter {
    std::condition_variable* cv;
    std::mutex* mu;
    time_point deadline;
    bool operator==(const Waiter&) const = default;
  };

  std::mutex mu_;  // after a waiter's own mutex, never before it
  std::condition_variable waiter_cv_;
  time_point now_;
  std::vector<Waiter> waiters_;
};

}  // namespace llmq::testing
