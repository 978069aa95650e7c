// Tool calls (engine/structured/tool_calls.h): each format's grammar accepts the calls as the
// families' chat templates render them (byte for byte: the text a model trained on them writes)
// and refuses undeclared names, arguments outside their schema, a second call without
// parallel_tool_calls and any other text; a tool's "$ref"s still find its $defs once embedded;
// a parameters schema that cannot be enforced is refused naming the tool; the parser reads back
// what the grammar accepts (arguments as json.dumps writes them) and reports malformed text
// (never a crash, on every prefix of valid calls); formats are recognised from the shared family
// models' real templates.
#include "engine/structured/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine/structured/matcher.h"
#include "engine/text/chat_template.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

const char* const kWeather = R"({"type": "object", "properties": {"city": {"type": "string"},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["city"],
    "additionalProperties": false})";
const char* const kOrder = R"({"type": "object", "$defs": {"item": {"type": "object",
    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku",
    "qty"], "additionalProperties": false}}, "properties": {"items": {"type": "array", "items":
    {"$ref": "#/$defs/item"}}}, "required": ["items"], "additionalProperties": false})";

std::vector<ToolSchema> Tools() {
  return {{"get_weather", kWeather}, {"place_order", kOrder}, {"ping", ""}};
}

class Calls {
 public:
  Calls(ToolCallFormat f, std::vector<ToolSchema> tools, bool parallel) {
    Grammar g;
    const Status st = BuildToolCallGrammar({f, std::move(tools), parallel}, &g);
    EXPECT_TRUE(st.ok()) << st.message();
    if (st.ok()) {
      const Status c = CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c_);
      EXPECT_TRUE(c.ok()) << c.message();
    }
  }
  bool Accepts(const std::string& text) const {
    if (c_ == nullptr) return false;
    Matcher m(c_);
    return m.Consume(text) && m.CanEnd();
  }
  bool AcceptsPrefix(const std::string& text) const {
    if (c_ == nullptr) return false;
    Matcher m(c_);
    return m.Consume(text);
  }

 private:
  std::shared_ptr<CompiledGrammar> c_;
};

// The calls as Qwen2.5's / Qwen3's template renders an assistant's tool_calls.
const std::string kHermesOne =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
    "3}}\n</tool_call>";
const std::string kHermesTwo =
    kHermesOne +
    "\n<tool_call>\n{\"name\": \"place_order\", \"arguments\": {\"items\": [{\"sku\": \"A-1\", "
    "\"qty\": 2}]}}\n</tool_call>";

TEST(ToolCallsTest, HermesGrammarTakesTheTemplatesCallsAndNothingElse) {
  const Calls parallel(ToolCallFormat::kHermes, Tools(), true);
  EXPECT_TRUE(parallel.Accepts(kHermesOne));
  EXPECT_TRUE(parallel.Accepts(kHermesTwo));
  EXPECT_TRUE(
      parallel.Accepts("<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_TRUE(parallel.AcceptsPrefix("<tool_call>\n{\"name\": \"get_"));
  EXPECT_FALSE(parallel.Accepts(  // undeclared
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(parallel.Accepts(  // days past its maximum
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
      "15}}\n</tool_call>"));
  EXPECT_FALSE(parallel.Accepts(  // the required city missing
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>"));
  EXPECT_FALSE(parallel.Accepts(  // ping takes no arguments
      "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"x\": 1}}\n</tool_call>"));
  EXPECT_FALSE(parallel.Accepts(  // the $ref'd item's qty must be an integer
      "<tool_call>\n{\"name\": \"place_order\", \"arguments\": {\"items\": [{\"sku\": \"A\", "
      "\"qty\": \"2\"}]}}\n</tool_call>"));
  EXPECT_FALSE(parallel.AcceptsPrefix("Sure! <tool_call>"));
  EXPECT_FALSE(parallel.Accepts(kHermesOne + " done"));
  EXPECT_FALSE(parallel.Accepts(""));
  const Calls one(ToolCallFormat::kHermes, Tools(), false);
  EXPECT_TRUE(one.Accepts(kHermesOne));
  EXPECT_FALSE(one.Accepts(kHermesTwo));
  const Calls named(ToolCallFormat::kHermes, {{"place_order", kOrder}}, true);
  EXPECT_FALSE(named.Accepts(kHermesOne));
  EXPECT_TRUE(named.Accepts(kHermesTwo.substr(kHermesOne.size() + 1)));
}

TEST(ToolCallsTest, LlamaAndMistralGrammars) {
  const std::string llama_one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  const std::string llama_two = llama_one + "; {\"name\": \"ping\", \"parameters\": {}}";
  const Calls llama(ToolCallFormat::kLlama3Json, Tools(), true);
  EXPECT_TRUE(llama.Accepts(llama_one));
  EXPECT_TRUE(llama.Accepts(llama_two));
  EXPECT_FALSE(llama.Accepts("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"));
  EXPECT_FALSE(Calls(ToolCallFormat::kLlama3Json, Tools(), false).Accepts(llama_two));
  const std::string mistral =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 1}}, "
      "{\"name\": \"ping\", \"arguments\": {}}]";
  const Calls m(ToolCallFormat::kMistral, Tools(), true);
  EXPECT_TRUE(m.Accepts(mistral));
  EXPECT_FALSE(m.Accepts("[TOOL_CALLS][]"));
  EXPECT_FALSE(m.Accepts("[{\"name\": \"ping\", \"arguments\": {}}]"));
  const Calls m1(ToolCallFormat::kMistral, Tools(), false);
  EXPECT_FALSE(m1.Accepts(mistral));
  EXPECT_TRUE(m1.Accepts("[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]"));
}

TEST(ToolCallsTest, ParametersThatCannotBeEnforcedAreRefusedNamingTheTool) {
  Grammar g;
  const Status st =
      BuildToolCallGrammar({ToolCallFormat::kHermes,
                            {{"a", kWeather}, {"b", R"({"type": "array", "uniqueItems": true})"}},
                            true},
                           &g);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("tools[1].function.parameters: keyword \"uniqueItems\""),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(
      BuildToolCallGrammar({ToolCallFormat::kHermes, {{"a", "{not json"}}, true}, &g).ok());
  EXPECT_FALSE(BuildToolCallGrammar({ToolCallFormat::kHermes, {}, true}, &g).ok());
}

TEST(ToolCallsTest, ParsedCallsAreWhatTheGrammarTook) {
  std::vector<ToolCall> calls;
  ASSERT_TRUE(ParseToolCalls(ToolCallFormat::kHermes, kHermesTwo, &calls).ok());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(calls[1].name, "place_order");
  EXPECT_EQ(calls[1].arguments, R"({"items": [{"sku": "A-1", "qty": 2}]})");
  // Whitespace as a model may write it, and arguments written compactly, still parse.
  ASSERT_TRUE(ParseToolCalls(ToolCallFormat::kHermes,
                             "<tool_call>{\"name\":\"ping\",\"arguments\":{\"a\":\"}\\\"{\"}}"
                             "</tool_call>\n",
                             &calls)
                  .ok());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"({"a": "}\"{"})");
  ASSERT_TRUE(ParseToolCalls(ToolCallFormat::kLlama3Json,
                             "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": [1, 2]}}; "
                             "{\"name\": \"b\", \"arguments\": {}}",
                             &calls)
                  .ok());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].name, "b");
  ASSERT_TRUE(ParseToolCalls(ToolCallFormat::kMistral,
                             "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"q\": \"é\"}}]",
                             &calls)
                  .ok());
  EXPECT_EQ(calls[0].arguments, R"({"q": "é"})");
  const std::vector<std::pair<ToolCallFormat, std::string>> bad = {
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"a\"}\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n[1]\n</tool_call>"},
      {ToolCallFormat::kHermes, kHermesOne + " and some text"},
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {}, \"x\": 1}"
       "\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {,}}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {}} trailing"},
      {ToolCallFormat::kLlama3Json, "I will call {\"name\": \"a\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": \"{}\"}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][]"},
  };
  for (const auto& [f, text] : bad) {
    const Status st = ParseToolCalls(f, text, &calls);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_TRUE(calls.empty()) << text;
  }
  // Every cut of valid calls (what a length-limited sample leaves): refused as a whole message;
  // as a cut one, the whole calls before the cut (refused when there is none); none crashes.
  const size_t first_end = kHermesOne.size();
  for (size_t n = 0; n < kHermesTwo.size(); ++n) {
    const std::string text = kHermesTwo.substr(0, n);
    const Status whole = ParseToolCalls(ToolCallFormat::kHermes, text, &calls);
    EXPECT_EQ(whole.ok(), n == first_end || n == first_end + 1) << n;  // "\n" after it: space
    const Status st = ParseToolCalls(ToolCallFormat::kHermes, text, &calls, /*cut=*/true);
    EXPECT_EQ(st.ok(), n >= first_end) << n;
    EXPECT_EQ(calls.size(), n >= first_end ? 1u : 0u) << n;
  }
  const std::string llama = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"param";
  ASSERT_TRUE(ParseToolCalls(ToolCallFormat::kLlama3Json, llama, &calls, true).ok());
  EXPECT_EQ(calls.size(), 1u);
  EXPECT_FALSE(ParseToolCalls(ToolCallFormat::kLlama3Json, llama, &calls).ok());
  // Mistral's list, cut anywhere: whole only when closed; the whole calls before a cut.
  const std::string mistral =
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"s\": \"],\"}}, "
      "{\"name\": \"b\", \"arguments\": {}}]";
  const size_t one = mistral.find("}}") + 2;
  for (size_t n = 0; n <= mistral.size(); ++n) {
    const std::string text = mistral.substr(0, n);
    EXPECT_EQ(ParseToolCalls(ToolCallFormat::kMistral, text, &calls).ok(), n == mistral.size())
        << n;
    const Status st = ParseToolCalls(ToolCallFormat::kMistral, text, &calls, /*cut=*/true);
    EXPECT_EQ(st.ok(), n >= one) << n;
    EXPECT_EQ(calls.size(), n >= mistral.size() - 1 ? 2u : n >= one ? 1u : 0u) << n;
  }
  for (const char* text :
       {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}} x",
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}] x", "[TOOL_CALLS][ ]"})
    EXPECT_FALSE(ParseToolCalls(ToolCallFormat::kMistral, text, &calls, true).ok()) << text;
}

TEST(ToolCallsTest, FormatsByNameAndFromTheFamiliesTemplates) {
  ToolCallFormat f;
  ASSERT_TRUE(ToolCallFormatByName("llama3_json", &f).ok());
  EXPECT_EQ(f, ToolCallFormat::kLlama3Json);
  // What model.tool_call_format accepts (config/config.cpp's list) is what is known here.
  for (const char* name : {"hermes", "llama3_json", "mistral"}) {
    LlmqConfig c;
    ASSERT_TRUE(
        ParseConfig(std::string("model:\n  tool_call_format: ") + name + "\n", "t.yaml", &c).ok());
    ASSERT_TRUE(ToolCallFormatByName(c.tool_call_format, &f).ok()) << name;
    EXPECT_STREQ(ToolCallFormatName(f), name);
  }
  LlmqConfig c;
  EXPECT_FALSE(ParseConfig("model:\n  tool_call_format: pythonic\n", "t.yaml", &c).ok());
  const Status st = ToolCallFormatByName("pythonic", &f);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("hermes, llama3_json, mistral"), std::string::npos);
  for (const char* m : {"tiny-qwen3", "tiny-qwen2", "tiny-llama32"}) {
    const std::string dir = testing::SharedModel(m);
    LLMQ_SKIP_WITHOUT_SHARED(dir, m);
    std::string origin;
    const std::string src = ReadTemplateSource(dir, &origin);
    ASSERT_FALSE(src.empty()) << m;
    bool found = false;
    const ToolCallFormat got = RecognizeToolCallFormat(src, &found);
    if (std::string(m) == "tiny-llama32") {
      EXPECT_FALSE(found) << "Llama 3.0's template renders no tools";
    } else {
      EXPECT_TRUE(found) << m;
      EXPECT_EQ(got, ToolCallFormat::kHermes) << m;
    }
  }
  bool found = false;
  EXPECT_EQ(RecognizeToolCallFormat("{{ '<|python_tag|>' }}", &found), ToolCallFormat::kLlama3Json);
  EXPECT_TRUE(found);
  EXPECT_EQ(RecognizeToolCallFormat("{{ '[TOOL_CALLS]' }}", &found), ToolCallFormat::kMistral);
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace llmq
