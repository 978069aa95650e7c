// serve.run_windows' time arithmetic (daemon/run_windows.h).
#include "daemon/run_windows.h"

#include <gtest/gtest.h>

namespace llmq {
namespace {

int At(int h, int m, int s = 0) {
  return h * 3600 + m * 60 + s;
}

RunWindow W(const char* text) {
  RunWindow w;
  EXPECT_TRUE(ParseRunWindow(text, &w).ok()) << text;
  return w;
}

TEST(RunWindowsTest, Parses) {
  RunWindow w = W("22:00-06:00");
  EXPECT_EQ(w.start, At(22, 0));
  EXPECT_EQ(w.end, At(6, 0));
  w = W("01:02:03-23:59:59");
  EXPECT_EQ(w.start, At(1, 2, 3));
  EXPECT_EQ(w.end, At(23, 59, 59));
  for (const char* bad :
       {"", "22:00", "22:00-", "-06:00", "24:00-06:00", "22:60-06:00", "2:00-06:00",
        "22:00-06:00:0", "22.00-06.00", "22:00-06:00 ", "aa:bb-06:00"}) {
    RunWindow out{1, 2};
    const Status st = ParseRunWindow(bad, &out);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("HH:MM-HH:MM"), std::string::npos) << st.message();
    EXPECT_EQ(out.start, 1) << "untouched on an error";
  }
}

TEST(RunWindowsTest, InsideAcrossMidnightAndWholeDay) {
  EXPECT_TRUE(InRunWindow({}, At(12, 0)));  // no windows: always
  const std::vector<RunWindow> night = {W("22:00-06:00")};
  EXPECT_TRUE(InRunWindow(night, At(22, 0)));  // start included
  EXPECT_TRUE(InRunWindow(night, At(0, 0)));
  EXPECT_TRUE(InRunWindow(night, At(5, 59, 59)));
  EXPECT_FALSE(InRunWindow(night, At(6, 0)));  // end excluded
  EXPECT_FALSE(InRunWindow(night, At(21, 59, 59)));
  const std::vector<RunWindow> day = {W("09:00-17:00")};
  EXPECT_TRUE(InRunWindow(day, At(9, 0)));
  EXPECT_FALSE(InRunWindow(day, At(17, 0)));
  EXPECT_FALSE(InRunWindow(day, At(8, 59, 59)));
  EXPECT_TRUE(InRunWindow({W("03:00-03:00")}, At(15, 0)));  // start == end: the whole day
  const std::vector<RunWindow> two = {W("01:00-02:00"), W("13:00-14:00")};
  EXPECT_TRUE(InRunWindow(two, At(13, 30)));
  EXPECT_FALSE(InRunWindow(two, At(12, 30)));
}

TEST(RunWindowsTest, NextChange) {
  const std::vector<RunWindow> night = {W("22:00-06:00")};
  EXPECT_EQ(SecondsToNextChange(night, At(21, 0)), 3600);      // opens at 22:00
  EXPECT_EQ(SecondsToNextChange(night, At(23, 0)), 7 * 3600);  // closes at 06:00
  EXPECT_EQ(SecondsToNextChange(night, At(22, 0)), 8 * 3600);  // at the start: to the end
  EXPECT_EQ(SecondsToNextChange(night, At(6, 0)), 16 * 3600);  // at the end: to the next start
  EXPECT_EQ(SecondsToNextChange({}, At(6, 0)), -1);
  EXPECT_EQ(SecondsToNextChange({W("00:00-00:00")}, At(6, 0)), -1);
  // Adjacent windows are one period: no change at 02:00.
  const std::vector<RunWindow> adjacent = {W("01:00-02:00"), W("02:00-03:00")};
  EXPECT_EQ(SecondsToNextChange(adjacent, At(1, 30)), 5400);
  // Overlapping ones too.
  EXPECT_EQ(SecondsToNextChange({W("01:00-02:30"), W("02:00-03:00")}, At(1, 30)), 5400);
}

TEST(RunWindowsTest, LocalSecondOfDayIsInRange) {
  const int s = LocalSecondOfDay(std::time(nullptr));
  EXPECT_GE(s, 0);
  EXPECT_LT(s, kSecondsPerDay);
}

}  // namespace
}  // namespace llmq
