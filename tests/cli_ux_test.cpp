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
       {"--output", "--errors", "--summary-json", "--max-num-seqs", "256 on the CPU, 1024 on a GPU",
        "2048 on the CPU, 8192 on a GPU", "=auto", "--no-prefix-cache", "--config", "--backend",
        "--precision", "=bf16", "--gpu-memory-utilization", "=0.9"}},
      {"generate", {"--prompt", "--max-tokens", "=64", "--temperature", "--seed", "--json"}},
      {"plan", {"--memory", "--kv-dtype", "--backend", "=auto", "--block-size", "=16"}},
      {"make-model", {"--shape", "llama3-8b", "--out", "--force", "--seed", "--tokenizer-from"}},
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

// --tokenizer-from: the weights are made, the tokenizer is another model's (the Llama 3 one of
// tiny-llama32 here: 128,256 ids), with its special ids; a vocabulary too large for the model and
// a folder without a tokenizer are refused, naming why.
TEST(CliUx, MakeModelTakesAnotherModelsTokenizer) {
  const std::string src = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(src, "tiny-llama32");
  const fs::path dir = testing::CurrentTestDir();
  WriteText(dir / "config.json",
            R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 128256, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
                "torch_dtype": "bfloat16"})");
  const fs::path model = dir / "m";
  const auto made = RunLlmq({"make-model", "--config", (dir / "config.json").string(),
                             "--tokenizer-from", src, "--out", model.string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_FALSE(fs::exists(model / "tokenizer.model"));  // none trained
  EXPECT_EQ(testing::ReadText((model / "tokenizer.json").string()),
            testing::ReadText(src + "/tokenizer.json"));
  EXPECT_EQ(testing::ReadText((model / "tokenizer_config.json").string()),
            testing::ReadText(src + "/tokenizer_config.json"));
  // The same ids for a text and for a conversation (the source's chat template came along).
  for (const std::vector<std::string>& what :
       {std::vector<std::string>{"--text", "Hello world, 2024!"},
        std::vector<std::string>{"--messages", R"([{"role": "user", "content": "Hi"}])"}}) {
    std::vector<std::string> a = {"tokenize", "--json", "--model", model.string()};
    std::vector<std::string> b = {"tokenize", "--json", "--model", src};
    a.insert(a.end(), what.begin(), what.end());
    b.insert(b.end(), what.begin(), what.end());
    const auto ra = RunLlmqWith({}, a), rb = RunLlmqWith({}, b);
    ASSERT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(ra.out, rb.out);
  }
  // The special ids are the tokenizer's, and the model generates.
  const std::string cfg = testing::ReadText((model / "config.json").string());
  const std::string src_cfg = testing::ReadText(src + "/config.json");
  const auto bos = [](const std::string& text) {
    const size_t at = text.find("\"bos_token_id\"");
    return at == std::string::npos ? std::string()
                                   : text.substr(at, text.find_first_of(",}", at) - at);
  };
  EXPECT_FALSE(bos(src_cfg).empty());
  EXPECT_EQ(bos(cfg), bos(src_cfg));
  const auto gen = RunLlmq({"generate", "--model", model.string(), "--prompt", "Hi", "--max-tokens",
                            "2", "--backend", "cpu"});
  EXPECT_EQ(gen.exit_code, 0) << gen.err;

  const auto small = RunLlmq({"make-model", "--shape", "tiny", "--tokenizer-from", src, "--out",
                              (dir / "small").string()});
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(small.err.find("does not fit the model's vocab_size 512"), std::string::npos)
      << small.err;
  const auto none = RunLlmq({"make-model", "--shape", "tiny", "--tokenizer-from", dir.string(),
                             "--out", (dir / "none").string()});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("no tokenizer.json or tokenizer.model"), std::string::npos) << none.err;
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
