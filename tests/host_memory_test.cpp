// The memory the process may take (MemAvailable, the cgroup v2 limit's room) parsed from made-up
// file text, the CPU's default KV budget arithmetic, and `llmq plan` printing the pool that
// `llmq run` then builds from the same memory.
#include "base/host_memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/test_util.h"

namespace llmq {
namespace {

constexpr const char* kMeminfo =
    "MemTotal:       24522108 kB\n"
    "MemFree:         1015064 kB\n"
    "MemAvailable:   23096860 kB\n"
    "Buffers:          125364 kB\n";

TEST(HostMemory, ParsesMemAvailable) {
  EXPECT_EQ(ParseMemAvailable(kMeminfo), int64_t{23096860} * 1024);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: 5"), 5);  // no unit: bytes
  EXPECT_EQ(ParseMemAvailable("MemTotal: 10 kB\nMemFree: 3 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: lots kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailable(""), std::nullopt);
}

TEST(HostMemory, CgroupRoomIsTheLimitLessUsage) {
  EXPECT_EQ(CgroupRoom("8589934592\n", "1073741824\n"), int64_t{7} << 30);
  EXPECT_EQ(CgroupRoom("max\n", "1073741824\n"), std::nullopt);  // no limit
  EXPECT_EQ(CgroupRoom("100\n", "150\n"), 0);                    // over the limit
  EXPECT_EQ(CgroupRoom("", ""), std::nullopt);                   // no such files
  EXPECT_EQ(CgroupV2Path("12:memory:/x\n0::/system.slice/llmq.service\n"),
            "/system.slice/llmq.service");
  EXPECT_EQ(CgroupV2Path("4:memory:/x\n"), "");  // cgroup v1 only
}

// A limit on a parent slice binds the service below it: the least room of the whole ancestry
// wins, read from real files laid out like /sys/fs/cgroup.
TEST(HostMemory, CgroupRoomIsTheLeastOfTheCgroupAndItsParents) {
  const std::string root = testing::TmpDir("cgroup_tree");
  auto put = [&](const std::string& dir, const char* max, const char* current) {
    std::filesystem::create_directories(root + dir);
    std::ofstream(root + dir + "/memory.max") << max;
    std::ofstream(root + dir + "/memory.current") << current;
  };
  put("/llmq.slice", "1000\n", "400\n");              // the slice: 600 left
  put("/llmq.slice/llmq.service", "max\n", "300\n");  // the service: no limit of its own
  EXPECT_EQ(CgroupTreeRoom(root, "/llmq.slice/llmq.service"), 600);
  put("/llmq.slice/llmq.service", "500\n", "300\n");  // its own limit is tighter: 200
  EXPECT_EQ(CgroupTreeRoom(root, "/llmq.slice/llmq.service"), 200);
  put("/llmq.slice", "max\n", "400\n");
  put("/llmq.slice/llmq.service", "max\n", "300\n");
  EXPECT_EQ(CgroupTreeRoom(root, "/llmq.slice/llmq.service"), std::nullopt);  // no limit
  EXPECT_EQ(CgroupTreeRoom(root, "/"), std::nullopt);  // the root has no memory.max
}

TEST(HostMemory, TheLowerOfRamAndCgroupRoomWins) {
  HostMemory m = LowerOf(int64_t{20} << 30, int64_t{4} << 30);
  EXPECT_EQ(m.bytes, int64_t{4} << 30);
  EXPECT_EQ(m.source, "cgroup memory.max - memory.current");
  m = LowerOf(int64_t{20} << 30, int64_t{40} << 30);
  EXPECT_EQ(m.bytes, int64_t{20} << 30);
  EXPECT_EQ(m.source, "MemAvailable");
  EXPECT_EQ(LowerOf(int64_t{3}, std::nullopt).bytes, 3);
  EXPECT_EQ(LowerOf(std::nullopt, int64_t{7}).bytes, 7);
  EXPECT_EQ(LowerOf(std::nullopt, std::nullopt).bytes, 0);
}

TEST(HostMemory, KvBudgetIsTheShareLessWeightsAndWorkingMemoryCapped) {
  HostKvInputs in;
  in.memory = 10'000'000'000;
  in.utilization = 0.9;
  in.weight_bytes = 2'000'000'000;
  in.working_bytes = 500'000'000;
  in.kv_bytes_per_token = 73'728;
  EXPECT_EQ(HostKvBudget(in), 9'000'000'000 - 2'500'000'000);
  in.max_num_seqs = 256;  // the cap: 2 x 256 sequences of 2048 tokens
  in.max_context = 2048;
  EXPECT_EQ(HostKvBudget(in), 9'000'000'000 - 2'500'000'000);  // 77 GB: not reached
  in.max_context = 64;
  EXPECT_EQ(HostKvBudget(in), int64_t{2} * 256 * 64 * 73'728);
  in.weight_bytes = 9'000'000'000;  // the weights fill it: nothing, not a negative pool
  EXPECT_EQ(HostKvBudget(in), 0);
}

// The default (kv_cache_memory auto): `llmq plan` prints the pool `llmq run` builds, both from
// the same memory (a made-up /proc/meminfo both read).
TEST(HostMemory, PlanPrintsThePoolRunBuilds) {
  const std::string dir = testing::CurrentTestDir();
  const std::string model = dir + "/m";
  ASSERT_EQ(
      testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model, "--seed", "2"}).exit_code,
      0);
  const std::string meminfo = dir + "/meminfo";
  std::ofstream(meminfo) << "MemTotal: 200000 kB\nMemAvailable:   60000 kB\n";
  const std::vector<std::string> env = {"LLMQ_TEST_MEMINFO=" + meminfo, "OMP_NUM_THREADS=1"};
  const auto plan =
      testing::RunLlmqWith(env, {"plan", "--model", model, "--backend", "cpu", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto p = nlohmann::json::parse(plan.out);
  EXPECT_EQ(p["memory_bytes"].get<int64_t>(), int64_t{60000} * 1024);
  const int64_t blocks = p["kv_blocks"];
  // Below the cap (2 x 256 sequences x 512 tokens x 384 bytes = 100 MB): the memory decides.
  EXPECT_GT(blocks, 1);
  EXPECT_LT(p["kv_cache_bytes"].get<int64_t>(),
            int64_t{60000} * 1024 * 9 / 10 - p["weights_bytes_resident"].get<int64_t>());

  const std::string in = dir + "/in.jsonl";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 3}})"
                    << "\n";
  const auto run = testing::RunLlmqWith(env, {"run", in, "-o", dir + "/out.jsonl", "--model", model,
                                              "--backend", "cpu", "--no-progress"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.err, m, std::regex("KV cache (\\d+) blocks"))) << run.err;
  EXPECT_EQ(std::stoll(m[1]), blocks) << run.err;
  EXPECT_NE(run.err.find("MemAvailable"), std::string::npos) << run.err;

  // An explicit size still wins.
  const auto fixed =
      testing::RunLlmqWith(env, {"run", in, "-o", dir + "/out2.jsonl", "--model", model,
                                 "--backend", "cpu", "--no-progress", "--kv-cache-memory", "1MiB"});
  ASSERT_EQ(fixed.exit_code, 0) << fixed.err;
  EXPECT_NE(fixed.err.find("engine.kv_cache_memory"), std::string::npos) << fixed.err;
}

}  // namespace
}  // namespace llmq
