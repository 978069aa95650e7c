// vLLM's structured outputs (structured_outputs {choice | regex | json | json_object} and the older
// guided_choice / guided_regex / guided_json) through the real `llmq run` on a shared family model
// (tiny-qwen3: random weights, so the walk through each grammar is a fuzz test): every choice
// output is one of its strings (some a prefix of another), every regex output matches its
// expression by std::regex (ECMAScript, an implementation of its own), every JSON output parses
// and has the schema's shape, on both endpoints; an expression that cannot be enforced is its
// line's error naming the field, and the other lines run.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "daemon/request_builder.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

// Choices are matched as written, whatever characters they hold (the pattern escapes each), and
// one that is a prefix of another may end the output or go on.
TEST(VllmStructured, ChoicesAreMatchedAsWritten) {
  const std::string dir = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
  Model model;
  ASSERT_TRUE(LoadModel(dir, BackendChoice{}, &model).ok());
  BuildContext ctx;
  ctx.model = &model;
  ctx.capacity = 1024;
  ASSERT_TRUE(ChatFormat::Load(dir, "", *model.tokenizer, &ctx.chat).ok());
  ctx.grammars = std::make_shared<GrammarCache>(model.tokenizer.get());
  const std::vector<std::string> choices = {"a.b (c)", "x*y?", "[tag] {j} 1-2 /s\\",
                                            "\t^$|+",  "é",    "é!"};
  const json line{{"custom_id", "c"},
                  {"method", "POST"},
                  {"url", "/v1/completions"},
                  {"body", {{"prompt", "p"}, {"guided_choice", choices}}}};
  const jobs::BatchRequest r = jobs::ParseBatchLine(line.dump(), 1, "in.jsonl");
  ASSERT_EQ(r.error, "");
  Request req;
  const Status st = BuildRequest(ctx, r, "in.jsonl", "job", &req);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (const std::string& c : choices) {
    Matcher m(req.grammar);
    EXPECT_TRUE(m.Consume(c) && m.CanEnd()) << c;
  }
  for (const std::string& other : {"aXb (c)", "xxy?", "a.b (c) ", "é!!", "", "x*y"}) {
    Matcher m(req.grammar);
    EXPECT_FALSE(m.Consume(other) && m.CanEnd()) << other;
  }
}

TEST(VllmStructuredRun, EveryOutputFollowsItsChoiceRegexOrSchema) {
  const std::string dir = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
  const std::string tmp = testing::CurrentTestDir();
  const std::vector<std::string> choices = {"positive", "negative", "neutral",
                                            "positive but hedged"};
  const std::string regex = "[0-9]{3}-[A-Z]{2}( ok)?";
  const json schema = json::parse(R"({"type": "object", "properties": {"label": {"enum": ["a",
      "b"]}, "score": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["label",
      "score"], "additionalProperties": false})");
  std::map<std::string, std::string> kind;  // custom_id -> "choice" | "regex" | "json" | "bad"
  {
    std::ofstream in(tmp + "/in.jsonl");
    auto write = [&](const std::string& id, const std::string& k, bool chat, json extra) {
      json body = std::move(extra);
      body["max_tokens"] = 48;
      body["temperature"] = 1.0;
      body["seed"] = static_cast<int>(kind.size());
      if (chat)
        body["messages"] = json::array({{{"role", "user"}, {"content", "Classify: " + id}}});
      else
        body["prompt"] = "Classify: " + id;
      kind[id] = k;
      in << json{{"custom_id", id},
                 {"method", "POST"},
                 {"url", chat ? "/v1/chat/completions" : "/v1/completions"},
                 {"body", body}}
                .dump()
         << "\n";
    };
    for (int i = 0; i < 8; ++i) {
      const bool chat = i % 2 == 0;
      const std::string n = std::to_string(i);
      write("choice-" + n, "choice", chat,
            i < 4 ? json{{"guided_choice", choices}}
                  : json{{"structured_outputs", {{"choice", choices}}}});
      write(
          "regex-" + n, "regex", chat,
          i < 4 ? json{{"guided_regex", regex}} : json{{"structured_outputs", {{"regex", regex}}}});
      write("json-" + n, "json", chat,
            i < 4 ? json{{"guided_json", schema}}
                  : json{{"structured_outputs", {{"json", schema.dump()}}}});
    }
    write("bad-lookahead", "bad", true, {{"guided_regex", "(?=a)b"}});
    write("bad-empty", "bad", false, {{"structured_outputs", {{"regex", "a*"}}}});
  }
  const auto r = testing::RunLlmq(
      {"run", tmp + "/in.jsonl", "-o", tmp + "/out.jsonl", "--model", dir, "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto by_id = testing::ByCustomId(testing::ReadJsonl(tmp + "/out.jsonl"));
  ASSERT_EQ(by_id.size(), kind.size());
  const std::regex re(regex);
  for (const auto& [id, k] : kind) {
    SCOPED_TRACE(id);
    const json& o = by_id.at(id);
    if (k == "bad") {
      const std::string msg = testing::ErrorMessage(o);
      const char* field = id == "bad-lookahead" ? "field 'body.guided_regex'"
                                                : "field 'body.structured_outputs.regex'";
      EXPECT_NE(msg.find(field), std::string::npos) << msg;
      if (id == "bad-empty") EXPECT_NE(msg.find("empty string"), std::string::npos) << msg;
      continue;
    }
    ASSERT_TRUE(o["error"].is_null()) << o.dump();
    const json& c = o["response"]["body"]["choices"][0];
    const std::string text = c.contains("message") ? c["message"]["content"].get<std::string>()
                                                   : c["text"].get<std::string>();
    // Every grammar here closes within the budget.
    EXPECT_EQ(c["finish_reason"], "stop") << text;
    if (k == "choice") {
      EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
    } else if (k == "regex") {
      EXPECT_TRUE(std::regex_match(text, re)) << text;
    } else {
      const json doc = json::parse(text);
      EXPECT_EQ(doc.size(), 2u) << text;
      EXPECT_TRUE(doc["label"] == "a" || doc["label"] == "b") << text;
      EXPECT_TRUE(doc["score"].is_number_integer() && doc["score"] >= 0 && doc["score"] <= 9)
          << text;
    }
  }
}

}  // namespace
}  // namespace llmq
