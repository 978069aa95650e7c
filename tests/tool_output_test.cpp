// daemon/tool_output.h: a completion's calls and content, read with a shared family model's real
// tokenizer (tiny-qwen3: <tool_call> is one added token, <|im_end|> the stop token): calls where
// the grammar took over (the whole ones before a cut by length), text before them as content,
// text alone otherwise; call ids stable and distinct.
#include "daemon/tool_output.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

class ToolOutput : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::SharedModel("tiny-qwen3");
    LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
    ASSERT_TRUE(Tokenizer::Load(dir, &tok_).ok());
  }
  // A completion of `before` then `calls` then <|im_end|>, the grammar from the calls' first token.
  Completion Make(const std::string& before, const std::string& calls, const char* finish) {
    Completion c;
    const std::vector<int> a = tok_->EncodeNoBos(before), b = tok_->EncodeNoBos(calls);
    c.ids.assign(a.begin(), a.end());
    c.ids.insert(c.ids.end(), b.begin(), b.end());
    c.ids.push_back(tok_->PieceToId("<|im_end|>"));
    c.text = before + calls;
    c.finish_reason = finish;
    c.grammar_from_token = static_cast<int>(a.size());
    c.grammar_from_byte = 0;
    return c;
  }
  std::unique_ptr<Tokenizer> tok_;
};

const std::string kCalls =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>"
    "\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";

TEST_F(ToolOutput, CallsAfterTheTextBeforeThem) {
  ASSERT_GE(tok_->PieceToId("<tool_call>"), 0);
  const Completion c = Make("Let me look that up. ", kCalls, "stop");
  ASSERT_EQ(tok_->TokenBytes(c.ids[static_cast<size_t>(c.grammar_from_token)]), "<tool_call>");
  const ToolMessage m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, c);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].name, "get_weather");
  EXPECT_EQ(m.calls[0].arguments, R"({"city": "Zürich"})");
  EXPECT_EQ(m.calls[1].name, "ping");
  EXPECT_EQ(m.content, "Let me look that up. ");
  EXPECT_EQ(SplitToolCalls(*tok_, ToolCallFormat::kHermes, Make("", kCalls, "stop")).content, "");
}

// A reasoning model's calls: the grammar began at its </think> (GrammarCache's `after`); the tag
// and the whitespace after it are content (the thought's end, for the reasoning split), not calls.
TEST_F(ToolOutput, CallsAfterAThoughtsEnd) {
  const Completion c = Make("<think>\nCall it.\n", "</think>\n\n" + kCalls, "stop");
  ASSERT_EQ(tok_->TokenBytes(c.ids[static_cast<size_t>(c.grammar_from_token)]), "</think>");
  const ToolMessage m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, c, "</think>");
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[1].name, "ping");
  EXPECT_EQ(m.content, "<think>\nCall it.\n</think>\n\n");
  // Without `after` the tag is no call: the text stays whole.
  const ToolMessage text = SplitToolCalls(*tok_, ToolCallFormat::kHermes, c);
  EXPECT_TRUE(text.calls.empty());
  EXPECT_EQ(text.content, c.text);
  // A grammar that began at the calls (the prompt closed the thought) is read as before.
  EXPECT_EQ(SplitToolCalls(*tok_, ToolCallFormat::kHermes, Make("x", kCalls, "stop"), "</think>")
                .calls.size(),
            2u);
}

TEST_F(ToolOutput, TextAloneWhereTheCallsAreNotWhole) {
  // Cut by its length: the whole calls before the cut, none when there is none.
  const size_t second = kCalls.find("\n<tool_call>", 1);
  Completion cut = Make("Hm. ", kCalls.substr(0, second + 30), "length");
  cut.ids.pop_back();  // no stop token
  ToolMessage m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, cut);
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].name, "get_weather");
  EXPECT_EQ(m.content, "Hm. ");
  cut = Make("Hm. ", kCalls.substr(0, second - 3), "length");
  cut.ids.pop_back();
  m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, cut);
  EXPECT_TRUE(m.calls.empty());
  EXPECT_EQ(m.content, cut.text);
  Completion never = Make("Just text, ", "no calls at all.", "stop");
  never.grammar_from_token = -1;
  m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, never);
  EXPECT_TRUE(m.calls.empty());
  EXPECT_EQ(m.content, never.text);
  // Text the parser refuses (a call cut short) stays text, whatever the engine said.
  Completion broken = Make("", "<tool_call>\n{\"name\": \"ping\"", "stop");
  m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, broken);
  EXPECT_TRUE(m.calls.empty());
  EXPECT_EQ(m.content, broken.text);
  // The trigger within a token: its bytes before the trigger are content.
  Completion mid = Make("ab", kCalls, "stop");
  mid.grammar_from_token -= 1;  // the token of "ab" holds the trigger's first byte...
  mid.grammar_from_byte =
      static_cast<int>(tok_->TokenBytes(mid.ids[static_cast<size_t>(mid.grammar_from_token)])
                           .size());  // ...at its end
  m = SplitToolCalls(*tok_, ToolCallFormat::kHermes, mid);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.content, "ab");
}

TEST(ToolCallIdTest, StableAndDistinct) {
  constexpr ToolCallFormat kHermes = ToolCallFormat::kHermes;
  EXPECT_EQ(ToolCallId(kHermes, "batch_req_1", 0, 0), ToolCallId(kHermes, "batch_req_1", 0, 0));
  std::set<std::string> ids;
  for (const char* r : {"batch_req_1", "batch_req_2"})
    for (int choice = 0; choice < 3; ++choice)
      for (int call = 0; call < 3; ++call) ids.insert(ToolCallId(kHermes, r, choice, call));
  EXPECT_EQ(ids.size(), 18u);
  const std::string id = ToolCallId(kHermes, "batch_req_1", 0, 0);
  ASSERT_EQ(id.size(), 29u);
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 5), std::string::npos) << id;
  EXPECT_EQ(ToolCallId(ToolCallFormat::kLlama3Json, "batch_req_1", 0, 0), id);
  // Mistral's: 9 alphanumerics (its templates raise on any other id), from the same hash.
  const std::string mistral = ToolCallId(ToolCallFormat::kMistral, "batch_req_1", 0, 0);
  EXPECT_EQ(mistral, id.substr(5, 9));
}

}  // namespace
}  // namespace llmq
