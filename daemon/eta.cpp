#include "daemon/eta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace llmq {

std::vector<double> EstimateFinishes(const std::vector<RunWindow>& windows, double now,
                                     double tokens_per_second, const std::vector<EtaJob>& jobs) {
  std::vector<double> out(jobs.size(), -1);
  if (!(tokens_per_second > 0)) return out;
  double tokens = 0;  // the work of the jobs so far
  for (size_t i = 0; i < jobs.size(); ++i) {
    const EtaJob& j = jobs[i];
    if (j.left > 0) {
      if (!(j.tokens_per_request > 0)) break;  // this one and every later one: unknown
      tokens += std::max(0.0, j.tokens_per_request * static_cast<double>(j.left) -
                                  static_cast<double>(j.in_flight_tokens));
    }
    out[i] = FinishTime(windows, now, tokens / tokens_per_second);
  }
  return out;
}

std::string FormatDuration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char b[32];
  if (s >= 86400)
    std::snprintf(b, sizeof b, "%ldd%02ldh", s / 86400, s / 3600 % 24);
  else if (s >= 3600)
    std::snprintf(b, sizeof b, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(b, sizeof b, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(b, sizeof b, "%lds", s);
  return b;
}

}  // namespace llmq
