// base/wall_clock.h: the scaled and step-driven test clocks' spelling and arithmetic (the real
// clock is the system's), at real times the tests give. The daemon's use of them is tested through
// the binary (serve_windows_test.cpp, serve_week_test.cpp).
#include "base/wall_clock.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace llmq::wall_clock {
namespace {

TEST(WallClock, AScaledClockRunsFromItsStartAtItsRate) {
  Scaled s;
  ASSERT_TRUE(ParseScaled("1000@5000x3600", &s).ok());
  EXPECT_EQ(s.At(5000), 1000);
  EXPECT_EQ(s.At(5001), 1000 + 3600) << "one real second is an hour";
  EXPECT_EQ(s.At(5000.5), 1000 + 1800);
  ASSERT_TRUE(ParseScaled("1767218400.5@1780000000x1", &s).ok());
  EXPECT_EQ(s.At(1780000010), 1767218410.5);
}

TEST(WallClock, AMalformedClockIsRefused) {
  Scaled s;
  for (const char* bad : {"", "1000", "1000@5000", "1000@5000x0", "1000@5000x-2", "x@yxz",
                          "1000@5000x2 ", "1000@5000x2junk"})
    EXPECT_FALSE(ParseScaled(bad, &s).ok()) << bad;
}

TEST(WallClock, AStepDrivenClockNamesItsStepAndItsFile) {
  Scaled s;
  ASSERT_TRUE(ParseScaled("1000@5000x3600,step=2.5,file=/tmp/a,b=c", &s).ok());
  EXPECT_EQ(s.At(5001), 1000 + 3600);
  EXPECT_EQ(s.step, 2.5);
  EXPECT_EQ(s.file, "/tmp/a,b=c") << "the path is the rest, commas and all";
  for (const char* bad : {"1000@5000x3600,step=2.5", "1000@5000x3600,step=2.5,file=",
                          "1000@5000x3600,file=/tmp/a", "1000@5000x3600,step=0,file=/tmp/a",
                          "1000@5000x3600,step=-1,file=/tmp/a", "1000@5000x3600,step=x,file=/tmp/a",
                          "1000@5000x3600,step=2,fil=/tmp/a", "1000@5000x3600 ,step=2,file=/tmp/a"})
    EXPECT_FALSE(ParseScaled(bad, &s).ok()) << bad;
}

// A step-driven clock of 2.5 s per step, 3600 times as fast as the real clock while idle, that
// starts at 1000 at real time 5000, published to a fresh file.
Scaled Stepped() {
  Scaled s;
  EXPECT_TRUE(
      ParseScaled("1000@5000x3600,step=2.5,file=" + testing::CurrentTestDir() + "/clock", &s).ok());
  return s;
}

TEST(WallClock, AStepDrivenClockStandsStillAtWorkButForItsSteps) {
  StepClock c(Stepped());
  EXPECT_EQ(c.Now(5001), 1000 + 3600) << "idle before any work: the scaled clock";
  ASSERT_TRUE(c.Busy(5001).ok());
  EXPECT_EQ(c.Now(5002), 4600) << "at work: real time does not move it";
  ASSERT_TRUE(c.Step(5003).ok());
  ASSERT_TRUE(c.Step(5004).ok());
  EXPECT_EQ(c.Now(5010), 4605);
  EXPECT_EQ(c.steps(), 2);
  ASSERT_TRUE(c.Busy(5011).ok());
  EXPECT_EQ(c.Now(5012), 4605) << "Busy while at work changes nothing";
  ASSERT_TRUE(c.Idle(5020).ok());
  EXPECT_EQ(c.Now(5021), 4605 + 3600) << "idle: with real time again, from when it was idle";
  ASSERT_TRUE(c.Idle(5021).ok());
  EXPECT_EQ(c.Now(5022), 4605 + 7200) << "Idle while idle changes nothing";
  ASSERT_TRUE(c.Step(5022).ok());
  EXPECT_EQ(c.Now(5030), 4605 + 7200 + 2.5) << "a step without Busy stops it too";
  EXPECT_EQ(c.steps(), 3);
}

TEST(WallClock, AnotherProcessReadsTheStepDrivenClockFromItsFile) {
  const Scaled s = Stepped();
  StepClock writer(s), reader(s);
  EXPECT_EQ(reader.Now(5001), 4600) << "nothing published yet: the spelling's clock";
  ASSERT_TRUE(writer.Busy(5002).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(writer.Step(5003 + i).ok());
  EXPECT_EQ(reader.Now(5100), 1000 + 2 * 3600 + 4 * 2.5) << "the writer's time, not real time's";
  EXPECT_EQ(reader.Now(5100), writer.Now(5100));
  EXPECT_EQ(reader.steps(), 0) << "a reader takes no step";
  ASSERT_TRUE(writer.Idle(5200).ok());
  EXPECT_EQ(reader.Now(5201), 8210 + 3600);
  // A daemon started again goes on from the clock its predecessor left.
  StepClock next(s);
  ASSERT_TRUE(next.Step(5202).ok());
  EXPECT_EQ(reader.Now(5300), 8210 + 2 * 3600 + 2.5);
}

TEST(WallClock, AStepDrivenClockNeverGoesBack) {
  const Scaled s = Stepped();
  StepClock writer(s), reader(s);
  // The reader looks at real time 5003, before it sees that the writer stopped the clock at 5002.
  EXPECT_EQ(reader.Now(5003), 1000 + 3 * 3600);
  ASSERT_TRUE(writer.Busy(5002).ok());
  EXPECT_EQ(reader.Now(5004), 1000 + 3 * 3600) << "it stays until the steps pass it";
  for (int i = 0; i < 4000; ++i) ASSERT_TRUE(writer.Step(5004).ok());
  EXPECT_EQ(reader.Now(5004), 1000 + 2 * 3600 + 4000 * 2.5);
  // The real clock set back (a writer's own reads too).
  EXPECT_EQ(writer.Now(4000), 1000 + 2 * 3600 + 4000 * 2.5);
  ASSERT_TRUE(writer.Idle(5005).ok());
  EXPECT_EQ(writer.Now(4000), 1000 + 2 * 3600 + 4000 * 2.5);
  EXPECT_EQ(reader.Now(5006), 1000 + 2 * 3600 + 4000 * 2.5 + 3600);
}

TEST(WallClock, WithoutTheVariableItIsTheRealClock) {
  // ctest does not set LLMQ_TEST_CLOCK for the unit tests.
  EXPECT_EQ(Scale(), 1.0);
  EXPECT_EQ(RealFor(2.5), std::chrono::nanoseconds(2500000000));
  EXPECT_EQ(RealFor(-1), std::chrono::nanoseconds(0));
  EXPECT_FALSE(StepDriven());
  Step();  // a no-op on the real clock
  EXPECT_EQ(Scale(), 1.0);
}

}  // namespace
}  // namespace llmq::wall_clock
