#include "base/wall_clock.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

namespace llmq::wall_clock {
namespace {

double RealNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// LLMQ_TEST_CLOCK, read once; a malformed value is a programmer's error in a test: it aborts.
const std::optional<Scaled>& TestClock() {
  static const std::optional<Scaled> clock = []() -> std::optional<Scaled> {
    const char* v = std::getenv("LLMQ_TEST_CLOCK");
    if (v == nullptr || *v == '\0') return std::nullopt;
    Scaled s;
    if (Status st = ParseScaled(v, &s); !st.ok()) {
      std::fprintf(stderr, "llmq: LLMQ_TEST_CLOCK: %s\n", st.message().c_str());
      std::abort();
    }
    return s;
  }();
  return clock;
}

}  // namespace

Status ParseScaled(const std::string& text, Scaled* out) {
  Scaled s;
  int end = 0;
  if (std::sscanf(text.c_str(), "%lf@%lfx%lf%n", &s.start, &s.anchor, &s.scale, &end) != 3 ||
      static_cast<size_t>(end) != text.size() || !(s.scale > 0))
    return Status::InvalidArgument("'" + text + "' is not <start>@<anchor>x<scale> (scale > 0)");
  *out = s;
  return Status::Ok();
}

double Now() {
  const auto& c = TestClock();
  return c ? c->At(RealNow()) : RealNow();
}

double Scale() {
  const auto& c = TestClock();
  return c ? c->scale : 1.0;
}

std::chrono::nanoseconds RealFor(double seconds) {
  if (!(seconds > 0)) return std::chrono::nanoseconds(0);
  const double ns = seconds / Scale() * 1e9;
  return std::chrono::nanoseconds(ns < 1 ? 1 : static_cast<int64_t>(ns));
}

}  // namespace llmq::wall_clock
