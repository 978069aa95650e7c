// ClaimChunks: one sweep over the plan's positions. The groups are in pre-order (begin ascending,
// a parent before the children that begin where it does), so a stack of the groups open at the
// current position is kept with one pass over them. The small groups on the stack are a suffix of
// it (a group inside a small one is small too); the outermost of them is the item at the position,
// else the request itself is; the item's run is the innermost large group below it (or the root).
// The item then joins the last chunk or starts one (see the header).
#include "engine/core/claim_groups.h"

#include <algorithm>

namespace llmq {

std::vector<ClaimChunk> ClaimChunks(const Plan& plan, uint32_t max_requests) {
  const uint32_t c = std::max<uint32_t>(max_requests, 1);
  const uint32_t n = static_cast<uint32_t>(plan.order.size());
  if (n == 0) return {};
  if (n <= c) return {{0, n}};  // the root is small: one chunk
  const std::vector<PlanGroup>& groups = plan.groups;
  auto small = [&](int32_t g) { return groups[g].end - groups[g].begin <= c; };

  std::vector<ClaimChunk> chunks;
  std::vector<int32_t> open;  // the groups holding position k, outermost first
  size_t g = 0;               // groups[g] is the next group not yet reached
  int32_t run = -2;           // the previous item's run: a large node (-1: the root)
  uint32_t filled = 0;        // requests in the last chunk
  for (uint32_t k = 0; k < n;) {
    while (!open.empty() && groups[open.back()].end <= k) open.pop_back();
    for (; g < groups.size() && groups[g].begin <= k; ++g) open.push_back(static_cast<int32_t>(g));
    // The outermost small group open, if any (the stack's small groups are a suffix of it).
    size_t s = open.size();
    while (s > 0 && small(open[s - 1])) --s;
    uint32_t end = k + 1;
    int32_t item_run = open.empty() ? -1 : open.back();
    if (s < open.size()) {
      end = groups[open[s]].end;
      item_run = s > 0 ? open[s - 1] : -1;
    }
    if (chunks.empty() || filled + (end - k) > c ||
        (item_run != run && 2 * uint64_t{filled} >= c)) {
      chunks.push_back({k, end});
      filled = end - k;
    } else {
      chunks.back().end = end;
      filled += end - k;
    }
    run = item_run;
    while (g < groups.size() && groups[g].begin < end) ++g;  // inside the item: never cut
    k = end;
  }
  return chunks;
}

}  // namespace llmq
