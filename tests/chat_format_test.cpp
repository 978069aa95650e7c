// engine/text/chat_format.h: which format a model folder gets (its own Jinja template, a built-in,
// the operator's choice), how a Jinja template's text becomes ids on a sentencepiece tokenizer, and
// what a broken or raising template does: at load time through the real binary, naming the file
// and line; at a request, as that line's error naming body.messages.
#include "engine/text/chat_format.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/tools/tokenizer_trainer.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A folder with a trained sentencepiece tokenizer (BOS "<s>" 1, EOS "</s>" 2) and `config` as
// tokenizer_config.json.
class ChatFormatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_dir_ = testing::TmpDir("chat_format_tok");
    ASSERT_TRUE(TrainTokenizer(600, 5, tok_dir_ + "/tokenizer.model").ok());
  }
  std::string Folder(const json& config) {
    const std::string dir = testing::CurrentTestDir();
    std::filesystem::copy_file(tok_dir_ + "/tokenizer.model", dir + "/tokenizer.model");
    WriteText(dir + "/tokenizer_config.json", config.dump());
    EXPECT_TRUE(Tokenizer::Load(dir, &tok_).ok());
    return dir;
  }
  Status Load(const std::string& dir, const std::string& choice = "") {
    return ChatFormat::Load(dir, choice, *tok_, &chat_);
  }
  std::vector<int> E(const std::string& s) { return tok_->EncodeNoBos(s); }

  static std::string tok_dir_;
  std::unique_ptr<Tokenizer> tok_;
  std::shared_ptr<const ChatFormat> chat_;
};
std::string ChatFormatTest::tok_dir_;

const std::vector<Message> kHi = {{"user", "Hi"}};

// The canonical chatml template (as Qwen's, without its tool branches).
const char* kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' "
    "}}{% endif %}";
// A template of no built-in's: BOS and EOS as the config's strings.
const char* kOwn =
    "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content | trim }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

TEST_F(ChatFormatTest, NoTemplateIsLlama2) {
  ASSERT_TRUE(Load(Folder({{"add_bos_token", true}})).ok());
  EXPECT_EQ(chat_->name(), "llama-2");
}

TEST_F(ChatFormatTest, SentencepieceModelWithABuiltinsTemplateGetsTheBuiltin) {
  ASSERT_TRUE(Load(Folder({{"chat_template", kChatml}})).ok());
  EXPECT_EQ(chat_->name(), "chatml");
}

TEST_F(ChatFormatTest, OwnTemplateOnSentencepieceSplitsOutBosAndEos) {
  const std::string dir = Folder({{"chat_template", kOwn},
                                  {"bos_token", "<s>"},
                                  {"eos_token", {{"content", "</s>"}, {"special", true}}}});
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_EQ(chat_->name(), dir + "/tokenizer_config.json:chat_template");
  const std::vector<Message> m = {{"system", " Be brief. "}, {"user", "Hi <s> there"}};
  std::string text;
  ASSERT_TRUE(chat_->Render(m, &text).ok());
  EXPECT_EQ(text, "<s>system: Be brief.</s>user: Hi <s> there</s>assistant:");
  std::vector<int> ids;
  ASSERT_TRUE(chat_->Encode(*tok_, m, &ids).ok());
  // As the slow Llama tokenizer splits on its special tokens: every "<s>" / "</s>" in the rendered
  // text is the control id (the template put the content in the text: HF does the same).
  std::vector<int> want = {1};
  for (int id : E("system: Be brief.")) want.push_back(id);
  want.push_back(2);
  for (int id : E("user: Hi ")) want.push_back(id);
  want.push_back(1);
  for (int id : E(" there")) want.push_back(id);
  want.push_back(2);
  for (int id : E("assistant:")) want.push_back(id);
  EXPECT_EQ(ids, want);
}

TEST_F(ChatFormatTest, ChatTemplateJinjaWinsOverTheConfigAndDefaultOfAList) {
  const std::string dir = Folder({{"bos_token", "<s>"},
                                  {"chat_template",
                                   {{{"name", "tool_use"}, {"template", "TOOLS"}},
                                    {{"name", "default"}, {"template", kOwn}}}}});
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_EQ(chat_->name(), dir + "/tokenizer_config.json:chat_template[default]");
  std::string text;
  ASSERT_TRUE(chat_->Render(kHi, &text).ok());
  // No eos_token in the config: a sentencepiece model's "</s>" (LlamaTokenizer's default).
  EXPECT_EQ(text, "<s>user: Hi</s>assistant:");

  WriteText(dir + "/chat_template.jinja", "[{{ messages[0].content }}]");
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_EQ(chat_->name(), dir + "/chat_template.jinja");
  ASSERT_TRUE(chat_->Render(kHi, &text).ok());
  EXPECT_EQ(text, "[Hi]");
}

// As transformers picks them: a conversation with tools gets the list's "tool_use" template, one
// without the "default"; a broken tool_use template fails Load naming it; it is part of the
// identity. chat_template.jinja has no tool_use beside it.
TEST_F(ChatFormatTest, ConversationsWithToolsGetTheToolUseTemplateOfAList) {
  const auto config = [](const std::string& tool_use) {
    return json{{"chat_template",
                 {{{"name", "default"}, {"template", "D:{{ tools is none }}"}},
                  {{"name", "tool_use"}, {"template", tool_use}}}}};
  };
  const std::string dir = Folder(config("T:{{ tools[0].function.name }}"));
  ASSERT_TRUE(Load(dir).ok());
  const std::string identity = chat_->identity();
  std::string text;
  ASSERT_TRUE(chat_->Render(kHi, &text).ok());
  EXPECT_EQ(text, "D:True");
  const Conversation c{kHi, {R"({"type":"function","function":{"name":"f"}})"}};
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "T:f");

  WriteText(dir + "/tokenizer_config.json", config("T:{{ tools[0] ").dump());
  const Status st = Load(dir);
  EXPECT_NE(st.message().find(dir + "/tokenizer_config.json:chat_template[tool_use]:1"),
            std::string::npos)
      << st.message();
  WriteText(dir + "/tokenizer_config.json", config("T2").dump());
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_NE(chat_->identity(), identity);

  WriteText(dir + "/chat_template.jinja", "J:{{ tools is none }}");
  ASSERT_TRUE(Load(dir).ok());
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "J:False");
}

TEST_F(ChatFormatTest, TheOperatorsChoiceOverridesTheModelsTemplate) {
  const std::string dir = Folder({{"chat_template", kOwn}});
  ASSERT_TRUE(Load(dir, "zephyr").ok());
  EXPECT_EQ(chat_->name(), "zephyr");
  EXPECT_FALSE(Load(dir, "nonsense").ok());
}

TEST_F(ChatFormatTest, IdentityFollowsTheTemplateAndItsTokens) {
  const std::string dir = Folder({{"chat_template", kOwn}, {"bos_token", "<s>"}});
  ASSERT_TRUE(Load(dir).ok());
  const std::string first = chat_->identity();
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_EQ(chat_->identity(), first);
  WriteText(dir + "/tokenizer_config.json",
            json{{"chat_template", std::string(kOwn) + " "}, {"bos_token", "<s>"}}.dump());
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_NE(chat_->identity(), first);
  WriteText(dir + "/tokenizer_config.json",
            json{{"chat_template", kOwn}, {"bos_token", "</s>"}}.dump());
  ASSERT_TRUE(Load(dir).ok());
  EXPECT_NE(chat_->identity(), first);
}

// The template gets the tools and each message's tool calls as JSON values in the order written,
// tool_call_id and name only where a message has them; tools are null without any.
TEST_F(ChatFormatTest, TheTemplateGetsToolsAndToolCallsAsWritten) {
  const char* own =
      "{% if tools is none %}no tools;{% else %}{{ tools | tojson }};{% endif %}"
      "{% for m in messages %}{{ m.role }}:{{ m.content }}"
      "{% if m.tool_calls is defined %} calls {{ m.tool_calls | tojson }}{% endif %}"
      "{% if m.tool_call_id is defined %} for {{ m.tool_call_id }}{% endif %}"
      "{% if m.name is defined %} by {{ m.name }}{% endif %};{% endfor %}";
  ASSERT_TRUE(Load(Folder({{"chat_template", own}})).ok());
  Conversation c;
  c.messages = {
      {"user", "Hi", "", "ann", ""},
      {"assistant", "", "", "",
       R"([{"id":"c1","type":"function","function":{"name":"f","arguments":{"z":1,"a":[true]}}}])"},
      {"tool", "sunny", "c1", "", ""}};
  std::string text;
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text,
            "no tools;user:Hi by ann;assistant: calls [{\"id\": \"c1\", \"type\": \"function\", "
            "\"function\": {\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": [true]}}}];"
            "tool:sunny for c1;");
  c.tools = {
      R"({"type":"function","function":{"name":"f","parameters":{"type":"object","b":1,"a":2}}})"};
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text.substr(0, text.find(';')),
            "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
            "{\"type\": \"object\", \"b\": 1, \"a\": 2}}}]");
  std::vector<int> ids;
  ASSERT_TRUE(chat_->Encode(*tok_, c, &ids).ok());
  EXPECT_EQ(ids, E(text));
}

// A request's chat_template_kwargs (Conversation::template_kwargs) are further variables beside
// the template's own, as written (key order kept); the names llmq sets are not theirs to change.
TEST_F(ChatFormatTest, TheTemplateGetsFurtherVariablesBesideItsOwn) {
  const char* own =
      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{% if enable_thinking is defined and enable_thinking is false %}no thinking;{% endif %}"
      "{% if date_string is defined %}{{ date_string }};{% endif %}"
      "{% if extra is defined %}{{ extra | tojson }};{% endif %}";
  ASSERT_TRUE(Load(Folder({{"chat_template", own}, {"bos_token", "<s>"}})).ok());
  Conversation c{kHi, {}};
  std::string text;
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "user:Hi;");
  c.template_kwargs =
      R"({"enable_thinking":false,"date_string":"1 Dec 2026","extra":{"z":1,"a":2}})";
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "user:Hi;no thinking;1 Dec 2026;{\"z\": 1, \"a\": 2};");
  std::vector<int> ids;
  ASSERT_TRUE(chat_->Encode(*tok_, c, &ids).ok());
  EXPECT_EQ(ids, E(text));
  c.template_kwargs = R"({"enable_thinking":true})";
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "user:Hi;");
  // A variable llmq sets (here the model's bos_token) is refused naming it, not overridden.
  c.template_kwargs = R"({"bos_token":"<x>"})";
  const Status st = chat_->Render(c, &text);
  EXPECT_EQ(st.message().rfind("field 'chat_template_kwargs.bos_token'", 0), 0u) << st.message();
}

// continue_final_message: rendered without the generation prompt, cut right after the final
// message's content, as transformers cuts it: where the template kept the content as written its
// trailing space stays; where it trimmed it, the cut is after the trimmed text. A template that
// does not show the final text is an error of that message.
TEST_F(ChatFormatTest, AContinuedFinalMessageEndsThePrompt) {
  const char* own =
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'user' %}{{ m.content | trim }}"
      "{% else %}{{ m.content }}{% endif %}</{{ m.role }}>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  ASSERT_TRUE(Load(Folder({{"chat_template", own}})).ok());
  Conversation c{{{"user", "List colours."}, {"assistant", "Red, "}}, {}};
  std::string text;
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "<user>List colours.</user><assistant>Red, </assistant><assistant>");
  c.add_generation_prompt = false;
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "<user>List colours.</user><assistant>Red, </assistant>");
  c.continue_final_message = true;
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "<user>List colours.</user><assistant>Red, ");  // the space kept, as written
  std::vector<int> ids;
  ASSERT_TRUE(chat_->Encode(*tok_, c, &ids).ok());
  EXPECT_EQ(ids, E(text));
  // A final user message the template trims: cut after its trimmed text.
  c.messages = {{"user", " Say "}};
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "<user>Say");
  // Its last occurrence: the same text earlier in the conversation does not end the prompt.
  c.messages = {{"user", "Red"}, {"assistant", "Red"}};
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, "<user>Red</user><assistant>Red");
}

// The families' own templates: the continued prompt is the start of the whole conversation's
// (without the generation prompt), ending with the final message's text.
TEST(ChatFormatFamilies, AContinuedFinalMessageIsTheStartOfTheWholeConversation) {
  for (const char* name : {"tiny-qwen3", "tiny-qwen2", "tiny-llama32"}) {
    SCOPED_TRACE(name);
    const std::string dir = testing::SharedModel(name);
    LLMQ_SKIP_WITHOUT_SHARED(dir, name);
    std::unique_ptr<Tokenizer> tok;
    ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
    std::shared_ptr<const ChatFormat> chat;
    ASSERT_TRUE(ChatFormat::Load(dir, "", *tok, &chat).ok());
    Conversation c{
        {{"system", "Answer in JSON."}, {"user", "Colours?"}, {"assistant", "{\"colours\": ["}},
        {}};
    c.add_generation_prompt = false;
    std::string whole, continued;
    ASSERT_TRUE(chat->Render(c, &whole).ok());
    c.continue_final_message = true;
    ASSERT_TRUE(chat->Render(c, &continued).ok());
    EXPECT_LT(continued.size(), whole.size());
    EXPECT_EQ(whole.compare(0, continued.size(), continued), 0) << continued;
    EXPECT_TRUE(continued.ends_with("{\"colours\": [")) << continued;
  }
}

TEST_F(ChatFormatTest, AFinalMessageTheTemplateHidesCannotBeContinued) {
  ASSERT_TRUE(
      Load(Folder({{"chat_template", "{% for m in messages %}[{{ m.role }}]{% endfor %}"}})).ok());
  Conversation c{{{"user", "Hi"}, {"assistant", "Hello"}}, {}};
  c.add_generation_prompt = false;
  c.continue_final_message = true;
  std::string text;
  const Status st = chat_->Render(c, &text);
  EXPECT_EQ(st.message().rfind("field 'messages[1].content': continue_final_message", 0), 0u)
      << st.message();
}

TEST_F(ChatFormatTest, BuiltinsReadNoFurtherVariables) {
  ASSERT_TRUE(Load(Folder({{"chat_template", kChatml}})).ok());
  ASSERT_EQ(chat_->name(), "chatml");
  Conversation c{kHi, {}};
  std::string plain, text;
  ASSERT_TRUE(chat_->Render(c, &plain).ok());
  c.template_kwargs = R"({"enable_thinking":false})";
  ASSERT_TRUE(chat_->Render(c, &text).ok());
  EXPECT_EQ(text, plain);
  // They always open the assistant's turn.
  c.add_generation_prompt = false;
  const Status st = chat_->Render(c, &text);
  EXPECT_EQ(st.message().rfind("field 'add_generation_prompt': the chatml built-in", 0), 0u)
      << st.message();
}

// The built-ins have no syntax for tools: tools, tool calls and tool messages are refused naming
// the field.
TEST_F(ChatFormatTest, BuiltinsRefuseToolsNamingTheField) {
  ASSERT_TRUE(Load(Folder({{"chat_template", kChatml}})).ok());
  ASSERT_EQ(chat_->name(), "chatml");
  std::string text;
  std::vector<int> ids;
  Conversation c{kHi, {R"({"type":"function","function":{"name":"f"}})"}};
  Status st = chat_->Render(c, &text);
  EXPECT_EQ(st.message().rfind("field 'tools': the chatml built-in", 0), 0u) << st.message();
  EXPECT_EQ(chat_->Encode(*tok_, c, &ids).message(), st.message());
  c.tools.clear();
  c.messages = {{"user", "Hi"}, {"assistant", "", "", "", R"([{"id":"c"}])"}};
  st = chat_->Render(c, &text);
  EXPECT_EQ(st.message().rfind("field 'messages[1].tool_calls'", 0), 0u) << st.message();
  c.messages = {{"user", "Hi"}, {"tool", "x", "c1", "", ""}};
  st = chat_->Render(c, &text);
  EXPECT_EQ(st.message().rfind("field 'messages[1].role'", 0), 0u) << st.message();
}

TEST_F(ChatFormatTest, BrokenTemplatesFailLoadNamingFileLineAndConstruct) {
  const struct {
    std::string source, what;
  } cases[] = {
      {"{% for m in messages %}\n{{ m.content }}\n", "endfor"},
      {"line one\n{{ messages | wordcount }}", "wordcount"},
      {"{{ messages[0].content.casefold() }}", "casefold"},
      {"{% if %}", ":1:"},
      {"{{ 'unterminated }}", ":1:"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.source);
    const std::string dir = Folder({{"chat_template", c.source}});
    const Status st = Load(dir);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(dir + "/tokenizer_config.json:chat_template:"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
  }
}

TEST_F(ChatFormatTest, ARaisingTemplateIsAnErrorOfTheMessages) {
  ASSERT_TRUE(Load(Folder({{"chat_template",
                            "{% if messages[0].role != 'system' %}{{ raise_exception('a system "
                            "message must come first') }}{% endif %}ok"}}))
                  .ok());
  std::vector<int> ids = {7};
  const Status st = chat_->Encode(*tok_, kHi, &ids);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("field 'messages': ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("a system message must come first"), std::string::npos);
  std::string text;
  EXPECT_TRUE(chat_->Render(std::vector<Message>{{"system", "s"}}, &text).ok());
  EXPECT_EQ(text, "ok");
}

// Through the binary: a model whose template does not parse is refused before anything runs
// (naming the file and line); a template that raises for one line fails that line only.
TEST(ChatFormatBinaryTest, BrokenTemplateStopsTheRunAndARaisingOneFailsOnlyItsLine) {
  const std::string dir = testing::CurrentTestDir();
  const std::string model = dir + "/model";
  ASSERT_EQ(
      testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model, "--seed", "3"}).exit_code,
      0);
  auto line = [](const std::string& id, const std::string& role) {
    return json{{"custom_id", id},
                {"method", "POST"},
                {"url", "/v1/chat/completions"},
                {"body",
                 {{"messages", {{{"role", role}, {"content", "Hello there"}}}},
                  {"max_tokens", 2},
                  {"temperature", 0}}}}
        .dump();
  };
  WriteText(dir + "/in.jsonl", line("a", "system") + "\n" + line("b", "user") + "\n");

  const std::string config = model + "/tokenizer_config.json";
  WriteText(config, json{{"add_bos_token", true},
                         {"chat_template", "{% for m in messages %}\n{{ m.content | shout }}"}}
                        .dump());
  auto r = testing::RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(config + ":chat_template:2: unsupported filter 'shout'"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.jsonl"));

  WriteText(config, json{{"add_bos_token", true},
                         {"chat_template",
                          "{% if messages[0].role != 'system' %}{{ raise_exception('system "
                          "first') }}{% endif %}{{ messages[0].content }}"}}
                        .dump());
  r = testing::RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> out = testing::ReadJsonl(dir + "/out.jsonl");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(testing::IsErrorLine(out[0])) << out[0];
  // A template that raises refuses the request (HTTP 400), naming body.messages.
  EXPECT_EQ(out[1]["response"]["status_code"], 400) << out[1];
  EXPECT_EQ(out[1]["response"]["body"]["error"]["param"], "messages") << out[1];
  const std::string err = testing::ErrorMessage(out[1]);
  EXPECT_NE(err.find("in.jsonl:2: field 'body.messages': "), std::string::npos) << err;
  EXPECT_NE(err.find("system first"), std::string::npos) << err;
}

}  // namespace
}  // namespace llmq
