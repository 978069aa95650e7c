// Graph buckets: the batch sizes (sequences per decode step) a GPU backend captures CUDA graphs
// for. A decode step of n sequences replays the graph of the smallest bucket >= n, its rows past n
// padded; a step larger than every bucket runs without a graph. Plain C++: chosen and tested on
// the CPU.
#pragma once

#include <vector>

namespace llmq {

// The buckets for an engine of `max_num_seqs` sequences, ascending, as vLLM's capture sizes:
// 1, 2, 4, then multiples of 8 up to 256, then multiples of 16 up to 512; cut after the first
// bucket >= max_num_seqs (so every decode step has one while max_num_seqs <= 512).
// max_num_seqs < 1 gives {1}.
std::vector<int> DefaultGraphBuckets(int max_num_seqs);

// The smallest bucket >= num_seqs in `buckets` (ascending), or -1 when num_seqs is past the
// largest (or `buckets` is empty).
int GraphBucketFor(int num_seqs, const std::vector<int>& buckets);

}  // namespace llmq
