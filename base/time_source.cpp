#include "base/time_source.h"

namespace llmq {
namespace {

class SteadyTimeSource final : public TimeSource {
 public:
  time_point Now() override { return std::chrono::steady_clock::now(); }
  void WaitUntil(std::condition_variable* cv, std::unique_lock<std::mutex>* lock,
                 time_point deadline) override {
    cv->wait_until(*lock, deadline);
  }
};

}  // namespace

TimeSource* TimeSource::Steady() {
  static TimeSource* const steady = new SteadyTimeSource();  // never destroyed: usable at exit
  return steady;
}

}  // namespace llmq
