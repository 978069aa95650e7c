// Prefix groups: runs of consecutive sequences in a step whose block tables begin with the same
// physical blocks, already computed. A GPU backend reads such a shared prefix once per group per
// step ("cascade" attention: the group's queries against the shared blocks as one matrix product,
// merged with each sequence's own suffix attention by log-sum-exp) instead of once per sequence.
// Plain C++: detected and tested on the CPU; the CPU backend reads a group's shared blocks once per
// kv head for up to 64 of its rows (kernels::PagedAttention).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backends/backend.h"

namespace llmq {

// Fills b->prefix_groups from b's block tables, positions and query_start: a partition of some of
// the batch's sequences into runs of consecutive sequences [first_seq, first_seq + num_seqs)
// (num_seqs >= 2) whose block tables begin with the same num_blocks >= 1 physical blocks, each of
// them entirely before every member's first query row (already-computed context, never a block
// this step writes to). Of the possible partitions it takes one that saves the most block reads,
// sum over groups of (num_seqs - 1) * num_blocks, ties going to longer runs. O(S) per plateau of
// equal neighbour prefixes a run may cross (every sequence sharing one prefix: O(S)); O(S^2) at
// worst.
void DetectPrefixGroups(int block_size, StepBatch* b);

// Reorders the leading run of single-token entries (the decode sequences, which the scheduler
// puts first) so that those whose block tables begin with the same block are adjacent; otherwise
// stable: sequences keep the order of the first one with their first block. `first_block[i]` is
// entry i's first physical block (-1: none); `num_tokens[i]` its tokens in the step. Writes the new
// order of all entries to *order (a permutation of 0..n-1; the identity when nothing moves).
void OrderBySharedFirstBlock(const std::vector<int32_t>& first_block,
                             const std::vector<int32_t>& num_tokens, std::vector<int32_t>* order);

}  // namespace llmq
