// `llmq run` end to end with the real binary on a generated model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
using testing::ReadJsonl;
using testing::RunLlmq;

std::string Completion(const std::string& id, const std::string& prompt, int max_tokens) {
  return json{
      {"custom_id", id},
      {"method", "POST"},
      {"url", "/v1/completions"},
      {"body",
       {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}}}}
      .dump();
}

class RunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("run_model");
    ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "2"}).exit_code,
              0);
  }
  static std::string model_;
};
std::string RunTest::model_;

TEST_F(RunTest, TenThousandLinesWithTwentyBadOnesKeepOrderAndNameLineAndField) {
  const std::string dir = testing::TmpDir("run_10k");
  // 20 malformed lines of different kinds, each with the field its error must name.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{not json", "invalid JSON"},
      {"[1, 2, 3]", "JSON object"},
      {R"({"method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})", "custom_id"},
      {R"({"custom_id": 7, "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})",
       "custom_id"},
      {Completion("doc-5", "a duplicate of an earlier id", 2), "duplicate"},
      {R"({"custom_id": "g1", "method": "GET", "url": "/v1/completions", "body": {"prompt": "x"}})",
       "method"},
      {R"({"custom_id": "u1", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}})",
       "url"},
      {R"({"custom_id": "b1", "method": "POST", "url": "/v1/completions"})", "body"},
      {R"({"custom_id": "m1", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}})",
       "body.messages"},
      {R"({"custom_id": "m2", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "wizard", "content": "x"}]}})",
       "body.messages[0].role"},
      {R"({"custom_id": "m3", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": 5}]}})",
       "body.messages[0].content"},
      {R"({"custom_id": "p1", "method": "POST", "url": "/v1/completions", "body": {"max_tokens": 3}})",
       "body.prompt"},
      {R"({"custom_id": "p2", "method": "POST", "url": "/v1/completions", "body": {"prompt": {"a": 1}}})",
       "body.prompt"},
      {R"({"custom_id": "t1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": -4}})",
       "body.max_tokens"},
      {R"({"custom_id": "t2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": "ten"}})",
       "body.max_tokens"},
      {R"({"custom_id": "t3", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "temperature": 9}})",
       "body.temperature"},
      {R"({"custom_id": "t4", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "top_p": 0}})",
       "body.top_p"},
      {R"({"custom_id": "t5", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "n": 0}})",
       "body.n"},
      {R"({"custom_id": "s1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "stream": true}})",
       "body.stream"},
      {Completion("ctx", "too long for the context", 600), "body.max_tokens"},
  };
  ASSERT_EQ(bad.size(), 20u);
  std::ofstream in(dir + "/in.jsonl");
  std::map<int, std::string> bad_at;  // line -> field
  int line = 0, next_bad = 0;
  for (int good = 0; good < 9980;) {
    ++line;
    if (line % 499 == 0 && next_bad < 20) {
      in << bad[next_bad].first << "\n";
      bad_at[line] = bad[next_bad++].second;
      continue;
    }
    in << Completion("doc-" + std::to_string(good),
                     "Story " + std::to_string(good % 97) + ": once upon a time", 2)
       << "\n";
    ++good;
  }
  in.close();
  ASSERT_EQ(next_bad, 20);
  const auto r = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model_,
                          "--summary-json", dir + "/summary.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = ReadJsonl(dir + "/out.jsonl");
  ASSERT_EQ(out.size(), 10000u);
  int errors = 0, good = 0;
  std::set<std::string> ids;
  for (int i = 0; i < 10000; ++i) {
    const json& o = out[i];
    ASSERT_TRUE(ids.insert(o["id"].get<std::string>()).second) << "request ids are unique";
    if (bad_at.count(i + 1)) {
      ++errors;
      ASSERT_TRUE(testing::IsErrorLine(o)) << o;
      const std::string msg = testing::ErrorMessage(o);
      EXPECT_NE(msg.find(":" + std::to_string(i + 1) + ":"), std::string::npos) << msg;
      EXPECT_NE(msg.find(bad_at[i + 1]), std::string::npos) << msg;
    } else {
      ASSERT_TRUE(o["error"].is_null()) << o;
      EXPECT_EQ(o["custom_id"], "doc-" + std::to_string(good++)) << "input order kept";
      EXPECT_EQ(o["response"]["status_code"], 200);
      EXPECT_EQ(o["response"]["body"]["object"], "text_completion");
      EXPECT_EQ(o["response"]["body"]["usage"]["completion_tokens"], 2);
    }
  }
  EXPECT_EQ(errors, 20);
  EXPECT_EQ(good, 9980);
  std::ifstream sf(dir + "/summary.json");
  const json s = json::parse(sf);
  EXPECT_EQ(s["requests"], 10000);
  EXPECT_EQ(s["failed"], 20);
  EXPECT_EQ(s["completion_tokens"], 9980 * 2);
  EXPECT_GT(s["cached_prompt_tokens"], 0);
  for (const char* k :
       {"prompt_tokens", "computed_prompt_tokens", "wall_seconds", "output_tokens_per_second",
        "ttft_seconds_p50", "ttft_seconds_p95", "latency_seconds_p50", "latency_seconds_p95"})
    EXPECT_TRUE(s.contains(k)) << k;
}

TEST_F(RunTest, PrefixFeaturesOffGiveTheSameOutputsAndErrorsCanBeSplit) {
  const std::string dir = testing::TmpDir("run_split");
  std::ofstream in(dir + "/in.jsonl");
  const std::string instructions(300, 'a');
  for (int i = 0; i < 40; ++i) {
    if (i == 7) in << "garbage\n";
    in << json{{"custom_id", "c" + std::to_string(i)},
               {"method", "POST"},
               {"url", "/v1/chat/completions"},
               {"body",
                {{"model", "tiny"},
                 {"max_tokens", 6},
                 {"temperature", 0},
                 {"messages",
                  {{{"role", "system"}, {"content", "Follow these rules: " + instructions}},
                   {{"role", "user"}, {"content", "Document " + std::to_string(i * 7919)}}}}}}}
              .dump()
       << "\n";
  }
  in.close();
  const auto on = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/on.jsonl", "--model", model_,
                           "--errors", dir + "/errors.jsonl"});
  const auto off = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/off.jsonl", "--model", model_,
                            "--no-prefix-cache", "--no-planner"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  ASSERT_EQ(off.exit_code, 0) << off.err;
  const auto a = ReadJsonl(dir + "/on.jsonl"), b = ReadJsonl(dir + "/off.jsonl");
  const auto errs = ReadJsonl(dir + "/errors.jsonl");
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 41u);  // errors in place
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(testing::ErrorMessage(errs[0]).find(":8:"), std::string::npos);
  int cached = 0;
  for (int i = 0, j = 0; i < 40; ++i, ++j) {
    if (j == 7) ++j;  // the error line in `off`
    EXPECT_EQ(a[i]["custom_id"], b[j]["custom_id"]);
    EXPECT_EQ(a[i]["response"]["body"]["choices"][0]["message"]["content"],
              b[j]["response"]["body"]["choices"][0]["message"]["content"]);
    cached +=
        a[i]["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    EXPECT_EQ(b[j]["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  }
  EXPECT_GT(cached, 0);

  // Without shared-prefix attention, profiled: the same outputs; the summary says where the time
  // went and how often the engine preempted.
  const auto plain =
      RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/plain.jsonl", "--model", model_, "--errors",
               dir + "/errors2.jsonl", "--no-shared-prefix-attention", "--profile",
               "--summary-json", dir + "/plain.summary.json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto c = ReadJsonl(dir + "/plain.jsonl");
  ASSERT_EQ(c.size(), 40u);
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(a[i]["response"]["body"]["choices"][0]["message"]["content"],
              c[i]["response"]["body"]["choices"][0]["message"]["content"]);
  const json sum = json::parse(testing::ReadText(dir + "/plain.summary.json"));
  EXPECT_EQ(sum["preemptions"], 0);
  // The KV pool's high-water mark and the blocks that ever held content (cached ones too).
  EXPECT_GT(sum["kv_blocks_peak"].get<int64_t>(), 0);
  EXPECT_GE(sum["kv_blocks_touched"].get<int64_t>(), sum["kv_blocks_peak"].get<int64_t>());
  const json& prof = sum["profile_seconds"];
  for (const char* k : {"schedule", "forward", "sample", "prefill_gemm", "decode_gemm", "attention",
                        "other_forward"})
    EXPECT_TRUE(prof.contains(k)) << k;
  EXPECT_GT(prof["forward"].get<double>(), 0);
  EXPECT_GT(prof["prefill_gemm"].get<double>(), 0);
  EXPECT_GT(prof["attention"].get<double>(), 0);
  EXPECT_LE(prof["prefill_gemm"].get<double>() + prof["decode_gemm"].get<double>() +
                prof["attention"].get<double>(),
            prof["forward"].get<double>());
  EXPECT_LE(prof["forward"].get<double>(), sum["wall_seconds"].get<double>());
}

TEST_F(RunTest, ChatWithoutMaxTokensFitsTheKvCacheAndHugeMaxTokensIsRefused) {
  const std::string dir = testing::TmpDir("run_capacity");
  std::ofstream in(dir + "/in.jsonl");
  in << json{{"custom_id", "chat"},
             {"method", "POST"},
             {"url", "/v1/chat/completions"},
             {"body",
              {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"temperature", 0}}}}
            .dump()
     << "\n"
     << json{{"custom_id", "huge"},
             {"method", "POST"},
             {"url", "/v1/completions"},
             {"body", {{"prompt", "hello"}, {"max_tokens", 2147483647}}}}
            .dump()
     << "\n";
  in.close();
  // 16 blocks of 16 tokens: less than the tiny model's 512-token context.
  const auto r = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model_,
                          "--kv-cache-memory", std::to_string(16 * 16 * 768)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = ReadJsonl(dir + "/out.jsonl");
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0]["error"].is_null()) << out[0];
  const json& usage = out[0]["response"]["body"]["usage"];
  EXPECT_LE(usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>(), 256);
  ASSERT_EQ(out[1]["response"]["status_code"], 400) << out[1];
  EXPECT_EQ(out[1]["response"]["body"]["error"]["param"], "max_tokens") << out[1];
  EXPECT_NE(testing::ErrorMessage(out[1]).find("body.max_tokens"), std::string::npos);
}

TEST_F(RunTest, MissingInputOrModelFailsClearly) {
  const std::string dir = testing::TmpDir("run_missing");
  auto r = RunLlmq({"run", dir + "/nope.jsonl", "-o", dir + "/out.jsonl", "--model", model_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nope.jsonl"), std::string::npos) << r.err;
  r = RunLlmq({"run", dir + "/in.jsonl"});
  EXPECT_EQ(r.exit_code, 2);
}

// The "model" field names the model that ran: the folder's name (a trailing slash too), else
// model.name of the config, else --model-name; never the request's echo.
TEST_F(RunTest, ResponsesNameTheModelThatRanNotTheRequestsModel) {
  const std::string dir = testing::TmpDir("run_model_name");
  {
    // Every line names gpt-4o-mini (one model per file, as OpenAI's Batch API has it), which is
    // not the model that runs; a line naming another model is refused (issue 27).
    std::ofstream in(dir + "/in.jsonl");
    for (const auto& [id, prompt] : {std::pair{"a", "one two"}, std::pair{"b", "three four"}}) {
      json line = json::parse(Completion(id, prompt, 2));
      line["body"]["model"] = "gpt-4o-mini";
      in << line.dump() << "\n";
    }
    in << R"({"custom_id": "bad", "method": "POST", "url": "/v1/completions", "body": {}})"
       << "\n";
    in << Completion("other", "five six", 2) << "\n";  // "model": "tiny"
  }
  std::ofstream(dir + "/named.yaml") << "model:\n  path: " << model_ << "\n  name: night-model\n";
  auto models = [&](const std::string& out) {
    std::vector<std::string> names;
    for (const json& j : ReadJsonl(out))
      if (!testing::IsErrorLine(j)) names.push_back(j["response"]["body"]["model"]);
    return names;
  };
  const std::string folder = std::filesystem::path(model_).filename().string();
  ASSERT_FALSE(folder.empty());
  auto r = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/a.jsonl", "--model", model_ + "/"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(models(dir + "/a.jsonl"), (std::vector<std::string>{folder, folder}));
  std::string other_error;
  for (const json& j : ReadJsonl(dir + "/a.jsonl"))
    if (j["custom_id"] == "other" && testing::IsErrorLine(j)) other_error = j.dump();
  EXPECT_NE(other_error.find("in.jsonl:4: field 'body.model': 'tiny' is not the job's model "
                             "'gpt-4o-mini'"),
            std::string::npos)
      << other_error;
  r = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/b.jsonl", "--config", dir + "/named.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(models(dir + "/b.jsonl"), (std::vector<std::string>{"night-model", "night-model"}));
  r = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/c.jsonl", "--config", dir + "/named.yaml",
               "--model-name", "flag-model", "--summary-json", dir + "/c.summary.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(models(dir + "/c.jsonl"), (std::vector<std::string>{"flag-model", "flag-model"}));
  std::ifstream summary(dir + "/c.summary.json");
  EXPECT_EQ(json::parse(summary)["model"], "flag-model");
}

}  // namespace
}  // namespace llmq
