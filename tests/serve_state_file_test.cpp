// <state>/serve.json (daemon/spool.h): what the running daemon publishes and `llmq status` reads
// back: the run windows in effect and the engine's progress, the work in flight by job included.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "daemon/spool.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

TEST(ServeStateFileTest, ReadsBackWhatTheDaemonWrote) {
  const spool::Paths p = spool::PathsFor(testing::CurrentTestDir() + "/state");
  ASSERT_TRUE(spool::EnsureLayout(p).ok());
  RunWindow night;
  ASSERT_TRUE(ParseRunWindow("22:00-06:00", &night).ok());
  spool::ServeProgress w;
  w.at = 1767225600.5;
  w.tokens_per_second = 1234.5;
  w.running = 16;
  w.queued = 1008;
  w.tokens_generated = 987654;
  w.held = true;
  w.fed_out = true;
  w.in_flight_tokens = {{"batch_0000000000000001", 700}, {"batch_0000000000000002", 12}};
  ASSERT_TRUE(spool::WriteServeState(p, {night}, w).ok());

  std::vector<RunWindow> windows;
  spool::ServeProgress r;
  ASSERT_TRUE(spool::ReadServeState(p, &windows, &r));
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0], night);
  EXPECT_DOUBLE_EQ(r.at, w.at);
  EXPECT_DOUBLE_EQ(r.tokens_per_second, w.tokens_per_second);
  EXPECT_EQ(r.running, 16);
  EXPECT_EQ(r.queued, 1008);
  EXPECT_EQ(r.tokens_generated, 987654);
  EXPECT_TRUE(r.held);
  EXPECT_TRUE(r.fed_out);
  EXPECT_EQ(r.in_flight_tokens, w.in_flight_tokens);
}

TEST(ServeStateFileTest, AFileLeftByADeadDaemonIsNotServing) {
  const spool::Paths p = spool::PathsFor(testing::CurrentTestDir() + "/state");
  ASSERT_TRUE(spool::EnsureLayout(p).ok());
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);  // its pid is gone (reaped)
  std::ofstream(p.serve_state) << "{\"pid\": " << child << ", \"run_windows\": [], "
                               << "\"progress\": {\"tokens_per_second\": 5}}\n";
  std::vector<RunWindow> windows;
  spool::ServeProgress r;
  EXPECT_FALSE(spool::ReadServeState(p, &windows, &r));
  EXPECT_EQ(r.tokens_per_second, 0) << "nothing read from a dead daemon's file";
}

}  // namespace
}  // namespace llmq
