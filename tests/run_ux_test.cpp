// What a user meets with `llmq run`, on the real binary: outputs checked before anything is
// computed, inputs and outputs that must not collide, standard input and output, failures caused by
// the operator's settings, live progress, a summary with queue time, TTFT, ITL and latency apart,
// and request ids unique across runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::vector<json> ParseJsonl(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

class RunUxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TmpDir("run_ux");
    model_ = dir_ + "/model";
    ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "5"}).exit_code,
              0);
    in_ = dir_ + "/in.jsonl";
    std::ofstream in(in_);
    for (int i = 0; i < 8; ++i)
      in << json{{"custom_id", "r" + std::to_string(i)},
                 {"method", "POST"},
                 {"url", "/v1/completions"},
                 {"body",
                  {{"prompt", "Once upon a time " + std::to_string(i)},
                   {"max_tokens", 24},
                   {"temperature", 0},
                   {"ignore_eos", true}}}}
                .dump()
         << "\n";
  }
  static std::string dir_, model_, in_;
};
std::string RunUxTest::dir_, RunUxTest::model_, RunUxTest::in_;

TEST_F(RunUxTest, UnwritableOutputsAreFoundBeforeAnythingIsComputed) {
  fs::create_directories(dir_ + "/a-folder");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir_ + "/missing/out.jsonl", "No such file or directory"},
      {dir_ + "/a-folder", "folder"},
      {"/dev/null/x", "Not a directory"},
  };
  for (const auto& [out, why] : cases) {
    const auto r = RunLlmq({"run", in_, "-o", out, "--model", model_, "--no-progress"});
    EXPECT_EQ(r.exit_code, 1) << out;
    EXPECT_NE(r.err.find(out), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("requests"), std::string::npos) << "nothing may run: " << r.err;
  }
  // The same for --errors and --summary-json.
  auto r = RunLlmq({"run", in_, "-o", dir_ + "/ok.jsonl", "--errors", dir_ + "/missing/e.jsonl",
                    "--model", model_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing/e.jsonl"), std::string::npos) << r.err;
  r = RunLlmq({"run", in_, "-o", dir_ + "/ok.jsonl", "--summary-json", "/dev/null/s.json",
               "--model", model_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(dir_ + "/ok.jsonl"));
}

TEST_F(RunUxTest, OutputEqualToInputOrErrorsEqualToOutputIsRefused) {
  const std::string before = ReadText(in_);
  auto r = RunLlmq({"run", in_, "-o", in_, "--model", model_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("input"), std::string::npos) << r.err;
  // Another spelling of the same file is caught too.
  r = RunLlmq({"run", in_, "-o", dir_ + "/./in.jsonl", "--model", model_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(ReadText(in_), before);
  r = RunLlmq(
      {"run", in_, "-o", dir_ + "/o.jsonl", "--errors", dir_ + "/o.jsonl", "--model", model_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--errors"), std::string::npos) << r.err;
}

TEST_F(RunUxTest, StandardInputAndOutputAndDevStdoutInPlace) {
  const auto file = RunLlmq({"run", in_, "-o", dir_ + "/file.jsonl", "--model", model_});
  ASSERT_EQ(file.exit_code, 0) << file.err;
  const auto expected = ParseJsonl(ReadText(dir_ + "/file.jsonl"));
  ASSERT_EQ(expected.size(), 8u);
  for (const std::string& out : {std::string("-"), std::string("/dev/stdout")}) {
    const auto r = RunLlmqWith({}, {"run", "-", "-o", out, "--model", model_}, in_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = ParseJsonl(r.out);
    ASSERT_EQ(got.size(), 8u) << out;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i]["response"]["body"]["choices"], expected[i]["response"]["body"]["choices"]);
    EXPECT_TRUE(fs::is_symlink("/dev/stdout") || fs::is_character_file("/dev/stdout"))
        << "/dev/stdout must never be replaced";
  }
}

TEST_F(RunUxTest, AFailureCausedByTheSettingsNamesTheSettingAndExitsNonZero) {
  const auto r = RunLlmq(
      {"run", in_, "-o", dir_ + "/kv.jsonl", "--model", model_, "--kv-cache-memory", "100"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no request succeeded"), std::string::npos) << r.err;
  const auto out = ParseJsonl(ReadText(dir_ + "/kv.jsonl"));
  ASSERT_EQ(out.size(), 8u);
  for (const json& o : out) {
    const std::string msg = testing::ErrorMessage(o);
    EXPECT_NE(msg.find("--kv-cache-memory"), std::string::npos) << msg;
    // Refused (HTTP 400), and no field of the request is at fault.
    EXPECT_EQ(o["response"]["status_code"], 400) << o;
    EXPECT_TRUE(o["response"]["body"]["error"]["param"].is_null()) << o;
    EXPECT_EQ(msg.find("body.max_tokens"), std::string::npos) << msg;
  }
}

TEST_F(RunUxTest, ProgressCountsTokensBeforeAnyRequestFinishes) {
  const auto r = RunLlmq({"run", in_, "-o", dir_ + "/p.jsonl", "--model", model_, "--progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Progress lines are separated by carriage returns.
  const std::regex line(R"((\d+)/8 requests \| (\d+) tokens)");
  bool tokens_before_first_finish = false, final_count = false;
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), line), end; it != end; ++it) {
    const int done = std::stoi((*it)[1]), tokens = std::stoi((*it)[2]);
    tokens_before_first_finish |= done == 0 && tokens > 0;
    final_count |= done == 8 && tokens == 8 * 24;
  }
  EXPECT_TRUE(tokens_before_first_finish) << r.err;
  EXPECT_TRUE(final_count) << r.err;
}

TEST_F(RunUxTest, SummarySeparatesQueueTtftItlAndLatencyAndNamesThePaths) {
  const auto r = RunLlmq({"run", in_, "-o", dir_ + "/s.jsonl", "--model", model_, "--summary-json",
                          dir_ + "/s.json", "--max-num-seqs", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json s = json::parse(ReadText(dir_ + "/s.json"));
  for (const char* k : {"queue_seconds", "ttft_seconds", "itl_seconds", "latency_seconds"}) {
    const std::string p50 = std::string(k) + "_p50", p95 = std::string(k) + "_p95";
    ASSERT_TRUE(s.contains(p50) && s.contains(p95)) << k << " " << s.dump(2);
    EXPECT_GE(s[p95].get<double>(), s[p50].get<double>()) << k;
  }
  // Two sequences at a time: the last requests wait in the queue, and latency covers it. (Only
  // what holds however long the steps take: the exact metrics are engine_service_test's, on a
  // manual clock, and their percentiles finalizer_test's.)
  EXPECT_GT(s["queue_seconds_p95"].get<double>(), 0);
  EXPECT_GT(s["itl_seconds_p50"].get<double>(), 0);
  EXPECT_GE(s["latency_seconds_p95"].get<double>(), s["queue_seconds_p95"].get<double>());
  EXPECT_EQ(s["model"], "model");
  EXPECT_EQ(s["input"], in_);
  EXPECT_EQ(s["output"], dir_ + "/s.jsonl");
  EXPECT_EQ(s["requests"], 8);
  EXPECT_EQ(s["completed"], 8);
}

TEST_F(RunUxTest, RequestIdsAreUniqueAcrossRunsStartedTogether) {
  const auto a = RunLlmq({"run", in_, "-o", dir_ + "/ida.jsonl", "--model", model_});
  const auto b = RunLlmq({"run", in_, "-o", dir_ + "/idb.jsonl", "--model", model_});
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  std::set<std::string> ids;
  for (const char* f : {"/ida.jsonl", "/idb.jsonl"})
    for (const json& o : ParseJsonl(ReadText(dir_ + f))) {
      EXPECT_TRUE(ids.insert(o["id"].get<std::string>()).second) << o["id"];
      EXPECT_TRUE(ids.insert(o["response"]["body"]["id"].get<std::string>()).second);
    }
  EXPECT_EQ(ids.size(), 32u);
}

}  // namespace
}  // namespace llmq::testing
