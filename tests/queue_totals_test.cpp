// QueueTotals (daemon/metrics.h): the queue's sums behind the metrics' counters and the count of
// requests left that the daemon prints when it stops, over a real queue.
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <string>

#include "daemon/metrics.h"
#include "tests/store_util.h"

namespace llmq {
namespace {

using jobs::OpenOrDie;

TEST(QueueTotalsTest, CountsWhatIsLeftAndKeepsTheLastTotalsWhenAReadFails) {
  const std::string path = jobs::DbPath();
  auto store = OpenOrDie(path);
  const int64_t a = jobs::Ingest(store.get(), "a.jsonl", {1, 2, 3}, /*bad=*/{3});
  jobs::Ingest(store.get(), "b.jsonl", {4, 5});
  ASSERT_TRUE(store->CommitResults({jobs::MakeResult(a, 1)}).ok());

  QueueTotals totals;
  ASSERT_TRUE(totals.Refresh(store.get()).ok());
  // a: line 1 done, line 3 refused, line 2 left; b: both left.
  EXPECT_EQ(totals.pending(), 3);
  std::string text;
  totals.Render(&text);
  EXPECT_NE(text.find("llmq_queue_depth 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("llmq_requests_total{status=\"completed\"} 1\n"), std::string::npos) << text;

  // Another connection takes the jobs away: the refresh fails and the last totals stand (the
  // daemon says it could not count rather than print 0).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "PRAGMA foreign_keys = OFF; DROP TABLE jobs", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  EXPECT_FALSE(totals.Refresh(store.get()).ok());
  EXPECT_EQ(totals.pending(), 3);
  std::string again;
  totals.Render(&again);
  EXPECT_EQ(again, text);
}

}  // namespace
}  // namespace llmq
