#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/cgroup.h"
#include "kernels/cpu/cpu_count.h"

namespace llmq::kernels {
namespace {

TEST(ThreadPoolTest, RunsEveryPieceOnceOnEveryTeamSize) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.threads(), threads);
    for (int64_t chunks : {0, 1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(chunks);
      pool.Run(chunks, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < chunks; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ManyRegionsInARowAndAfterSleeping) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 20000; ++r) pool.Run(3, [&](int64_t i) { sum.fetch_add(i + 1); });
  ASSERT_EQ(sum.load(), 20000 * 6);
  // Past the spin: the workers are asleep on the futex and must wake for the next region.
  while (pool.sleeping_workers() < 2) std::this_thread::yield();
  // One piece per thread, each held until three threads have arrived: the region ends only once
  // both sleeping workers woke and took a piece.
  std::set<std::thread::id> ran;
  std::mutex mu;
  std::condition_variable arrived;
  pool.Run(3, [&](int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ran.insert(std::this_thread::get_id());
    arrived.notify_all();
    arrived.wait(lock, [&] { return ran.size() == 3; });
  });
  EXPECT_EQ(ran.size(), 3u);
}

TEST(ThreadPoolTest, NestedAndConcurrentCallersRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.Run(4, [&](int64_t) { pool.Run(5, [&](int64_t) { inner.fetch_add(1); }); });
  ASSERT_EQ(inner.load(), 20);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int r = 0; r < 500; ++r) pool.Run(8, [&](int64_t) { total.fetch_add(1); });
    });
  for (std::thread& t : callers) t.join();
  ASSERT_EQ(total.load(), 4 * 500 * 8);
}

TEST(ThreadPoolTest, BarrierIsMeasuredAndSmallWorkStaysOnTheCaller) {
  ThreadPool one(1), two(2);
  EXPECT_EQ(one.barrier_ns(), 0);
  EXPECT_EQ(one.ChunksFor(1e9), 1);
  EXPECT_GT(two.barrier_ns(), 0);
  EXPECT_EQ(two.ChunksFor(two.barrier_ns()), 1);  // under two barriers: not worth it
  EXPECT_EQ(two.ChunksFor(1e12), ThreadPool::kChunksPerThread * 2);
  EXPECT_GE(two.ChunksFor(4 * two.barrier_ns()), 2);
}

TEST(ThreadPoolTest, ParallelForCoversTheRangeInOrderedPieces) {
  const int before = CpuThreads();
  SetCpuThreads(2);
  ASSERT_EQ(CpuPool().threads(), 2);
  std::vector<int> seen(1000, 0);
  ParallelFor(1000, 1e6, [&](int64_t b, int64_t e) {
    ASSERT_LT(b, e);
    for (int64_t i = b; i < e; ++i) ++seen[i];
  });
  for (int v : seen) ASSERT_EQ(v, 1);
  int calls = 0;
  ParallelFor(1000, 0.0, [&](int64_t b, int64_t e) {  // free work: one call on the caller
    ++calls;
    ASSERT_EQ(b, 0);
    ASSERT_EQ(e, 1000);
  });
  ASSERT_EQ(calls, 1);
  SetCpuThreads(before);
}

TEST(CpuCountTest, CgroupAncestryRunsFromTheLeafToTheRoot) {
  EXPECT_EQ(CgroupAncestry("/system.slice/llmq.service"),
            (std::vector<std::string>{"/system.slice/llmq.service", "/system.slice", "/"}));
  EXPECT_EQ(CgroupAncestry("/"), std::vector<std::string>{"/"});
  EXPECT_EQ(CgroupAncestry(""), std::vector<std::string>{"/"});
}

TEST(CpuCountTest, QuotaOfCpuMax) {
  EXPECT_EQ(QuotaCpus("max 100000"), 0);
  EXPECT_EQ(QuotaCpus("100000 100000"), 1);
  EXPECT_EQ(QuotaCpus("150000 100000"), 2);
  EXPECT_EQ(QuotaCpus("50000 100000\n"), 1);
  EXPECT_EQ(QuotaCpus("400000 100000"), 4);
  EXPECT_EQ(QuotaCpus(""), 0);
  EXPECT_EQ(QuotaCpus("x 100000"), 0);
  EXPECT_EQ(QuotaCpus("100000 0"), 0);
}

TEST(CpuCountTest, BudgetIsWithinTheAffinityMask) {
  const CpuBudget b = ReadCpuBudget();
  EXPECT_GE(b.affinity, 1);
  EXPECT_GE(b.usable, 1);
  EXPECT_LE(b.usable, b.affinity);
  EXPECT_EQ(UsableCpus(), b.usable);
  EXPECT_NE(DescribeCpuBudget(b).find("affinity"), std::string::npos);
}

}  // namespace
}  // namespace llmq::kernels
