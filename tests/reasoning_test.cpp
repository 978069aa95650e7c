// Reasoning output (engine/text/reasoning.h, vLLM's --reasoning-parser): the split of a completion
// into thought and answer for both formats, what a prompt's tail says of the thought, the grammar
// that binds the answer after </think> (StartAfter), and a chat line through the request layer on
// Qwen3's real template (tiny-qwen3): the tail rule that keeps an earlier turn's thought from
// closing this one, the lazy grammar, and the output line's reasoning_content.
#include "engine/text/reasoning.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"
#include "daemon/request_builder.h"
#include "engine/structured/grammar_cache.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;
constexpr ReasoningFormat kQwen3 = ReasoningFormat::kQwen3;
constexpr ReasoningFormat kR1 = ReasoningFormat::kDeepSeekR1;

TEST(Reasoning, NamesAreTheConfigurationsNames) {
  for (const char* name : kReasoningFormatNames) {
    LlmqConfig c;
    ASSERT_TRUE(
        ParseConfig(std::string("model:\n  reasoning_parser: ") + name + "\n", "t.yaml", &c).ok());
    ReasoningFormat f;
    ASSERT_TRUE(ReasoningFormatByName(c.reasoning_parser, &f).ok()) << name;
    EXPECT_EQ(ReasoningFormatName(f), std::string(name));
  }
  ReasoningFormat f;
  const Status st = ReasoningFormatByName("granite", &f);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("qwen3, deepseek_r1"), std::string::npos) << st.message();
}

TEST(Reasoning, ThePromptsLastTagSaysWhereTheThoughtIs) {
  EXPECT_EQ(PromptThoughtOf("<|im_start|>assistant\n"), PromptThought::kNone);
  EXPECT_EQ(PromptThoughtOf("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            PromptThought::kClosed);
  EXPECT_EQ(PromptThoughtOf("<｜Assistant｜><think>\n"), PromptThought::kOpen);
  EXPECT_EQ(PromptThoughtOf("</think> then <think>"), PromptThought::kOpen);
  EXPECT_EQ(PromptThoughtOf("done</think>"), PromptThought::kClosed);
}

// Each case: the text, the prompt's state, and for each format the thought and answer
// (nullopt: null).
struct SplitCase {
  std::string text;
  PromptThought prompt;
  std::optional<std::string> qwen_reasoning, qwen_content, r1_reasoning, r1_content;
};

TEST(Reasoning, SplitsAsVllmsParsers) {
  using std::nullopt;
  using P = PromptThought;
  const SplitCase cases[] = {
      // Thought then answer: the same for both, whatever the prompt said.
      {"<think>\nhmm\n</think>\n\n{\"a\": 1}", P::kNone, "\nhmm\n", "\n\n{\"a\": 1}", "\nhmm\n",
       "\n\n{\"a\": 1}"},
      // The prompt opened the thought: the completion holds only its end.
      {"hmm</think>answer", P::kOpen, "hmm", "answer", "hmm", "answer"},
      // Nothing after the end: no answer.
      {"<think>x</think>", P::kNone, "x", nullopt, "x", nullopt},
      // Only the first </think> ends the thought.
      {"a</think>b</think>c", P::kNone, "a", "b</think>c", "a", "b</think>c"},
      // Cut by max_tokens inside the thought.
      {"<think>\nstill thinking", P::kNone, "\nstill thinking", nullopt, "\nstill thinking",
       nullopt},
      {"still thinking", P::kOpen, "still thinking", nullopt, "still thinking", nullopt},
      // The prompt closed the thought (enable_thinking false): all answer.
      {"{\"a\": 1}", P::kClosed, nullopt, "{\"a\": 1}", nullopt, "{\"a\": 1}"},
      // Neither tag and the model's choice: Qwen3 answered, R1 thought.
      {"plain", P::kNone, nullopt, "plain", "plain", nullopt},
  };
  for (const SplitCase& c : cases) {
    SCOPED_TRACE(c.text);
    const ReasoningSplit q = SplitReasoningWith(kQwen3, c.text, c.prompt);
    EXPECT_EQ(q.reasoning, c.qwen_reasoning);
    EXPECT_EQ(q.content, c.qwen_content);
    const ReasoningSplit r = SplitReasoningWith(kR1, c.text, c.prompt);
    EXPECT_EQ(r.reasoning, c.r1_reasoning);
    EXPECT_EQ(r.content, c.r1_content);
  }
}

TEST(Reasoning, ThePromptIsAskedOnlyForATextWithNeitherTag) {
  int asked = 0;
  auto prompt = [&] {
    ++asked;
    return PromptThought::kClosed;
  };
  EXPECT_EQ(SplitReasoning(kR1, "<think>a</think>b", prompt).content, "b");
  EXPECT_EQ(SplitReasoning(kR1, "a</think>b", prompt).content, "b");
  EXPECT_EQ(SplitReasoning(kR1, "<think>a", prompt).reasoning, "a");
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(SplitReasoning(kR1, "a", prompt).content, "a");  // closed: all answer
  EXPECT_EQ(asked, 1);
}

// The answer's grammar after "</think>": the tag, up to 20 whitespace bytes, then the document.
TEST(Reasoning, StartAfterBindsTheAnswerAfterTheTag) {
  const std::string dir = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  auto trie = std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok));
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(json::parse(R"({"type": "object", "properties": {"a":
      {"type": "integer"}}, "required": ["a"], "additionalProperties": false})"),
                                &g)
                  .ok());
  StartAfter("</think>", &g);
  std::shared_ptr<CompiledGrammar> c;
  ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), trie, &c).ok());
  auto accepts = [&](const std::string& text, bool complete) {
    Matcher m(c);
    return m.Consume(text) && (!complete || m.CanEnd());
  };
  EXPECT_TRUE(accepts("</think>{\"a\": 1}", true));
  EXPECT_TRUE(accepts("</think>\n\n{\"a\": 12}", true));
  EXPECT_TRUE(accepts("</think>\n", false));
  EXPECT_FALSE(accepts("</think>\n", true));
  EXPECT_FALSE(accepts("</think>x", false));
  EXPECT_FALSE(accepts("{\"a\": 1}", false));
  EXPECT_FALSE(accepts("</think>" + std::string(21, ' ') + "{", false));

  // The cache keeps the grammar after a text apart from the plain one, and compiles each once.
  GrammarCache cache(tok.get());
  std::shared_ptr<CompiledGrammar> plain, after, again;
  ASSERT_TRUE(cache.JsonObject(&plain).ok());
  ASSERT_TRUE(cache.JsonObject(&after, "</think>").ok());
  ASSERT_TRUE(cache.JsonObject(&again, "</think>").ok());
  EXPECT_NE(plain, after);
  EXPECT_EQ(after, again);
  EXPECT_EQ(cache.stats().compiled, 2);
  Matcher m(after);
  EXPECT_TRUE(m.Consume("</think> {}") && m.CanEnd());
  EXPECT_FALSE(Matcher(plain).Consume("</think>"));
}

// Qwen3's real template through the request layer.
class ReasoningLines : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::SharedModel("tiny-qwen3");
    LLMQ_SKIP_WITHOUT_SHARED(dir_, "tiny-qwen3");
    ASSERT_TRUE(LoadModel(dir_, BackendChoice{}, &model_).ok());
    ASSERT_TRUE(ChatFormat::Load(dir_, "", *model_.tokenizer, &ctx_.chat).ok());
    ctx_.model = &model_;
    ctx_.capacity = 1024;
    ctx_.grammars = std::make_shared<GrammarCache>(model_.tokenizer.get());
    ctx_.tool_format = ToolCallFormat::kHermes;
    ctx_.reasoning = kQwen3;
  }
  jobs::BatchRequest Line(const json& body) {
    const json line{
        {"custom_id", "x"}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}};
    jobs::BatchRequest r = jobs::ParseBatchLine(line.dump(), 1, "in.jsonl");
    EXPECT_EQ(r.error, "");
    return r;
  }
  std::string dir_;
  Model model_;
  BuildContext ctx_;
};

const json kSchema = json::parse(R"({"type": "json_schema", "json_schema": {"name": "n",
    "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})");

TEST_F(ReasoningLines, TheGrammarWaitsForTheThoughtUnlessThePromptClosedIt) {
  const json user = json::array({{{"role", "user"}, {"content", "Give a."}}});
  jobs::BatchRequest thinking = Line({{"messages", user}, {"response_format", kSchema}});
  EXPECT_EQ(PromptThoughtFor(ctx_, thinking), PromptThought::kNone);
  Request req;
  ASSERT_TRUE(BuildRequest(ctx_, thinking, "in.jsonl", "job", &req).ok());
  ASSERT_NE(req.grammar, nullptr);
  EXPECT_EQ(req.grammar_trigger, "</think>");
  EXPECT_FALSE(req.grammar_trigger_at_start);
  Matcher m(req.grammar);
  EXPECT_TRUE(m.Consume("</think>\n\n{\"a\": 3}") && m.CanEnd());

  jobs::BatchRequest closed = Line({{"messages", user},
                                    {"response_format", kSchema},
                                    {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(PromptThoughtFor(ctx_, closed), PromptThought::kClosed);
  ASSERT_TRUE(BuildRequest(ctx_, closed, "in.jsonl", "job", &req).ok());
  EXPECT_EQ(req.grammar_trigger, "");
  Matcher eager(req.grammar);
  EXPECT_TRUE(eager.Consume("{\"a\": 3}") && eager.CanEnd());

  // Without a parser the grammar binds from the first token, as before.
  BuildContext plain = ctx_;
  plain.reasoning.reset();
  ASSERT_TRUE(BuildRequest(plain, thinking, "in.jsonl", "job", &req).ok());
  EXPECT_EQ(req.grammar_trigger, "");
}

// A tool loop: the earlier assistant turn's thought is kept in the prompt (it follows the last
// user query), so the whole prompt's last tag is </think>; the tail, this turn's opening, has none.
TEST_F(ReasoningLines, AnEarlierTurnsThoughtDoesNotCloseThisOne) {
  const json messages = json::parse(R"([
    {"role": "user", "content": "Weather in Bern?"},
    {"role": "assistant", "content": "<think>\nI should call the tool.\n</think>\n\n",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                     "arguments": "{\"city\": \"Bern\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "12 C"}])");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  jobs::BatchRequest r =
      Line({{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}});
  std::string prompt;
  ASSERT_TRUE(ctx_.chat->Render(ChatConversation(r), &prompt).ok());
  ASSERT_EQ(PromptThoughtOf(prompt), PromptThought::kClosed) << prompt;
  EXPECT_EQ(PromptThoughtFor(ctx_, r), PromptThought::kNone);
  Request req;
  ASSERT_TRUE(BuildRequest(ctx_, r, "in.jsonl", "job", &req).ok());
  EXPECT_EQ(req.grammar_trigger, "</think>");
  EXPECT_EQ(req.grammar_trigger_after, "");
  // Under "auto" the calls' own trigger, looked for after the thought; the prompt closing the
  // thought looks for it from the first token.
  jobs::BatchRequest autos = Line({{"messages", messages}, {"tools", tools}});
  Request auto_req;
  ASSERT_TRUE(BuildRequest(ctx_, autos, "in.jsonl", "job", &auto_req).ok());
  EXPECT_EQ(auto_req.grammar_trigger, "<tool_call>");
  EXPECT_EQ(auto_req.grammar_trigger_after, "</think>");
  autos = Line({{"messages", messages},
                {"tools", tools},
                {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_TRUE(BuildRequest(ctx_, autos, "in.jsonl", "job", &auto_req).ok());
  EXPECT_EQ(auto_req.grammar_trigger_after, "");
  Matcher m(req.grammar);
  EXPECT_TRUE(m.Consume("</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                        "{\"city\": \"Bern\"}}\n</tool_call>") &&
              m.CanEnd());
}

TEST_F(ReasoningLines, TheOutputLineCarriesTheThoughtApart) {
  const json user = json::array({{{"role", "user"}, {"content", "Give a."}}});
  const jobs::BatchRequest r = Line({{"messages", user}});
  RequestOutput o;
  o.id = "x";
  Completion c;
  c.text = "<think>\nhmm\n</think>\n\nThe answer.";
  c.finish_reason = "stop";
  o.completions.push_back(c);
  c.text = "no tags at all";  // Qwen3: the model answered without thinking
  o.completions.push_back(c);
  auto message = [&](const BuildContext& ctx, int i) {
    return json::parse(
        OutputLine(ctx, r, o, "req", 0))["response"]["body"]["choices"][i]["message"];
  };
  EXPECT_EQ(message(ctx_, 0)["reasoning_content"], "\nhmm\n");
  EXPECT_EQ(message(ctx_, 0)["content"], "\n\nThe answer.");
  EXPECT_TRUE(message(ctx_, 1)["reasoning_content"].is_null());
  EXPECT_EQ(message(ctx_, 1)["content"], "no tags at all");
  BuildContext r1 = ctx_;
  r1.reasoning = kR1;  // R1 thought until it was cut
  EXPECT_EQ(message(r1, 1)["reasoning_content"], "no tags at all");
  EXPECT_TRUE(message(r1, 1)["content"].is_null());
  BuildContext plain = ctx_;
  plain.reasoning.reset();
  EXPECT_FALSE(message(plain, 0).contains("reasoning_content"));
  EXPECT_EQ(message(plain, 0)["content"], o.completions[0].text);
}

// The whole chain through the real binary: model.reasoning_parser in the configuration, and a job
// of a schema line whose prompt closed the thought (the answer is JSON from the first token), one
// whose model is made to end its thought at once (logit_bias on </think>: the grammar takes over
// there, past it), and a free line; every message carries reasoning_content.
TEST(ReasoningRun, AJobSplitsTheThoughtAndBindsTheAnswer) {
  const std::string dir = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
  const std::string tmp = testing::CurrentTestDir();
  const json schema = json::parse(R"({"type": "json_schema", "json_schema": {"name": "n",
      "schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0,
      "maximum": 9}}, "required": ["a"], "additionalProperties": false}}})");
  const json user = json::array({{{"role", "user"}, {"content", "Give a."}}});
  auto line = [&](const std::string& id, json body) {
    body["messages"] = user;
    body["temperature"] = 0;
    if (!body.contains("max_tokens")) body["max_tokens"] = 40;
    return json{
        {"custom_id", id}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}}
        .dump();
  };
  {
    std::ofstream in(tmp + "/in.jsonl");
    in << line("closed", {{"response_format", schema},
                          {"chat_template_kwargs", {{"enable_thinking", false}}}})
       << "\n"
       << line("ended", {{"response_format", schema}, {"logit_bias", {{"151668", 100}}}}) << "\n"
       << line("free", {{"max_tokens", 6}})
       << "\n"
       // The "ended" line as a Response: the thought a reasoning item, the answer a message.
       << json{{"custom_id", "ended-responses"},
               {"method", "POST"},
               {"url", "/v1/responses"},
               {"body",
                {{"input", "Give a."},
                 {"temperature", 0},
                 {"max_output_tokens", 40},
                 {"logit_bias", {{"151668", 100}}},
                 {"text",
                  {{"format",
                    {{"type", "json_schema"},
                     {"name", "n"},
                     {"schema", schema["json_schema"]["schema"]}}}}}}}}
              .dump()
       << "\n";
    std::ofstream(tmp + "/llmq.yaml") << "model:\n  reasoning_parser: qwen3\n";
  }
  const auto r = testing::RunLlmq({"run", tmp + "/in.jsonl", "-o", tmp + "/out.jsonl", "--model",
                                   dir, "--config", tmp + "/llmq.yaml", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, nlohmann::json> by_id =
      testing::ByCustomId(testing::ReadJsonl(tmp + "/out.jsonl"));
  ASSERT_EQ(by_id.size(), 4u);
  auto choice = [&](const std::string& id) { return by_id[id]["response"]["body"]["choices"][0]; };
  // Closed by the prompt: all answer, the schema's from the first token.
  const json closed = choice("closed");
  EXPECT_TRUE(closed["message"]["reasoning_content"].is_null()) << closed.dump();
  ASSERT_TRUE(closed["message"]["content"].is_string()) << closed.dump();
  const json doc = json::parse(closed["message"]["content"].get<std::string>());
  EXPECT_TRUE(doc["a"].is_number_integer()) << closed.dump();
  EXPECT_EQ(closed["finish_reason"], "stop");
  // Ended at once: an empty thought, then the schema's document (whitespace may come first).
  const json ended = choice("ended");
  EXPECT_EQ(ended["message"]["reasoning_content"], "") << ended.dump();
  ASSERT_TRUE(ended["message"]["content"].is_string()) << ended.dump();
  const json ended_doc = json::parse(ended["message"]["content"].get<std::string>());
  EXPECT_EQ(ended_doc.size(), 1u) << ended.dump();
  EXPECT_TRUE(ended_doc["a"].is_number_integer()) << ended.dump();
  EXPECT_EQ(ended["finish_reason"], "stop");
  // The thought's tokens: </think> alone; none where the prompt closed it.
  EXPECT_EQ(
      by_id["ended"]["response"]["body"]["usage"]["completion_tokens_details"]["reasoning_tokens"],
      1);
  EXPECT_EQ(
      by_id["closed"]["response"]["body"]["usage"]["completion_tokens_details"]["reasoning_tokens"],
      0);
  // The Response of the same line: its thought apart, its answer the same document.
  const json resp = by_id["ended-responses"]["response"]["body"];
  ASSERT_EQ(resp["output"].size(), 2u) << resp.dump();
  EXPECT_EQ(resp["output"][0]["type"], "reasoning");
  ASSERT_EQ(resp["output"][0]["content"].size(), 1u) << resp.dump();
  EXPECT_EQ(resp["output"][0]["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], "");
  EXPECT_EQ(resp["output"][1]["type"], "message");
  EXPECT_EQ(resp["output"][1]["content"][0]["text"], ended["message"]["content"]);
  EXPECT_EQ(resp["status"], "completed");
  EXPECT_EQ(resp["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
  // Free: the key is there, whatever the random weights wrote.
  EXPECT_TRUE(choice("free")["message"].contains("reasoning_content")) << by_id["free"].dump();
}

}  // namespace
}  // namespace llmq
