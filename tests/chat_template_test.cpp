// Tests for engine/text/chat_template.h: the four built-in templates rendered as their Hugging Face
// Jinja templates render them, encoded with control ids where BOS/EOS/markers go (stories260K's
// tokenizer, and one trained here with <|im_start|>-style pieces), role errors, and detection of
// the template from tokenizer_config.json.
#include "engine/text/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/tools/tokenizer_trainer.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<Message> OneTurn() {
  return {{"user", "Hello"}};
}
std::vector<Message> OneTurnSystem() {
  return {{"system", "Be brief."}, {"user", "Hello"}};
}
std::vector<Message> MultiTurn() {
  return {{"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "Tell a story."}};
}
std::vector<Message> MultiTurnSystem() {
  std::vector<Message> m = MultiTurn();
  m.insert(m.begin(), {"system", "You are kind."});
  return m;
}

std::string Render(ChatTemplate t, const std::vector<Message>& m, bool add_bos = false) {
  std::string text;
  const Status st = RenderChat(t, m, add_bos, &text);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return text;
}

std::vector<int> Cat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// --- names
// ----------------------------------------------------------------------------------------

TEST(ChatTemplateTest, NamesRoundTrip) {
  for (ChatTemplate t : {ChatTemplate::kLlama2, ChatTemplate::kMistral, ChatTemplate::kChatml,
                         ChatTemplate::kZephyr}) {
    ChatTemplate back = ChatTemplate::kZephyr;
    ASSERT_TRUE(ChatTemplateByName(ChatTemplateName(t), &back).ok()) << ChatTemplateName(t);
    EXPECT_EQ(back, t);
  }
  EXPECT_STREQ(ChatTemplateName(ChatTemplate::kLlama2), "llama-2");
  ChatTemplate t;
  const Status st = ChatTemplateByName("vicuna", &t);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vicuna"), std::string::npos);
  EXPECT_NE(st.message().find("llama-2, mistral, chatml, zephyr"), std::string::npos);
}

// --- rendering
// ------------------------------------------------------------------------------------

TEST(ChatTemplateTest, RendersLlama2) {
  EXPECT_EQ(Render(ChatTemplate::kLlama2, OneTurn()), "<s>[INST] Hello [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kLlama2, OneTurnSystem()),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kLlama2, MultiTurn()),
            "<s>[INST] Hi [/INST] Hello! How can I help? </s><s>[INST] Tell a story. [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kLlama2, MultiTurnSystem()),
            "<s>[INST] <<SYS>>\nYou are kind.\n<</SYS>>\n\nHi [/INST] Hello! How can I help? "
            "</s><s>[INST] Tell a story. [/INST]");
}

TEST(ChatTemplateTest, Llama2StripsContentAsItsTemplateDoes) {
  // content.strip() of each message (after the system block is prepended to the first).
  EXPECT_EQ(
      Render(ChatTemplate::kLlama2, {{"user", "  Hi \n"}, {"assistant", "\tYo  "}, {"user", "x "}}),
      "<s>[INST] Hi [/INST] Yo </s><s>[INST] x [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kLlama2, {{"system", " S "}, {"user", " U "}}),
            "<s>[INST] <<SYS>>\n S \n<</SYS>>\n\n U [/INST]");
}

TEST(ChatTemplateTest, RendersMistral) {
  EXPECT_EQ(Render(ChatTemplate::kMistral, OneTurn()), "<s>[INST] Hello [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kMistral, OneTurnSystem()),
            "<s>[INST] Be brief.\n\nHello [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kMistral, MultiTurn()),
            "<s>[INST] Hi [/INST]Hello! How can I help?</s>[INST] Tell a story. [/INST]");
  EXPECT_EQ(Render(ChatTemplate::kMistral, MultiTurnSystem()),
            "<s>[INST] You are kind.\n\nHi [/INST]Hello! How can I help?</s>[INST] Tell a story. "
            "[/INST]");
}

TEST(ChatTemplateTest, RendersChatml) {
  EXPECT_EQ(Render(ChatTemplate::kChatml, OneTurn()),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(ChatTemplate::kChatml, OneTurnSystem(), /*add_bos=*/true),
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(ChatTemplate::kChatml, MultiTurnSystem()),
            "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
            "<|im_start|>user\nTell a story.<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, RendersZephyr) {
  EXPECT_EQ(Render(ChatTemplate::kZephyr, OneTurn()), "<|user|>\nHello</s>\n<|assistant|>\n");
  EXPECT_EQ(Render(ChatTemplate::kZephyr, MultiTurnSystem()),
            "<|system|>\nYou are kind.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello! How can I "
            "help?</s>\n<|user|>\nTell a story.</s>\n<|assistant|>\n");
  EXPECT_EQ(Render(ChatTemplate::kZephyr, OneTurn(), /*add_bos=*/true),
            "<s><|user|>\nHello</s>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, ChatmlAndZephyrAllowAnyTurnOrder) {
  const std::vector<Message> m = {{"user", "a"}, {"user", "b"}, {"assistant", "c"}};
  EXPECT_EQ(Render(ChatTemplate::kChatml, m),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
            "<|im_start|>assistant\nc<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(ChatTemplate::kZephyr, {{"system", "s"}}), "<|system|>\ns</s>\n<|assistant|>\n");
}

// --- errors
// ---------------------------------------------------------------------------------------

void ExpectError(ChatTemplate t, const std::vector<Message>& m, const std::string& field,
                 const std::string& also = "") {
  std::string text;
  const Status st = RenderChat(t, m, false, &text);
  ASSERT_FALSE(st.ok()) << ChatTemplateName(t) << " accepted it: " << text;
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("field '" + field + "'", 0), 0u) << st.message();
  if (!also.empty()) {
    EXPECT_NE(st.message().find(also), std::string::npos) << st.message();
  }
}

TEST(ChatTemplateTest, ErrorsNameMessageIndexAndField) {
  for (ChatTemplate t : {ChatTemplate::kLlama2, ChatTemplate::kMistral, ChatTemplate::kChatml,
                         ChatTemplate::kZephyr}) {
    SCOPED_TRACE(ChatTemplateName(t));
    ExpectError(t, {}, "messages", "empty");
    ExpectError(t, {{"user", "a"}, {"assistant", "b"}, {"tool", "c"}}, "messages[2].role",
                "'tool'");
    ExpectError(t, {{"user", "a"}, {"system", "b"}, {"user", "c"}}, "messages[1].role",
                "system message must be the first");
  }
  for (ChatTemplate t : {ChatTemplate::kLlama2, ChatTemplate::kMistral}) {
    SCOPED_TRACE(ChatTemplateName(t));
    ExpectError(t, {{"user", "a"}, {"user", "b"}}, "messages[1].role", "expected 'assistant'");
    ExpectError(t, {{"system", "s"}, {"assistant", "a"}, {"user", "b"}}, "messages[1].role",
                "expected 'user'");
    ExpectError(t, {{"user", "a"}, {"assistant", "b"}, {"assistant", "c"}}, "messages[2].role",
                "alternate");
    ExpectError(t, {{"user", "a"}, {"assistant", "b"}}, "messages[1].role", "last message");
    ExpectError(t, {{"system", "s"}}, "messages", "user message");
  }
}

// --- encoding with stories260K's tokenizer (HF LlamaTokenizer, legacy)
// -----------------------------

class ChatTemplateStoriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = llmq::testing::SharedModel("stories260K");
    LLMQ_SKIP_WITHOUT_SHARED(dir_, "stories260K");
    const Status st = Tokenizer::Load(dir_, &tok_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(tok_->bos_id(), 1);
    ASSERT_EQ(tok_->eos_id(), 2);
  }
  std::vector<int> Encode(ChatTemplate t, const std::vector<Message>& m) {
    std::vector<int> ids = {-5};  // EncodeChat replaces what was there
    const Status st = EncodeChat(*tok_, t, m, &ids);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return ids;
  }
  std::vector<int> E(const std::string& s) { return tok_->EncodeNoBos(s); }

  std::string dir_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(ChatTemplateStoriesTest, Llama2OneTurnMatchesHuggingFace) {
  // HF LlamaTokenizer (legacy) on "<s>[INST] Hello [/INST]": <s> is split out as id 1, the rest is
  // sentencepiece-encoded with its dummy prefix: "▁" "[" "I" "N" "S" "T" "]" "▁He" "ll" "o" "▁" "["
  // "/" "I" "N" "S" "T" "]" (this vocabulary has no "▁[" piece).
  EXPECT_EQ(Encode(ChatTemplate::kLlama2, OneTurn()),
            (std::vector<int>{1, 410, 508, 442, 458, 437, 434, 509, 346, 306, 414, 410, 508, 492,
                              442, 458, 437, 434, 509}));
  EXPECT_EQ(Encode(ChatTemplate::kLlama2, OneTurn()), tok_->Encode("[INST] Hello [/INST]"));
}

TEST_F(ChatTemplateStoriesTest, Llama2MultiTurnPutsControlIdsPerTurn) {
  const std::vector<int> ids = Encode(ChatTemplate::kLlama2, MultiTurnSystem());
  // Meta's reference: per turn, [BOS] + sp("[INST] {u} [/INST] {a} ") + [EOS]; then the last.
  EXPECT_EQ(ids, Cat({{1},
                      E("[INST] <<SYS>>\nYou are kind.\n<</SYS>>\n\nHi [/INST] Hello! How can I "
                        "help? "),
                      {2, 1},
                      E("[INST] Tell a story. [/INST]")}));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ(ids.front(), 1);
  const auto eos = std::find(ids.begin(), ids.end(), 2);
  ASSERT_NE(eos, ids.end());
  EXPECT_EQ(*(eos + 1), 1);  // </s><s>
}

TEST_F(ChatTemplateStoriesTest, MistralMultiTurn) {
  EXPECT_EQ(Encode(ChatTemplate::kMistral, MultiTurn()),
            Cat({{1},
                 E("[INST] Hi [/INST]Hello! How can I help?"),
                 {2},
                 E("[INST] Tell a story. [/INST]")}));
  EXPECT_EQ(Encode(ChatTemplate::kMistral, OneTurnSystem()),
            Cat({{1}, E("[INST] Be brief.\n\nHello [/INST]")}));
}

TEST_F(ChatTemplateStoriesTest, ChatmlMarkersAbsentFromVocabAreText) {
  ASSERT_EQ(tok_->PieceToId("<|im_start|>"), -1);
  ASSERT_TRUE(tok_->add_bos());
  // One text segment after the BOS the tokenizer asks for.
  EXPECT_EQ(Encode(ChatTemplate::kChatml, MultiTurnSystem()),
            Cat({{1}, E(Render(ChatTemplate::kChatml, MultiTurnSystem()))}));
}

TEST_F(ChatTemplateStoriesTest, ZephyrEosAfterEachMessage) {
  EXPECT_EQ(Encode(ChatTemplate::kZephyr, OneTurnSystem()), Cat({{1},
                                                                 E("<|system|>\nBe brief."),
                                                                 {2},
                                                                 E("\n<|user|>\nHello"),
                                                                 {2},
                                                                 E("\n<|assistant|>\n")}));
}

TEST_F(ChatTemplateStoriesTest, ContentNeverBecomesControlIds) {
  const std::vector<int> ids =
      Encode(ChatTemplate::kLlama2, {{"user", "say <s> and </s> and <|im_start|>"}});
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);  // only the template's BOS
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0);
  EXPECT_EQ(tok_->Decode(ids), "[INST] say <s> and </s> and <|im_start|> [/INST]");
}

TEST_F(ChatTemplateStoriesTest, PieceToId) {
  EXPECT_EQ(tok_->PieceToId("<s>"), 1);
  EXPECT_EQ(tok_->PieceToId("</s>"), 2);
  EXPECT_EQ(tok_->PieceToId("<unk>"), 0);
  EXPECT_EQ(tok_->PieceToId("▁He"), 346);
  EXPECT_EQ(tok_->PieceToId("no such piece"), -1);
  EXPECT_EQ(tok_->PieceToId(""), -1);
}

TEST_F(ChatTemplateStoriesTest, ErrorsLeaveNoIds) {
  std::vector<int> ids = {7};
  const Status st = EncodeChat(*tok_, ChatTemplate::kLlama2, {{"assistant", "a"}}, &ids);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(ids.empty());
}

// --- encoding with markers in the vocabulary
// ---------------------------------------------------------

// A 600-piece tokenizer like TrainTokenizer's, plus <|im_start|>/<|im_end|> as control pieces (as
// real chatml models list them: special, never produced from text) and the zephyr markers as
// user-defined pieces. Written to `dir`/tokenizer.model with a tokenizer_config.json.
std::string MarkerTokenizerDir(const std::string& name, bool add_bos) {
  const std::string dir = llmq::testing::TmpDir(name);
  TokenizerExtras extras;
  extras.control_symbols = {"<|im_start|>", "<|im_end|>"};
  extras.user_defined_symbols = {"<|system|>", "<|user|>", "<|assistant|>"};
  const Status st = TrainTokenizer(600, 11, dir + "/tokenizer.model", extras);
  EXPECT_TRUE(st.ok()) << st.ToString();
  WriteFile(dir + "/tokenizer_config.json",
            std::string("{\"add_bos_token\": ") + (add_bos ? "true" : "false") + "}");
  return dir;
}

TEST(ChatTemplateMarkerTest, ChatmlMarkersAreSingleIds) {
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(MarkerTokenizerDir("chatml_markers", false), &tok).ok());
  ASSERT_FALSE(tok->add_bos());
  const int start = tok->PieceToId("<|im_start|>"), end = tok->PieceToId("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_GE(end, 0);
  EXPECT_TRUE(tok->IsControl(start));
  // Control pieces are never produced from text: only the template can put them there.
  const std::vector<int> as_text = tok->EncodeNoBos("<|im_start|>");
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), start), 0);

  std::vector<int> ids;
  ASSERT_TRUE(EncodeChat(*tok, ChatTemplate::kChatml, OneTurnSystem(), &ids).ok());
  auto E = [&](const std::string& s) { return tok->EncodeNoBos(s); };
  EXPECT_EQ(ids, Cat({{start},
                      E("system\nBe brief."),
                      {end},
                      E("\n"),
                      {start},
                      E("user\nHello"),
                      {end},
                      E("\n"),
                      {start},
                      E("assistant\n")}));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->bos_id()), 0);  // add_bos false: no BOS
}

TEST(ChatTemplateMarkerTest, ZephyrMarkersAreSingleIdsAndBosFollowsAddBos) {
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(MarkerTokenizerDir("zephyr_markers", true), &tok).ok());
  const int user = tok->PieceToId("<|user|>"), assistant = tok->PieceToId("<|assistant|>");
  ASSERT_GE(user, 0);
  ASSERT_GE(assistant, 0);
  std::vector<int> ids;
  ASSERT_TRUE(EncodeChat(*tok, ChatTemplate::kZephyr, OneTurn(), &ids).ok());
  auto E = [&](const std::string& s) { return tok->EncodeNoBos(s); };
  EXPECT_EQ(
      ids,
      Cat({{tok->bos_id(), user}, E("\nHello"), {tok->eos_id()}, E("\n"), {assistant}, E("\n")}));
}

TEST(ChatTemplateMarkerTest, TrainedTokenizerWithoutMarkers) {
  const std::string dir = llmq::testing::TmpDir("plain512");
  ASSERT_TRUE(TrainTokenizer(512, 3, dir + "/tokenizer.model").ok());
  WriteFile(dir + "/tokenizer_config.json", R"({"add_bos_token": false})");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  std::vector<int> ids;
  // llama-2 writes its BOS whatever add_bos says; chatml follows add_bos (false here).
  ASSERT_TRUE(EncodeChat(*tok, ChatTemplate::kLlama2, OneTurn(), &ids).ok());
  EXPECT_EQ(ids, Cat({{tok->bos_id()}, tok->EncodeNoBos("[INST] Hello [/INST]")}));
  ASSERT_TRUE(EncodeChat(*tok, ChatTemplate::kChatml, OneTurn(), &ids).ok());
  EXPECT_EQ(ids, tok->EncodeNoBos(Render(ChatTemplate::kChatml, OneTurn())));
}

// --- detection
// ------------------------------------------------------------------------------------

const char* kChatmlJinja =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";
const char* kZephyrJinja =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
const char* kLlama2Jinja =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 "
    "and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% "
    "endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' "
    "[/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";
const char* kMistralJinja =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
const char* kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{{ content }}{% endfor %}";

// Writes tokenizer_config.json with `chat_template` (omitted when null) and detects.
ChatTemplate DetectFrom(const json& chat_template, bool* found, const std::string& name) {
  const std::string dir = llmq::testing::TmpDir("detect_" + name);
  json config = {{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", true}};
  if (!chat_template.is_null()) config["chat_template"] = chat_template;
  WriteFile(dir + "/tokenizer_config.json", config.dump(2));
  return DetectChatTemplate(dir, found);
}

TEST(ChatTemplateDetectTest, RecognisesTheCanonicalTemplates) {
  bool found = false;
  EXPECT_EQ(DetectFrom(kChatmlJinja, &found, "chatml"), ChatTemplate::kChatml);
  EXPECT_TRUE(found);
  found = false;
  EXPECT_EQ(DetectFrom(kZephyrJinja, &found, "zephyr"), ChatTemplate::kZephyr);
  EXPECT_TRUE(found);
  found = false;
  EXPECT_EQ(DetectFrom(kLlama2Jinja, &found, "llama2"), ChatTemplate::kLlama2);  // has [INST] too
  EXPECT_TRUE(found);
  found = false;
  EXPECT_EQ(DetectFrom(kMistralJinja, &found, "mistral"), ChatTemplate::kMistral);
  EXPECT_TRUE(found);
}

TEST(ChatTemplateDetectTest, ListFormUsesTheDefaultTemplate) {
  bool found = false;
  const json list = {{{"name", "tool_use"}, {"template", kChatmlJinja}},
                     {{"name", "default"}, {"template", kMistralJinja}}};
  EXPECT_EQ(DetectFrom(list, &found, "list"), ChatTemplate::kMistral);
  EXPECT_TRUE(found);
  const json no_default = {{{"name", "tool_use"}, {"template", kChatmlJinja}}};
  DetectFrom(no_default, &found, "list_no_default");
  EXPECT_FALSE(found);
}

TEST(ChatTemplateDetectTest, UnknownOrAbsentIsNotFound) {
  bool found = true;
  EXPECT_EQ(DetectFrom(kLlama3Jinja, &found, "llama3"), ChatTemplate::kLlama2);
  EXPECT_FALSE(found);
  found = true;
  DetectFrom(nullptr, &found, "none");
  EXPECT_FALSE(found);
  found = true;
  DetectFrom(42, &found, "number");
  EXPECT_FALSE(found);
  found = true;
  DetectChatTemplate(llmq::testing::TmpDir("detect_empty_dir"), &found);
  EXPECT_FALSE(found);
  found = true;
  DetectChatTemplate("/nonexistent/model/dir", &found);
  EXPECT_FALSE(found);
  const std::string bad = llmq::testing::TmpDir("detect_bad_json");
  WriteFile(bad + "/tokenizer_config.json", "{\"chat_template\": \"<|im_start|>");
  found = true;
  DetectChatTemplate(bad, &found);
  EXPECT_FALSE(found);
}

TEST(ChatTemplateDetectTest, ChatTemplateJinjaFile) {
  const std::string dir = llmq::testing::TmpDir("detect_jinja_file");
  WriteFile(dir + "/tokenizer_config.json", R"({"add_bos_token": true})");
  WriteFile(dir + "/chat_template.jinja", kZephyrJinja);
  bool found = false;
  EXPECT_EQ(DetectChatTemplate(dir, &found), ChatTemplate::kZephyr);
  EXPECT_TRUE(found);
}

TEST(ChatTemplateDetectTest, SharedModelsNameNone) {
  const std::string dir = llmq::testing::SharedModel("stories260K");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "stories260K");
  bool found = true;
  DetectChatTemplate(dir, &found);
  EXPECT_FALSE(found);
}

}  // namespace
}  // namespace llmq
