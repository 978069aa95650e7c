// PrefixPlanner: offline ordering of a whole pending window by shared prompt prefixes.
// Builds a radix tree over the prompts' tokens and emits requests depth-first, so that requests
// sharing a prefix are contiguous at every level of nesting (one system prompt > several task
// templates > documents), and reports each shared prefix as a group the engine pins while the
// group runs. Pure algorithm: no engine state, no I/O.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace llmq {

struct PlanGroup {
  uint32_t begin = 0, end = 0;  // the group's requests are order[begin, end)
  int32_t shared_tokens =
      0;                // tokens every request of the group shares, rounded down to full blocks
  int32_t parent = -1;  // index of the enclosing group in Plan::groups, -1 at the top
};

struct Plan {
  std::vector<uint32_t> order;    // a permutation of [0, prompts.size())
  std::vector<PlanGroup> groups;  // groups with shared_tokens >= one block, parents before children
  int64_t unique_tokens = 0;      // tokens in the radix tree (each shared prefix counted once)
};

// `prompts[i]` are request i's prompt ids. Within a group, children come in a deterministic order
// (larger subtrees first, ties by first appearance); identical prompts stay in input order.
// O(total tokens) time and memory; 100,000 prompts of ~1,300 tokens plan in well under a second.
// InvalidArgument past the 32-bit indices: 2^31 prompts or more, or a prompt of 2^31 tokens or
// more.
StatusOr<Plan> PlanPrefixes(const std::vector<std::span<const int32_t>>& prompts, int block_size);

}  // namespace llmq
