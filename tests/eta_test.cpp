// llmq status' ETA model (daemon/eta.h): the work of the jobs ahead and a job's own, at the
// measured rate, inside the run windows.
#include "daemon/eta.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <vector>

namespace llmq {
namespace {

class EtaTest : public ::testing::Test {
 protected:
  // The windows' arithmetic is in local time: UTC here, so that the times below read plainly.
  void SetUp() override {
    const char* tz = std::getenv("TZ");
    had_tz_ = tz != nullptr;
    if (had_tz_) tz_ = tz;
    setenv("TZ", "UTC", 1);
    tzset();
  }
  void TearDown() override {
    if (had_tz_)
      setenv("TZ", tz_.c_str(), 1);
    else
      unsetenv("TZ");
    tzset();
  }
  bool had_tz_ = false;
  std::string tz_;
};

constexpr double kMidnight = 1767225600;  // 2026-01-01T00:00:00Z
constexpr double kHour = 3600;

RunWindow W(const char* text) {
  RunWindow w;
  EXPECT_TRUE(ParseRunWindow(text, &w).ok()) << text;
  return w;
}

TEST_F(EtaTest, EachJobEndsAfterTheWorkOfThoseAheadAndItsOwn) {
  // 100 tokens/s, no windows: job 0 holds 10 requests of 50 tokens with 100 already sampled in
  // flight (400 left: 4 s), job 1 20 of 10 (200: 2 s more), job 2 is finalizing (nothing left).
  const std::vector<double> f =
      EstimateFinishes({}, kMidnight, 100, {{10, 50, 100}, {20, 10, 0}, {0, 0, 0}});
  ASSERT_EQ(f.size(), 3u);
  EXPECT_DOUBLE_EQ(f[0], kMidnight + 4);
  EXPECT_DOUBLE_EQ(f[1], kMidnight + 6);
  EXPECT_DOUBLE_EQ(f[2], kMidnight + 6) << "done once those ahead are";
}

TEST_F(EtaTest, InFlightTokensNeverMakeWorkNegative) {
  // More in flight than the mean says is left (requests longer than the mean): nothing left, not
  // less than nothing (the next job's work is not eaten into).
  const std::vector<double> f = EstimateFinishes({}, kMidnight, 10, {{1, 50, 80}, {2, 50, 0}});
  EXPECT_DOUBLE_EQ(f[0], kMidnight);
  EXPECT_DOUBLE_EQ(f[1], kMidnight + 10);
}

TEST_F(EtaTest, WorkRunsOnlyInsideTheWindows) {
  const std::vector<RunWindow> nightly = {W("22:00-06:00")};
  // At 05:00 with three hours of work: one hour tonight, two from 22:00.
  std::vector<double> f = EstimateFinishes(nightly, kMidnight + 5 * kHour, 1, {{3, 3600, 0}});
  EXPECT_DOUBLE_EQ(f[0], kMidnight + 24 * kHour);
  // At noon nothing runs before 22:00: twelve hours of work are eight tonight (22:00-06:00) and
  // four the next night, ending at 02:00 two days on.
  f = EstimateFinishes(nightly, kMidnight + 12 * kHour, 1, {{12, 3600, 0}});
  EXPECT_DOUBLE_EQ(f[0], kMidnight + (24 + 24 + 2) * kHour);
}

TEST_F(EtaTest, UnknownWhereNothingTellsTheSizeOrTheRate) {
  // No rate yet: nothing can be told.
  for (double v : EstimateFinishes({}, kMidnight, 0, {{1, 10, 0}})) EXPECT_EQ(v, -1);
  // A job ahead of unknown size: it and every job behind it are unknown; those before are told.
  const std::vector<double> f =
      EstimateFinishes({}, kMidnight, 10, {{1, 10, 0}, {5, 0, 0}, {1, 10, 0}});
  EXPECT_DOUBLE_EQ(f[0], kMidnight + 1);
  EXPECT_EQ(f[1], -1);
  EXPECT_EQ(f[2], -1);
  // A window of one second a day still opens: two seconds of work end the next day, at 03:00:01.
  EXPECT_DOUBLE_EQ(EstimateFinishes({W("03:00-03:00:01")}, kMidnight, 1, {{1, 2, 0}})[0],
                   kMidnight + (24 + 3) * kHour + 1);
}

TEST(FormatDurationTest, ReadsWithoutAmbiguity) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(-5), "0s");
  EXPECT_EQ(FormatDuration(59.4), "59s");
  EXPECT_EQ(FormatDuration(60), "1m00s");
  EXPECT_EQ(FormatDuration(725), "12m05s");
  EXPECT_EQ(FormatDuration(3 * 3600 + 7 * 60 + 20), "3h07m");
  EXPECT_EQ(FormatDuration(2 * 86400 + 4 * 3600 + 59), "2d04h");
}

}  // namespace
}  // namespace llmq
