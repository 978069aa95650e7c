// The watchdog's verdicts (daemon/watchdog.h) on times the test gives: pings while the event loop,
// the engine thread and the queue are alive; none while the engine does not tick or the queue does
// not answer, each logged once when it goes stale and once when it comes back; a late check (a
// blocked event loop) logged. No clock, no sleeping.
#include "daemon/watchdog.h"

#include <gtest/gtest.h>

namespace llmq {
namespace {

using Clock = WatchdogMonitor::Clock;
using std::chrono::milliseconds;
constexpr Clock::time_point kAnswers = Clock::time_point::max();

class WatchdogTest : public ::testing::Test {
 protected:
  // A check due now and run on time, the engine having ticked `tick_age` ago.
  WatchdogMonitor::Verdict CheckAt(milliseconds tick_age,
                                   Clock::time_point queue_failing_since = kAnswers) {
    now_ += w_.period();
    return w_.Check(now_, now_, now_ - tick_age, queue_failing_since);
  }
  WatchdogMonitor w_{milliseconds(1000), "/state/queue.db"};
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(WatchdogTest, PingsEveryQuarterIntervalWhileEverythingIsAlive) {
  EXPECT_EQ(w_.period(), milliseconds(250));
  for (int i = 0; i < 8; ++i) {
    const WatchdogMonitor::Verdict v = CheckAt(milliseconds(100));
    EXPECT_TRUE(v.ping);
    EXPECT_TRUE(v.logs.empty());
  }
  // Exactly half the interval is still alive; past it is not.
  EXPECT_TRUE(CheckAt(milliseconds(500)).ping);
  EXPECT_FALSE(CheckAt(milliseconds(501)).ping);
}

TEST_F(WatchdogTest, AStalledEngineStopsThePingsAndIsLoggedOnceEachWay) {
  WatchdogMonitor::Verdict v = CheckAt(milliseconds(700));
  EXPECT_FALSE(v.ping);
  ASSERT_EQ(v.logs.size(), 1u);
  EXPECT_EQ(v.logs[0],
            "watchdog: the engine thread has not ticked for 0.7s (a step that does not return?): "
            "no WATCHDOG=1 until it does");
  v = CheckAt(milliseconds(950));
  EXPECT_FALSE(v.ping);
  EXPECT_TRUE(v.logs.empty()) << "logged once while it stays stale";
  v = CheckAt(milliseconds(10));
  EXPECT_TRUE(v.ping);
  ASSERT_EQ(v.logs.size(), 1u);
  EXPECT_EQ(v.logs[0], "watchdog: the engine thread ticks again");
}

TEST_F(WatchdogTest, AQueueThatDoesNotAnswerStopsThePings) {
  const Clock::time_point failing = now_;
  EXPECT_TRUE(CheckAt(milliseconds(0), failing).ping) << "failing for a quarter: still alive";
  EXPECT_TRUE(CheckAt(milliseconds(0), failing).ping) << "half";
  WatchdogMonitor::Verdict v = CheckAt(milliseconds(0), failing);
  EXPECT_FALSE(v.ping);
  ASSERT_EQ(v.logs.size(), 1u);
  EXPECT_EQ(v.logs[0],
            "watchdog: the queue (/state/queue.db) has not answered for 0.8s: no WATCHDOG=1 until "
            "it does");
  v = CheckAt(milliseconds(0), kAnswers);
  EXPECT_TRUE(v.ping);
  ASSERT_EQ(v.logs.size(), 1u);
  EXPECT_EQ(v.logs[0], "watchdog: the queue (/state/queue.db) answers again");
}

TEST_F(WatchdogTest, ACheckThatRunsLateSaysHowLongTheEventLoopWasBlocked) {
  const Clock::time_point due = now_ + w_.period();
  now_ = due + milliseconds(3000);  // the loop was stuck in a call for 3 s
  WatchdogMonitor::Verdict v = w_.Check(now_, due, now_ - milliseconds(10), kAnswers);
  ASSERT_EQ(v.logs.size(), 1u);
  EXPECT_EQ(v.logs[0], "watchdog: the event loop did not run for 3.2s (no WATCHDOG=1 meanwhile)");
  EXPECT_TRUE(v.ping) << "alive again: it pings at once";
  // Late by a quarter or less is on time.
  v = w_.Check(now_ + milliseconds(250), now_, now_, kAnswers);
  EXPECT_TRUE(v.logs.empty());
}

}  // namespace
}  // namespace llmq
