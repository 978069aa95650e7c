// What a new user meets on the command line, on the real binary: help for every command with its
// defaults, --version, make-model refusing to overwrite a model, config discovery.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using testing::RunLlmq;
using testing::RunLlmqWith;

void WriteText(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

TEST(CliUx, EveryCommandHasHelpWithItsFlagsAndDefaults) {
  const auto root = RunLlmq({"--help"});
  EXPECT_EQ(root.exit_code, 0);
  for (const char* cmd : {"run", "generate", "plan", "make-model"})
    EXPECT_NE(root.out.find(cmd), std::string::npos) << cmd;
  const std::vector<std::pair<std::string, std::vector<std::string>>> expect = {
      {"run",
       {"--output", "--errors", "--summary-json", "--max-num-seqs", "=256", "=2048", "=auto",
        "--no-prefix-cache", "--config", "--backend", "--precision", "=bf16",
        "--gpu-memory-utilization", "=0.9"}},
      {"generate", {"--prompt", "--max-tokens", "=64", "--temperature", "--seed", "--json"}},
      {"plan", {"--memory", "--kv-dtype", "--backend", "=auto", "--block-size", "=16"}},
      {"make-model", {"--shape", "--out", "--force", "--seed"}},
  };
  for (const auto& [cmd, flags] : expect) {
    const auto r = RunLlmq({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    for (const std::string& f : flags)
      EXPECT_NE(r.out.find(f), std::string::npos) << cmd << " " << f;
  }
  const auto all = RunLlmq({"--help-all"});
  EXPECT_EQ(all.exit_code, 0);
  EXPECT_NE(all.out.find("--kv-cache-memory"), std::string::npos);
  EXPECT_NE(all.out.find("--block-size"), std::string::npos);
}

TEST(CliUx, VersionAndBadFlags) {
  const auto v = RunLlmq({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("llmq ", 0), 0u) << v.out;
  const auto bad = RunLlmq({"run", "in.jsonl", "-o", "out.jsonl", "--no-such-flag"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--no-such-flag"), std::string::npos) << bad.err;
  EXPECT_EQ(RunLlmq({"plan", "--model", "m", "--kv-dtype", "f8"}).exit_code, 2);
}

TEST(CliUx, MakeModelRefusesANonEmptyFolderUnlessForced) {
  const fs::path dir = testing::CurrentTestDir();
  const fs::path model = dir / "m";
  ASSERT_EQ(
      RunLlmq({"make-model", "--shape", "tiny", "--out", model.string(), "--seed", "1"}).exit_code,
      0);
  const auto weights = fs::last_write_time(model / "model.safetensors");
  const auto again =
      RunLlmq({"make-model", "--shape", "tiny", "--out", model.string(), "--seed", "2"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("not empty"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  EXPECT_EQ(fs::last_write_time(model / "model.safetensors"), weights) << "weights were touched";
  const auto forced =
      RunLlmq({"make-model", "--shape", "tiny", "--out", model.string(), "--seed", "2", "--force"});
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  WriteText(dir / "file", "x");
  EXPECT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", (dir / "file").string()}).exit_code,
            1);
}

class ConfigDiscovery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::TmpDir("config_discovery");
    ASSERT_EQ(
        RunLlmq({"make-model", "--shape", "tiny", "--out", dir_ + "/models/tiny", "--seed", "3"})
            .exit_code,
        0);
    // A relative model.path is relative to the config file's folder, not to the working folder.
    WriteText(fs::path(dir_) / "good.yaml", "model:\n  path: models/tiny\n");
    WriteText(fs::path(dir_) / "bad.yaml", "engine:\n  max_num_seqs: 0\n");
    WriteText(fs::path(dir_) / "in.jsonl",
              R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )"
              R"("body": {"prompt": "Once upon", "max_tokens": 3, "temperature": 0}})"
              "\n");
  }
  static std::string dir_;
};
std::string ConfigDiscovery::dir_;

TEST_F(ConfigDiscovery, FlagThenEnvironmentVariable) {
  const std::string in = dir_ + "/in.jsonl", out = dir_ + "/out.jsonl";
  // $LLMQ_CONFIG names the model (relative to the config's folder).
  auto r = RunLlmqWith({"LLMQ_CONFIG=" + dir_ + "/good.yaml"}, {"run", in, "-o", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // --config wins over $LLMQ_CONFIG: the bad one is read and named.
  r = RunLlmqWith({"LLMQ_CONFIG=" + dir_ + "/good.yaml"},
                  {"run", in, "-o", out, "--config", dir_ + "/bad.yaml"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bad.yaml:2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("engine.max_num_seqs"), std::string::npos) << r.err;
  // A missing $LLMQ_CONFIG file is named with the variable.
  r = RunLlmqWith({"LLMQ_CONFIG=" + dir_ + "/nope.yaml"}, {"run", in, "-o", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("LLMQ_CONFIG"), std::string::npos) << r.err;
  // --model overrides the config's model.path.
  r = RunLlmqWith({"LLMQ_CONFIG=" + dir_ + "/good.yaml"},
                  {"run", in, "-o", out, "--model", dir_ + "/nowhere"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace llmq
