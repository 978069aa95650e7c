// Exponential backoff for retrying a transient failure (a queue out of reach, a lock held by
// another process): the wait after a failure starts at `first` and doubles with each further
// failure in a row up to `cap`; a success resets it. Many workers whose queue went away do not
// all hammer it as it comes back.
//
// Thread-safety: none; the owner serializes calls.
#pragma once

#include <algorithm>
#include <chrono>

namespace llmq {

class Backoff {
 public:
  // A cap below first is taken as first (every wait is `first`).
  Backoff(std::chrono::milliseconds first, std::chrono::milliseconds cap)
      : first_(first), cap_(std::max(cap, first)), next_(first) {}

  // The wait after this failure; the one after the next failure is twice it (at most the cap).
  std::chrono::milliseconds Next() {
    const std::chrono::milliseconds wait = next_;
    next_ = std::min(next_ * 2, cap_);
    return wait;
  }
  // A success: the next failure waits `first` again.
  void Reset() { next_ = first_; }

 private:
  std::chrono::milliseconds first_, cap_;
  std::chrono::milliseconds next_;  // the wait the next failure gets
};

}  // namespace llmq
