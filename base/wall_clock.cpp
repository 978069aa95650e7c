#include "base/wall_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

namespace llmq::wall_clock {
namespace {

double RealNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A test clock that is malformed, or cannot be published, is a programmer's error in a test: it
// aborts.
void CheckTestClock(const Status& st) {
  if (st.ok()) return;
  std::fprintf(stderr, "llmq: LLMQ_TEST_CLOCK: %s\n", st.message().c_str());
  std::abort();
}

// LLMQ_TEST_CLOCK, read once: its spelling, and the step-driven clock when it has a step.
struct TestClockState {
  Scaled spelling;
  std::unique_ptr<StepClock> stepped;
};
const std::optional<TestClockState>& TestClock() {
  static const std::optional<TestClockState> clock = []() -> std::optional<TestClockState> {
    const char* v = std::getenv("LLMQ_TEST_CLOCK");
    if (v == nullptr || *v == '\0') return std::nullopt;
    TestClockState c;
    CheckTestClock(ParseScaled(v, &c.spelling));
    if (c.spelling.step > 0) c.stepped = std::make_unique<StepClock>(c.spelling);
    return c;
  }();
  return clock;
}

StepClock* Stepped() {
  const auto& c = TestClock();
  return c ? c->stepped.get() : nullptr;
}

// The file's record: the sequence number at [0, 8), the state at [8, 32). The writer makes the
// number odd, writes the state, makes it even; a reader takes a state read between two reads of
// the same even number.
constexpr off_t kStateAt = sizeof(uint64_t);

}  // namespace

Status ParseScaled(const std::string& text, Scaled* out) {
  Scaled s;
  int end = 0, file_at = 0;
  bool ok = std::sscanf(text.c_str(), "%lf@%lfx%lf%n", &s.start, &s.anchor, &s.scale, &end) == 3 &&
            s.scale > 0;
  if (ok && static_cast<size_t>(end) != text.size()) {  // step-driven: the path is the rest
    ok = std::sscanf(text.c_str() + end, ",step=%lf,file=%n", &s.step, &file_at) == 1 &&
         file_at > 0 && static_cast<size_t>(end + file_at) < text.size() && s.step > 0;
    if (ok) s.file = text.substr(end + file_at);
  }
  if (!ok)
    return Status::InvalidArgument(
        "'" + text +
        "' is not <start>@<anchor>x<scale>[,step=<seconds>,file=<path>] (scale, step > 0)");
  *out = s;
  return Status::Ok();
}

double Now() {
  const auto& c = TestClock();
  if (!c) return RealNow();
  return c->stepped ? c->stepped->Now(RealNow()) : c->spelling.At(RealNow());
}

double Scale() {
  const auto& c = TestClock();
  return c ? c->spelling.scale : 1.0;
}

std::chrono::nanoseconds RealFor(double seconds) {
  if (!(seconds > 0)) return std::chrono::nanoseconds(0);
  const double ns = seconds / Scale() * 1e9;
  return std::chrono::nanoseconds(ns < 1 ? 1 : static_cast<int64_t>(ns));
}

bool StepDriven() {
  return Stepped() != nullptr;
}

void Busy() {
  if (StepClock* c = Stepped()) CheckTestClock(c->Busy(RealNow()));
}
void Step() {
  if (StepClock* c = Stepped()) CheckTestClock(c->Step(RealNow()));
}
void Idle() {
  if (StepClock* c = Stepped()) CheckTestClock(c->Idle(RealNow()));
}

Stopwatch::Stopwatch()
    : start_(std::chrono::steady_clock::now()), steps_(StepDriven() ? Stepped()->steps() : 0) {}

double Stopwatch::Seconds() const {
  if (const StepClock* c = Stepped())
    return static_cast<double>(c->steps() - steps_) * TestClock()->spelling.step;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() * Scale();
}

StepClock::StepClock(Scaled spelling)
    : spelling_(std::move(spelling)), state_{spelling_.start, spelling_.anchor, spelling_.scale} {}

StepClock::~StepClock() {
  if (fd_ >= 0) ::close(fd_);
}

double StepClock::Now(double real) {
  std::lock_guard<std::mutex> lock(mu_);
  return NowLocked(real);
}

double StepClock::NowLocked(double real) {
  if (!writer_) Read(&state_);  // kept as it was while none is published
  told_ = std::max(told_, state_.At(real));
  return told_;
}

Status StepClock::Busy(double real) {
  std::lock_guard<std::mutex> lock(mu_);
  if (writer_ && state_.rate == 0) return Status::Ok();  // standing still already
  return Set({NowLocked(real), real, 0});
}

Status StepClock::Step(double real) {
  std::lock_guard<std::mutex> lock(mu_);
  LLMQ_RETURN_IF_ERROR(Set({NowLocked(real) + spelling_.step, real, 0}));
  steps_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status StepClock::Idle(double real) {
  std::lock_guard<std::mutex> lock(mu_);
  if (writer_ && state_.rate != 0) return Status::Ok();  // running already
  return Set({NowLocked(real), real, spelling_.scale});
}

Status StepClock::Set(State next) {
  if (!writer_) {
    // Opened for writing (a reader's descriptor is read-only). The sequence goes on from the
    // file's (an earlier daemon's, odd if it died writing): no record is taken half its, half ours.
    const int fd = ::open(spelling_.file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return Status::IoError(spelling_.file +
                             ": cannot publish the test clock: " + std::strerror(errno));
    uint64_t at = 0;
    if (::pread(fd, &at, sizeof at, 0) == sizeof at) seq_ = std::max(seq_, at + at % 2);
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
    writer_ = true;
  }
  const uint64_t writing = seq_ + 1, written = seq_ + 2;
  if (::pwrite(fd_, &writing, sizeof writing, 0) != sizeof writing ||
      ::pwrite(fd_, &next, sizeof next, kStateAt) != sizeof next ||
      ::pwrite(fd_, &written, sizeof written, 0) != sizeof written)
    return Status::IoError(spelling_.file +
                           ": cannot publish the test clock: " + std::strerror(errno));
  seq_ = written;
  state_ = next;
  return Status::Ok();
}

bool StepClock::Read(State* out) {
  if (fd_ < 0) fd_ = ::open(spelling_.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return false;  // not published yet
  for (int tries = 0; tries < 1000; ++tries) {
    uint64_t before = 0, after = 0;
    State s;
    if (::pread(fd_, &before, sizeof before, 0) != sizeof before ||
        ::pread(fd_, &s, sizeof s, kStateAt) != sizeof s)
      return false;  // not published yet
    if (::pread(fd_, &after, sizeof after, 0) == sizeof after && before == after &&
        before % 2 == 0) {
      *out = s;
      seq_ = before;
      return true;
    }
  }
  return false;  // a writer that died halfway through: the state read last stays
}

}  // namespace llmq::wall_clock
