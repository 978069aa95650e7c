// ClaimChunks: cutting a prefix plan into the units workers claim (issue 27). Many `llmq serve`
// workers share one queue and each claim takes one plan group whole (Store::ClaimNextGroup); a
// chunk here is such a group. Chunks follow the prefix tree, so that the requests sharing a prefix
// go to one worker whenever they fit in one claim. Pure algorithm: no engine state, no I/O.
//
// The rule, for a maximum chunk size C (>= 1; 0 is taken as 1):
//  - The plan's requests are seen as a tree: the root holds every request, each PlanGroup is a
//    node, a request belongs directly to the innermost group containing it (ungrouped requests:
//    to the root). A node is "small" when it holds at most C requests, else "large". A plan of
//    at most C requests is one chunk.
//  - Items: the plan is read in order as a sequence of items, each either a small node whose
//    parent is large (taken whole: a small group is never split) or a request directly in a
//    large node. An item's "run" is the innermost large node holding it.
//  - Greedy packing: a chunk takes items in order; the next item starts a new chunk when it does
//    not fit (the chunk would exceed C), or when its run differs from the previous item's (the
//    boundary of a large group lies between them) and the chunk already holds at least half of
//    C (2 * size >= C).
// So a large group is split along its children: its own requests and small children are packed
// together, a large child is cut the same way, and a chunk crosses a large group's boundary only
// while it holds fewer than C / 2 requests, to fill a chunk that would otherwise stay tiny (the
// last requests of one large group then share a claim with what follows, the members of a chain
// of nested groups, prompts each extending the last, share claims of C / 2 or more). Small groups
// side by side (several small system prompts) are packed into one chunk as far as they fit.
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
