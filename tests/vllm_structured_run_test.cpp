// vLLM's structured outputs (structured_outputs {choice | regex | json | json_object} and the older
// guided_choice / guided_regex / guided_json) through the real `llmq run` on a shared family model
// (tiny-qwen3: random weights, so the walk through each grammar is a fuzz test): every choice
// output is one of its strings (some a prefix of another), every regex output matches its
// expression by std::regex (ECMAScript, an implementation of its own), every JSON output parses
// and has the schema's shape, on both endpoints; an expression that cannot be enforced is its
// line's error naming the field, and the other lines run.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
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

// One line of a job in `in`: `body` with max_tokens, temperature 1 and `seed`, asking `ask` + id
// by chat or as a completion.
void WriteLine(std::ostream& in, const std::string& id, bool chat, json body,
               const std::string& ask, int seed, int max_tokens) {
  body["max_tokens"] = max_tokens;
  body["temperature"] = 1.0;
  body["seed"] = seed;
  if (chat)
    body["messages"] = json::array({{{"role", "user"}, {"content", ask + id}}});
  else
    body["prompt"] = ask + id;
  in << json{{"custom_id", id},
             {"method", "POST"},
             {"url", chat ? "/v1/chat/completions" : "/v1/completions"},
             {"body", body}}
            .dump()
     << "\n";
}

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
  for (const char* other : {"aXb (c)", "xxy?", "a.b (c) ", "é!!", "", "x*y"}) {
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
      WriteLine(in, id, chat, std::move(extra), "Classify: ", static_cast<int>(kind.size()), 48);
      kind[id] = k;
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
      if (id == "bad-empty") {
        EXPECT_NE(msg.find("empty string"), std::string::npos) << msg;
      }
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

// A nested list of digits, "[" (item ("," item)*)? "]": Full when `s` is one whole, Prefix when it
// ends before one closes, Bad otherwise (a recursive descent of its own).
enum class ListText { kFull, kPrefix, kBad };
ListText CheckList(const std::string& s) {
  size_t i = 0;
  // One list from s[i]: kFull (i after it), kPrefix (the text ended inside it) or kBad.
  std::function<ListText()> list = [&]() -> ListText {
    if (i == s.size()) return ListText::kPrefix;
    if (s[i++] != '[') return ListText::kBad;
    for (bool first = true;; first = false) {
      if (i == s.size()) return ListText::kPrefix;
      if (s[i] == ']') {
        ++i;
        return ListText::kFull;
      }
      if (!first && s[i++] != ',') return ListText::kBad;
      if (i == s.size()) return ListText::kPrefix;
      if (s[i] >= '0' && s[i] <= '9') {
        ++i;
      } else if (const ListText t = list(); t != ListText::kFull) {
        return t;
      }
    }
  };
  const ListText t = list();
  return t == ListText::kFull && i != s.size() ? ListText::kBad : t;
}

// GBNF and Lark grammars (vLLM's structured_outputs.grammar and guided_grammar, llama.cpp's
// grammar): a regular one (vLLM's documentation's SQL example) and a recursive one (nested lists,
// in GBNF and in Lark) through the real `llmq run`; a grammar with a syntax error is its line's
// error naming the field, the line and the column.
TEST(VllmStructured, GbnfAndLarkGrammarsThroughLlmqRun) {
  const std::string dir = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
  const std::string tmp = testing::CurrentTestDir();
  const std::string sql = R"(root ::= select_statement
select_statement ::= "SELECT " column " from " table " where " condition
column ::= "col_1 " | "col_2 "
table ::= "table_1 " | "table_2 "
condition ::= column "= " number
number ::= "1 " | "2 "
)";
  const std::string lists =
      "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\n"
      "item ::= list | [0-9]\n";
  const std::string lark_lists =  // the same lists, as Lark writes them
      "start: list\nlist: \"[\" [item (\",\" item)*] \"]\"\n?item: list | DIGIT\n"
      "%import common.DIGIT\n";
  std::map<std::string, std::string> kind;  // custom_id -> "sql" | "list" | "bad"
  {
    std::ofstream in(tmp + "/in.jsonl");
    auto write = [&](const std::string& id, const std::string& k, bool chat, json extra) {
      WriteLine(in, id, chat, std::move(extra), "Write: ", static_cast<int>(kind.size()), 40);
      kind[id] = k;
    };
    const char* fields[] = {"structured_outputs", "guided_grammar", "grammar"};
    for (int i = 0; i < 6; ++i) {
      const std::string n = std::to_string(i);
      for (const auto& [k, text] :
           {std::pair{"sql", sql}, std::pair{"list", lists}, std::pair{"lark-list", lark_lists}}) {
        const std::string f = fields[i % 3];
        write(k + ("-" + n), k == std::string("lark-list") ? "list" : k, i % 2 == 0,
              f == "structured_outputs" ? json{{f, {{"grammar", text}}}} : json{{f, text}});
      }
    }
    write("bad-syntax", "bad", true, {{"guided_grammar", "root ::= \"a\"\nitem ::= (\"b\""}});
    write("bad-lark", "bad", false, {{"structured_outputs", {{"grammar", "start: \"a\" ("}}}});
  }
  const auto r = testing::RunLlmq(
      {"run", tmp + "/in.jsonl", "-o", tmp + "/out.jsonl", "--model", dir, "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto by_id = testing::ByCustomId(testing::ReadJsonl(tmp + "/out.jsonl"));
  ASSERT_EQ(by_id.size(), kind.size());
  const std::regex sql_re("SELECT col_[12]  from table_[12]  where col_[12] = [12] ");
  int full_lists = 0;
  for (const auto& [id, k] : kind) {
    SCOPED_TRACE(id);
    const json& o = by_id.at(id);
    if (k == "bad") {
      const std::string msg = testing::ErrorMessage(o);
      const std::string want = id == "bad-syntax"
                                   ? "field 'body.guided_grammar': line 2, column 14: expected ')'"
                                   : "field 'body.structured_outputs.grammar': line 1, column 13: "
                                     "expected ')'";
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
      continue;
    }
    ASSERT_TRUE(o["error"].is_null()) << o.dump();
    const json& c = o["response"]["body"]["choices"][0];
    const std::string text = c.contains("message") ? c["message"]["content"].get<std::string>()
                                                   : c["text"].get<std::string>();
    if (k == "sql") {
      EXPECT_EQ(c["finish_reason"], "stop") << text;
      EXPECT_TRUE(std::regex_match(text, sql_re)) << text;
    } else if (c["finish_reason"] == "stop") {
      EXPECT_EQ(CheckList(text), ListText::kFull) << text;
      ++full_lists;
    } else {  // cut by max_tokens inside a list: what was written can still be completed
      EXPECT_EQ(c["finish_reason"], "length") << text;
      EXPECT_EQ(CheckList(text), ListText::kPrefix) << text;
    }
  }
  EXPECT_GT(full_lists, 0);
}

}  // namespace
}  // namespace llmq
