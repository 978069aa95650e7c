// Matcher (engine/structured/matcher.h) and Grammar (grammar.h): a grammar over lexemes enforced
// byte by byte and token by token. Checked against independent references: a hand-written
// recursive-descent recognizer of the same small JSON-like language (whole documents, random and
// mutated), and a token-by-token brute force of every mask over the real Llama 3 and Qwen3
// vocabularies of ../shared (each token's bytes consumed by a copy of the matcher) at every step
// of documents; the grammar's contracts refused by Validate.
#include "engine/structured/matcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/structured/json_schema.h"
#include "engine/text/tokenizer.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using Sym = Grammar::Symbol;

// value ::= object | array | STR | NUM | true
// object ::= '{' '}' | '{' members '}'     members ::= STR ':' value | STR ':' value ',' members
// array ::= '[' ']' | '[' elements ']'     elements ::= value | value ',' elements
// with up to 3 spaces folded into each side of a delimiter, as the JSON compiler does.
Grammar MiniJson() {
  Grammar g;
  const Sym lbrace = g.Lexeme("\\{ {0,3}"), rbrace = g.Lexeme(" {0,3}\\}");
  const Sym lbrack = g.Lexeme("\\[ {0,3}"), rbrack = g.Lexeme(" {0,3}\\]");
  const Sym comma = g.Lexeme(" {0,3}, {0,3}"), colon = g.Lexeme(" {0,3}: {0,3}");
  const Sym str = g.Lexeme("\"[a-z]*\""), num = g.Lexeme("-?(0|[1-9][0-9]*)");
  const Sym tru = g.Literal("true");
  const Sym value = g.NewRule("value"), object = g.NewRule("object"), array = g.NewRule("array");
  const Sym members = g.NewRule("members"), elements = g.NewRule("elements");
  for (const Sym s : {object, array, str, num, tru}) g.AddAlternative(value, {s});
  g.AddAlternative(object, {lbrace, rbrace});
  g.AddAlternative(object, {lbrace, members, rbrace});
  g.AddAlternative(members, {str, colon, value});
  g.AddAlternative(members, {str, colon, value, comma, members});
  g.AddAlternative(array, {lbrack, rbrack});
  g.AddAlternative(array, {lbrack, elements, rbrack});
  g.AddAlternative(elements, {value});
  g.AddAlternative(elements, {value, comma, elements});
  g.set_start(value);
  return g;
}

// The reference: recursive descent over the same language, written from the grammar's text.
class MiniJsonReference {
 public:
  static bool Accepts(const std::string& s) {
    MiniJsonReference r{s};
    return r.Value() && r.i_ == s.size();
  }

 private:
  explicit MiniJsonReference(const std::string& s) : s_(s) {}
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  // Up to `n` spaces.
  void Spaces(int n) {
    while (n-- > 0 && Eat(' ')) {
    }
  }
  // A delimiter with up to 3 spaces on each side (before: what the lexeme before left).
  bool Delim(char c, int before, int after) {
    const size_t at = i_;
    Spaces(before);
    if (!Eat(c)) return i_ = at, false;
    Spaces(after);
    return true;
  }
  bool Value() {
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') return Container('{', '}', true);
    if (c == '[') return Container('[', ']', false);
    if (c == '"') return Str();
    if (c == 't') return s_.compare(i_, 4, "true") == 0 ? (i_ += 4, true) : false;
    return Num();
  }
  bool Str() {
    if (!Eat('"')) return false;
    while (i_ < s_.size() && s_[i_] >= 'a' && s_[i_] <= 'z') ++i_;
    return Eat('"');
  }
  bool Num() {
    Eat('-');
    if (Eat('0')) return true;
    if (i_ >= s_.size() || s_[i_] < '1' || s_[i_] > '9') return false;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return true;
  }
  bool Container(char open, char close, bool object) {
    Eat(open);
    // Spaces after the opener: 3 of its own, 3 more of the closer's when empty.
    const size_t at = i_;
    Spaces(6);
    if (Eat(close)) return true;
    i_ = at;
    Spaces(3);
    for (;;) {
      if (object && !(Str() && Delim(':', 3, 3))) return false;
      if (!Value()) return false;
      if (Delim(',', 3, 3)) continue;
      return Delim(close, 3, 0);
    }
  }
  const std::string& s_;
  size_t i_ = 0;
};

std::shared_ptr<CompiledGrammar> CompileOrDie(Grammar g, std::shared_ptr<const TokenTrie> trie) {
  std::shared_ptr<CompiledGrammar> c;
  const Status st = CompiledGrammar::Compile(std::move(g), std::move(trie), &c);
  EXPECT_TRUE(st.ok()) << st.message();
  return c;
}

bool MatcherAccepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& doc) {
  Matcher m(g);
  return m.Consume(doc) && m.CanEnd();
}

// A random document of the language, then maybe mutated.
std::string RandomDoc(std::mt19937& rng, int depth) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const auto sp = [&] { return std::string(static_cast<size_t>(pick(3) == 0 ? pick(4) : 0), ' '); };
  switch (depth > 3 ? 2 + pick(3) : pick(5)) {
    case 0:
    case 1: {
      const bool object = pick(2) == 0;
      std::string s(1, object ? '{' : '[');
      s += sp();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        if (i > 0) s += sp() + "," + sp();
        if (object)
          s += "\"" + std::string(static_cast<size_t>(pick(3)), 'k') + "\"" + sp() + ":" + sp();
        s += RandomDoc(rng, depth + 1);
      }
      return s + sp() + (object ? "}" : "]");
    }
    case 2:
      return "\"" + std::string(static_cast<size_t>(pick(4)), 'a' + static_cast<char>(pick(26))) +
             "\"";
    case 3:
      return pick(2) == 0 ? "0" : (pick(2) == 0 ? "-" : "") + std::to_string(1 + pick(999));
    default:
      return "true";
  }
}

TEST(MatcherTest, WholeDocumentsAgreeWithARecursiveDescentReference) {
  const auto g = CompileOrDie(MiniJson(), TokenTrie::SingleBytes());
  ASSERT_NE(g, nullptr);
  for (const char* doc : {"{}", "[]", "{ }", "[      ]", "{\"a\":1}", "{\"a\" :  [1, 2 ,3]}",
                          "[[[[]]]]", "[true,\"x\",-12,0,{}]", "{\"\":{\"b\":[true]}}"}) {
    EXPECT_TRUE(MiniJsonReference::Accepts(doc)) << doc;
    EXPECT_TRUE(MatcherAccepts(g, doc)) << doc;
  }
  for (const char* doc : {"", "{", "[1,]", "{\"a\"}", "01", "[       ]", "{\"A\":1}", "-0", "[1 2]",
                          "{\"a\":1,}", "true ", " true", "[tru]"}) {
    EXPECT_EQ(MatcherAccepts(g, doc), MiniJsonReference::Accepts(doc)) << doc;
  }
  std::mt19937 rng(7);
  int accepted = 0;
  const std::string bytes = "{}[],: \"a0-1t";
  for (int i = 0; i < 3000; ++i) {
    std::string doc = RandomDoc(rng, 0);
    if (i % 2 == 1 && !doc.empty()) {  // a mutation: a byte replaced, dropped or doubled
      const size_t at = rng() % doc.size();
      switch (rng() % 3) {
        case 0:
          doc[at] = bytes[rng() % bytes.size()];
          break;
        case 1:
          doc.erase(at, 1);
          break;
        default:
          doc.insert(at, 1, doc[at]);
      }
    }
    const bool want = MiniJsonReference::Accepts(doc);
    accepted += want;
    ASSERT_EQ(MatcherAccepts(g, doc), want) << doc;
    if (want)  // a valid document's every prefix is accepted, and only the whole can end
      for (size_t k = 0; k < doc.size(); ++k) {
        Matcher m(g);
        ASSERT_TRUE(m.Consume(doc.substr(0, k))) << doc << " at " << k;
      }
  }
  EXPECT_GT(accepted, 1500);
  EXPECT_LT(accepted, 3000);
}

TEST(MatcherTest, ARefusedTokenLeavesTheStateAsItWas) {
  const auto g = CompileOrDie(MiniJson(), TokenTrie::SingleBytes());
  Matcher m(g);
  ASSERT_TRUE(m.Consume("{\"ab"));
  EXPECT_FALSE(m.Consume("c\":1}x"));  // refused at its last byte
  EXPECT_TRUE(m.Consume("c\":1}"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.IsTerminated());
  TokenMask mask(256);
  m.Mask(&mask);
  EXPECT_EQ(mask.Count(), 0) << "after the whole document only EOS";
}

TEST(MatcherTest, ByteMasksAreTheBytesThatContinue) {
  const auto g = CompileOrDie(MiniJson(), TokenTrie::SingleBytes());
  for (const std::string prefix : {"", "{", "{\"", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\":10 ",
                                   "[", "[1,", "[true", "[{}", "{\"a\":   "}) {
    Matcher m(g);
    ASSERT_TRUE(m.Consume(prefix)) << prefix;
    TokenMask mask(256);
    m.Mask(&mask);
    for (int b = 0; b < 256; ++b) {
      Matcher copy = m;
      EXPECT_EQ(mask.Test(b), copy.Consume(std::string(1, static_cast<char>(b))))
          << "after '" << prefix << "' byte " << b;
    }
  }
}

// Several lexemes alive at once: a key spelled out and any key, with different values after them.
TEST(MatcherTest, LexemesAliveSideBySideEndTogether) {
  Grammar g;
  const Sym lbrace = g.Literal("{"), rbrace = g.Literal("}"), colon = g.Literal(":");
  const Sym name = g.Literal("\"name\""), any = g.Lexeme("\"[a-z]*\"");
  const Sym num = g.Lexeme("[0-9]+"), tru = g.Literal("true");
  const Sym obj = g.NewRule("obj");
  g.AddAlternative(obj, {lbrace, name, colon, num, rbrace});
  g.AddAlternative(obj, {lbrace, any, colon, tru, rbrace});
  g.set_start(obj);
  const auto c = CompileOrDie(std::move(g), TokenTrie::SingleBytes());
  EXPECT_TRUE(MatcherAccepts(c, "{\"name\":12}"));
  EXPECT_TRUE(MatcherAccepts(c, "{\"name\":true}"));
  EXPECT_TRUE(MatcherAccepts(c, "{\"abc\":true}"));
  EXPECT_FALSE(MatcherAccepts(c, "{\"abc\":12}"));
  EXPECT_FALSE(MatcherAccepts(c, "{\"name\":12"));
  Matcher m(c);
  ASSERT_TRUE(m.Consume("{\"nam\":"));
  TokenMask mask(256);
  m.Mask(&mask);
  EXPECT_TRUE(mask.Test('t'));
  EXPECT_FALSE(mask.Test('1'));
}

TEST(GrammarTest, WhatTheMatcherCannotEnforceIsRefused) {
  {
    Grammar g;
    const Sym r = g.NewRule("r");
    g.AddAlternative(r, {g.Lexeme("a*")});
    g.set_start(r);
    std::vector<std::unique_ptr<LexemeAutomaton>> re;
    const Status st = g.CompileLexemes(&re);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("matches the empty string"), std::string::npos) << st.message();
  }
  {
    Grammar g;  // r ::= 'a' r: no document ends
    const Sym r = g.NewRule("r");
    g.AddAlternative(r, {g.Literal("a"), r});
    g.set_start(r);
    const Status st = g.Validate();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("r admits no document"), std::string::npos) << st.message();
  }
  {
    Grammar g;  // s ::= 'b' | 'a' r, r unproductive: the second alternative is dropped
    const Sym s = g.NewRule("s"), r = g.NewRule("r");
    g.AddAlternative(s, {g.Literal("b")});
    g.AddAlternative(s, {g.Literal("a"), r});
    g.AddAlternative(r, {g.Literal("a"), r});
    g.set_start(s);
    ASSERT_TRUE(g.Validate().ok());
    const auto c = CompileOrDie(std::move(g), TokenTrie::SingleBytes());
    Matcher m(c);
    EXPECT_FALSE(m.Consume("a")) << "a prefix that can never be completed is refused";
    EXPECT_TRUE(m.Consume("b"));
  }
  {
    Grammar g;
    const Sym r = g.NewRule("r");
    g.AddAlternative(r, {g.Lexeme("(?=a)a")});
    g.set_start(r);
    std::shared_ptr<CompiledGrammar> c;
    const Status st = CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c);
    EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
  }
  EXPECT_EQ(RegexEscape("a.b{1}\n"), "a\\.b\\{1\\}\\x0a");
}

// m's mask equals the brute force: every token's bytes consumed by a copy of m.
void ExpectMaskIsBruteForce(Matcher* m, const Tokenizer& tok, TokenMask* mask,
                            const std::string& after) {
  m->Mask(mask);
  for (int id = 0; id < tok.vocab_size(); ++id) {
    Matcher copy = *m;
    const bool want = !tok.IsControl(id) && copy.Consume(tok.TokenBytes(id));
    ASSERT_EQ(mask->Test(id), want)
        << "after '" << after << "' token " << id << " '" << tok.TokenBytes(id) << "'";
  }
}

// Consumes `doc` byte by byte, checking the mask against the brute force before every `every`-th
// byte and at the end; how many masks were checked.
int ExpectMasksAlong(Matcher* m, const Tokenizer& tok, const std::string& doc, size_t every) {
  TokenMask mask(tok.vocab_size());
  int checked = 0;
  for (size_t k = 0; k <= doc.size(); ++k) {
    if (k > 0) {
      EXPECT_TRUE(m->Consume(doc.substr(k - 1, 1))) << k;
      if (::testing::Test::HasFailure()) return checked;
    }
    if (k % every != 0 && k != doc.size()) continue;  // the brute force is slow
    ExpectMaskIsBruteForce(m, tok, &mask, doc.substr(0, k));
    if (::testing::Test::HasFatalFailure()) return checked;
    ++checked;
  }
  return checked;
}

// Masks over real vocabularies equal the brute force: every token's bytes consumed by a copy.
class MatcherVocabTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string dir = testing::SharedModel(GetParam());
    LLMQ_SKIP_WITHOUT_SHARED(dir, GetParam());
    ASSERT_TRUE(Tokenizer::Load(dir, &tok_).ok());
    trie = std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok_));
    tok = tok_.get();
  }
  std::unique_ptr<Tokenizer> tok_;
  const Tokenizer* tok = nullptr;  // the vocabulary's tokenizer
  std::shared_ptr<const TokenTrie> trie;
};

TEST_P(MatcherVocabTest, MasksEqualTheTokenByTokenBruteForce) {
  const auto g = CompileOrDie(MiniJson(), trie);
  const std::string doc = "{\"name\":  [1, 23,{\"abc\" : true}, \"xyz\"],\"b\":-40}";
  Matcher m(g);
  EXPECT_GT(ExpectMasksAlong(&m, *tok, doc, 3), 15);
  EXPECT_TRUE(m.CanEnd());
  EXPECT_GT(g->num_cached_masks(), 5u);
}

// Masks kept for one grammar serve another over the same vocabulary (SharedMasks): a grammar with
// the same string lexeme in other surroundings gets its masks from them, and they still equal the
// brute force.
TEST_P(MatcherVocabTest, MasksSharedBetweenGrammarsEqualTheBruteForce) {
  const auto first = CompileOrDie(MiniJson(), trie);
  Matcher warm(first);
  TokenMask mask(trie->vocab_size());
  for (const char c : std::string("[\"abc\", \"de\"]")) {
    warm.Mask(&mask);
    ASSERT_TRUE(warm.Consume(std::string(1, c)));
  }
  // strings ::= '<' STR (';' STR)* '>' with the same STR lexeme, other delimiters.
  Grammar g;
  const Sym str = g.Lexeme("\"[a-z]*\""), open = g.Literal("<"), close = g.Literal(">");
  const Sym sep = g.Literal(";"), list = g.NewRule("list"), tail = g.NewRule("tail");
  g.AddAlternative(list, {open, str, tail});
  g.AddAlternative(tail, {close});
  g.AddAlternative(tail, {sep, str, tail});
  g.set_start(list);
  const auto second = CompileOrDie(std::move(g), trie);
  Matcher m(second);
  ExpectMasksAlong(&m, *tok, "<\"ab\";\"\";\"xyz\">", 1);
  EXPECT_TRUE(m.CanEnd());
}

// The states where several lexemes are alive at once take the union of each one's own mask
// (CompiledGrammar::CacheFor): an object's listed keys beside the key of any other property (the
// names it must not be), a value of several types, a formatted string beside null; masks equal the
// brute force there too, before and after the listed names are passed.
TEST_P(MatcherVocabTest, StatesOfSeveralLexemesEqualTheBruteForce) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "nam": {"type": ["string", "null", "integer"]},
                     "id": {"type": "integer"}},
      "additionalProperties": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}})"),
                                &g)
                  .ok());
  const auto c = CompileOrDie(std::move(g), trie);
  Matcher m(c);
  ExpectMasksAlong(
      &m, *tok,
      R"({"name": "x", "nam": null, "id": 4, "names": "2024-01-02", "na": null, "i": "2020-02-03"})",
      2);
  EXPECT_TRUE(m.CanEnd());
}

// A matcher keeps its last mask (and its only token, and CanEnd) while a token changes neither its
// chart nor its lexer state (inside a string); the kept masks equal those computed afresh by a
// fresh matcher brought to the same text, token by token through a document of long strings,
// escapes, non-ASCII text, numbers and nesting, and the tokens inside a plain string take the kept
// mask.
TEST_P(MatcherVocabTest, KeptMasksEqualMasksComputedAfresh) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"title": {"type": "string"}, "notes": {"type": "array",
                     "items": {"type": "string", "maxLength": 40}}, "n": {"type": "number"}},
      "required": ["title", "notes", "n"], "additionalProperties": false})"),
                                &g)
                  .ok());
  const auto c = CompileOrDie(std::move(g), trie);
  const std::string doc =
      R"({"title": "The quick brown fox jumps over the lazy dog, \"twice\" \u00e9t\u00e9 and )"
      R"(then some more words to make a long string value", "notes": ["café naïve )"
      R"(résumé", "short", "x\ty"], "n": -12.5e3})";
  Matcher m(c);
  std::string text;
  int kept = 0, steps = 0;
  for (const int id : tok->EncodeNoBos(doc)) {
    const TokenMask& got = m.Mask();
    Matcher fresh(c);
    ASSERT_TRUE(fresh.Consume(text));
    TokenMask want;
    fresh.MaskAfresh(&want);
    ASSERT_EQ(got.words(), want.words()) << "after '" << text << "'";
    int only = -1;
    for (int t = 0; t < want.size() && want.Count() == 1; ++t)
      if (want.Test(t)) only = t;
    EXPECT_EQ(m.OnlyToken(), only) << "after '" << text << "'";
    EXPECT_EQ(m.CanEnd(), fresh.CanEnd()) << "after '" << text << "'";
    const int64_t before = m.masks_computed();
    EXPECT_EQ(&m.Mask(), &got);
    EXPECT_EQ(m.masks_computed(), before) << "asked again, unchanged: the kept mask";
    const std::string bytes = tok->TokenBytes(id);
    ASSERT_TRUE(m.Consume(bytes)) << "'" << text << "' + '" << bytes << "'";
    text += bytes;
    ++steps;
    (void)m.Mask();
    kept += m.masks_computed() == before;
  }
  EXPECT_TRUE(m.CanEnd());
  // The title is a plain string of some twenty tokens after its first: each keeps the mask.
  EXPECT_GE(kept, 15) << kept << " of " << steps << " tokens kept the mask";
}

// A string of bounded length: its masks are derived from the unbounded string's layers (what each
// token does from one position in a character: SharedFor), not walked per count; they equal the
// brute force at counts below min, between the bounds and at max, through escapes, a surrogate
// pair (one character) and multibyte characters.
TEST_P(MatcherVocabTest, LengthBoundedStringMasksAreTheBruteForce) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(nlohmann::ordered_json::parse(
                                    R"({"type": "string", "minLength": 4, "maxLength": 9})"),
                                &g)
                  .ok());
  const auto c = CompileOrDie(std::move(g), trie);
  Matcher m(c);
  EXPECT_GE(ExpectMasksAlong(&m, *tok, R"("a\"é\ud83d\ude00x\u00e9yz")", 3), 11);
  EXPECT_TRUE(m.CanEnd());
  Matcher at_max(c);
  EXPECT_GE(ExpectMasksAlong(&at_max, *tok, R"("123456789")", 2), 6);
  EXPECT_TRUE(at_max.CanEnd());
}

// Matchers of one freshly compiled grammar computing their masks on threads side by side (each
// first from the tables as built, again building where one is missing) give, token by token, the
// masks of the same documents computed afresh, one after another, on a grammar of their own.
TEST_P(MatcherVocabTest, MatchersOfOneGrammarOnThreadsGiveTheSerialMasks) {
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"id": {"type": "string", "minLength": 3, "maxLength": 12},
                     "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
                     "n": {"type": "integer"}, "ok": {"type": "boolean"}},
      "required": ["id", "tags", "n", "ok"], "additionalProperties": false})");
  const auto compile = [&] {
    Grammar g;
    EXPECT_TRUE(CompileJsonSchema(schema, &g).ok());
    return CompileOrDie(std::move(g), trie);
  };
  const std::vector<std::string> docs = {
      R"({"id": "abc", "tags": ["red", "blue"], "n": 12, "ok": true})",
      R"({"id": "é\"x\u00e9yz", "tags": [], "n": -3, "ok": false})",
      R"({"id": "0123456789ab", "tags": ["green"], "n": 0, "ok": true})",
      R"({"id": "a b c d", "tags": ["blue", "blue", "red"], "n": 987654, "ok": false})"};
  // Each document's masks before each of its tokens, and at its end (kept, or computed afresh).
  const auto walk = [&](const std::shared_ptr<CompiledGrammar>& g, const std::string& doc,
                        bool afresh, std::vector<std::vector<uint32_t>>* masks) {
    Matcher m(g);
    TokenMask mask;
    const auto next = [&] {
      if (afresh) m.MaskAfresh(&mask);
      masks->push_back(afresh ? mask.words() : m.Mask().words());
    };
    for (const int id : tok->EncodeNoBos(doc)) {
      next();
      if (!m.Consume(tok->TokenBytes(id))) return;
    }
    next();
  };
  std::vector<std::vector<std::vector<uint32_t>>> want(docs.size()), got(docs.size());
  const auto serial = compile();
  for (size_t d = 0; d < docs.size(); ++d) walk(serial, docs[d], true, &want[d]);
  const auto shared = compile();
  std::vector<std::thread> threads;
  for (size_t d = 0; d < docs.size(); ++d)
    threads.emplace_back([&, d] { walk(shared, docs[d], false, &got[d]); });
  for (std::thread& t : threads) t.join();
  for (size_t d = 0; d < docs.size(); ++d) {
    ASSERT_EQ(got[d].size(), want[d].size()) << docs[d];
    EXPECT_EQ(got[d].size(), tok->EncodeNoBos(docs[d]).size() + 1) << "refused: " << docs[d];
    for (size_t k = 0; k < want[d].size(); ++k)
      ASSERT_EQ(got[d][k], want[d][k]) << docs[d] << ", mask " << k;
  }
}

// A matcher whose lexer state's cached mask is built, but whose chart needs a lexeme never started
// on this grammar (here the closing brace, after the last property), computes its mask first from
// the tables as built, finds one missing, and computes it again building: the mask equals the one
// computed afresh.
TEST_P(MatcherVocabTest, AMaskNeedingATableNotBuiltIsComputedAgainBuilding) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"a": {"type": "string"}, "c": {"type": "string"}},
      "required": ["a", "c"], "additionalProperties": false})"),
                                &g)
                  .ok());
  const auto c = CompileOrDie(std::move(g), trie);
  Matcher first(c);
  ASSERT_TRUE(first.Consume(R"({"a": "x)"));
  (void)first.Mask();  // the string's cached mask, and what may follow it here: ", "c": ..."
  Matcher second(c);
  ASSERT_TRUE(second.Consume(R"({"a": "x", "c": "y)"));  // the same lexer state, another chart
  const TokenMask got = second.Mask();
  TokenMask want;
  second.MaskAfresh(&want);
  EXPECT_EQ(got.words(), want.words());
  const std::string close = R"("})";
  bool closes = false;
  for (int id = 0; id < tok->vocab_size() && !closes; ++id)
    closes = tok->TokenBytes(id) == close && got.Test(id);
  EXPECT_TRUE(closes) << "'\"}' ends the document";
}

// Documents of one structure share their chart whatever their strings and numbers, and so their
// masks: a second document's matcher finds every mask the first one's kept in the grammar (none
// computed again), and each equals the mask computed afresh. A document of another structure
// computes its own.
TEST_P(MatcherVocabTest, DocumentsOfOneStructureShareTheirMasks) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                     "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name", "n", "tags"], "additionalProperties": false})"),
                                &g)
                  .ok());
  const auto c = CompileOrDie(std::move(g), trie);
  const auto walk = [&](const std::string& doc) {
    Matcher m(c);
    TokenMask want;
    for (const int id : tok->EncodeNoBos(doc)) {
      const TokenMask& got = m.Mask();
      m.MaskAfresh(&want);
      EXPECT_EQ(got.words(), want.words()) << doc;
      if (!m.Consume(tok->TokenBytes(id))) return false;
    }
    return m.CanEnd();
  };
  ASSERT_TRUE(walk(R"({"name": "alpha beta", "n": 12, "tags": ["x", "yy"]})"));
  const size_t kept = c->num_kept_masks();
  EXPECT_GT(kept, 5u);
  ASSERT_TRUE(walk(R"({"name": "gamma delta", "n": 345, "tags": ["zzz", "w"]})"));
  EXPECT_EQ(c->num_kept_masks(), kept) << "the same structure: every mask found";
  ASSERT_TRUE(walk(R"({"name": "e", "n": -7, "tags": []})"));
  EXPECT_GT(c->num_kept_masks(), kept) << "an empty array: a chart of its own";
}

INSTANTIATE_TEST_SUITE_P(SharedVocabularies, MatcherVocabTest,
                         ::testing::Values("tiny-llama32", "tiny-qwen3"));

}  // namespace
}  // namespace llmq
