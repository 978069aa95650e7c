// daemon/worker.h: a worker's slot of its state folder (a stable id, one process per slot) and
// its presence on the queue (a restart in its slot takes back at once what its last run held),
// on a real state folder and a real SQLite queue.
#include "daemon/worker.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/store_util.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using jobs::Claim;

TEST(WorkerTest, SlotsAreTakenInOrderAndAFreedOneIsTakenAgainWithItsId) {
  const std::string root = testing::TmpDir("worker_slots");
  int fd0 = -1, fd1 = -1, fd2 = -1;
  std::string id0, id1, id2;
  ASSERT_TRUE(TakeWorkerSlot(root, &fd0, &id0).ok());
  ASSERT_TRUE(TakeWorkerSlot(root, &fd1, &id1).ok());  // flock: this process's other descriptor
  EXPECT_EQ(id0, HostName() + ":" + root + "#0");
  EXPECT_EQ(id1, HostName() + ":" + root + "#1");
  ::close(fd0);  // the worker in slot 0 ends: the next one takes its slot, and its id
  ASSERT_TRUE(TakeWorkerSlot(root, &fd2, &id2).ok());
  EXPECT_EQ(id2, id0);
  ::close(fd1);
  ::close(fd2);
}

TEST(WorkerTest, ARestartInItsSlotTakesBackWhatItsLastRunHeld) {
  const std::string dir = testing::TmpDir("worker_restart");
  auto store = jobs::OpenOrDie(dir + "/queue.db");
  ASSERT_TRUE(store);
  jobs::IngestGroups(store.get(), "a.jsonl", {1, 2, 3}, {10, 10, 10});
  jobs::WorkerInfo me;
  me.id = "host:" + dir + "#0";
  {
    WorkerPresence first(store.get(), me, 3600);
    int64_t released = -1;
    ASSERT_TRUE(first.Register(&released).ok());
    EXPECT_EQ(released, 0);
    Claim c;
    ASSERT_TRUE(store->ClaimNextGroup(me.id, 3600, 2, &c).ok());
    ASSERT_EQ(c.requests.size(), 2u);
  }  // killed: its leases run for an hour more, and no one else may take them
  auto other = jobs::OpenOrDie(dir + "/queue.db", jobs::Store::Check::kSkip);
  Claim c;
  jobs::WorkerInfo info;
  info.id = "other";
  ASSERT_TRUE(other->RegisterWorker(info).ok());
  ASSERT_TRUE(other->ClaimNextGroup("other", 3600, 10, &c).ok());
  EXPECT_EQ(c.requests.size(), 1u) << "only the request the dead run did not hold";
  // The same worker restarted: its registration gives them back at once.
  WorkerPresence second(store.get(), me, 3600);
  int64_t released = -1;
  ASSERT_TRUE(second.Register(&released).ok());
  EXPECT_EQ(released, 2);
  ASSERT_TRUE(other->ClaimNextGroup("other", 3600, 10, &c).ok());
  EXPECT_EQ(c.requests.size(), 2u);
  // Leave gives back what it holds and shows it stopped.
  ASSERT_TRUE(second.Beat("running", "batch_x", 5).ok());
  ASSERT_TRUE(second.Leave(&released).ok());
  EXPECT_EQ(released, 0);
  std::vector<jobs::WorkerInfo> all;
  ASSERT_TRUE(store->ListWorkers(&all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, me.id);
  EXPECT_EQ(all[0].state, "stopped");
}

}  // namespace
}  // namespace llmq
