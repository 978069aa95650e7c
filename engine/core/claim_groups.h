// ClaimChunks: cutting a prefix plan into the units workers claim (issue 27). Many `llmq serve`
// workers share one queue and each claim takes one plan group whole (Store::ClaimNextGroup); a
// chunk here is such a group. Chunks follow the prefix tree, so that the requests sharing a prefix
// go to one worker whenever they fit in one claim. Pure algorithm: no engine state, no I/O.
//
// The rule, for a maximum chunk size C (>= 1; 0 is taken as 1):
//  - The plan's requests are seen as a tree: the root holds every request, each PlanGroup is a
//    node, a request belongs directly to the innermost group containing it (ungrouped requests:
//    to the root). A node is "small" when it holds at most C requests, else "large".
//  - A small node is never split: it lies whole inside one chunk.
//  - A large node (the root when the plan has more than C requests) is cut: its items, in plan
//    order, are the requests directly in it and its children. A large child is cut the same way
//    and its chunks hold nothing of its siblings; each maximal run of the other items (requests
//    and small children between two large children, or before the first, or after the last) is
//    packed greedily: a chunk takes items while they fit in C, the next item that does not fit
//    starts a new chunk.
// Hence a chunk either lies inside one large node's run of items, or is the whole plan. A chunk
// never holds part of a group and part of another outside it: it holds whole small groups (for
// example, several small top-level groups side by side, which fills a claim rather than making
// tiny ones), or requests and small children of one large group. The last chunk of a run may be
// small (greedy, not balanced): simple and deterministic.
// Smaller C balances work across workers more finely; larger C means fewer claims.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/prefix_planner.h"

namespace llmq {

// The requests a claim takes at most by default (IngestOptions::claim_group_max).
inline constexpr uint32_t kDefaultClaimGroupRequests = 64;

struct ClaimChunk {
  uint32_t begin = 0, end = 0;  // the chunk's requests are plan.order[begin, end)
};

// The chunks of `plan` for chunk size `max_requests` (see the top): consecutive, in order, covering
// plan.order exactly; none for an empty plan. O(order + groups) time.
std::vector<ClaimChunk> ClaimChunks(const Plan& plan, uint32_t max_requests);

}  // namespace llmq
