// Backend choice: auto, cpu and cuda resolved on this machine, the flag and config key through the
// real binary, and a clear error where cuda cannot be had (built without CUDA, or no device).
#include "engine/backends/backend_choice.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/model/model.h"
#include "tests/test_util.h"

#ifdef LLMQ_HAVE_CUDA
#include "engine/backends/cuda_backend.h"
#endif

namespace llmq {
namespace {

using testing::RunLlmq;

// Whether a usable CUDA device is here (never when built without CUDA).
bool DeviceHere() {
#ifdef LLMQ_HAVE_CUDA
  return CheckCudaDevice().ok();
#else
  return false;
#endif
}

TEST(BackendChoice, NamesParseBothWays) {
  for (BackendKind k : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda}) {
    BackendKind got = BackendKind::kCpu;
    ASSERT_TRUE(ParseBackendKind(BackendKindName(k), &got));
    EXPECT_EQ(got, k);
  }
  BackendKind k = BackendKind::kCpu;
  EXPECT_FALSE(ParseBackendKind("gpu", &k));
  EXPECT_FALSE(ParseBackendKind("CUDA", &k));
  EXPECT_EQ(k, BackendKind::kCpu);
  Precision p = Precision::kBf16;
  ASSERT_TRUE(ParsePrecision("fp32", &p));
  EXPECT_EQ(p, Precision::kFp32);
  EXPECT_FALSE(ParsePrecision("fp16", &p));
}

TEST(BackendChoice, ResolvesOnThisMachine) {
  const StatusOr<ResolvedBackend> cpu = ResolveBackend(BackendKind::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->kind, BackendKind::kCpu);
  EXPECT_EQ(cpu->why, "");

  const bool device = DeviceHere();
  const StatusOr<ResolvedBackend> automatic = ResolveBackend(BackendKind::kAuto);
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->kind, device ? BackendKind::kCuda : BackendKind::kCpu);
  EXPECT_FALSE(automatic->why.empty());  // auto says why

  const StatusOr<ResolvedBackend> cuda = ResolveBackend(BackendKind::kCuda);
  if (device) {
    ASSERT_TRUE(cuda.ok()) << cuda.status().message();
    EXPECT_EQ(cuda->kind, BackendKind::kCuda);
    EXPECT_EQ(cuda->why, "");
    return;
  }
  ASSERT_FALSE(cuda.ok());
  const Status& st = cuda.status();
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("backend cuda"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(BuiltWithCuda() ? "no usable CUDA device" : "built without CUDA"),
            std::string::npos)
      << st.message();
}

class BackendChoiceCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("backend_choice_model");
    const auto r = RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static std::string model_;
};
std::string BackendChoiceCli::model_;

TEST_F(BackendChoiceCli, CpuIsSaidAndSummarised) {
  const auto g = RunLlmq({"generate", "--model", model_, "--prompt", "hi", "--max-tokens", "3",
                          "--backend", "cpu", "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(g.out)["backend"], "cpu");

  const std::string dir = testing::CurrentTestDir();
  const std::string in = dir + "/in.jsonl";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 3}})"
                    << "\n";
  const auto r = RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model_, "--backend",
                          "cpu", "--summary-json", dir + "/s.json", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("backend cpu; KV cache "), std::string::npos) << r.err;
  // kv_cache_memory auto: the pool comes from the memory the process may take.
  EXPECT_NE(r.err.find("engine.gpu_memory_utilization 0.9 of "), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(testing::ReadText(dir + "/s.json"))["backend"], "cpu");
}

TEST_F(BackendChoiceCli, CpuThreadsAreSaidInPlanStartUpAndSummary) {
  auto plan = [&](const std::vector<std::string>& env, std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "--model", model_, "--backend", "cpu", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = testing::RunLlmqWith(env, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  auto p = plan({"OMP_NUM_THREADS=1"}, {"--threads", "3"});
  EXPECT_EQ(p["cpu_threads"], 3);
  EXPECT_EQ(p["cpu_threads_source"], "3 (--threads)");
  p = plan({"OMP_NUM_THREADS=1"}, {});
  EXPECT_EQ(p["cpu_threads"], 1);
  EXPECT_EQ(p["cpu_threads_source"], "1 ($OMP_NUM_THREADS)");
  p = plan({"-u", "OMP_NUM_THREADS"}, {});  // unset: the CPUs this process may use
  EXPECT_GE(p["cpu_threads"].get<int>(), 1);
  EXPECT_NE(p["cpu_threads_source"].get<std::string>().find("usable CPUs: affinity "),
            std::string::npos)
      << p["cpu_threads_source"];
  EXPECT_EQ(testing::RunLlmq({"plan", "--model", model_, "--threads", "0"}).exit_code, 2);

  const std::string dir = testing::CurrentTestDir();
  const std::string in = dir + "/in.jsonl", cfg = dir + "/llmq.yaml";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 3}})"
                    << "\n";
  std::ofstream(cfg) << "engine:\n  cpu_threads: 2\n";
  auto r = testing::RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model_, "--config",
                             cfg, "--summary-json", dir + "/s.json", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("; cpu threads 2 (engine.cpu_threads)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| cpu threads 2"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(testing::ReadText(dir + "/s.json"))["cpu_threads"], 2);
  r = testing::RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model_, "--config", cfg,
                        "--threads", "1", "--summary-json", dir + "/s.json", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("; cpu threads 1 (--threads)"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(testing::ReadText(dir + "/s.json"))["cpu_threads"], 1);
  // The step limits: the CPU backend's when unset (auto), else the flag's or the config's.
  EXPECT_NE(r.err.find("; steps of at most 256 sequences and 2048 tokens"), std::string::npos)
      << r.err;
  std::ofstream(cfg) << "engine:\n  max_num_seqs: 7\n  max_num_batched_tokens: auto\n";
  r = testing::RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model_, "--config", cfg,
                        "--max-num-batched-tokens", "300", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("; steps of at most 7 sequences and 300 tokens"), std::string::npos)
      << r.err;
}

TEST_F(BackendChoiceCli, CudaWithoutADeviceIsAClearError) {
  if (DeviceHere()) GTEST_SKIP() << "a CUDA device is here: cuda can be had";
  const std::string expect = BuiltWithCuda() ? "no usable CUDA device" : "built without CUDA";
  const auto g = RunLlmq({"generate", "--model", model_, "--prompt", "hi", "--backend", "cuda"});
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find("backend cuda: "), std::string::npos) << g.err;
  EXPECT_NE(g.err.find(expect), std::string::npos) << g.err;

  // The config key does the same for run; the flag overrides it.
  const std::string dir = testing::CurrentTestDir();
  const std::string in = dir + "/in.jsonl";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 2}})"
                    << "\n";
  std::ofstream(dir + "/c.yaml") << "engine:\n  backend: cuda\n";
  const auto r = RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model_, "--config",
                          dir + "/c.yaml", "--no-progress"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("backend cuda: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
  const auto flag = RunLlmq({"run", in, "-o", dir + "/out.jsonl", "--model", model_, "--config",
                             dir + "/c.yaml", "--backend", "auto", "--no-progress"});
  EXPECT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_NE(flag.err.find("backend cpu (auto: "), std::string::npos) << flag.err;

  // plan: a GPU elsewhere needs --memory; with it, bf16 weights and K/V.
  const auto p = RunLlmq({"plan", "--model", model_, "--backend", "cuda"});
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_NE(p.err.find("--memory"), std::string::npos) << p.err;
}

// engine.device / --device (one llmq serve per GPU) names a CUDA device: a worker meant for GPU 2
// never quietly runs on the CPU, whether cpu was asked for or auto found no such device.
TEST_F(BackendChoiceCli, ADeviceOtherThanZeroIsRefusedWhereTheBackendIsCpu) {
  const std::string dir = testing::CurrentTestDir();
  const std::string in = dir + "/in.jsonl";
  std::ofstream(in) << R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
                    << R"("body": {"model": "m", "prompt": "hello", "max_tokens": 2}})"
                    << "\n";
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run",     in,     "-o",           dir + "/out.jsonl",
                                     "--model", model_, "--no-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::RunLlmqWith({}, args);
  };
  auto r = run({"--backend", "cpu", "--device", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("engine.device 2: a CUDA device, but the backend is cpu (engine.backend "
                       "cpu)"),
            std::string::npos)
      << r.err;
  std::ofstream(dir + "/c.yaml") << "engine:\n  device: 1\n";
  r = run({"--config", dir + "/c.yaml"});  // auto
  if (DeviceHere()) {
    // cuda:1 where there is one; else "no device 1: N visible", auto falling back and refused.
    if (r.exit_code != 0) {
      EXPECT_NE(r.err.find("engine.device 1: a CUDA device, but the backend is cpu (auto: no "
                           "usable CUDA device: no device 1"),
                std::string::npos)
          << r.err;
    }
  } else {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("engine.device 1: a CUDA device, but the backend is cpu (auto: "),
              std::string::npos)
        << r.err;
  }
  // The flag overrides the config; 0 is every backend's.
  r = run({"--config", dir + "/c.yaml", "--device", "0", "--backend", "cpu"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run({"--device", "-1"}).exit_code, 2);
  EXPECT_EQ(run({"--device", "1024"}).exit_code, 2);
}

TEST_F(BackendChoiceCli, BadNamesAreUsageErrors) {
  EXPECT_EQ(RunLlmq({"generate", "--model", model_, "--prompt", "x", "--backend", "gpu"}).exit_code,
            2);
  EXPECT_EQ(RunLlmq({"run", "in.jsonl", "-o", "o.jsonl", "--backend", "gpu"}).exit_code, 2);
  EXPECT_EQ(RunLlmq({"run", "in.jsonl", "-o", "o.jsonl", "--precision", "fp16"}).exit_code, 2);
  EXPECT_EQ(
      RunLlmq({"run", "in.jsonl", "-o", "o.jsonl", "--gpu-memory-utilization", "0"}).exit_code, 2);
  EXPECT_EQ(RunLlmq({"plan", "--model", model_, "--gpu-memory-utilization", "1.5"}).exit_code, 2);
}

TEST_F(BackendChoiceCli, PlanSaysBackendBytesPerTokenAndBudget) {
  // tiny: 3 layers x 2 kv heads x 16 head_dim.
  const auto cpu =
      RunLlmq({"plan", "--model", model_, "--memory", "1G", "--backend", "cpu", "--json"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const auto c = nlohmann::json::parse(cpu.out);
  EXPECT_EQ(c["backend"], "cpu");
  EXPECT_EQ(c["kv_bytes_per_token"], 2 * 3 * 2 * 16 * 4);
  EXPECT_EQ(c["kv_dtype"], "f32");
  EXPECT_EQ(c["kv_budget_source"],
            "gpu_memory_utilization 0.9 x --memory 1G - resident weights - working memory, at "
            "most 2 x max_num_seqs full-context sequences");

  // A GPU planned from --memory: bf16 halves the bytes per token and the resident weights.
  const auto gpu = RunLlmq({"plan", "--model", model_, "--memory", "1G", "--backend", "cuda",
                            "--gpu-memory-utilization", "0.5", "--json"});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto g = nlohmann::json::parse(gpu.out);
  EXPECT_EQ(g["backend"], "cuda (bf16)");
  EXPECT_EQ(g["kv_bytes_per_token"], 2 * 3 * 2 * 16 * 2);
  EXPECT_EQ(g["weights_bytes_resident"].get<int64_t>(), 2 * g["parameters"].get<int64_t>());
  // The CPU's packed fp32 copy: at least 4 bytes a parameter (panels are padded).
  EXPECT_GE(c["weights_bytes_resident"].get<int64_t>(), 4 * c["parameters"].get<int64_t>());
  EXPECT_EQ(g["kv_cache_bytes"].get<int64_t>(),
            (int64_t{1} << 29) - g["weights_bytes_resident"].get<int64_t>());
  EXPECT_NE(g["kv_budget_source"].get<std::string>().find("gpu_memory_utilization 0.5"),
            std::string::npos);
  const int64_t tokens = g["kv_tokens"];
  EXPECT_EQ(tokens, g["kv_blocks"].get<int64_t>() * 16);
  const auto text = RunLlmq(
      {"plan", "--model", model_, "--memory", "1G", "--backend", "cuda", "--precision", "fp32"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("backend            cuda (fp32)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("kv bytes per token 768"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("kv budget from     gpu_memory_utilization"), std::string::npos)
      << text.out;
}

TEST_F(BackendChoiceCli, PlanCountsFp8ProjectionsAtOneByteWithAScalePerChannel) {
  // tiny: hidden 64, intermediate 160, 3 layers, 4 heads / 2 kv heads of 16: per layer the
  // projections hold 64 x (64 + 2 x 32) + 64 x 64 + 3 x 64 x 160 weights over
  // (64 + 2 x 32) + 64 + 2 x 160 + 64 output channels.
  const int64_t proj = 3 * (64 * 128 + 64 * 64 + 3 * 64 * 160), rows = 3 * (128 + 64 + 320 + 64);
  const auto bf16 = RunLlmq({"plan", "--model", model_, "--memory", "1G", "--backend", "cuda",
                             "--precision", "bf16", "--json"});
  const auto fp8 = RunLlmq({"plan", "--model", model_, "--memory", "1G", "--backend", "cuda",
                            "--precision", "fp8", "--json"});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  const auto b = nlohmann::json::parse(bf16.out), f = nlohmann::json::parse(fp8.out);
  EXPECT_EQ(f["backend"], "cuda (fp8)");
  EXPECT_EQ(f["weight_dtype"], "fp8");
  EXPECT_EQ(f["weights_bytes_resident"].get<int64_t>(),
            b["weights_bytes_resident"].get<int64_t>() - proj + 4 * rows);
  // The KV cache stays bf16, and the bytes the weights leave go to it.
  EXPECT_EQ(f["kv_bytes_per_token"], b["kv_bytes_per_token"]);
  EXPECT_EQ(f["kv_cache_bytes"].get<int64_t>() - b["kv_cache_bytes"].get<int64_t>(),
            proj - 4 * rows);
  // --kv-dtype f32 is refused as under bf16: the cache follows the precision.
  const auto f32kv = RunLlmq({"plan", "--model", model_, "--memory", "1G", "--backend", "cuda",
                              "--precision", "fp8", "--kv-dtype", "f32"});
  EXPECT_NE(f32kv.exit_code, 0);
  EXPECT_NE(f32kv.err.find("follows --precision fp8"), std::string::npos) << f32kv.err;
}

}  // namespace
}  // namespace llmq
