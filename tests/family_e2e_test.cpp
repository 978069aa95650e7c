// The shared models of real families (tiny-qwen3, tiny-qwen2, tiny-llama32: random weights, real
// tokenizer.json and chat templates) end to end through the real binary, against their references
// (Hugging Face's tokenizer and template, a float64 forward): `llmq tokenize` gives every
// reference's prompt_ids (and its rendered text for a chat), `llmq generate` its greedy
// completion, and `llmq run` a job of all of them with the model's own template and no flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct Reference {
  std::string name;  // the file's stem: plain, chat, chat_system, ...
  json j;
  bool chat() const { return j.contains("messages"); }
};

std::vector<Reference> References(const std::string& dir) {
  std::vector<Reference> refs;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "reference")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream f(e.path());
    refs.push_back({e.path().stem().string(), json::parse(f)});
  }
  std::sort(refs.begin(), refs.end(),
            [](const Reference& a, const Reference& b) { return a.name < b.name; });
  return refs;
}

class FamilyEndToEnd : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = testing::SharedModel(GetParam());
    LLMQ_SKIP_WITHOUT_SHARED(dir_, GetParam());
    refs_ = References(dir_);
    ASSERT_FALSE(refs_.empty()) << dir_ << "/reference has no references";
  }
  // One line per (custom_id, url, body) through `llmq run` on the model; its output lines.
  struct Line {
    std::string id, url;
    json body;
  };
  std::vector<json> RunJob(const std::vector<Line>& lines) {
    const std::string tmp = testing::CurrentTestDir();
    {
      std::ofstream in(tmp + "/in.jsonl");
      for (const Line& l : lines)
        in << json{{"custom_id", l.id}, {"method", "POST"}, {"url", l.url}, {"body", l.body}}.dump()
           << "\n";
    }
    const auto r = testing::RunLlmq(
        {"run", tmp + "/in.jsonl", "-o", tmp + "/out.jsonl", "--model", dir_, "--no-progress"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::ReadJsonl(tmp + "/out.jsonl");
  }
  std::string dir_;
  std::vector<Reference> refs_;
};

TEST_P(FamilyEndToEnd, TokenizeReproducesEveryPromptAndRenderedChat) {
  for (const Reference& ref : refs_) {
    SCOPED_TRACE(ref.name);
    const auto r =
        ref.chat()
            ? testing::RunLlmq(
                  {"tokenize", "--model", dir_, "--json", "--messages", ref.j["messages"].dump()})
            : testing::RunLlmq({"tokenize", "--model", dir_, "--json", "--text", ref.j["prompt"]});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["ids"], ref.j["prompt_ids"]);
    if (ref.chat()) {
      EXPECT_EQ(out["rendered"], ref.j["rendered"]);
    }
  }
}

TEST_P(FamilyEndToEnd, GenerateReproducesEveryGreedyCompletion) {
  for (const Reference& ref : refs_) {
    SCOPED_TRACE(ref.name);
    const std::string max_tokens = std::to_string(ref.j["max_tokens"].get<int>());
    const auto r =
        ref.chat()
            ? testing::RunLlmq({"generate", "--model", dir_, "--json", "--temperature", "0",
                                "--max-tokens", max_tokens, "--messages", ref.j["messages"].dump()})
            : testing::RunLlmq({"generate", "--model", dir_, "--json", "--temperature", "0",
                                "--max-tokens", max_tokens, "--prompt", ref.j["prompt"]});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["prompt_ids"], ref.j["prompt_ids"]);
    // Both end with the stop token when one stopped the completion (as vLLM's token_ids).
    EXPECT_EQ(out["completion_ids"], ref.j["completion_ids"]);
    EXPECT_EQ(out["finish_reason"], ref.j["finish_reason"]);
    EXPECT_EQ(out["text"], ref.j["completion_text"]);
  }
}

// A job of every reference (chat lines rendered by the model's own template: no flag, no config),
// each line twice (the second shares the whole prompt with the first: a prefix-cache hit must not
// change a greedy completion).
TEST_P(FamilyEndToEnd, RunUsesTheModelsOwnTemplateAndCountsItsPromptTokens) {
  std::vector<Line> lines;
  for (const Reference& ref : refs_) {
    for (int copy = 0; copy < 2; ++copy) {
      json body{{"model", "anything"}, {"max_tokens", ref.j["max_tokens"]}, {"temperature", 0}};
      if (ref.chat())
        body["messages"] = ref.j["messages"];
      else
        body["prompt"] = ref.j["prompt"];
      lines.push_back({ref.name + "-" + std::to_string(copy),
                       ref.chat() ? "/v1/chat/completions" : "/v1/completions", body});
    }
  }
  const std::vector<json> out = RunJob(lines);
  ASSERT_EQ(out.size(), 2 * refs_.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const Reference& ref = refs_[i / 2];
    SCOPED_TRACE(out[i]["custom_id"].get<std::string>());
    ASSERT_TRUE(out[i]["error"].is_null()) << out[i]["error"].dump();
    const json& body = out[i]["response"]["body"];
    const json& choice = body["choices"][0];
    EXPECT_EQ(body["usage"]["prompt_tokens"], ref.j["prompt_ids"].size());
    EXPECT_EQ(body["usage"]["completion_tokens"], ref.j["completion_ids"].size());
    EXPECT_EQ(choice["finish_reason"], ref.j["finish_reason"]);
    EXPECT_EQ(ref.chat() ? choice["message"]["content"] : choice["text"], ref.j["completion_text"]);
    EXPECT_EQ(body["model"], fs::path(dir_).filename().string());
  }
}

// vLLM's chat_template_kwargs reach the model's own template, in `llmq tokenize` and in a job:
// Qwen3's template (tiny-qwen2 carries one too) closes an empty thought after the generation prompt
// for enable_thinking false; Llama 3.2's reads no such variable. A line that tries to set one of
// llmq's own variables is that line's error, naming the key; the others run.
TEST_P(FamilyEndToEnd, ChatTemplateKwargsReachTheModelsTemplate) {
  const json messages = json::array({{{"role", "user"}, {"content", "Name three colours."}}});
  const json kwargs = {{"enable_thinking", false}};
  const auto plain =
      testing::RunLlmq({"tokenize", "--model", dir_, "--json", "--messages", messages.dump()});
  const auto with = testing::RunLlmq({"tokenize", "--model", dir_, "--json", "--messages",
                                      messages.dump(), "--chat-template-kwargs", kwargs.dump()});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(with.exit_code, 0) << with.err;
  const json p = json::parse(plain.out), w = json::parse(with.out);
  const std::string thought_closed = "<think>\n\n</think>\n\n";
  std::ifstream config(dir_ + "/tokenizer_config.json");
  const std::string source = json::parse(config).value("chat_template", "");
  ASSERT_FALSE(source.empty());
  if (source.find("enable_thinking is false") != std::string::npos) {  // Qwen3's
    EXPECT_EQ(w["rendered"], p["rendered"].get<std::string>() + thought_closed);
    EXPECT_GT(w["ids"].size(), p["ids"].size());
  } else {
    EXPECT_EQ(w["rendered"], p["rendered"]);
  }
  const json bad = {{"enable_thinking", false}, {"add_generation_prompt", false}};
  std::vector<Line> lines;
  for (const json* k : {static_cast<const json*>(nullptr), &kwargs, &bad}) {
    json body{{"model", "m"}, {"max_tokens", 2}, {"messages", messages}};
    if (k) body["chat_template_kwargs"] = *k;
    lines.push_back({k == nullptr   ? "plain"
                     : k == &kwargs ? "with"
                                    : "bad",
                     "/v1/chat/completions", body});
  }
  const std::vector<json> out = RunJob(lines);
  ASSERT_EQ(out.size(), 3u);
  std::map<std::string, json> by_id = testing::ByCustomId(out);
  EXPECT_EQ(by_id["plain"]["response"]["body"]["usage"]["prompt_tokens"], p["ids"].size());
  EXPECT_EQ(by_id["with"]["response"]["body"]["usage"]["prompt_tokens"], w["ids"].size());
  EXPECT_NE(testing::ErrorMessage(by_id["bad"])
                .find("field 'body.chat_template_kwargs.add_generation_prompt'"),
            std::string::npos)
      << by_id["bad"].dump();
}

// continue_final_message through a job: the prompt ends inside the assistant's message (fewer
// tokens than the whole conversation's with the generation prompt) and the completion continues
// it; without add_generation_prompt false the line is its own error.
TEST_P(FamilyEndToEnd, AJobContinuesTheFinalMessage) {
  const json messages = json::parse(
      R"([{"role": "user", "content": "Colours?"}, {"role": "assistant", "content": "Red and"}])");
  json cont{{"model", "m"},
            {"max_tokens", 3},
            {"messages", messages},
            {"add_generation_prompt", false},
            {"continue_final_message", true}};
  json whole{{"model", "m"}, {"max_tokens", 3}, {"messages", messages}};
  json bad = cont;
  bad.erase("add_generation_prompt");
  const std::vector<json> out = RunJob({{"cont", "/v1/chat/completions", cont},
                                        {"whole", "/v1/chat/completions", whole},
                                        {"bad", "/v1/chat/completions", bad}});
  ASSERT_EQ(out.size(), 3u);
  std::map<std::string, json> by_id = testing::ByCustomId(out);
  ASSERT_TRUE(by_id["cont"]["error"].is_null()) << by_id["cont"].dump();
  const json& usage = by_id["cont"]["response"]["body"]["usage"];
  EXPECT_LT(usage["prompt_tokens"], by_id["whole"]["response"]["body"]["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage["completion_tokens"], 3);
  EXPECT_NE(testing::ErrorMessage(by_id["bad"]).find("field 'body.continue_final_message'"),
            std::string::npos)
      << by_id["bad"].dump();
}

INSTANTIATE_TEST_SUITE_P(SharedModels, FamilyEndToEnd,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "tiny-llama32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace llmq
