// Regex (engine/structured/regex.h): whole-string and search matches equal std::regex's
// (ECMAScript grammar, an independent implementation) on every string of a small alphabet up to a
// length, prefixes are never refused when some continuation matches, UTF-8 characters are matched
// whole, what is not enforced is refused by name, JSON-string mode matches the encoded forms of
// exactly the matching strings, and a trie walk with it equals a brute force.
#include "engine/structured/regex.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/token_trie.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

std::unique_ptr<Regex> Compiled(const std::string& pattern, Regex::Mode mode) {
  std::unique_ptr<Regex> r;
  const Status st = Regex::Compile(pattern, mode, &r);
  EXPECT_TRUE(st.ok()) << pattern << ": " << st.message();
  return r;
}

// A fixed pseudo-random sequence (xorshift64).
struct XorShift {
  uint64_t x = 88172645463325252ull;
  uint64_t operator()() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
};

// Every string over `alphabet` of length 0..`max_len`.
std::vector<std::string> AllStrings(const std::string& alphabet, int max_len) {
  std::vector<std::string> out = {""}, layer = {""};
  for (int len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const std::string& s : layer)
      for (char c : alphabet) next.push_back(s + c);
    out.insert(out.end(), next.begin(), next.end());
    layer = std::move(next);
  }
  return out;
}

TEST(RegexTest, MatchesLikeStdRegexOnEveryShortString) {
  const std::vector<std::string> patterns = {
      "a",
      "ab|b",
      "a*b+",
      "(ab)?a",
      "a{2}",
      "a{1,2}b{0,}",
      "[a-c]",
      "[^a]",
      "[-a]",
      "[a-]b",
      "\\d+\\.?\\d*",
      "\\w\\W",
      "\\s",
      "\\S\\D",
      "^a",
      "b$",
      "^(a|b)*$",
      "^$",
      ".",
      "^.b.$",
      "(?:a|0)+",
      "a+?b",
      "(a|)b",
      "x{0}a",
      "[\\d.]{2,3}",
      "^[a-z0-9._-]+@[a-z]+$",
      "0|1|a",
      "\\-\\.",
      // Alternatives anchored at one end or neither (search: the unanchored ends share one tail).
      "^a|b$",
      "a$|^b|0",
      "ab|b$|^0|.@",
      "(a|b)$|a.",
      // Anchors inside: assertions (the start or the end of the text), wherever they stand.
      "a^b",
      "(a$)b",
      "(^a)|b",
      "^$|(^a+b$)",
      "^([^@]|$)",
      "^(\\.?(a|b)*($|\\.))*$",
      "(^[^a]*$)|b",
      "a($|b)",
      "(^|@)a",
      "a(@|$)",
      "$^",
      "(a|^)b",
      "(^a|b$)+",
      "^(0$|1)*",
      "(b|$)(^|a)",
      "^$|^\\d{1,2}(?:\\.\\d)?$",
  };
  const std::vector<std::string> strings = AllStrings("ab01.-@ \n", 4);
  for (const std::string& p : patterns) {
    const std::regex oracle(p, std::regex::ECMAScript);
    const auto full = Compiled(p, Regex::Mode::kFull);
    const auto search = Compiled(p, Regex::Mode::kSearch);
    ASSERT_TRUE(full && search) << p;
    for (const std::string& s : strings) {
      // Anchors in full mode: ^a$ and a are the same whole-string language.
      ASSERT_EQ(full->Matches(s), std::regex_match(s, oracle))
          << "/" << p << "/ full on \"" << s << "\"";
      ASSERT_EQ(search->Matches(s), std::regex_search(s, oracle))
          << "/" << p << "/ search on \"" << s << "\"";
    }
  }
}

TEST(RegexTest, APrefixIsRefusedOnlyWhenNothingCanFollowIt) {
  const std::vector<std::string> patterns = {
      "^\\d-\\d{2}$", "^(ab|a0)*1$", "^a.b$",       "[ab]{2}0",   "^(a|b)+@(0|1)$", "(a$)|b0",
      "a(@|$)-?",     "(^a|0)+1",    "^(a($|-))*$", "^$|(^a@b$)", "a^b|0$1|-"};
  const std::vector<std::string> strings = AllStrings("ab01-@", 4);
  const std::vector<std::string> tails = AllStrings("ab01-@", 4);
  for (const std::string& p : patterns) {
    const std::regex oracle(p, std::regex::ECMAScript);
    const auto r = Compiled(p, Regex::Mode::kFull);
    for (const std::string& s : strings) {
      bool continues = false;
      for (const std::string& t : tails)
        if (std::regex_match(s + t, oracle)) {
          continues = true;
          break;
        }
      // Every pattern here completes within four more characters when it can at all.
      ASSERT_EQ(r->IsViablePrefix(s), continues) << "/" << p << "/ prefix \"" << s << "\"";
    }
  }
}

TEST(RegexTest, Utf8CharactersAreMatchedWhole) {
  const auto dot = Compiled("^.$", Regex::Mode::kFull);
  for (const char* one : {"a", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"})
    EXPECT_TRUE(dot->Matches(one)) << one;
  EXPECT_FALSE(dot->Matches("\xc3\xa9\xc3\xa9")) << "two characters";
  EXPECT_FALSE(dot->Matches("\xc3")) << "half a character";
  EXPECT_TRUE(dot->IsViablePrefix("\xc3"));
  EXPECT_FALSE(dot->IsViablePrefix("\xff")) << "never UTF-8";
  EXPECT_FALSE(dot->IsViablePrefix("\xed\xa0\x80")) << "a surrogate";
  EXPECT_FALSE(dot->Matches("\n"));
  const auto greek = Compiled("^[\\u03b1-\\u03c9]+$", Regex::Mode::kFull);
  EXPECT_TRUE(greek->Matches("\xce\xb1\xcf\x89"));  // αω
  EXPECT_FALSE(greek->Matches("a"));
  const auto not_a = Compiled("^[^a]$", Regex::Mode::kFull);
  EXPECT_TRUE(not_a->Matches("\xf0\x9f\x98\x80"));
  EXPECT_FALSE(not_a->Matches("a"));
  const auto literal = Compiled("^caf\xc3\xa9|\\u{1F600}$", Regex::Mode::kFull);
  EXPECT_TRUE(literal->Matches("caf\xc3\xa9"));
  EXPECT_TRUE(literal->Matches("\xf0\x9f\x98\x80"));
}

TEST(RegexTest, WhatIsNotEnforcedIsRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> unsupported = {
      {"(?=a)b", "lookaround"},
      {"(a)\\1", "backreference"},
      {"\\bword", "word boundary"},
      {"\\p{L}", "Unicode property"},
      {"a{1001}", "over 1000"}};
  for (const auto& [p, what] : unsupported) {
    std::unique_ptr<Regex> r;
    const Status st = Regex::Compile(p, Regex::Mode::kSearch, &r);
    EXPECT_EQ(st.code(), Status::Code::kUnsupported) << p << ": " << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("offset"), std::string::npos) << st.message();
  }
  for (const char* p : {"(a", "a)", "*a", "a**", "[z-a]", "a{3,1}", "[a", "\\", "\\x4"}) {
    std::unique_ptr<Regex> r;
    const Status st = Regex::Compile(p, Regex::Mode::kSearch, &r);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << p << ": " << st.message();
  }
}

// Random strings of the syntax's characters: each compiles or is refused, never crashes or grows
// past its bound; a compiled one answers on a few strings.
TEST(RegexTest, RandomPatternsCompileOrAreRefused) {
  const std::string alphabet = "ab01()[]{}|*+?^$\\.-,dDwWsSu:=!<>9";
  XorShift next;
  int compiled = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string p;
    const int len = 1 + static_cast<int>(next() % 12);
    for (int k = 0; k < len; ++k) p += alphabet[next() % alphabet.size()];
    std::unique_ptr<Regex> r;
    const Status st = Regex::Compile(p, Regex::Mode::kSearch, &r);
    if (!st.ok()) {
      EXPECT_TRUE(st.code() == Status::Code::kInvalidArgument ||
                  st.code() == Status::Code::kUnsupported)
          << p;
      continue;
    }
    ++compiled;
    EXPECT_LE(r->num_nfa_states(), static_cast<size_t>(Regex::kMaxNfaStates)) << p;
    for (const char* s : {"", "a", "ab01", "\xc3\xa9-9"}) (void)r->Matches(s);
  }
  EXPECT_GT(compiled, 1000);
  std::unique_ptr<Regex> r;
  EXPECT_EQ(Regex::Compile("(a{1000}){1000}", Regex::Mode::kFull, &r).code(),
            Status::Code::kUnsupported);
}

TEST(RegexTest, AnEmptyLanguageIsDeadFromTheStart) {
  const auto r = Compiled("^[^\\s\\S]$", Regex::Mode::kFull);
  EXPECT_EQ(r->start(), Regex::kDead);
  EXPECT_FALSE(r->Matches(""));
  EXPECT_FALSE(r->IsViablePrefix(""));
}

// JSON-string mode (Options::json_string): a pattern accepts the JSON encoding (Python's
// json.dumps, ensure_ascii=False) of exactly the strings it accepts, and every JSON escape of
// a character it accepts, nothing else.

// Python's json.dumps(s, ensure_ascii=False) without its quotes.
std::string JsonBody(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", c);
          out += u;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::unique_ptr<Regex> Compiled(const std::string& p, Regex::Mode mode, bool json) {
  std::unique_ptr<Regex> r;
  const Status st = Regex::Compile(p, Regex::Options{.mode = mode, .json_string = json}, &r);
  EXPECT_TRUE(st.ok()) << p << ": " << st.message();
  return r;
}

TEST(RegexJsonStringTest, MatchesTheEncodingOfExactlyTheMatchingStrings) {
  const std::vector<std::string> patterns = {"^[a-z]+$",
                                             "\"",
                                             "\\d{3}-\\d{4}",
                                             "[^\"]*",
                                             ".*",
                                             "^\\S+$",
                                             "^.{2,4}$",
                                             "a|\\\\",
                                             "[\\x00-\\x1f]",
                                             "\\n",
                                             "/",
                                             "^[^a]*$",
                                             "\\s",
                                             "^(?:\"|\\\\)+$",
                                             "^\\w*$",
                                             "^[^\\x00-\\x1f\"\\\\/]*$",
                                             "^\\u00e9.$",
                                             "^a.b$",
                                             "[\\b]",
                                             "\u00e9$|^a|b",
                                             "\\n$|z\"|^\\\\",
                                             "(^a|\"$)|b^",
                                             "^$|(^[^\"]+\\n$)",
                                             "a($|\\\\)",
                                             "(^[a-z]+$)",
                                             "(^$)|(^\\d+$)",
                                             "$^",
                                             ""};
  const std::vector<std::string> chars = {
      "a",  "b",  "z",  "0",  "5",    "-",    " ",    "\"",     "\\",     "/",          "\n",
      "\t", "\r", "\b", "\f", "\x01", "\x1f", "\x7f", "\u00e9", "\u20ac", "\U0001F600", "\u2028"};
  XorShift next;
  std::vector<std::string> strings = {""};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(next() % 7);
    for (int k = 0; k < n; ++k) s += chars[next() % chars.size()];
    strings.push_back(s);
  }
  for (const std::string& p : patterns) {
    const std::regex oracle(p, std::regex::ECMAScript);
    for (const Regex::Mode mode : {Regex::Mode::kFull, Regex::Mode::kSearch}) {
      const auto plain = Compiled(p, mode, false);
      const auto json = Compiled(p, mode, true);
      std::unique_ptr<Regex> quoted;  // the whole JSON string, its quotes read too
      ASSERT_TRUE(
          Regex::Compile(p, {.mode = mode, .json_string = true, .quoted = true}, &quoted).ok());
      ASSERT_TRUE(plain && json) << p;
      for (const std::string& s : strings) {
        const bool want = plain->Matches(s);
        if (s.find_first_of("\x7f\x80\xc3\xe2\xf0") ==
            std::string::npos) {  // ASCII: std::regex too
          const bool std_match = mode == Regex::Mode::kFull ? std::regex_match(s, oracle)
                                                            : std::regex_search(s, oracle);
          ASSERT_EQ(want, std_match) << "/" << p << "/ on " << JsonBody(s);
        }
        ASSERT_EQ(json->Matches(JsonBody(s)), want)
            << "/" << p << "/ " << (mode == Regex::Mode::kFull ? "full" : "search") << " on "
            << JsonBody(s);
        ASSERT_EQ(quoted->Matches("\"" + JsonBody(s) + "\""), want)
            << "/" << p << "/ quoted on " << JsonBody(s);
        // A raw control character is never JSON text.
        if (s.find_first_of("\n\t\r\b\f\x01\x1f") != std::string::npos) {
          ASSERT_FALSE(json->Matches(s)) << "/" << p << "/ raw " << JsonBody(s);
        }
      }
    }
  }
}

TEST(RegexJsonStringTest, AcceptsEveryEscapeOfAMatchingCharacterAndNothingElse) {
  struct Case {
    const char* pattern;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"^\\n$", {"\\n", "\\u000a", "\\u000A"}, {"\n", "\\u000b", "\\\\n", "\\u000", "n"}},
      {"^/$", {"/", "\\/"}, {"\\\\/", "\\u002f"}},
      {"^a$", {"a"}, {"\\u0061", "\\a"}},
      {"^\"$", {"\\\""}, {"\"", "\\u0022"}},
      {"^\\\\$", {"\\\\"}, {"\\", "\\u005c"}},
      {"^[\\x00-\\x1f]$",
       {"\\u0000", "\\u001F", "\\u001f", "\\u0010", "\\b", "\\t"},
       {"\x01", "\\u0020", "\\u0100"}},
      {"^.$",
       {"\\t", "\\\"", "\\/", "\\u0001", "\u00e9"},
       {"\\n", "\\r", "\\u000a", "\\u000D", "\\x41", "\\"}},
      {"^[^\\\\]+$", {"abc", "\\\"", "\\n"}, {"a\\\\b"}},
  };
  for (const Case& c : cases) {
    const auto r = Compiled(c.pattern, Regex::Mode::kFull, true);
    for (const std::string& t : c.yes) EXPECT_TRUE(r->Matches(t)) << c.pattern << " on " << t;
    for (const std::string& t : c.no) EXPECT_FALSE(r->Matches(t)) << c.pattern << " on " << t;
  }
  const auto r = Compiled("^\\n$", Regex::Mode::kFull, true);
  EXPECT_TRUE(r->IsViablePrefix("\\"));
  EXPECT_TRUE(r->IsViablePrefix("\\u00"));
  EXPECT_FALSE(r->IsViablePrefix("\\x"));
  EXPECT_FALSE(r->IsViablePrefix("\\u01"));
  std::unique_ptr<Regex> big;  // the escapes count against the state bound
  EXPECT_EQ(
      Regex::Compile(".{1000}", {.mode = Regex::Mode::kFull, .json_string = true}, &big).code(),
      Status::Code::kOk);
}

// A regex as the trie's recognizer, over the Llama 3 vocabulary: the tokens a number lexeme can
// start with are exactly those whose bytes are a viable prefix.
class RegexRecognizer {
 public:
  explicit RegexRecognizer(Regex* r) : r_(r), stack_{r->start()} {}
  bool Push(uint8_t b) {
    const int next = r_->Step(stack_.back(), b);
    if (next == Regex::kDead) return false;
    stack_.push_back(next);
    return true;
  }
  void Pop(int n) { stack_.resize(stack_.size() - static_cast<size_t>(n)); }

 private:
  Regex* r_;
  std::vector<int> stack_;
};

// A search for one of several words: once one has matched, the DFA no longer follows the search
// for the others (one trailing part, Nfa::Reduce); before that, it grew with the combinations
// (3,507 states for six words in JSON-string mode, a patternProperties key taking 281 ms).
TEST(RegexTest, ASearchStopsSearchingOnceItHasMatched) {
  std::unique_ptr<Regex> re;
  ASSERT_TRUE(Regex::Compile("nightly|beta|devedition|release|esr|unbranded-release",
                             {Regex::Mode::kSearch, true, true}, &re)
                  .ok());
  std::vector<int> work = {re->start()};
  std::set<int> seen = {re->start()};
  while (!work.empty()) {
    const int q = work.back();
    work.pop_back();
    for (int b = 0; b < 256; ++b)
      if (const int t = re->Step(q, static_cast<uint8_t>(b));
          t != Regex::kDead && seen.insert(t).second)
        work.push_back(t);
  }
  EXPECT_LT(re->num_dfa_states(), 200u);
  EXPECT_TRUE(re->Matches("\"xbeta\\n\""));
  EXPECT_TRUE(re->Matches("\"\u00e9unbranded-releases\""));
  EXPECT_FALSE(re->Matches("\"releas\\u0065\""));  // an escape Python would not write
  EXPECT_FALSE(re->Matches("\"nightl\""));
}

TEST(RegexTest, ATrieWalkAllowsTheViablePrefixes) {
  const std::string dir = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama32");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  const TokenTrie trie = TokenTrie::FromTokenizer(*tok);
  for (const char* p : {"^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?$",
                        "^\\d{4}-\\d{2}-\\d{2}$", "^[A-Za-z ]{1,12}$"}) {
    auto r = Compiled(p, Regex::Mode::kFull);
    RegexRecognizer rec(r.get());
    TokenMask mask(trie.vocab_size());
    trie.Walk(rec, &mask);
    int expected = 0;
    for (int id = 0; id < tok->vocab_size(); ++id) {
      const bool want = !tok->IsControl(id) && r->IsViablePrefix(tok->TokenBytes(id));
      expected += want;
      ASSERT_EQ(mask.Test(id), want) << p << ": token " << id;
    }
    EXPECT_EQ(mask.Count(), expected) << p;
    EXPECT_GT(expected, 0) << p;
  }
}

}  // namespace
}  // namespace llmq
