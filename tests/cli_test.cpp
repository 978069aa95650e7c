// The real binary end to end: make-model, generate, plan, and clear errors on bad models.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using testing::RunLlmq;

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("cli_model");
    const auto r = RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static std::string model_;
};
std::string CliTest::model_;

TEST_F(CliTest, MakeModelWritesHuggingFaceLayout) {
  for (const char* f : {"config.json", "generation_config.json", "tokenizer_config.json",
                        "model.safetensors", "tokenizer.model"})
    EXPECT_TRUE(fs::exists(fs::path(model_) / f)) << f;
}

TEST_F(CliTest, MakeModelIsDeterministic) {
  const std::string again = testing::TmpDir("cli_model_again");
  ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", again, "--seed", "1"}).exit_code, 0);
  auto bytes = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(bytes(fs::path(model_) / "model.safetensors"),
            bytes(fs::path(again) / "model.safetensors"));
}

TEST_F(CliTest, GenerateJsonIsReproducibleWithASeed) {
  auto gen = [&](const std::string& seed) {
    return RunLlmq({"generate", "--model", model_, "--prompt", "Once upon a time", "--max-tokens",
                    "20", "--temperature", "0.8", "--seed", seed, "--json", "--ignore-eos"});
  };
  const auto a = gen("5"), b = gen("5"), c = gen("6");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const json ja = json::parse(a.out);
  EXPECT_EQ(ja["completion_ids"].size(), 20u);
  EXPECT_EQ(ja["finish_reason"], "length");
  EXPECT_GT(ja["prompt_ids"].size(), 1u);
  EXPECT_EQ(ja["prompt_ids"][0], 1) << "BOS first";
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(json::parse(c.out)["completion_ids"], ja["completion_ids"]);
}

TEST_F(CliTest, GenerateStopsAtMaxTokensAndPrintsText) {
  const auto r = RunLlmq({"generate", "--model", model_, "--prompt", "hello", "--max-tokens", "5",
                          "--temperature", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("completion tokens"), std::string::npos);
}

// --grammar and --json-schema: the output follows them (std::regex and a JSON parse check it),
// a grammar that does not compile is named with its line and column, and one flag at a time.
TEST_F(CliTest, GenerateFollowsAGrammarOrASchema) {
  const std::string dir = testing::CurrentTestDir();
  const std::string g = testing::WriteFileIn(
      dir, "answer.gbnf", "root ::= (\"yes\" | \"no\") \", \" word \".\"\nword ::= [a-z]{1,8}\n");
  const std::string schema = testing::WriteFileIn(
      dir, "n.json",
      R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["n"], "additionalProperties": false})");
  for (const char* seed : {"1", "2", "3"}) {
    auto r = RunLlmq({"generate", "--model", model_, "--prompt", "Answer:", "--max-tokens", "200",
                      "--temperature", "1", "--seed", seed, "--json", "--grammar", g});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["finish_reason"], "stop") << r.out;
    EXPECT_TRUE(
        std::regex_match(j["text"].get<std::string>(), std::regex("(yes|no), [a-z]{1,8}\\.")))
        << r.out;
    r = RunLlmq({"generate", "--model", model_, "--prompt", "Count:", "--max-tokens", "200",
                 "--temperature", "1", "--seed", seed, "--json", "--json-schema", schema});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    j = json::parse(r.out);
    EXPECT_EQ(j["finish_reason"], "stop") << r.out;
    const json doc = json::parse(j["text"].get<std::string>());
    EXPECT_EQ(doc.size(), 1u) << r.out;
    EXPECT_TRUE(doc["n"].is_number_integer() && doc["n"] >= 0 && doc["n"] <= 99) << r.out;
  }
  const std::string bad = testing::WriteFileIn(dir, "bad.gbnf", "root ::= [a-z\n");
  auto r = RunLlmq({"generate", "--model", model_, "--prompt", "x", "--grammar", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(bad + ": line 1, column 14:"), std::string::npos) << r.err;
  r = RunLlmq(
      {"generate", "--model", model_, "--prompt", "x", "--grammar", g, "--json-schema", schema});
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(CliTest, PlanReportsKvBytesPerToken) {
  const auto r = RunLlmq({"plan", "--model", model_, "--memory", "1G", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  // tiny: 3 layers x 2 kv heads x 16 head_dim, fp32: 2*3*2*16*4.
  EXPECT_EQ(j["kv_bytes_per_token"], 2 * 3 * 2 * 16 * 4);
  EXPECT_EQ(j["kv_tokens"].get<int64_t>() % 16, 0);
  const int64_t tokens = j["kv_tokens"];
  const int64_t budget = j["kv_cache_bytes"];
  const int64_t per = j["kv_bytes_per_token"];
  EXPECT_LE(budget, (int64_t{1} << 30) * 9 / 10 - j["weights_bytes_resident"].get<int64_t>());
  EXPECT_LE(tokens * per, budget);
  EXPECT_GT((tokens + 16) * per, budget);
  EXPECT_EQ(j["full_context_sequences"], tokens / 512);
}

TEST_F(CliTest, BadCommandLinesExitTwo) {
  EXPECT_EQ(RunLlmq({"generate", "--model", model_}).exit_code, 2);
  EXPECT_EQ(
      RunLlmq({"generate", "--model", model_, "--prompt", "x", "--max-tokens", "abc"}).exit_code,
      2);
  EXPECT_EQ(RunLlmq({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(RunLlmq({"make-model", "--shape", "nope", "--out", testing::TmpDir("nope")}).exit_code,
            1);
}

// Copies the generated model, lets `breakit` damage the copy, and expects a clean failure whose
// message names `must_name`.
void ExpectBrokenModelFails(const std::string& model, const std::string& name,
                            const std::function<void(const fs::path&)>& breakit,
                            const std::vector<std::string>& must_name) {
  const fs::path dir = testing::TmpDir("broken_" + name);
  fs::copy(model, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  breakit(dir);
  const auto r =
      RunLlmq({"generate", "--model", dir.string(), "--prompt", "hi", "--max-tokens", "2"});
  EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
  for (const std::string& s : must_name)
    EXPECT_NE(r.err.find(s), std::string::npos) << name << ": " << r.err;
}

TEST_F(CliTest, BrokenModelsFailWithAMessageNamingFileAndField) {
  auto rewrite = [](const fs::path& p, const std::function<void(std::string&)>& edit) {
    std::ifstream in(p, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    in.close();
    edit(s);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
  };
  ExpectBrokenModelFails(model_, "truncated",
                         [&](const fs::path& d) {
                           rewrite(d / "model.safetensors",
                                   [](std::string& s) { s.resize(s.size() / 2); });
                         },
                         {"model.safetensors"});
  ExpectBrokenModelFails(model_, "no_hidden",
                         [&](const fs::path& d) {
                           rewrite(d / "config.json", [](std::string& s) {
                             json j = json::parse(s);
                             j.erase("hidden_size");
                             s = j.dump();
                           });
                         },
                         {"config.json", "hidden_size"});
  ExpectBrokenModelFails(model_, "wrong_shape",
                         [&](const fs::path& d) {
                           rewrite(d / "config.json", [](std::string& s) {
                             json j = json::parse(s);
                             j["intermediate_size"] = 128;
                             s = j.dump();
                           });
                         },
                         {"model.safetensors", "mlp"});
  ExpectBrokenModelFails(model_, "no_tokenizer",
                         [&](const fs::path& d) { fs::remove(d / "tokenizer.model"); },
                         {"tokenizer.model"});
  ExpectBrokenModelFails(model_, "bad_tokenizer",
                         [&](const fs::path& d) {
                           rewrite(d / "tokenizer.model",
                                   [](std::string& s) { s = "this is not a sentencepiece model"; });
                         },
                         {"tokenizer.model"});
  ExpectBrokenModelFails(model_, "no_weights",
                         [&](const fs::path& d) { fs::remove(d / "model.safetensors"); },
                         {"model.safetensors"});
}

}  // namespace
}  // namespace llmq
