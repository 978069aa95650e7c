#include "base/backoff.h"

#include <gtest/gtest.h>

namespace llmq {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, DoublesFromTheFirstWaitUpToTheCapAndResetsOnSuccess) {
  Backoff b(milliseconds(500), milliseconds(3000));
  EXPECT_EQ(b.Next(), milliseconds(500));
  EXPECT_EQ(b.Next(), milliseconds(1000));
  EXPECT_EQ(b.Next(), milliseconds(2000));
  EXPECT_EQ(b.Next(), milliseconds(3000));  // capped, not 4000
  EXPECT_EQ(b.Next(), milliseconds(3000));
  b.Reset();
  EXPECT_EQ(b.Next(), milliseconds(500));
  EXPECT_EQ(b.Next(), milliseconds(1000));
}

TEST(Backoff, ACapBelowTheFirstWaitKeepsEveryWaitAtTheFirst) {
  Backoff b(milliseconds(200), milliseconds(50));
  EXPECT_EQ(b.Next(), milliseconds(200));
  EXPECT_EQ(b.Next(), milliseconds(200));
}

}  // namespace
}  // namespace llmq
