// `llmq grammar check` (daemon/cli_grammar.cpp) on the real binary with the Llama 3 tokenizer of
// ../shared: a grammar compiled and texts walked token by token (accepted whole, rejected at the
// token where they leave the grammar, a prefix accepted without EOS), a disagreement making the
// exit status 1, a syntax error named by line and column, and the --json shape; a Lark grammar
// (no line holds `::=`) the same way.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;

TEST(GrammarCheckCliTest, TextsAreWalkedTokenByToken) {
  const std::string model = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-llama32");
  const std::string dir = testing::CurrentTestDir();
  const std::string g =
      testing::WriteFileIn(dir, "list.gbnf",
                           "root ::= \"[\" (item (\", \" item)*)? \"]\"\n"
                           "item ::= [0-9]+ | \"\\\"\" [a-z ]* \"\\\"\" | root\n");
  testing::RunResult r = testing::RunLlmq({"grammar", "check", "--model", model, g, "--accept",
                                           "[1, \"two words\", [3, []]]", "--accept", "[]",
                                           "--reject", "[1,2]", "--reject", "[1, [2]"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find(g + ": compiled in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accept \"[]\": accepted;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reject \"[1,2]\": rejected at token 3 ([1, | 2)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("reject \"[1, [2]\": accepted, but EOS not allowed at its end"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("disagrees"), std::string::npos) << r.out;

  // A text expected the other way: said, and the exit status is 1; --json's shape.
  r = testing::RunLlmq({"grammar", "check", "--model", model, g, "--json", "--reject", "[7]"});
  EXPECT_EQ(r.exit_code, 1) << r.err << r.out;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["file"], g);
  EXPECT_EQ(out["syntax"], "gbnf");
  EXPECT_TRUE(out["compiled"].get<bool>());
  EXPECT_TRUE(out["error"].is_null());
  EXPECT_GT(out["rules"].get<int>(), 0);
  EXPECT_GT(out["lexemes"].get<int>(), 0);
  ASSERT_EQ(out["texts"].size(), 1u);
  EXPECT_EQ(out["texts"][0]["expected"], "reject");
  EXPECT_TRUE(out["texts"][0]["accepted"].get<bool>());
  EXPECT_TRUE(out["texts"][0]["complete"].get<bool>());
  EXPECT_FALSE(out["texts"][0]["agrees"].get<bool>());

  // A syntax error: refused naming line and column, exit status 1.
  const std::string bad = testing::WriteFileIn(dir, "bad.gbnf", "root ::= item\nitem ::= [0-9\n");
  r = testing::RunLlmq({"grammar", "check", "--model", model, bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find(bad + ": refused: line 2, column 14:"), std::string::npos) << r.out;
}

TEST(GrammarCheckCliTest, LarkGrammarsAreReadAsLark) {
  const std::string model = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-llama32");
  const std::string dir = testing::CurrentTestDir();
  const std::string g = testing::WriteFileIn(dir, "list.lark",
                                             "start: \"[\" [item (\",\" item)*] \"]\"\n"
                                             "?item: INT | ESCAPED_STRING | start\n"
                                             "%import common (INT, ESCAPED_STRING, WS)\n"
                                             "%ignore WS\n");
  testing::RunResult r = testing::RunLlmq({"grammar", "check", "--model", model, g, "--accept",
                                           "[1, \"two words\", [3, []]]", "--accept", " [ ] ",
                                           "--reject", "[1,]", "--reject", "[1, [2]"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find(g + ": compiled in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" us (Lark: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reject \"[1,]\": rejected at token"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("disagrees"), std::string::npos) << r.out;
  // A Lark syntax error names line and column.
  const std::string bad = testing::WriteFileIn(dir, "bad.lark", "start: item\nitem: /[0-9/\n");
  r = testing::RunLlmq({"grammar", "check", "--model", model, bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find(bad + ": refused: line 2, column 8: unterminated character set"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace llmq
