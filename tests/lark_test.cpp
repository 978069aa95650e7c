// Lark grammars (engine/structured/lark.h). The language the Matcher enforces is Lark's own: every
// string over a small alphabet up to a length is given to Lark's Earley parser
// (tests/oracle/lark/oracle.py: Debian's python3-lark, lexer="dynamic_complete") and walked byte by
// byte through the compiled grammar; the verdicts must agree, and no prefix the matcher takes may
// be stranded (each can be completed within a few characters, by Lark's verdicts). Errors name line
// and column; what is not enforced is refused by name.
#include "engine/structured/lark.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "tests/grammar_text_util.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

std::shared_ptr<CompiledGrammar> CompileText(const std::string& text) {
  return testing::CompileForBytes(CompileLark, text);
}

std::string ErrorOf(const std::string& text) {
  return testing::FrontEndError(CompileLark, text);
}

// Byte by byte: how much of `s` the matcher takes, and whether it may end there.
bool Takes(const std::shared_ptr<CompiledGrammar>& g, const std::string& s, bool* can_end) {
  Matcher m(g);
  for (char c : s)
    if (!m.Consume(std::string(1, c))) return false;
  *can_end = m.CanEnd();
  return true;
}

// Every string of up to `max_len` characters of `alphabet` (UTF-8 characters).
std::vector<std::string> AllStrings(const std::vector<std::string>& alphabet, size_t max_len) {
  std::vector<std::string> all = {""}, level = {""};
  for (size_t len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const std::string& s : level)
      for (const std::string& c : alphabet) next.push_back(s + c);
    all.insert(all.end(), next.begin(), next.end());
    level = std::move(next);
  }
  return all;
}

std::vector<std::string> Chars(const std::string& utf8) {
  std::vector<std::string> out;
  for (size_t i = 0; i < utf8.size();) {
    size_t n = 1;
    while (i + n < utf8.size() && (static_cast<uint8_t>(utf8[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(utf8.substr(i, n));
    i += n;
  }
  return out;
}

// Python with Lark: Debian's /usr/bin/python3 (python3-lark), else the first python3.
std::string LarkPython() {
  for (const char* py : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(py) + " -c 'import lark' >/dev/null 2>&1").c_str()) == 0)
      return py;
  return "";
}

struct Case {
  const char* grammar;
  const char* alphabet;
  size_t max_len;
};

// Every case's strings through Lark (one python run) and through the compiled grammar.
void ExpectLarkAgrees(const std::vector<Case>& cases) {
  const std::string py = LarkPython();
  if (py.empty())
    LLMQ_SKIP_OR_FAIL_MISSING("python3 with Lark (Debian's python3-lark: scripts/bootstrap)");
  nlohmann::json in = nlohmann::json::array();
  std::vector<std::vector<std::string>> texts;
  for (const Case& c : cases) {
    texts.push_back(AllStrings(Chars(c.alphabet), c.max_len));
    in.push_back({{"grammar", c.grammar}, {"texts", texts.back()}});
  }
  const std::string dir = testing::CurrentTestDir();
  {
    std::ofstream f(dir + "/in.json", std::ios::binary);
    f << in.dump();
  }
  const std::string script =
      (std::filesystem::path(LLMQ_SOURCE_DIR) / "tests" / "oracle" / "lark" / "oracle.py").string();
  const std::string cmd = py + " " + testing::ShellQuote(script) + " <" +
                          testing::ShellQuote(dir + "/in.json") + " >" +
                          testing::ShellQuote(dir + "/out.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dir + "/out.json");
  const nlohmann::json out = nlohmann::json::parse(f);
  ASSERT_EQ(out.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].grammar);
    ASSERT_TRUE(out[k].is_array()) << "Lark refused it: " << out[k].dump();
    const auto g = CompileText(cases[k].grammar);
    ASSERT_NE(g, nullptr);
    constexpr size_t kSlack = 3;  // a prefix taken is completed within this many characters
    std::set<std::string> completable;
    int accepted = 0, disagreements = 0;
    for (size_t i = 0; i < texts[k].size(); ++i) {
      if (!out[k][i].get<bool>()) continue;
      ++accepted;
      const std::string& t = texts[k][i];
      for (size_t cut = 0; cut <= t.size(); ++cut)
        if (t.size() - cut <= kSlack) completable.insert(t.substr(0, cut));
    }
    EXPECT_GT(accepted, 0);  // the case means something
    for (size_t i = 0; i < texts[k].size() && disagreements < 10; ++i) {
      const std::string& s = texts[k][i];
      bool can_end = false;
      const bool taken = Takes(g, s, &can_end);
      const bool want = out[k][i].get<bool>();
      if ((taken && can_end) != want) {
        ++disagreements;
        ADD_FAILURE() << "\"" << s << "\": Lark " << (want ? "accepts" : "rejects");
      }
      // A prefix the matcher takes is one Lark can complete (judged where the strings reach).
      if (taken && s.size() + kSlack <= cases[k].max_len && !completable.count(s)) {
        ++disagreements;
        ADD_FAILURE() << "prefix \"" << s << "\" taken, but Lark completes it nowhere";
      }
    }
  }
}

TEST(Lark, RulesTerminalsAndOperatorsAgreeWithLark) {
  ExpectLarkAgrees({
      // Rules, terminals, groups, optional, repetition, recursion, aliases, ? and ! and priority.
      {"start: a+ B? | \"(\" start \")\"\na: \"x\" | \"y\" \"z\"\nB.2: \"b\"+", "xyzb()", 5},
      {"?start: sum\n?sum: product\n    | sum \"+\" product -> add\n?product: atom | product "
       "\"*\" atom\n!atom: DIGIT | \"(\" sum \")\"\nDIGIT: \"0\"..\"1\"",
       "01+*()", 5},
      // Ranges, any-case strings, ~ bounds, [optional].
      {"start: WORD (\",\" WORD)~0..2 | \"ab\"i NUM~2 | [\"-\"] NUM~1..2\nWORD: \"a\"..\"b\"+\n"
       "NUM: \"0\"..\"1\"",
       "abA,01-", 5},
      // Greedy lexing would lose "abbc": terminals are taken apart where they overlap.
      {"start: A B\nA: \"a\" | \"ab\"\nB: \"bc\" | \"c\"", "abc", 5},
      // An alias written against a name.
      {"start: x+ -> all\nx: \"a\"->ay | \"b\"->bee", "ab-", 4},
      {"start: NUM NUM\nNUM: /[0-9]+/", "01a", 5},
  });
}

TEST(Lark, RegularExpressionsAgreeWithPythonsRe) {
  ExpectLarkAgrees({
      {"start: R1 | R2 | R3\nR1: /a[^a\\n]?b{1,2}/\nR2: /(?:xy|z)+/i\nR3: /\\d\\s?c?/", "abXyz1 \n",
       4},
      {"start: /(?i)a(?-i:b)|c{1,2}|d{2,}|e{,1}f/", "aAbBcdef", 4},
      {"start: /[a-c\\]-]x*|\\x41\\u00e9|\\./", "abc]-xAé.", 3},
      {"start: /./ | /x./s", "ax\n", 3},
      // Python's corners: ']' first in a class, '-' at its edge, octal, an empty alternative (the
      // longer alternatives first: Lark's lexer takes Python's first match, see below).
      {"start: /[-a]c|\\141d|(a|)e|[]a]b?/", "]a-bcde", 3},
      // Case folding as Python's: (?i)k takes the Kelvin sign, s the long s; [\1] is octal 1.
      {"start: /(?i)ks/ | \"st\"i | /[\\1a]/",
       "kK\u212As\u017Ft\x01"
       "a",
       2},
      // Python's Unicode classes on str: é is a word character, ٣ (Arabic-Indic 3) a digit.
      {"start: /\\w+/ | /\\d\\D/ | /\\S\\s/", "aé٣_ -", 3},
  });
}

TEST(Lark, IgnoredTextAndCommonTerminalsAgreeWithLark) {
  ExpectLarkAgrees({
      {"start: \"[\" [item (\",\" item)*] \"]\"\nitem: NUMBER | start\n%import common.NUMBER\n"
       "%import common (WS)\n%ignore WS",
       "[], 1.", 6},
      {"start: (WORD | INT)+\n%import common.WORD\n%import common.INT -> INT\n%ignore \" \"\n"
       "%ignore /#[^\\n]*\\n/",
       "ab1 #\n", 5},
      {"start: ESCAPED_STRING\n%import common.ESCAPED_STRING", "\"\\a\n", 6},
      {"start: C_COMMENT | CPP_COMMENT | SH_COMMENT\n%import common (C_COMMENT, CPP_COMMENT, "
       "SH_COMMENT)",
       "/*a#", 6},
      {"start: SIGNED_NUMBER | HEXDIGIT\n%import common (SIGNED_NUMBER, HEXDIGIT)", "1-.eE", 5},
      {"start: CNAME (NEWLINE CNAME)*\n%import common (CNAME, NEWLINE, WS_INLINE)\n"
       "%ignore WS_INLINE",
       "_a1 \n\r", 4},
  });
}

TEST(Lark, ErrorsNameLineAndColumn) {
  EXPECT_EQ(ErrorOf("start: a\n"), "line 1, column 8: rule 'a' is not defined");
  EXPECT_EQ(ErrorOf("x: \"a\"\n"), "line 2, column 1: the grammar has no rule named start");
  EXPECT_EQ(ErrorOf("start: A\nA: \"a\" b\nb: \"c\""),
            "line 2, column 1: terminal 'A' names rule 'b' (terminals are made of strings, "
            "expressions and terminals)");
  EXPECT_EQ(ErrorOf("start: \"a\" |\n  | \"b\" )"), "line 2, column 9: unexpected ')'");
  EXPECT_EQ(ErrorOf("start: /a{3,1}/"), "line 1, column 10: min repeat greater than max repeat");
  EXPECT_EQ(ErrorOf("start: /*a/"), "line 1, column 9: nothing to repeat");
  EXPECT_EQ(ErrorOf("start: /(a/"), "line 1, column 9: missing ), unterminated subpattern");
  EXPECT_EQ(ErrorOf("start: \"\""), "line 1, column 8: empty terminals are not allowed");
  EXPECT_EQ(ErrorOf("start: \"b\"..\"a\""), "line 1, column 8: a range's end is below its start");
  EXPECT_EQ(ErrorOf("start: \"a\"\nstart: \"b\""),
            "line 2, column 1: rule 'start' is defined twice");
  EXPECT_EQ(ErrorOf("start: A\n%import common.NOPE -> A"),
            "line 2, column 1: Lark's common has no terminal 'NOPE'");
  EXPECT_EQ(ErrorOf("start: \"a\"\n%frobnicate"),
            "line 2, column 1: unknown directive %frobnicate");
  // What is not enforced is refused by name, as Unsupported.
  const struct {
    const char* grammar;
    const char* named;
  } unsupported[] = {
      {"start: /a(?=b)/", "lookaround"},
      {"start: /(a)\\1/", "backreferences"},
      {"start: /^a$/", "anchors"},
      {"start: /a\\b/", "word boundaries"},
      {"start: /a*+/", "possessive"},
      {"start: /a/x", "verbose"},
      {"x{p}: p\nstart: \"a\"", "templates"},
      {"start: A\n%declare A", "%declare"},
      {"start: A\n%import python.NAME -> A", "only Lark's common terminals"},
      {"start: <|eot|>", "special tokens"},
      {"start: %json {}", "%json"},
      {"start: \"a\"~1001", "at most 1000"},
  };
  for (const auto& u : unsupported) {
    Grammar g;
    const Status st = CompileLark(u.grammar, &g);
    EXPECT_EQ(st.code(), Status::Code::kUnsupported) << u.grammar << ": " << st.message();
    EXPECT_NE(st.message().find(u.named), std::string::npos) << u.grammar << ": " << st.message();
  }
}

// A terminal's language is its expression's. Lark's Earley lexer only takes Python's first match
// (and its prefixes): a lazy `d{2,}?` gives it "dd" alone, `a|ab` gives "a" alone. llmq, as
// LLGuidance's lexer, takes every string the expression matches.
TEST(Lark, ATerminalIsEveryStringItsExpressionMatches) {
  const auto lazy = CompileText("start: /d{2,}?/ | /a|ab/");
  ASSERT_NE(lazy, nullptr);
  for (const char* s : {"dd", "ddd", "dddd", "a", "ab"}) {
    bool can_end = false;
    EXPECT_TRUE(Takes(lazy, s, &can_end) && can_end) << s;
  }
  bool can_end = false;
  EXPECT_FALSE(Takes(lazy, "d", &can_end) && can_end);
  EXPECT_FALSE(Takes(lazy, "abb", &can_end));
}

// LLGuidance's braces are Lark's ~ ranges.
TEST(Lark, BracesAreTildeRanges) {
  const auto braces = CompileText("start: \"a\"{2} \"b\"{1,} \"c\"{,1} \"d\"{0,2}");
  const auto tilde = CompileText("start: \"a\"~2 \"b\"+ \"c\"? \"d\"~0..2");
  ASSERT_TRUE(braces && tilde);
  for (const std::string& s : AllStrings(Chars("abcd"), 6)) {
    bool end_a = false, end_b = false;
    const bool a = Takes(braces, s, &end_a), b = Takes(tilde, s, &end_b);
    EXPECT_EQ(a && end_a, b && end_b) << s;
    EXPECT_EQ(a, b) << s;
  }
}

TEST(Lark, TellsLarkFromGbnfAsVllmDoes) {
  EXPECT_TRUE(LooksLikeLark("start: \"a\"\n"));
  EXPECT_TRUE(LooksLikeLark("// root ::= x\nstart: \"a\"  # not ::= here\n"));
  EXPECT_FALSE(LooksLikeLark("root ::= \"a\"\n"));
  EXPECT_FALSE(LooksLikeLark("# Lark? no\nroot ::= x\nx ::= \"b\""));
  // LLGuidance's names may hold '-' (an alias's arrow after one is not part of it).
  const auto dashed = CompileText("start: my-rule->x\nmy-rule: \"a\"");
  ASSERT_NE(dashed, nullptr);
  bool ends = false;
  EXPECT_TRUE(Takes(dashed, "a", &ends) && ends);
  // CompileGrammarText reads each as what it is: the same language.
  for (const char* text : {"root ::= \"a\" [0-9]+", "start: \"a\" /[0-9]+/"}) {
    Grammar g;
    ASSERT_TRUE(CompileGrammarText(text, &g).ok()) << text;
    std::shared_ptr<CompiledGrammar> c;
    ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
    bool can_end = false;
    EXPECT_TRUE(Takes(c, "a12", &can_end) && can_end) << text;
    EXPECT_FALSE(Takes(c, "b", &can_end)) << text;
  }
}

}  // namespace
}  // namespace llmq
