#include "config/run_windows.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace llmq {
namespace {

// "HH:MM" or "HH:MM:SS" (two digits each; 24:00 is not a time of day).
bool ParseTime(std::string_view s, int* out) {
  if (s.size() != 5 && s.size() != 8) return false;
  int parts[3] = {0, 0, 0};
  for (size_t i = 0; i * 3 < s.size(); ++i) {
    const std::string_view p = s.substr(i * 3, 2);
    if (i * 3 + 2 < s.size() && s[i * 3 + 2] != ':') return false;
    if (p.size() != 2 || p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9') return false;
    parts[i] = (p[0] - '0') * 10 + (p[1] - '0');
  }
  if (parts[0] > 23 || parts[1] > 59 || parts[2] > 59) return false;
  *out = parts[0] * 3600 + parts[1] * 60 + parts[2];
  return true;
}

bool InWindow(const RunWindow& w, int t) {
  if (w.start == w.end) return true;                      // the whole day
  if (w.start < w.end) return t >= w.start && t < w.end;  // within one day
  return t >= w.start || t < w.end;                       // across midnight
}

std::string FormatTime(int t) {
  char b[16];
  if (t % 60 == 0)
    std::snprintf(b, sizeof b, "%02d:%02d", t / 3600, t / 60 % 60);
  else
    std::snprintf(b, sizeof b, "%02d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return b;
}

// `t` plus `seconds` of wall-clock time (a day with a daylight-saving change has 23 or 25 hours).
// The fields are set in range (mktime's handling of an overflowing tm_sec keeps the old UTC
// offset); only the day may overflow.
std::time_t AddLocalSeconds(std::time_t t, int seconds) {
  std::tm tm{};
  localtime_r(&t, &tm);
  const int64_t s = int64_t{tm.tm_hour} * 3600 + tm.tm_min * 60 + std::min(tm.tm_sec, 59) + seconds;
  tm.tm_mday += static_cast<int>(s / kSecondsPerDay);
  tm.tm_hour = static_cast<int>(s % kSecondsPerDay / 3600);
  tm.tm_min = static_cast<int>(s % 3600 / 60);
  tm.tm_sec = static_cast<int>(s % 60);
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

}  // namespace

Status ParseRunWindow(std::string_view text, RunWindow* out) {
  const size_t dash = text.find('-');
  RunWindow w;
  if (dash == std::string_view::npos || !ParseTime(text.substr(0, dash), &w.start) ||
      !ParseTime(text.substr(dash + 1), &w.end))
    return Status::InvalidArgument("run window '" + std::string(text) +
                                   "': expected HH:MM-HH:MM (or HH:MM:SS-HH:MM:SS), local time, "
                                   "e.g. 22:00-06:00");
  *out = w;
  return Status::Ok();
}

bool InRunWindow(const std::vector<RunWindow>& windows, int t) {
  if (windows.empty()) return true;
  return std::any_of(windows.begin(), windows.end(),
                     [t](const RunWindow& w) { return InWindow(w, t); });
}

int SecondsToNextChange(const std::vector<RunWindow>& windows, int t) {
  const bool now = InRunWindow(windows, t);
  // The state can only change at a window's start or end: try those, nearest first.
  std::vector<int> deltas;
  for (const RunWindow& w : windows)
    for (int b : {w.start, w.end})
      deltas.push_back((b - t + kSecondsPerDay - 1) % kSecondsPerDay + 1);
  std::sort(deltas.begin(), deltas.end());
  for (int d : deltas)
    if (InRunWindow(windows, (t + d) % kSecondsPerDay) != now) return d;
  return -1;
}

std::string FormatRunWindow(const RunWindow& w) {
  return FormatTime(w.start) + "-" + FormatTime(w.end);
}

RunWindowState RunWindowStateAt(const std::vector<RunWindow>& windows, std::time_t now) {
  RunWindowState s;
  s.open = InRunWindow(windows, LocalSecondOfDay(now));
  const int first = SecondsToNextChange(windows, LocalSecondOfDay(now));
  if (first < 0) return s;
  const std::time_t t1 = AddLocalSeconds(now, first);
  const std::time_t t2 = AddLocalSeconds(t1, SecondsToNextChange(windows, LocalSecondOfDay(t1)));
  s.next_close = s.open ? t1 : t2;
  s.next_open = s.open ? t2 : t1;
  return s;
}

double FinishTime(const std::vector<RunWindow>& windows, double now, double work_seconds) {
  double t = now, left = std::max(0.0, work_seconds);
  // Each pass ends a window or an interval between two: a year of daily windows at most.
  for (int pass = 0; pass < 2 * 366 * static_cast<int>(windows.size() + 1); ++pass) {
    const auto whole = static_cast<std::time_t>(t);
    const RunWindowState st = RunWindowStateAt(windows, whole);
    if (st.next_close < 0 && st.open) return t + left;  // always open
    if (st.open) {
      const double room = static_cast<double>(st.next_close) - t;
      if (left <= room) return t + left;
      left -= room;
      t = static_cast<double>(st.next_close);
    } else {
      if (st.next_open < 0) return -1;  // never open: never done
      t = static_cast<double>(st.next_open);
    }
  }
  return t + left;
}

std::string LocalIso8601(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char b[40];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S%z", &tm);  // ...+0100
  std::string s = b;
  if (s.size() >= 5) s.insert(s.size() - 2, ":");  // +01:00
  return s;
}

int LocalSecondOfDay(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm.tm_hour * 3600 + tm.tm_min * 60 + std::min(tm.tm_sec, 59);  // a leap second: :59
}

}  // namespace llmq
