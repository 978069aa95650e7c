// llmq status' ETA (issue 23): when each unfinished job of the queue is expected done.
//
// The model: the daemon feeds jobs in queue order and works through their completion tokens at
// the rate it measured while busy (spool::ServeProgress::tokens_per_second), only inside the run
// windows. A job's work is its requests without a result times the completion tokens a request
// of it takes (its own mean once some finished, else the queue's), less the tokens its requests
// in the engine already hold; a job is done when the work of every job before it and its own is.
// Prefill is not counted apart: it is inside the measured rate, as long as jobs are alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_windows.h"

namespace llmq {

struct EtaJob {
  int64_t left = 0;               // requests without a result (nor a cancellation)
  double tokens_per_request = 0;  // completion tokens one takes; <= 0: unknown
  int64_t in_flight_tokens = 0;   // completion tokens its unfinished requests already hold
};

// For each of `jobs` (in the order they are fed): the unix time it is expected done, or -1 when
// that cannot be told (no measured rate, a job ahead whose requests' size is unknown, windows
// that never open). `now`: unix seconds; `tokens_per_second`: the busy rate, per wall-clock second.
std::vector<double> EstimateFinishes(const std::vector<RunWindow>& windows, double now,
                                     double tokens_per_second, const std::vector<EtaJob>& jobs);

// A duration for people: "45s", "12m05s", "3h07m", "2d04h".
std::string FormatDuration(double seconds);

}  // namespace llmq
