// serve.run_windows' time arithmetic (daemon/run_windows.h).
#include "config/run_windows.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <string>

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

TEST(RunWindowsTest, FormatsBackWhatItParses) {
  for (const char* text : {"22:00-06:00", "01:02:03-23:59:59", "00:00-00:00", "09:30-17:00:30"})
    EXPECT_EQ(FormatRunWindow(W(text)), text);
}

// Sets TZ for one test (the zone rules are POSIX strings: no zoneinfo files needed).
class LocalZone {
 public:
  explicit LocalZone(const char* tz) {
    if (const char* old = std::getenv("TZ")) old_ = old;
    had_ = std::getenv("TZ") != nullptr;
    setenv("TZ", tz, 1);
    tzset();
  }
  ~LocalZone() {
    if (had_)
      setenv("TZ", old_.c_str(), 1);
    else
      unsetenv("TZ");
    tzset();
  }

 private:
  std::string old_;
  bool had_ = false;
};

// A local time (the zone in effect) as time_t.
std::time_t Local(int y, int mo, int d, int h, int mi) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

TEST(RunWindowsTest, StateAtAMomentGivesTheNextOpeningAndClosing) {
  LocalZone utc("UTC0");
  const std::vector<RunWindow> night = {W("22:00-06:00")};
  RunWindowState s = RunWindowStateAt(night, Local(2026, 12, 1, 12, 0));
  EXPECT_FALSE(s.open);
  EXPECT_EQ(LocalIso8601(s.next_open), "2026-12-01T22:00:00+00:00");
  EXPECT_EQ(LocalIso8601(s.next_close), "2026-12-02T06:00:00+00:00");
  s = RunWindowStateAt(night, Local(2026, 12, 31, 23, 30));  // inside, across the new year
  EXPECT_TRUE(s.open);
  EXPECT_EQ(LocalIso8601(s.next_close), "2027-01-01T06:00:00+00:00");
  EXPECT_EQ(LocalIso8601(s.next_open), "2027-01-01T22:00:00+00:00");
  s = RunWindowStateAt({W("01:00-02:00"), W("13:00-14:00")}, Local(2026, 12, 1, 12, 0));
  EXPECT_FALSE(s.open);
  EXPECT_EQ(LocalIso8601(s.next_open), "2026-12-01T13:00:00+00:00");
  EXPECT_EQ(LocalIso8601(s.next_close), "2026-12-01T14:00:00+00:00");
  // Never changes: no windows, or the whole day.
  for (const std::vector<RunWindow>& w : {std::vector<RunWindow>{}, {W("05:00-05:00")}}) {
    s = RunWindowStateAt(w, Local(2026, 12, 1, 12, 0));
    EXPECT_TRUE(s.open);
    EXPECT_EQ(s.next_open, -1);
    EXPECT_EQ(s.next_close, -1);
  }
}

// An ETA's end: work runs only inside the windows, night after night.
TEST(RunWindowsTest, FinishTimeSpreadsTheWorkOverTheWindows) {
  LocalZone utc("UTC0");
  const std::vector<RunWindow> night = {W("22:00-06:00")};
  const auto iso = [](double t) { return LocalIso8601(static_cast<std::time_t>(t)); };
  const double noon = Local(2026, 12, 1, 12, 0), late = Local(2026, 12, 1, 23, 0);
  EXPECT_EQ(iso(FinishTime(night, noon, 3600)), "2026-12-01T23:00:00+00:00") << "waits for 22:00";
  EXPECT_EQ(iso(FinishTime(night, late, 3600)), "2026-12-02T00:00:00+00:00") << "inside: at once";
  // Twelve hours of work: the 7 hours left tonight, then 5 of the next night.
  EXPECT_EQ(iso(FinishTime(night, late, 12 * 3600)), "2026-12-03T03:00:00+00:00");
  EXPECT_EQ(iso(FinishTime(night, late, 7 * 3600)), "2026-12-02T06:00:00+00:00")
      << "the last minute";
  EXPECT_EQ(FinishTime({}, noon, 90), noon + 90) << "no windows: always";
  EXPECT_EQ(FinishTime({W("05:00-05:00")}, noon, 90), noon + 90) << "the whole day";
  EXPECT_EQ(iso(FinishTime({W("01:00-02:00"), W("13:00-14:00")}, noon, 90 * 60)),
            "2026-12-02T01:30:00+00:00");
  EXPECT_EQ(FinishTime(night, late + 0.5, 0), late + 0.5) << "nothing left";
}

TEST(RunWindowsTest, StateFollowsTheWallClockAcrossADaylightSavingChange) {
  // Central Europe: on 2026-03-29 the clocks go from 02:00 CET to 03:00 CEST.
  LocalZone cet("CET-1CEST,M3.5.0,M10.5.0/3");
  const RunWindowState s = RunWindowStateAt({W("22:00-06:00")}, Local(2026, 3, 28, 12, 0));
  EXPECT_FALSE(s.open);
  EXPECT_EQ(LocalIso8601(s.next_open), "2026-03-28T22:00:00+01:00");
  EXPECT_EQ(LocalIso8601(s.next_close), "2026-03-29T06:00:00+02:00");
  EXPECT_EQ(s.next_close - s.next_open, 7 * 3600) << "that night's window is an hour shorter";
}

}  // namespace
}  // namespace llmq
