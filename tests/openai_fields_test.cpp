// Every OpenAI request field through the real binary (`llmq run` on a generated model): honoured
// fields show their effect in the output lines, fields OpenAI ignores change nothing, refused ones
// become error lines naming the field; and the output details (logprobs in both endpoints' shapes,
// system_fingerprint, response.request_id, completion_tokens_details, message.refusal).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/text/hf_tokenizer.h"
#include "engine/text/tokenizer.h"
#include "jobs/batch_request.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

class OpenAiFieldsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("openai_fields_model");
    ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"})
                  .exit_code,
              0);
    ASSERT_TRUE(Tokenizer::Load(model_, &tok_).ok());
  }
  static void TearDownTestSuite() { tok_.reset(); }

  // A line: chat when `chat`, else completions; greedy, 12 tokens, EOS ignored, plus `extra`.
  static json Line(const std::string& id, bool chat, const json& extra) {
    json body = {{"model", "tiny"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", "Tell me about the old red barn."}}};
    } else {
      body["prompt"] = "The old red barn stood";
    }
    body.update(extra);
    return {{"custom_id", id},
            {"method", "POST"},
            {"url", chat ? "/v1/chat/completions" : "/v1/completions"},
            {"body", body}};
  }

  // Runs the lines; returns the output lines by custom_id.
  static std::map<std::string, json> Run(const std::string& name, const std::vector<json>& lines) {
    const std::string dir = testing::TmpDir(name);
    {
      std::ofstream in(dir + "/in.jsonl");
      for (const json& l : lines) in << l.dump() << "\n";
    }
    const auto r = testing::RunLlmq(
        {"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model_, "--no-progress"});
    EXPECT_TRUE(r.exit_code == 0) << r.err;
    std::map<std::string, json> out;
    for (const json& j : testing::ReadJsonl(dir + "/out.jsonl"))
      out[j["custom_id"].get<std::string>()] = j;
    EXPECT_EQ(out.size(), lines.size());
    return out;
  }
  static const json& Body(const json& line) { return line["response"]["body"]; }
  static std::string Text(const json& line) {
    const json& c = Body(line)["choices"][0];
    return c.contains("message") ? c["message"]["content"].get<std::string>()
                                 : c["text"].get<std::string>();
  }
  // The chat logprobs' chosen tokens, as bytes.
  static std::vector<std::string> TokenBytes(const json& line) {
    std::vector<std::string> out;
    for (const json& t : Body(line)["choices"][0]["logprobs"]["content"]) {
      std::string b;
      for (int x : t["bytes"]) b += static_cast<char>(x);
      out.push_back(b);
    }
    return out;
  }
  // The id of the vocabulary token with these bytes (the first one).
  static int IdOf(const std::string& bytes) {
    for (int id = 0; id < tok_->vocab_size(); ++id)
      if (tok_->TokenBytes(id) == bytes) return id;
    return -1;
  }

  static std::string model_;
  static std::unique_ptr<Tokenizer> tok_;
};
std::string OpenAiFieldsTest::model_;
std::unique_ptr<Tokenizer> OpenAiFieldsTest::tok_;

TEST_F(OpenAiFieldsTest, LogprobsInBothShapesAndOutputDetails) {
  const auto out =
      Run("oai_logprobs",
          {Line("chat", true, {{"logprobs", true}, {"top_logprobs", 3}}),
           Line("chat-n2", true, {{"logprobs", true}, {"n", 2}, {"temperature", 1}, {"seed", 5}}),
           Line("cmpl", false, {{"logprobs", 2}}), Line("plain", true, json::object())});
  for (const auto& [id, line] : out) {
    SCOPED_TRACE(id);
    ASSERT_TRUE(line["error"].is_null()) << line.dump();
    EXPECT_NE(line["response"]["request_id"], line["id"]);
    const json& b = Body(line);
    EXPECT_EQ(b["system_fingerprint"].get<std::string>().rfind("fp_llmq-", 0), 0u);
    EXPECT_EQ(b["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
  }
  // The same model files give the same fingerprint.
  EXPECT_EQ(Body(out.at("chat"))["system_fingerprint"], Body(out.at("cmpl"))["system_fingerprint"]);
  const json& chat = Body(out.at("chat"))["choices"][0];
  EXPECT_TRUE(chat["message"]["refusal"].is_null());
  const json& content = chat["logprobs"]["content"];
  ASSERT_EQ(content.size(), 12u);
  std::string text;
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one; the list is ordered.
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
    EXPECT_EQ(t["top_logprobs"][0]["logprob"], t["logprob"]);
    EXPECT_GE(t["top_logprobs"][0]["logprob"], t["top_logprobs"][1]["logprob"]);
    EXPECT_GE(t["top_logprobs"][1]["logprob"], t["top_logprobs"][2]["logprob"]);
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    for (int x : t["bytes"]) text += static_cast<char>(x);
  }
  // The tokens' bytes spell the completion (invalid UTF-8 as U+FFFD, as the text has it).
  EXPECT_EQ(Utf8Lossy(text), Text(out.at("chat")));
  EXPECT_TRUE(Body(out.at("plain"))["choices"][0]["logprobs"].is_null());
  // n = 2: each sample has its own list; top_logprobs defaults to 0.
  const json& n2 = Body(out.at("chat-n2"))["choices"];
  ASSERT_EQ(n2.size(), 2u);
  for (const json& c : n2) {
    ASSERT_EQ(c["logprobs"]["content"].size(), 12u);
    EXPECT_TRUE(c["logprobs"]["content"][0]["top_logprobs"].empty());
  }
  const json& cmpl = Body(out.at("cmpl"))["choices"][0]["logprobs"];
  ASSERT_EQ(cmpl["tokens"].size(), 12u);
  ASSERT_EQ(cmpl["token_logprobs"].size(), 12u);
  ASSERT_EQ(cmpl["top_logprobs"].size(), 12u);
  ASSERT_EQ(cmpl["text_offset"].size(), 12u);
  EXPECT_EQ(cmpl["text_offset"][0], 0);
  for (size_t i = 0; i < 12; ++i) {
    const json& top = cmpl["top_logprobs"][i];
    EXPECT_GE(top.size(), 2u);
    EXPECT_LE(top.size(), 3u);
    EXPECT_EQ(top[cmpl["tokens"][i].get<std::string>()], cmpl["token_logprobs"][i]);
  }
}

// The table: every field, with what it must do.
TEST_F(OpenAiFieldsTest, EveryFieldIsHonouredIgnoredOrRefusedByName) {
  // First the greedy completions, to know their tokens.
  // Penalties act on repeated tokens: 40 tokens of this model repeat some.
  const json long_run = {{"max_tokens", 40}};
  const auto base = Run(
      "oai_base", {Line("chat", true, {{"logprobs", true}}), Line("cmpl", false, json::object()),
                   Line("chat40", true, long_run), Line("cmpl40", false, long_run)});
  const std::vector<std::string> greedy = TokenBytes(base.at("chat"));
  ASSERT_EQ(greedy.size(), 12u);
  // The greedy chat's first id, from `llmq generate` (logprobs name a token by the text it adds,
  // which may be a U+FFFD many ids share), and its logprob: any other first token's is lower.
  const auto gen = testing::RunLlmq(
      {"generate", "--model", model_, "--messages",
       json{{{"role", "user"}, {"content", "Tell me about the old red barn."}}}.dump(),
       "--max-tokens", "12", "--temperature", "0", "--ignore-eos", "--json"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const json generated = json::parse(gen.out);
  ASSERT_EQ(generated["text"], Text(base.at("chat")));
  const int first = generated["completion_ids"][0];
  auto first_logprob = [](const json& l) -> double {
    return Body(l)["choices"][0]["logprobs"]["content"][0]["logprob"];
  };
  const double greedy_first = first_logprob(base.at("chat"));
  const int forced = IdOf(" barn") >= 0 ? IdOf(" barn") : 300;
  const std::string chat_text = Text(base.at("chat")), cmpl_text = Text(base.at("cmpl"));
  const std::string chat40 = Text(base.at("chat40")), cmpl40 = Text(base.at("cmpl40"));

  struct Case {
    std::string id;
    bool chat;
    json extra;
    std::string refused_field;  // "" for an honoured or ignored one
    std::function<void(const json&)> check;
  };
  auto same = [&](const json& l) {
    EXPECT_EQ(Text(l), Body(l)["object"] == "chat.completion" ? chat_text : cmpl_text);
  };
  auto differs = [&](const json& l) {
    const bool chat = Body(l)["object"] == "chat.completion";
    if (Body(l)["usage"]["completion_tokens"] == 40) {
      EXPECT_NE(Text(l), chat ? chat40 : cmpl40);
    } else {
      EXPECT_NE(Text(l), chat ? chat_text : cmpl_text);
    }
  };
  auto tokens = [](size_t n) {
    return [n](const json& l) { EXPECT_EQ(Body(l)["usage"]["completion_tokens"], n); };
  };
  const std::vector<Case> cases = {
      // Honoured: OpenAI's.
      {"max_tokens", false, {{"max_tokens", 3}}, "", tokens(3)},
      {"max_completion_tokens", true, {{"max_completion_tokens", 4}}, "", tokens(4)},
      {"n",
       true,
       {{"n", 3}, {"temperature", 1}},
       "",
       [](const json& l) { EXPECT_EQ(Body(l)["choices"].size(), 3u); }},
      {"best_of=n",
       false,
       {{"n", 2}, {"best_of", 2}},
       "",
       [](const json& l) { EXPECT_EQ(Body(l)["choices"].size(), 2u); }},
      {"temperature", true, {{"temperature", 1.5}, {"seed", 1}}, "", differs},
      {"presence_penalty", true, {{"presence_penalty", 2}, {"max_tokens", 40}}, "", differs},
      {"frequency_penalty", false, {{"frequency_penalty", 2}, {"max_tokens", 40}}, "", differs},
      {"repetition_penalty", true, {{"repetition_penalty", 2}, {"max_tokens", 40}}, "", differs},
      {"logit_bias-100",
       true,
       {{"logit_bias", {{std::to_string(first), -100}}}, {"logprobs", true}},
       "",
       [&](const json& l) { EXPECT_LT(first_logprob(l), greedy_first); }},
      {"logit_bias+100",
       true,
       {{"logit_bias", {{std::to_string(forced), 100}}}, {"logprobs", true}},
       "",
       [&](const json& l) {
         EXPECT_EQ(TokenBytes(l), std::vector<std::string>(12, tok_->TokenBytes(forced)));
       }},
      {"stop_token_ids",
       true,
       {{"stop_token_ids", {first}}},
       "",
       [](const json& l) {
         EXPECT_EQ(Body(l)["usage"]["completion_tokens"], 1);
         EXPECT_EQ(Body(l)["choices"][0]["finish_reason"], "stop");
       }},
      {"min_tokens",
       true,
       {{"stop_token_ids", {first}}, {"min_tokens", 5}, {"logprobs", true}},
       "",
       [&](const json& l) {
         const auto t = TokenBytes(l);
         EXPECT_GE(t.size(), 6u);
         EXPECT_LT(first_logprob(l), greedy_first);  // `first` was not drawn
       }},
      {"stop",
       false,
       {{"stop", cmpl_text.substr(2, 3)}},
       "",
       [&](const json& l) { EXPECT_EQ(Text(l), cmpl_text.substr(0, 2)); }},
      {"response_format text", true, {{"response_format", {{"type", "text"}}}}, "", same},
      // Structured outputs: the text is a JSON object (complete when "stop", else a prefix).
      {"response_format json_object",
       true,
       {{"response_format", {{"type", "json_object"}}}, {"max_tokens", 60}},
       "",
       [](const json& l) {
         const std::string text = Text(l);
         ASSERT_FALSE(text.empty());
         EXPECT_EQ(text[0], '{') << text;
         if (Body(l)["choices"][0]["finish_reason"] == "stop") {
           EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
         }
       }},
      {"response_format json_schema",
       false,
       {{"response_format",
         {{"type", "json_schema"},
          {"json_schema",
           {{"name", "pick"},
            {"schema",
             {{"type", "object"},
              {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"enum", {1, 22}}}}}},
              {"required", {"n", "ok"}},
              {"additionalProperties", false}}}}}}},
        {"max_tokens", 300}},  // room for JSON's whitespace (32 bytes at most a side)
       "",
       [](const json& l) {
         const std::string text = Text(l);
         ASSERT_EQ(Body(l)["choices"][0]["finish_reason"], "stop") << text;
         const json doc = json::parse(text, nullptr, false);
         ASSERT_TRUE(doc.is_object()) << text;
         EXPECT_EQ(doc.size(), 2u) << text;
         EXPECT_TRUE(doc["ok"].is_boolean()) << text;
         EXPECT_TRUE(doc["n"] == 1 || doc["n"] == 22) << text;
       }},
      {"echo false", false, {{"echo", false}}, "", same},
      {"suffix empty", false, {{"suffix", ""}}, "", same},
      {"stream false", true, {{"stream", false}}, "", same},
      // Ignored, as OpenAI ignores them.
      {"user", true, {{"user", "u-1"}}, "", same},
      {"metadata", true, {{"metadata", {{"k", "v"}}}}, "", same},
      {"store", true, {{"store", true}}, "", same},
      {"service_tier", false, {{"service_tier", "auto"}}, "", same},
      // Refused by name.
      // This model's chat format is a built-in (no syntax for tools).
      {"tools on a built-in template",
       true,
       {{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}},
       "body.tools",
       nullptr},
      {"tool_choice without tools", true, {{"tool_choice", "auto"}}, "body.tool_choice", nullptr},
      {"tool_choice required on a model whose template renders no tools",
       true,
       {{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})},
        {"tool_choice", "required"}},
       "body.tools",
       nullptr},
      {"functions",
       true,
       {{"functions", json::array({{{"name", "f"}}})}},
       "body.functions",
       nullptr},
      {"response_format unenforceable",
       true,
       {{"response_format",
         {{"type", "json_schema"},
          {"json_schema",
           {{"name", "tags"}, {"schema", {{"type", "array"}, {"uniqueItems", true}}}}}}}},
       "body.response_format.json_schema.schema",
       nullptr},
      {"echo", false, {{"echo", true}}, "body.echo", nullptr},
      {"suffix", false, {{"suffix", " the end"}}, "body.suffix", nullptr},
      {"best_of", false, {{"best_of", 3}}, "body.best_of", nullptr},
      {"stream", true, {{"stream", true}}, "body.stream", nullptr},
      {"logprobs 6", false, {{"logprobs", 6}}, "body.logprobs", nullptr},
      {"top_logprobs 21",
       true,
       {{"logprobs", true}, {"top_logprobs", 21}},
       "body.top_logprobs",
       nullptr},
      {"logit_bias id", true, {{"logit_bias", {{"99999", 5}}}}, "body.logit_bias.99999", nullptr},
      {"unknown", true, {{"skip_special_tokens", false}}, "body.skip_special_tokens", nullptr},
  };
  std::vector<json> lines;
  for (const Case& c : cases) lines.push_back(Line(c.id, c.chat, c.extra));
  const auto out = Run("oai_table", lines);
  int line_no = 0;
  for (const Case& c : cases) {
    ++line_no;
    SCOPED_TRACE(c.id);
    const json& l = out.at(c.id);
    if (c.refused_field.empty()) {
      ASSERT_TRUE(l["error"].is_null()) << l.dump();
      EXPECT_EQ(l["response"]["status_code"], 200);
      c.check(l);
    } else {
      // Refused as OpenAI's API refuses a request: its HTTP 400 response, the field as param.
      ASSERT_TRUE(l["error"].is_null()) << l.dump();
      EXPECT_EQ(l["response"]["status_code"], 400) << l.dump();
      const json& e = l["response"]["body"]["error"];
      EXPECT_EQ(e["type"], "invalid_request_error");
      EXPECT_EQ(e["param"], jobs::ParamOfField(c.refused_field)) << l.dump();
      EXPECT_TRUE(e["code"].is_null());
      const std::string msg = e["message"];
      EXPECT_NE(
          msg.find("in.jsonl:" + std::to_string(line_no) + ": field '" + c.refused_field + "'"),
          std::string::npos)
          << msg;
    }
  }
}

}  // namespace
}  // namespace llmq
