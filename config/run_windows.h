// Run windows (serve.run_windows, issue 8): the daily periods of local time in which `llmq serve`
// starts requests, e.g. ["22:00-06:00"]. Outside them the daemon still accepts and validates
// jobs. This file is the value's syntax (the config loader parses it, config.cpp) and its time
// arithmetic; llmq serve (cli_serve.cpp, CheckWindow) holds and releases the JobRunner with it.
//
// A window is "HH:MM[:SS]-HH:MM[:SS]", start included, end excluded; an end before the start
// crosses midnight ("22:00-06:00"), an end equal to the start is the whole day. Times are
// seconds after local midnight (0..86399): on a day when the clock changes (daylight saving)
// the windows follow the wall clock, so a window may be an hour shorter or longer that night.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace llmq {

struct RunWindow {
  int start = 0, end = 0;  // seconds after local midnight
  bool operator==(const RunWindow&) const = default;
};

inline constexpr int kSecondsPerDay = 86400;

// Parses one window; InvalidArgument naming `text` and what is wrong.
Status ParseRunWindow(std::string_view text, RunWindow* out);
// Whether second-of-day `t` lies in a window; true when there are no windows (always running).
bool InRunWindow(const std::vector<RunWindow>& windows, int t);
// Seconds from second-of-day `t` until InRunWindow changes (1..86400); -1 when it never does
// (no windows, or windows covering the whole day).
int SecondsToNextChange(const std::vector<RunWindow>& windows, int t);
// The second of the local day of `t` (localtime_r).
int LocalSecondOfDay(std::time_t t);

// "HH:MM-HH:MM" (HH:MM:SS where a time has seconds): what ParseRunWindow reads back.
std::string FormatRunWindow(const RunWindow& w);

// Where the moment `now` stands against `windows`: whether a window is open, and when the state
// next changes both ways (the next opening and the next closing; -1 when it never changes: no
// windows, or windows covering the whole day). Wall-clock arithmetic (mktime), so the times stay
// right across a daylight-saving change.
struct RunWindowState {
  bool open = true;
  std::time_t next_open = -1, next_close = -1;
};
RunWindowState RunWindowStateAt(const std::vector<RunWindow>& windows, std::time_t now);

// When `work_seconds` of running, started at `now`, are done if work runs only inside `windows`
// (none: always): the time left in the open window, then window after window. An ETA's end.
double FinishTime(const std::vector<RunWindow>& windows, double now, double work_seconds);

// Local time as ISO 8601 with the UTC offset: "2026-12-01T22:00:00+01:00".
std::string LocalIso8601(std::time_t t);

}  // namespace llmq
