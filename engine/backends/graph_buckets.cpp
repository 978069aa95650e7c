#include "engine/backends/graph_buckets.h"

#include <algorithm>

namespace llmq {

namespace {

constexpr int kLargestBucket = 512;

int NextBucket(int b) {
  if (b < 8) return b * 2;  // 1, 2, 4, 8
  return b < 256 ? b + 8 : b + 16;
}

}  // namespace

std::vector<int> DefaultGraphBuckets(int max_num_seqs) {
  std::vector<int> buckets;
  for (int b = 1; b <= kLargestBucket; b = NextBucket(b)) {
    buckets.push_back(b);
    if (b >= max_num_seqs) break;
  }
  return buckets;
}

int GraphBucketFor(int num_seqs, const std::vector<int>& buckets) {
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), num_seqs);
  return it == buckets.end() ? -1 : *it;
}

}  // namespace llmq
