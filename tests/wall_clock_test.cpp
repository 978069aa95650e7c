// base/wall_clock.h: the scaled test clock's spelling and arithmetic (the real clock is the
// system's). The daemon's use of it is tested through the binary (serve_week_test.cpp).
#include "base/wall_clock.h"

#include <gtest/gtest.h>

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

TEST(WallClock, WithoutTheVariableItIsTheRealClock) {
  // ctest does not set LLMQ_TEST_CLOCK for the unit tests.
  EXPECT_EQ(Scale(), 1.0);
  EXPECT_EQ(RealFor(2.5), std::chrono::nanoseconds(2500000000));
  EXPECT_EQ(RealFor(-1), std::chrono::nanoseconds(0));
}

}  // namespace
}  // namespace llmq::wall_clock
