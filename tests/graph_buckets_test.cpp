// Graph buckets: the default capture sizes and the bucket a decode step of n sequences replays.
#include "engine/backends/graph_buckets.h"

#include <gtest/gtest.h>

namespace llmq {
namespace {

TEST(GraphBuckets, DefaultsFollowVllmsCaptureSizes) {
  EXPECT_EQ(DefaultGraphBuckets(1), (std::vector<int>{1}));
  EXPECT_EQ(DefaultGraphBuckets(0), (std::vector<int>{1}));
  EXPECT_EQ(DefaultGraphBuckets(3), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(DefaultGraphBuckets(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(DefaultGraphBuckets(20), (std::vector<int>{1, 2, 4, 8, 16, 24}));
  const std::vector<int> b256 = DefaultGraphBuckets(256);
  ASSERT_EQ(b256.size(), 3u + 32u);  // 1, 2, 4, then 8..256 by 8
  EXPECT_EQ(b256.back(), 256);
  for (size_t i = 3; i < b256.size(); ++i) EXPECT_EQ(b256[i], 8 * static_cast<int>(i - 2));
  const std::vector<int> b300 = DefaultGraphBuckets(300);
  EXPECT_EQ(b300.back(), 304);  // 256, 272, 288, 304: by 16 past 256
  EXPECT_EQ(b300[b300.size() - 2], 288);
  const std::vector<int> big = DefaultGraphBuckets(100000);
  EXPECT_EQ(big.back(), 512);  // larger steps run without a graph
  for (size_t i = 1; i < big.size(); ++i) EXPECT_LT(big[i - 1], big[i]);
}

TEST(GraphBuckets, SmallestBucketThatHoldsTheStep) {
  const std::vector<int> b = DefaultGraphBuckets(256);
  EXPECT_EQ(GraphBucketFor(1, b), 1);
  EXPECT_EQ(GraphBucketFor(2, b), 2);
  EXPECT_EQ(GraphBucketFor(3, b), 4);
  EXPECT_EQ(GraphBucketFor(5, b), 8);
  EXPECT_EQ(GraphBucketFor(8, b), 8);
  EXPECT_EQ(GraphBucketFor(9, b), 16);
  EXPECT_EQ(GraphBucketFor(250, b), 256);
  EXPECT_EQ(GraphBucketFor(256, b), 256);
  EXPECT_EQ(GraphBucketFor(257, b), -1);
  EXPECT_EQ(GraphBucketFor(3, {}), -1);
  EXPECT_EQ(GraphBucketFor(3, {5, 7}), 5);
  EXPECT_EQ(GraphBucketFor(7, {5, 7}), 7);
}

}  // namespace
}  // namespace llmq
