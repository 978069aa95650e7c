// GBNF grammars (engine/structured/gbnf.h): syntax errors name line and column; the language the
// Matcher enforces is exactly the grammar's, checked against std::regex (an implementation of its
// own) over every string of a small alphabet up to a length, and against hand-written predicates
// for recursive grammars: whole strings accepted or not, and every prefix the matcher takes can
// still be completed (greedy lexing never strands a document).
#include "engine/structured/gbnf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "tests/grammar_text_util.h"

namespace llmq {
namespace {

std::shared_ptr<CompiledGrammar> CompileText(const std::string& text) {
  return testing::CompileForBytes(CompileGbnf, text);
}

std::string ErrorOf(const std::string& text) {
  return testing::FrontEndError(CompileGbnf, text);
}

// Byte by byte: whether `s` is taken whole and the document may end there.
bool Accepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& s) {
  Matcher m(g);
  for (char c : s)
    if (!m.Consume(std::string(1, c))) return false;
  return m.CanEnd();
}
bool TakesPrefix(const std::shared_ptr<CompiledGrammar>& g, const std::string& s) {
  Matcher m(g);
  for (char c : s)
    if (!m.Consume(std::string(1, c))) return false;
  return true;
}

void AllStrings(const std::string& alphabet, size_t max_len,
                const std::function<void(const std::string&)>& f) {
  std::vector<std::string> level = {""};
  f("");
  for (size_t len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const std::string& s : level)
      for (char c : alphabet) {
        next.push_back(s + c);
        f(next.back());
      }
    level = std::move(next);
  }
}

// Every string up to `max_len` over `alphabet`: accepted exactly when `oracle` says; a prefix up
// to `max_len - slack` taken exactly when some completion of at most `slack` more characters is
// in the language.
void ExpectLanguage(const std::string& gbnf, const std::function<bool(const std::string&)>& oracle,
                    const std::string& alphabet, size_t max_len, size_t slack) {
  SCOPED_TRACE(gbnf);
  const auto g = CompileText(gbnf);
  ASSERT_NE(g, nullptr);
  int in = 0;
  AllStrings(alphabet, max_len, [&](const std::string& s) {
    const bool want = oracle(s);
    in += want;
    EXPECT_EQ(Accepts(g, s), want) << "\"" << s << "\"";
    if (s.size() + slack > max_len) return;
    bool completable = false;
    AllStrings(alphabet, slack, [&](const std::string& t) { completable |= oracle(s + t); });
    EXPECT_EQ(TakesPrefix(g, s), completable) << "prefix \"" << s << "\"";
  });
  EXPECT_GT(in, 0);  // the test means something
}

std::function<bool(const std::string&)> Re(const std::string& ecma) {
  auto re = std::make_shared<std::regex>(ecma);
  return [re](const std::string& s) { return std::regex_match(s, *re); };
}

TEST(Gbnf, RegularGrammarsMatchTheirRegex) {
  struct Case {
    const char* gbnf;
    const char* regex;
    const char* alphabet;
  };
  const Case cases[] = {
      {R"(root ::= "ab" | "a" [b-c]*)", "ab|a[b-c]*", "abc"},
      {R"(root ::= [ab]{2,3} ("-" [ab]+)?)", "[ab]{2,3}(-[ab]+)?", "ab-"},
      {"root ::= x x\nx ::= \"a\"?", "a?a?", "ab"},
      {"ws ::= | \" \" | \"\\n\" [ \\t]{0,2}\nroot ::= \"x\" ws \"y\"", "x( |\\n[ \\t]{0,2})?y",
       "xy \n\t"},
      {R"(root ::= [^a\-] "-"{1,})", "[^a\\-]-+", "ab-"},
      {"root ::= \"a\"\n  | \"b\" # a line that begins with | goes on\n", "a|b", "ab"},
      {"# a comment\nroot ::= (\"a\" (\"b\" | \"\") )* \"c\"", "(ab?)*c", "abc"},
  };
  for (const Case& c : cases) ExpectLanguage(c.gbnf, Re(c.regex), c.alphabet, 6, 3);
}

// Where the greedy lexer would end a lexeme too late, the lexeme is taken apart: every string of
// the grammar stays reachable and no prefix is stranded.
TEST(Gbnf, GreedyLexingLosesNoString) {
  // Inside one expression (a rule or a part that references only such rules) nothing is greedy.
  ExpectLanguage(R"(root ::= ("a" | "ab") "bc")", Re("(a|ab)bc"), "abc", 6, 3);
  ExpectLanguage("num ::= [0-9]+\nroot ::= num [0-9a]*", Re("[0-9]+[0-9a]*"), "01a", 5, 2);
  // Beside a rule of the parser (recursive ones here), lexemes that would swallow the start of
  // what follows them are taken apart: "a" | "ab" before "bc", [0-9]+ before more digits.
  ExpectLanguage(
      "root ::= (\"a\" | \"ab\") rest\nrest ::= \"bc\" | \"[\" rest \"]\"",
      [](const std::string& s) {
        const size_t k = s.find('[') == std::string::npos ? 0 : s.rfind('[') - s.find('[') + 1;
        const size_t open = s.find('[');
        if (k == 0) return std::regex_match(s, std::regex("(a|ab)bc"));
        return std::regex_match(s.substr(0, open), std::regex("a|ab")) &&
               s.substr(open, k) == std::string(k, '[') &&
               s.substr(open + k) == "bc" + std::string(k, ']');
      },
      "abc[]", 7, 4);
  ExpectLanguage("num ::= [0-9]+\nroot ::= num tail\ntail ::= | [0-9a] tail", Re("[0-9]+[0-9a]*"),
                 "01a", 6, 2);
  // Two lexemes that match one text ("a": [a] and [a-b]) are scanned as one list, and what may
  // follow either is allowed next: "b" (after [a]) beside "bc" (after [a-b]), which would swallow
  // the "c" of "cx".
  ExpectLanguage(
      "root ::= [a] \"b\" t1 | [a-b] \"bc\" t2\nt1 ::= \"cx\" | \"(\" t1 \")\"\n"
      "t2 ::= \"y\" | \"(\" t2 \")\"",
      [](const std::string& s) {
        static const std::regex re(R"(ab(\(*)cx(\)*)|[ab]bc(\(*)y(\)*))");
        std::smatch m;
        if (!std::regex_match(s, m, re)) return false;
        return m[1].length() == m[2].length() && m[3].length() == m[4].length();
      },
      "abcxy()", 6, 4);
  // A terminal part of a rule is one lexeme (`word "b"` below, exact as one expression); a
  // terminal rule beside a recursive one that could swallow what follows it is taken apart.
  ExpectLanguage(
      "word ::= [ab]+\nroot ::= word \"b\" | \"(\" root \")\"",
      [](const std::string& s) {
        size_t k = 0;
        while (k < s.size() && s[k] == '(') ++k;
        if (s.size() < 2 * k) return false;
        const std::string mid = s.substr(k, s.size() - 2 * k);
        return s.substr(s.size() - k) == std::string(k, ')') &&
               std::regex_match(mid, std::regex("[ab]+b"));
      },
      "ab()", 8, 5);
  const std::string apart = "word ::= [ab]+\nroot ::= word \"b\" (\"(\" root \")\")?";
  ExpectLanguage(
      apart,
      [](const std::string& s) {  // ([ab]+b\()^k [ab]+b \)^k
        const size_t k = static_cast<size_t>(std::count(s.begin(), s.end(), '('));
        if (s.size() < k || s.substr(s.size() - k) != std::string(k, ')')) return false;
        static const std::regex part("[ab]+b");
        size_t at = 0;
        for (size_t i = 0; i <= k; ++i) {
          const size_t end = i < k ? s.find('(', at) : s.size() - k;
          if (end == std::string::npos || !std::regex_match(s.substr(at, end - at), part))
            return false;
          at = end + 1;
        }
        return true;
      },
      "ab()", 8, 4);
  Grammar g;
  ASSERT_TRUE(CompileGbnf(apart, &g).ok());
  EXPECT_NE(g.Dump().find("word"), std::string::npos) << g.Dump();
}

// A rule recursive only through itself, each reference ending or beginning its alternative
// (llama.cpp's json.gbnf: `ws ::= ([ \t\n] ws)?`), is a repetition: one lexeme
// where it is terminal, not a parser rule per character. Its language is unchanged; a rule that
// also names itself elsewhere stays a rule of the parser.
TEST(Gbnf, RecursionThroughItselfAtTheEdgeIsRepetition) {
  const struct {
    const char* gbnf;
    const char* regex;
    const char* alphabet;
  } cases[] = {
      {"root ::= \"[\" ws \"]\"\nws ::= ([ \\t\\n] ws)?", "\\[[ \\t\\n]*\\]", "[] \t"},
      {"root ::= x\nx ::= \"a\" x | \"b\" x | \"c\"", "[ab]*c", "abc"},
      {"root ::= x\nx ::= x \"a\" | x \"bc\" | \"c\" | \"\"", "c?(a|bc)*", "abc"},
      {"root ::= x\nx ::= \"a\" (\"b\" x | \"c\") | \"d\"", "(ab)*(ac|d)", "abcd"},
      // At both edges: the parts before gather before, the parts after after.
      {"root ::= \"[\" ws \"]\"\nws ::= | [ \\t] ws | ws [\\n]", "\\[[ \\t]*\\n*\\]", "[] \t\n"},
      {"root ::= x\nx ::= \"a\" x | x \"b\" | \"c\" | x", "a*cb*", "abc"},
      {"root ::= x \"b\"\nx ::= \"a\" x", "$^", "ab"},  // no way out: no document
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.gbnf);
    Grammar g;
    ASSERT_TRUE(CompileGbnf(c.gbnf, &g).ok());
    if (std::string(c.regex) == "$^") {  // the empty language: refused as such
      std::shared_ptr<CompiledGrammar> compiled;
      const Status st = CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &compiled);
      EXPECT_NE(st.message().find("admits no document"), std::string::npos) << st.message();
      continue;
    }
    ExpectLanguage(c.gbnf, Re(c.regex), c.alphabet, 6, 3);
    EXPECT_EQ(g.lexemes().size(), 1u) << g.Dump();  // the whole grammar is one expression
  }
  // Not at an edge: a rule of the parser, the language kept.
  const char* nested = "root ::= x\nx ::= \"(\" x \")\" | \"a\"";
  ExpectLanguage(
      nested,
      [](const std::string& s) {
        const size_t k = s.size() / 2;
        return s.size() % 2 == 1 && s == std::string(k, '(') + "a" + std::string(k, ')');
      },
      "()a", 7, 4);
  Grammar g;
  ASSERT_TRUE(CompileGbnf(nested, &g).ok());
  EXPECT_GT(g.lexemes().size(), 1u) << g.Dump();
}

TEST(Gbnf, RecursiveGrammars) {
  const auto balanced = [](const std::string& s) {
    int depth = 0;
    for (char c : s) {
      depth += c == '(' ? 1 : -1;
      if (depth < 0) return false;
    }
    return depth == 0 && !s.empty();
  };
  // One outer pair: "(" root* ")".
  ExpectLanguage(R"g(root ::= "(" root* ")")g",
                 [&](const std::string& s) {
                   if (!balanced(s)) return false;
                   int depth = 0;  // the first "(" closes only at the end
                   for (size_t i = 0; i < s.size(); ++i) {
                     depth += s[i] == '(' ? 1 : -1;
                     if (depth == 0 && i + 1 < s.size()) return false;
                   }
                   return true;
                 },
                 "()", 8, 4);
  ExpectLanguage(R"(root ::= root "a" | "b")", Re("ba*"), "ab", 6, 2);
  // Right recursion through a terminal-looking rule: a list of numbers.
  ExpectLanguage("root ::= num (\",\" root)?\nnum ::= [0-9]+", Re("[0-9]+(,[0-9]+)*"), "0,", 6, 2);
}

// llama.cpp's JSON grammar: strings and numbers are single lexemes (no rule of their characters
// is left), and documents are accepted as JSON says.
TEST(Gbnf, JsonGrammarKeepsItsLexemes) {
  const std::string json_gbnf = R"(# llama.cpp's grammars/json.gbnf, written again
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";
  Grammar g;
  ASSERT_TRUE(CompileGbnf(json_gbnf, &g).ok());
  const std::string dump = g.Dump();
  for (const char* rule : {"string ::=", "number ::=", "ws ::="})
    EXPECT_EQ(dump.find(rule), std::string::npos) << rule << "\n" << dump;
  const auto c = CompileText(json_gbnf);
  ASSERT_NE(c, nullptr);
  for (const char* ok : {R"({})", R"({"a": 1})", "{\"a\": [1, -2.5e3, \"x\\u00e9\", true, null]}\n",
                         R"({"k":{"l":[]}, "m": "é"} )"})
    EXPECT_TRUE(Accepts(c, ok)) << ok;
  for (const char* bad : {R"([1])", R"({"a" 1})", R"({"a": 01x})", R"({"a": "\q"})", "{,}",
                          "{\"a\": tru}", R"({"a": 1,})"})
    EXPECT_FALSE(Accepts(c, bad)) << bad;
}

// What a hostile line could send is bounded: thousands of lexemes side by side, a chain of 2,000
// rules, groups nested 101 deep, 50,001 parts. The first two compile (taken apart where the
// checks would cost too much, the chain a rule of the parser past 100 rules inlined) and accept
// exactly their strings; the others are refused naming why.
TEST(Gbnf, LargeAndDeepGrammarsStayBounded) {
  std::string many = "root ::= (";
  for (int i = 0; i < 3000; ++i) many += (i > 0 ? " | \"k" : "\"k") + std::to_string(i) + "\" x";
  many += ")\nx ::= \".\" | \"(\" x \")\"\n";
  auto g = CompileText(many);
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"k0.", "k123.", "k2999(.)", "k12((.))"}) EXPECT_TRUE(Accepts(g, ok)) << ok;
  for (const char* bad : {"k3000.", "k.", "k1", "k01.", "k12(.", "k1.."})
    EXPECT_FALSE(Accepts(g, bad)) << bad;

  std::string chain = "root ::= r0 \"b\" root?\n";
  for (int i = 0; i < 2000; ++i)
    chain += "r" + std::to_string(i) +
             " ::= " + (i < 1999 ? "r" + std::to_string(i + 1) + " [a-c]?" : std::string("\"a\"")) +
             "\n";
  g = CompileText(chain);
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"ab", "acb", "aabab", "acccb"}) EXPECT_TRUE(Accepts(g, ok)) << ok;
  for (const char* bad : {"b", "a", "abd", "cab"}) EXPECT_FALSE(Accepts(g, bad)) << bad;

  const std::string deep = "root ::= " + std::string(101, '(') + "\"a\"" + std::string(101, ')');
  Grammar out;
  const Status st = CompileGbnf(deep, &out);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_EQ(st.message(), "line 1, column 110: groups are nested deeper than 100");
  EXPECT_TRUE(CompileText("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')')));
  std::string huge = "root ::=";
  for (int i = 0; i < 50001; ++i) huge += " \"a\"";
  const Status big = CompileGbnf(huge, &out);
  EXPECT_EQ(big.code(), Status::Code::kUnsupported);
  EXPECT_EQ(big.message(), "line 1, column 200010: the grammar has more than 50000 parts");
}

TEST(Gbnf, CharactersAndEscapes) {
  const auto g = CompileText(
      "root ::= \"\\u00e9\" [^a\\n] . [\\x41-\\x43] \"\\U0001F600\" \"\\\"\\\\\\t\" \"日本\"");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "ébéA😀\"\\\t日本"));
  EXPECT_TRUE(Accepts(g, "é日\nC😀\"\\\t日本"));   // `.` takes a line break, a class a CJK char
  EXPECT_FALSE(Accepts(g, "éa\nA😀\"\\\t日本"));   // [^a\n] refuses a
  EXPECT_FALSE(Accepts(g, "é\n\nA😀\"\\\t日本"));  // and a line break
  EXPECT_FALSE(Accepts(g, "ébéD😀\"\\\t日本"));    // D is past [A-C]
  EXPECT_FALSE(TakesPrefix(g, "e"));
  EXPECT_FALSE(TakesPrefix(g,
                           "\xc3"  // never a byte that is not UTF-8 in a character
                           "\xa9\xff"));
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(ErrorOf("root ::= \"a\"\nitem ::= thing \"b\""),
            "line 2, column 10: rule 'thing' is not defined");
  EXPECT_EQ(ErrorOf("root = \"a\""),
            "line 1, column 6: expected '::=' after the rule name, found '='");
  EXPECT_NE(ErrorOf("start: \"a\" | b").find("without one, as Lark"), std::string::npos);
  EXPECT_EQ(ErrorOf("item ::= \"a\""), "the grammar has no rule named root");
  EXPECT_EQ(ErrorOf("root ::= \"a\"\nroot ::= \"b\""),
            "line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(ErrorOf("root ::= \"a\\q\""), "line 1, column 12: unknown escape '\\q'");
  EXPECT_EQ(ErrorOf("root ::= [z-a]"), "line 1, column 11: a class range's end is below its start");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{3,2}"),
            "line 1, column 13: a repetition's maximum is below its minimum");
  EXPECT_EQ(ErrorOf("root ::= (\"a\" | \"b\""),
            "line 1, column 20: expected ')', found the end of the grammar");
  EXPECT_EQ(ErrorOf("root ::= \"a\" )"), "line 1, column 14: unexpected ')'");
  EXPECT_EQ(ErrorOf("root ::= \"ab\n\""),
            "line 1, column 13: unexpected the end of the line inside a literal or a class");
  EXPECT_EQ(ErrorOf("root ::= \"\xff\""), "line 1, column 11: the grammar is not UTF-8");
  // What is not enforced: Unsupported, named.
  Grammar g;
  Status st = CompileGbnf("root ::= \"a\"{1001}", &g);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_EQ(st.message(), "line 1, column 14: a repetition bound is at most 1000");
  st = CompileGbnf("root ::= (= \"a\") \"a\"", &g);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_EQ(st.message(), "line 1, column 10: lookahead assertions '(= ...)' are not supported");
  // A grammar with no string at all is refused when compiled (Grammar::Validate).
  ASSERT_TRUE(CompileGbnf("root ::= [^\\x00-\\U0010FFFF]", &g).ok());
  std::shared_ptr<CompiledGrammar> c;
  EXPECT_FALSE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
}

}  // namespace
}  // namespace llmq
