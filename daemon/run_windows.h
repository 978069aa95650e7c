// Run windows (serve.run_windows, issue 8): the daily periods of local time in which `llmq serve`
// starts requests, e.g. ["22:00-06:00"]. Outside them the daemon still accepts and validates
// jobs. This file is the time arithmetic; llmq serve (cli_serve.cpp, CheckWindow) holds and
// releases the JobRunner with it.
//
// A window is "HH:MM[:SS]-HH:MM[:SS]", start included, end excluded; an end before the start
// crosses midnight ("22:00-06:00"), an end equal to the start is the whole day. Times are
// seconds after local midnight (0..86399): on a day when the clock changes (daylight saving)
// the windows follow the wall clock, so a window may be an hour shorter or longer that night.
#pragma once

#include <ctime>
#include <string_view>
#include <vector>

#include "engine/status.h"

namespace llmq {

struct RunWindow {
  int start = 0, end = 0;  // seconds after local midnight
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

}  // namespace llmq
