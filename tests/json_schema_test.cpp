// The JSON Schema compiler (engine/structured/json_schema.h): each schema's grammar, enforced by a
// Matcher byte by byte, accepts the instances the schema accepts (written as Python's json.dumps
// writes them, or with other whitespace) and rejects the others; what it cannot enforce is refused
// naming the keyword and its JSON pointer.
#include "engine/structured/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/json_regex.h"
#include "engine/structured/matcher.h"
#include "engine/structured/regex.h"
#include "engine/text/tokenizer.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;

class Schema {
 public:
  explicit Schema(const json& schema) {
    Grammar g;
    const Status st = CompileJsonSchema(schema, &g);
    EXPECT_TRUE(st.ok()) << st.message() << "\n" << schema.dump();
    if (st.ok()) {
      EXPECT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c_).ok());
    }
  }
  bool Accepts(const std::string& text) const {
    if (c_ == nullptr) return false;
    Matcher m(c_);
    return m.Consume(text) && m.CanEnd();
  }
  bool Accepts(const json& v) const { return Accepts(PythonJsonDumps(v)); }

 private:
  std::shared_ptr<CompiledGrammar> c_;
};

Status Refusal(const json& schema) {
  Grammar g;
  return CompileJsonSchema(schema, &g);
}

// Each schema: the documents it accepts and those it rejects (json texts as Python writes them).
struct Verdicts {
  const char* schema;
  std::vector<const char*> accepts, rejects;
};
void Check(const std::vector<Verdicts>& cases) {
  for (const Verdicts& c : cases) {
    const Schema s(json::parse(c.schema));
    for (const char* ok : c.accepts)
      EXPECT_TRUE(s.Accepts(json::parse(ok))) << c.schema << " " << ok;
    for (const char* bad : c.rejects)
      EXPECT_FALSE(s.Accepts(json::parse(bad))) << c.schema << " " << bad;
  }
}

TEST(JsonSchemaTest, PythonDumpsShape) {
  EXPECT_EQ(PythonJsonDumps(json::parse(R"({"a": [1, "x\n\"", null, true, 2.5], "b": {}})")),
            "{\"a\": [1, \"x\\n\\\"\", null, true, 2.5], \"b\": {}}");
  EXPECT_EQ(JsonQuote(std::string("\x01\xc3\xa9", 3)), "\"\\u0001\xc3\xa9\"");
}

TEST(JsonSchemaTest, ScalarsByType) {
  const Schema s(json::parse(R"({"type": ["integer", "null", "boolean"]})"));
  for (const char* ok : {"0", "-12", "null", "true", "false"})
    EXPECT_TRUE(s.Accepts(std::string(ok))) << ok;
  for (const char* bad : {"1.5", "\"1\"", "01", "-", "nul", "[]", "{}", " 1", "1 "})
    EXPECT_FALSE(s.Accepts(std::string(bad))) << bad;
  const Schema num(json::parse(R"({"type": "number"})"));
  for (const char* ok : {"0", "1.5", "-0.25e+10", "3E5"})
    EXPECT_TRUE(num.Accepts(std::string(ok))) << ok;
  for (const char* bad : {".5", "1.", "1e", "+1"})
    EXPECT_FALSE(num.Accepts(std::string(bad))) << bad;
  const Schema str(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"));
  for (const char* ok : {"\"ab\"", "\"a\\nb\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\u0041bc\""})
    EXPECT_TRUE(str.Accepts(std::string(ok))) << ok;
  for (const char* bad : {"\"a\"", "\"abcd\"", "\"a\nb\"", "\"\\x41b\""})
    EXPECT_FALSE(str.Accepts(std::string(bad))) << bad;
}

TEST(JsonSchemaTest, PropertiesInOrderRequiredOnesPresent) {
  // a required, b optional, c required, d optional; no others.
  const Schema s(json::parse(R"({"type": "object", "additionalProperties": false,
      "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
                     "d": {"type": "null"}},
      "required": ["a", "c"]})"));
  const json values = json::parse(R"({"a": 1, "b": "x", "c": true, "d": null})");
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  for (int subset = 0; subset < 16; ++subset) {
    json o = json::object();
    std::string text = "{";
    for (int i = 0; i < 4; ++i)
      if (subset >> i & 1) {
        text += (text.size() > 1 ? ", " : "") + JsonQuote(names[static_cast<size_t>(i)]) + ": " +
                values[names[static_cast<size_t>(i)]].dump();
      }
    text += "}";
    const bool want = (subset & 1) && (subset & 4);
    EXPECT_EQ(s.Accepts(text), want) << text;
  }
  EXPECT_FALSE(s.Accepts(std::string("{\"c\": true, \"a\": 1}"))) << "out of order";
  EXPECT_FALSE(s.Accepts(std::string("{\"a\": 1, \"c\": true, \"e\": 1}")));
  EXPECT_FALSE(s.Accepts(std::string("{\"a\": \"1\", \"c\": true}")));
  EXPECT_TRUE(s.Accepts(std::string("{\n  \"a\" :1,\t\"c\":  true\r\n}")));
  const std::string ws(JsonSchemaOptions::kMaxWhitespace, ' ');
  EXPECT_TRUE(s.Accepts("{" + ws + "\"a\": 1, \"c\": true}"));
  EXPECT_FALSE(s.Accepts("{" + ws + " \"a\": 1, \"c\": true}")) << "whitespace is bounded";
}

TEST(JsonSchemaTest, OtherPropertiesAfterTheListedOnesNeverUnderAListedName) {
  const Schema s(json::parse(R"({"type": "object",
      "properties": {"id": {"type": "integer"}, "idx": {"type": "string"}},
      "additionalProperties": {"type": "boolean"}})"));
  EXPECT_TRUE(s.Accepts(json::parse(R"({"id": 1, "idx": "a", "i": true, "ids": false})")));
  EXPECT_TRUE(s.Accepts(json::parse(R"({"other": true})")));
  EXPECT_TRUE(s.Accepts(json::parse(R"({"": true, "i": false, "idxx": true})")));
  EXPECT_FALSE(s.Accepts(json::parse(R"({"id": true})"))) << "a listed name with another's value";
  EXPECT_FALSE(s.Accepts(std::string(R"({"other": true, "id": 1})")))
      << "the listed ones come first";
  EXPECT_FALSE(s.Accepts(json::parse(R"({"x": 1})")));
  // A name has one spelling, Python's json.dumps': a listed name written with other escapes
  // would pass for another (and be validated as one), so an unlisted key takes only the escapes
  // JSON requires.
  for (const char* bad :
       {R"({"i\u0064": true})", R"({"\u0069d": true})", R"({"a\/b": true})", R"({"\u00e9": true})",
        R"({"\u001F": true})", R"({"\ud83d\ude00": true})"})
    EXPECT_FALSE(s.Accepts(std::string(bad))) << bad;
  for (const char* ok : {R"({"i\"d": true})", R"({"a\\b\n\t": true})", R"({"\u001f\u0000": true})",
                         "{\"\u00e9\": true}"})
    EXPECT_TRUE(s.Accepts(std::string(ok))) << ok;
  const Schema any(json::parse(R"({"properties": {"a": {"type": "string"}}})"));
  EXPECT_TRUE(any.Accepts(json::parse(R"({"a": "x", "b": [1, {"c": null}]})")));
  EXPECT_TRUE(any.Accepts(json::parse("12"))) << "no type: any type, properties on objects";
}

TEST(JsonSchemaTest, RefsRecurseAndCombinatorsCombine) {
  const Schema tree(json::parse(R"({"$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
        "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}}, "$ref": "#/$defs/node"})"));
  EXPECT_TRUE(tree.Accepts(json::parse(R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})")));
  EXPECT_FALSE(tree.Accepts(json::parse(R"({"v": 1, "kids": [{"w": 2}]})")));
  const Schema any_of(json::parse(R"({"anyOf": [{"type": "string"}, {"enum": [1, "x", null]}]})"));
  for (const char* ok : {"\"q\"", "1", "null"}) EXPECT_TRUE(any_of.Accepts(std::string(ok))) << ok;
  for (const char* bad : {"2", "true"}) EXPECT_FALSE(any_of.Accepts(std::string(bad))) << bad;
  const Schema all_of(json::parse(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})"));
  EXPECT_TRUE(all_of.Accepts(json::parse(R"({"a": 1, "b": "x"})")));
  EXPECT_FALSE(all_of.Accepts(json::parse(R"({"a": 1})")));
  // additionalProperties sees only its own schema's properties: b is forbidden by the first.
  const Status closed = Refusal(json::parse(R"({"allOf": [
      {"properties": {"a": {"type": "integer"}}, "additionalProperties": false},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]}], "type": "object"})"));
  EXPECT_NE(closed.message().find("no document"), std::string::npos) << closed.message();
  const Schema siblings(json::parse(R"({"type": "object", "additionalProperties": false,
      "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
      "anyOf": [{"required": ["kind"]}, {"required": ["n"]}]})"));
  EXPECT_TRUE(siblings.Accepts(json::parse(R"({"n": 1})")));
  EXPECT_TRUE(siblings.Accepts(json::parse(R"({"kind": "b"})")));
  EXPECT_FALSE(siblings.Accepts(json::parse("{}")));
  const Schema two(json::parse(R"({"enum": [2.0, "x"]})"));
  for (const char* ok : {"2", "2.0", "2.00", "\"x\""})
    EXPECT_TRUE(two.Accepts(std::string(ok))) << ok;
  for (const char* bad : {"2.01", "20", "-2"}) EXPECT_FALSE(two.Accepts(std::string(bad))) << bad;
  const Schema konst(json::parse(R"({"const": "on"})"));
  EXPECT_TRUE(konst.Accepts(json::parse("\"on\"")));
  EXPECT_FALSE(konst.Accepts(json::parse("\"off\"")));
}

// enum and const of objects and arrays: exactly those values (members compared by value, numbers
// by value), the properties in the value's order, whitespace as anywhere.
TEST(JsonSchemaTest, EnumsOfObjectsAndArrays) {
  const Schema s(
      json::parse(R"({"enum": [{"op": "add", "args": [1, 2.5]}, [null, {"k": []}], "x"]})"));
  for (const char* ok : {R"({"op": "add", "args": [1, 2.5]})", R"({"op":"add","args":[1.0,2.50]})",
                         R"([null, {"k": []}])", R"([ null , { "k" : [ ] } ])", R"("x")"})
    EXPECT_TRUE(s.Accepts(std::string(ok))) << ok;
  for (const char* bad : {R"({"op": "add"})", R"({"op": "add", "args": [1, 2.5], "x": 1})",
                          R"({"op": "add", "args": [1]})", R"({"op": "add", "args": [1, 2.5, 3]})",
                          R"({"op": "sub", "args": [1, 2.5]})", R"([null, {"k": [1]}])",
                          R"([null])", R"([])", R"({})", R"("y")"})
    EXPECT_FALSE(s.Accepts(std::string(bad))) << bad;
  const Schema typed(json::parse(R"({"type": "array", "const": [1, "a"]})"));
  EXPECT_TRUE(typed.Accepts(json::parse(R"([1, "a"])")));
  EXPECT_FALSE(typed.Accepts(json::parse(R"(["a", 1])")));
  const Schema other_type(json::parse(R"({"type": "string", "enum": [{"a": 1}, "b"]})"));
  EXPECT_FALSE(other_type.Accepts(json::parse(R"({"a": 1})"))) << "not of the type";
  EXPECT_TRUE(other_type.Accepts(json::parse(R"("b")")));
  // The keywords beside the enum hold for its objects and arrays too (each value's shape merged
  // with them): {"a": "x"} fails a's type, [1] the count.
  const Schema beside(json::parse(R"({"enum": [{"a": 1}, {"a": "x"}, [1, 2], [1]],
      "properties": {"a": {"type": "integer"}}, "minItems": 2})"));
  for (const char* ok : {R"({"a": 1})", R"([1, 2])"}) EXPECT_TRUE(beside.Accepts(std::string(ok)));
  for (const char* bad : {R"({"a": "x"})", R"([1])"})
    EXPECT_FALSE(beside.Accepts(std::string(bad))) << bad;
}

// A surrogate pair written as two \u escapes is one character, as validators count it (Ajv's
// ucs2length); a lone surrogate, high or low, is refused (strict parsers refuse it: a document the
// grammar allowed always parses), bounded or not.
TEST(JsonSchemaTest, ASurrogatePairOfEscapesIsOneCharacterALoneOneNone) {
  const Schema one(json::parse(R"({"type": "string", "minLength": 1, "maxLength": 1})"));
  const Schema any(json::parse(R"({"type": "string"})"));
  for (const char* ok : {R"("\ud83d\ude00")", R"("\uD83D\uDE00")", R"("\udbff\udfff")",
                         "\"\xf0\x9f\x98\x80\"", R"("\u00e9")", R"("\ud7ff")", R"("\ue000")"}) {
    EXPECT_TRUE(one.Accepts(std::string(ok))) << ok;
    EXPECT_TRUE(any.Accepts(std::string(ok))) << ok;
  }
  for (const char* lone :
       {R"("\ud83d")", R"("\ude00")", R"("\ud83dx")", R"("\ud83d\n")", R"("\ud83d\ud83d")",
        R"("\ud83d\u0041")", R"("\ude00\ude00")", R"("\ud83d\/")", R"("a\uDC00")"}) {
    EXPECT_FALSE(one.Accepts(std::string(lone))) << lone;
    EXPECT_FALSE(any.Accepts(std::string(lone))) << lone;
  }
  EXPECT_FALSE(one.Accepts(std::string(R"("\ud83d\ude00a")")));
  const Schema two(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 2})"));
  for (const char* ok :
       {R"("\ud83d\ude00\ud83d\ude00")", R"("a\ud83d\ude00")", R"("\uD83D\uDe00x")"})
    EXPECT_TRUE(two.Accepts(std::string(ok))) << ok;
  for (const char* bad : {R"("\ud83d\ude00")", R"("\ud83d\ud83d\ude00x")", R"("\ud83dx")"})
    EXPECT_FALSE(two.Accepts(std::string(bad))) << bad;
}

// Lengths are counted, not unrolled: long bounds cost nothing, and masks are cached per count
// class (far from the bounds one mask): each mask equals the token-by-token brute force over the
// Llama 3 vocabulary near and far from the bounds.
TEST(JsonSchemaTest, LongStringBoundsAndTheirMasks) {
  const Schema big(json::parse(R"({"type": "string", "minLength": 2000, "maxLength": 5000})"));
  EXPECT_TRUE(big.Accepts(json(std::string(2000, 'a'))));
  EXPECT_TRUE(big.Accepts(json(std::string(4999, 'a') + "\xc3\xa9")));
  EXPECT_FALSE(big.Accepts(json(std::string(1999, 'a'))));
  EXPECT_FALSE(big.Accepts(json(std::string(5001, 'a'))));
  const std::string dir = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama32");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  auto trie = std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok));
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(json::parse(R"({"type": "string", "minLength": 150,
      "maxLength": 420})"),
                                &g)
                  .ok());
  std::shared_ptr<CompiledGrammar> c;
  ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), trie, &c).ok());
  std::string text = "\"";
  for (int i = 0; text.size() < 421; ++i) text += "word" + std::to_string(i) + " ";
  text = text.substr(0, 421) + "\"";  // 420 characters
  const std::vector<int> ids = tok->EncodeNoBos(text);
  Matcher m(c);
  TokenMask mask(trie->vocab_size());
  int checked = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k % 6 == 0 || k + 3 >= ids.size()) {
      m.Mask(&mask);
      for (int id = 0; id < tok->vocab_size(); id += 3) {
        Matcher copy = m;
        ASSERT_EQ(mask.Test(id), !tok->IsControl(id) && copy.Consume(tok->TokenBytes(id)))
            << "token " << k << ", id " << id;
      }
      ++checked;
    }
    ASSERT_TRUE(m.Consume(tok->TokenBytes(ids[k]))) << k;
  }
  EXPECT_TRUE(m.CanEnd());
  EXPECT_GT(checked, 10);
  EXPECT_LT(c->num_cached_masks(), static_cast<size_t>(checked)) << "far from the bounds: one";
}

TEST(JsonSchemaTest, TheFormsOfNotSchemasUse) {
  // Exactly one of a and b: oneOf made exclusive by not-required.
  const Schema one(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}}, "oneOf": [{"required": ["a"], "not": {"required": ["b"]}},
      {"required": ["b"], "not": {"required": ["a"]}}]})"));
  EXPECT_TRUE(one.Accepts(json::parse(R"({"a": 1})")));
  EXPECT_TRUE(one.Accepts(json::parse(R"({"b": 1})")));
  EXPECT_FALSE(one.Accepts(json::parse(R"({"a": 1, "b": 2})")));
  EXPECT_FALSE(one.Accepts(json::parse("{}")));
  const Schema not_type(json::parse(R"({"not": {"type": ["string", "object", "array"]}})"));
  for (const char* ok : {"1", "2.5", "null", "true"})
    EXPECT_TRUE(not_type.Accepts(std::string(ok)));
  for (const char* bad : {"\"x\"", "{}", "[]"}) EXPECT_FALSE(not_type.Accepts(std::string(bad)));
  const Schema not_names(json::parse(R"({"type": "string", "not": {"enum": ["admin", "root"]}})"));
  EXPECT_TRUE(not_names.Accepts(json("adm")));
  EXPECT_TRUE(not_names.Accepts(json("admins")));
  EXPECT_FALSE(not_names.Accepts(json("admin")));
  EXPECT_FALSE(not_names.Accepts(json("root")));
  const Schema twice(json::parse(R"({"not": {"not": {"type": "null"}}})"));
  EXPECT_TRUE(twice.Accepts(std::string("null")));
  EXPECT_FALSE(twice.Accepts(std::string("1")));
  EXPECT_FALSE(Refusal(json::parse(R"({"not": {}})")).ok()) << "nothing is valid";
  const Status other =
      Refusal(json::parse(R"({"properties": {"p": {"not": {"format": "date"}}}})"));
  EXPECT_NE(other.message().find("keyword \"not\" at \"/properties/p/not\""), std::string::npos)
      << other.message();
}

// not, oneOf of branches that overlap, if/then/else and contains, written as the union of schemas
// the complement is (each verdict is Ajv's: tests/oracle/jsonschema, run on these by hand).
TEST(JsonSchemaTest, NotIsTheComplementKeywordByKeyword) {
  const struct {
    const char* schema;
    std::vector<const char*> valid, invalid;
  } cases[] = {
      {R"~({"not": {"minimum": 3}})~",
       {R"~(1)~", R"~(2.9)~", R"~(-100000.0)~"},
       {R"~(3)~", R"~(4)~", R"~("x")~", R"~(null)~"}},
      {R"~({"type": "integer", "not": {"minimum": 3, "maximum": 7}})~",
       {R"~(1)~", R"~(2)~", R"~(8)~", R"~(100)~"},
       {R"~(3)~", R"~(7)~", R"~("x")~"}},
      {R"~({"type": "string", "not": {"minLength": 2}})~",
       {R"~("")~", R"~("a")~"},
       {R"~("ab")~", R"~("abc")~", R"~(1)~"}},
      {R"~({"type": "string", "not": {"maxLength": 2, "minLength": 1}})~",
       {R"~("")~", R"~("abc")~"},
       {R"~("a")~", R"~("ab")~", R"~(1)~"}},
      {R"~({"not": {"enum": [1, 2, "a", true, null]}})~",
       {R"~(0)~", R"~(1.5)~", R"~(3)~", R"~("b")~", R"~(false)~", R"~([])~", R"~({})~"},
       {R"~(1)~", R"~(2)~", R"~("a")~", R"~(true)~", R"~(null)~"}},
      {R"~({"type": "object", "properties": {"k": {"type": "string"}}, "not": {"properties": {"k": {"enum": ["x"]}}}})~",
       {R"~({"k": "y"})~"},
       {R"~({})~", R"~({"k": "x"})~"}},
      {R"~({"not": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}})~",
       {R"~({})~", R"~({"a": 1})~", R"~(1)~", R"~("s")~", R"~([])~"},
       {R"~({"a": "s"})~"}},
      {R"~({"type": "object", "oneOf": [{"properties": {"c": {"enum": ["m"]}}, "required": ["url"]}, {"properties": {"c": {"enum": ["o"]}}, "required": ["url"]}]})~",
       {R"~({"c": "m", "url": "u"})~", R"~({"c": "o", "url": "u"})~"},
       {R"~({"url": "u"})~", R"~({"url": "u", "c": "z"})~", R"~({"c": "m"})~"}},
      {R"~({"not": {"allOf": [{"type": "string"}, {"minLength": 2}]}})~",
       {R"~("")~", R"~("a")~", R"~(1)~"},
       {R"~("ab")~"}},
      {R"~({"not": {"anyOf": [{"type": "string"}, {"minimum": 2}]}})~",
       {R"~(1)~"},
       {R"~("")~", R"~("a")~", R"~(2)~", R"~(3)~", R"~(null)~"}},
      {R"~({"type": "array", "not": {"minItems": 2}})~", {R"~([])~", R"~([1])~"}, {R"~([1, 2])~"}},
      {R"~({"type": "object", "not": {"maxProperties": 1}})~",
       {R"~({"a": 1, "b": 2})~"},
       {R"~({})~", R"~({"a": 1})~"}},
      {R"~({"type": "object", "not": {"dependentRequired": {"a": ["b"]}}})~",
       {R"~({"a": 1})~"},
       {R"~({})~", R"~({"a": 1, "b": 2})~", R"~({"b": 2})~"}},
      {R"~({"type": "number", "not": {"exclusiveMinimum": 0, "exclusiveMaximum": 10}})~",
       {R"~(-1)~", R"~(0)~", R"~(10)~", R"~(11)~"},
       {R"~(5)~"}},
      {R"~({"not": {"const": false}})~", {R"~(true)~", R"~(0)~", R"~(null)~"}, {R"~(false)~"}},
      {R"~({"type": "object", "properties": {"a": {}}, "not": {"required": ["a", "b"]}})~",
       {R"~({})~", R"~({"a": 1})~"},
       {R"~({"a": 1, "b": 2})~"}},
      {R"~({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}})~",
       {R"~("ab")~", R"~(1)~"},
       {R"~("")~", R"~("a")~", R"~(1.5)~", R"~(null)~"}},
      {R"~({"type": "object", "properties": {"country": {"enum": ["US", "CA"]}, "zip": {"type": "string"}}, "if": {"properties": {"country": {"const": "US"}}}, "then": {"properties": {"zip": {"maxLength": 5}}}, "else": {"properties": {"zip": {"minLength": 6}}}})~",
       {R"~({"country": "US", "zip": "123"})~", R"~({"country": "CA", "zip": "123456"})~",
        R"~({"zip": "12"})~"},
       {R"~({"country": "US", "zip": "123456"})~", R"~({"country": "CA", "zip": "123"})~",
        R"~({"zip": "1234567"})~"}},
      {R"~({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}})~",
       {R"~({})~", R"~({"a": 1, "b": 2})~", R"~({"b": 1})~"},
       {R"~({"a": 1})~"}},
      {R"~({"then": {"type": "string"}})~", {R"~(1)~", R"~("x")~"}, {}},
      {R"~({"type": "integer", "if": {"minimum": 10}, "then": {"maximum": 20}, "else": {"minimum": 0}})~",
       {R"~(0)~", R"~(5)~", R"~(10)~", R"~(20)~"},
       {R"~(-1)~", R"~(21)~"}},
      {R"~({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false}, {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": false}]})~",
       {R"~({"a": 1})~", R"~({"b": 1})~"},
       {R"~({})~", R"~({"a": 1, "b": 2})~", R"~({"c": 1})~"}},
      {R"~({"type": "object", "properties": {"a": {}, "xb": {}, "xc": {}}, "additionalProperties": false, "not": {"patternProperties": {"^x": {"type": "integer"}}}})~",
       {R"~({"xb": "s"})~", R"~({"xb": 1, "xc": "t"})~"},
       {R"~({})~", R"~({"a": 1})~", R"~({"xb": 1})~", R"~({"xb": 1, "xc": 2})~"}},
      {R"~({"type": "object", "properties": {"a": {}, "bb": {}}, "additionalProperties": false, "not": {"propertyNames": {"enum": ["a"]}}})~",
       {R"~({"bb": 1})~", R"~({"a": 1, "bb": 2})~"},
       {R"~({})~", R"~({"a": 1})~"}},
      {R"~({"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": false, "not": {"properties": {"a": {}}, "additionalProperties": {"type": "string"}}})~",
       {R"~({"b": 1})~", R"~({"a": 1, "b": 2})~"},
       {R"~({})~", R"~({"a": 1})~", R"~({"b": "s"})~"}},
      {R"~({"anyOf": [{"type": "object", "properties": {"a": {}}, "additionalProperties": false}, {"type": "string"}], "not": {"additionalProperties": false}})~",
       {R"~({"a": 1})~"},
       {R"~({})~", R"~("s")~"}},
      {R"~({"not": {"type": "integer"}})~",
       {R"~(1.5)~", R"~("x")~", R"~(0.225)~", R"~(-0.5)~", R"~(null)~", R"~([])~", R"~(1.05)~"},
       {R"~(1)~", R"~(1.0)~", R"~(0.0)~"}},
      {R"~({"oneOf": [{"type": "integer"}, {"type": "number"}]})~",
       {R"~(1.5)~", R"~(-2.75)~"},
       {R"~(1)~", R"~("x")~", R"~(0)~"}},
      {R"~({"enum": [1, 2.5, 3], "not": {"type": "integer"}})~",
       {R"~(2.5)~"},
       {R"~(1)~", R"~(3)~"}},
      {R"~({"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}, "v": {}}, "additionalProperties": false, "oneOf": [{"properties": {"k": {"const": "a"}, "v": {"type": "string"}}}, {"properties": {"k": {"const": "b"}, "v": {"type": "integer"}}}]}})~",
       {R"~([{"k": "a", "v": "s"}])~", R"~([{"k": "b", "v": 1}])~", R"~([{"v": "s"}])~"},
       {R"~([{"k": "a", "v": 1}])~", R"~([{"k": "b", "v": "s"}])~", R"~([{"v": []}])~",
        R"~([{}])~"}},
      // contains (counted), not {items}, not {contains}.
      {R"~({"type": "array", "contains": {"type": "string"}})~",
       {R"~(["a"])~", R"~([1, "a"])~", R"~(["a", "b", 2])~"},
       {R"~([])~", R"~([1])~"}},
      {R"~({"type": "array", "contains": {"type": "string"}, "minContains": 2})~",
       {R"~(["a", "b"])~", R"~([1, "a", 2, "b"])~"},
       {R"~([])~", R"~(["a"])~"}},
      {R"~({"type": "array", "contains": {"type": "string"}, "maxContains": 1})~",
       {R"~(["a"])~", R"~([1, "a", 2])~"},
       {R"~([])~", R"~(["a", "b"])~"}},
      {R"~({"type": "array", "contains": {"type": "string"}, "minContains": 0, "maxContains": 1})~",
       {R"~([])~", R"~(["a"])~", R"~([1, 2])~"},
       {R"~(["a", "b"])~"}},
      {R"~({"type": "array", "items": {"type": ["string", "integer"]}, "not": {"items": {"type": "string"}}})~",
       {R"~([1])~", R"~(["a", 1])~"},
       {R"~([])~", R"~(["a"])~"}},
      {R"~({"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "array", "items": {"type": "integer"}}]})~",
       {R"~(["a"])~", R"~([1])~"},
       {R"~([])~", R"~(["a", 1])~"}},
      {R"~({"type": "array", "not": {"contains": {"const": 1}}})~",
       {R"~([])~", R"~([2])~"},
       {R"~([1])~", R"~([2, 1])~"}},
      {R"~({"type": "array", "not": {"contains": {"const": 1}, "minContains": 2}})~",
       {R"~([])~", R"~([1])~", R"~([2, 1, 3])~"},
       {R"~([1, 1])~"}},
      {R"~({"type": "array", "prefixItems": [{"type": "integer"}], "contains": {"type": "string"}, "maxItems": 3})~",
       {R"~([1, "a"])~", R"~([1, 2, "a"])~"},
       {R"~([1])~", R"~(["a"])~", R"~([1, 2, 3, "a"])~"}},
      {R"~({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "contains": {"type": "string"}, "maxContains": 1})~",
       {R"~(["a", "b"])~"},
       {R"~([1])~"}},
      // not {pattern}: a string none of the patterns matches.
      {R"~({"type": "string", "not": {"pattern": "^a"}})~",
       {R"~("")~", R"~("ba")~", R"~("b")~"},
       {R"~("a")~", R"~("ab")~"}},
      {R"~({"type": "string", "pattern": "b", "not": {"pattern": "^a"}})~",
       {R"~("ba")~", R"~("b")~"},
       {R"~("")~", R"~("ab")~", R"~("c")~"}},
      {R"~({"not": {"pattern": "[0-9]"}})~", {R"~("x")~"}, {R"~("x1")~", R"~(1)~", R"~(null)~"}},
      {R"~({"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]})~",
       {R"~("a")~", R"~("b")~"},
       {R"~("ab")~", R"~("c")~"}},
      {R"~({"type": "string", "not": {"anyOf": [{"pattern": "^a"}, {"enum": ["zz"]}]}})~",
       {R"~("z")~", R"~("bz")~"},
       {R"~("a")~", R"~("zz")~"}},
      {R"~({"not": {"not": {"pattern": "^a"}}})~", {R"~("a")~", R"~(1)~"}, {R"~("b")~"}},
      {R"~({"type": "string", "not": {"pattern": "é"}})~",
       {R"~("e")~", R"~("\n")~"},
       {R"~("é")~", R"~("aé")~"}},
      // Beside lengths and a pattern; oneOf beside anyOf.
      {R"~({"type": "string", "minLength": 2, "maxLength": 3, "not": {"enum": ["ab", "xyz"]}})~",
       {R"~("ac")~", R"~("xyy")~", R"~("é😀")~"},
       {R"~("a")~", R"~("ab")~", R"~("xyz")~", R"~("abcd")~"}},
      {R"~({"type": "string", "minLength": 1, "not": {"pattern": "^a"}})~",
       {R"~("b")~", R"~("ba")~"},
       {R"~("")~", R"~("a")~"}},
      {R"~({"type": "string", "maxLength": 1, "pattern": "[0-9]", "not": {"const": "1"}})~",
       {R"~("2")~"},
       {R"~("")~", R"~("1")~", R"~("12")~", R"~("x")~"}},
      {R"~({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}], "oneOf": [{"required": ["c"]}, {"required": ["d"]}]})~",
       {R"~({"a": 1, "c": 1})~", R"~({"a": 1, "d": 1})~", R"~({"b": 1, "d": 1})~"},
       {R"~({})~", R"~({"a": 1, "c": 1, "d": 1})~", R"~({"c": 1})~"}},
      // Several if/then as allOf parts.
      {R"~({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "string"}, "c": {"type": "boolean"}, "d": {"type": "string"}}, "allOf": [{"if": {"properties": {"a": {"const": false}}}, "then": {"required": ["b"]}}, {"if": {"properties": {"c": {"const": true}}}, "then": {"required": ["d"]}}]})~",
       {R"~({"a": false, "b": "x", "c": true, "d": "y"})~", R"~({"a": true, "c": false})~"},
       {R"~({})~", R"~({"a": false})~", R"~({"a": false, "b": "x"})~", R"~({"c": true})~",
        R"~({"c": true, "d": "y"})~", R"~({"a": false, "b": "x", "c": true})~"}},
      {R"~({"allOf": [{"if": {"type": "string"}, "then": {"minLength": 2}}, {"if": {"type": "integer"}, "then": {"minimum": 3}}, {"if": {"type": "array"}, "then": {"minItems": 1}}]})~",
       {R"~("ab")~", R"~(3)~", R"~([1])~", R"~(null)~"},
       {R"~("a")~", R"~(1)~", R"~([])~"}},
  };
  for (const auto& c : cases) {
    const Schema s(json::parse(c.schema));
    for (const char* v : c.valid) EXPECT_TRUE(s.Accepts(std::string(v))) << c.schema << " " << v;
    for (const char* v : c.invalid) EXPECT_FALSE(s.Accepts(std::string(v))) << c.schema << " " << v;
  }
  // Before draft 7, if/then/else are not keywords (a draft-04 schema's `if` constrains nothing).
  const Schema draft4(json::parse(R"({"$schema": "http://json-schema.org/draft-04/schema#",
      "if": {"type": "string"}, "then": {"minLength": 2}})"));
  EXPECT_TRUE(draft4.Accepts(json("a")));
  // A part of allOf that admits nothing makes nothing of the whole (it flattened to false and was
  // read as an object: {"kids": null} passed).
  EXPECT_FALSE(Refusal(json::parse(R"({"type": "object", "required": ["k"],
      "properties": {"k": {"anyOf": [{"type": ["null", "boolean"], "not": {"maxLength": 2}}]}},
      "if": {"properties": {"k": {"enum": ["x"]}}}, "else": {"properties": {"k": {"const": null}}}})"))
                   .ok());
  // What stays refused names the keyword inside the not.
  for (const char* k :
       {R"({"not": {"format": "date"}})", R"({"not": {"multipleOf": 0.5}})",
        R"({"not": {"uniqueItems": true}})", R"({"type": "string", "not": {"format": "email"}})"}) {
    const Status st = Refusal(json::parse(k));
    EXPECT_EQ(st.code(), Status::Code::kUnsupported) << k << ": " << st.message();
    EXPECT_NE(st.message().find("keyword \"not\" at \"/not\""), std::string::npos) << st.message();
  }
}

// not {additionalProperties}, not {patternProperties} and not {propertyNames} on an object that
// may have any name: a member of some kind of key whose value fails the keyword (listed, or among
// the other keys), each verdict Ajv's.
TEST(JsonSchemaTest, NotOfTheNamesOfAnOpenObjectAsksForAMember) {
  const struct {
    const char* schema;
    std::vector<const char*> valid, invalid;
  } cases[] = {
      {R"~({"type": "object", "not": {"additionalProperties": false}})~",
       {R"~({"a": 1})~", R"~({"a": 1, "b": 2})~"},
       {R"~({})~"}},
      {R"~({"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"properties": {"a": {}}, "additionalProperties": false}})~",
       {R"~({"a": 1, "b": 2})~", R"~({"b": 2})~"},
       {R"~({"a": 1})~", R"~({})~", R"~({"a": "x", "b": 2})~"}},
      {R"~({"type": "object", "properties": {"a": {}}, "not": {"properties": {"a": {}}, "additionalProperties": {"type": "string"}}})~",
       {R"~({"b": 1})~", R"~({"a": "x", "b": null})~", R"~({"b": "s", "c": 2})~"},
       {R"~({"b": "s"})~", R"~({"a": 1})~", R"~({})~"}},
      {R"~({"type": "object", "not": {"patternProperties": {"^x": {"type": "integer"}}}})~",
       {R"~({"x1": "s"})~", R"~({"a": 1, "xa": null})~"},
       {R"~({"x1": 1})~", R"~({"a": "s"})~", R"~({})~"}},
      {R"~({"type": "object", "properties": {"xk": {"type": ["integer", "string"]}}, "required": ["xk"], "not": {"patternProperties": {"^x": {"type": "integer"}}}})~",
       {R"~({"xk": "s"})~", R"~({"xk": 1, "xz": "s"})~"},
       {R"~({"xk": 1})~", R"~({"xk": 1, "xz": 2})~"}},
      {R"~({"type": "object", "not": {"propertyNames": {"pattern": "^[a-z]+$"}}})~",
       {R"~({"A": 1})~", R"~({"a": 1, "B2": 2})~"},
       {R"~({"a": 1})~", R"~({})~"}},
      {R"~({"type": "object", "not": {"propertyNames": {"maxLength": 2}}})~",
       {R"~({"abc": 1})~", R"~({"a": 1, "ééé": 1})~"},
       {R"~({"ab": 1})~", R"~({"éé": 1})~", R"~({})~"}},
      {R"~({"type": "object", "not": {"propertyNames": {"enum": ["a", "b"]}}})~",
       {R"~({"c": 1})~", R"~({"a": 1, "z": 2})~"},
       {R"~({"a": 1, "b": 2})~", R"~({})~"}},
      // Two members asked (none of two closed objects): one may be both.
      {R"~({"type": "object", "not": {"anyOf": [{"properties": {"a": {}}, "additionalProperties": false}, {"properties": {"b": {}}, "additionalProperties": false}]}})~",
       {R"~({"c": 1})~", R"~({"a": 1, "b": 2})~", R"~({"b": 1, "a": 2, "c": 3})~"},
       {R"~({"a": 1})~", R"~({"b": 1})~", R"~({})~"}},
      {R"~({"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"anyOf": [{"additionalProperties": {"type": "integer"}}, {"propertyNames": {"pattern": "^[a-z]$"}}]}})~",
       {R"~({"a": 1, "bb": "s"})~", R"~({"b": "s", "cc": 1})~"},
       {R"~({"a": 1, "bb": 2})~", R"~({"b": "s"})~", R"~({"a": 1})~"}},
      // oneOf of an open object and a closed one: the open one's objects with another key.
      {R"~({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false}, {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}]})~",
       {R"~({"a": "x", "b": 1})~"},
       {R"~({"a": "x"})~", R"~({})~", R"~({"b": 1})~"}},
  };
  for (const auto& c : cases) {
    const Schema s(json::parse(c.schema));
    for (const char* v : c.valid) EXPECT_TRUE(s.Accepts(std::string(v))) << c.schema << " " << v;
    for (const char* v : c.invalid) EXPECT_FALSE(s.Accepts(std::string(v))) << c.schema << " " << v;
  }
}

// Conditionals merged one after another (allOf of if/then parts) each write the cases before
// them again: a long chain is refused by what it writes, not run out of memory (MaskBench's
// cloudify.json, dozens of `if type is X then ...` parts, took 24 GB).
TEST(JsonSchemaTest, LongChainsOfConditionalsAreRefusedNotWrittenOut) {
  json parts = json::array();
  for (int i = 0; i < 40; ++i)
    parts.push_back(
        {{"if", {{"properties", {{"t", {{"const", "t" + std::to_string(i)}}}}}}},
         {"then", {{"required", {"p" + std::to_string(i)}}}},
         {"else", {{"properties", {{"p" + std::to_string(i), {{"type", "string"}}}}}}}});
  const json schema = {
      {"type", "object"}, {"properties", {{"t", {{"type", "string"}}}}}, {"allOf", parts}};
  const Status st = Refusal(schema);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("written out"), std::string::npos) << st.message();
  json two = schema;
  two["allOf"] = json::array({parts[0], parts[1]});
  const Schema s(two);
  EXPECT_TRUE(s.Accepts(json::parse(R"({"t": "t0", "p0": 1})")));
  EXPECT_FALSE(s.Accepts(json::parse(R"({"t": "t0"})")));
  EXPECT_FALSE(s.Accepts(json::parse(R"({"t": "t5", "p1": 2})"))) << "p1 must be a string";
  EXPECT_TRUE(s.Accepts(json::parse(R"({"t": "t5", "p1": "x"})")));
}

// A oneOf of many overlapping objects: each branch's "and not the others" multiplies its
// alternatives; past the bound the schema is refused, not written out (MaskBench's o21819, eleven
// meter types on one base, took 24 GB before the alternatives beside an anyOf were bounded).
// Where the branches list a discriminator (a property with values of their own), oneOf is
// enforced on the objects that have it: each branch with it required (json_schema.h).
TEST(JsonSchemaTest, ManyOverlappingBranchesAreRefusedNotWrittenOut) {
  const auto branches = [](bool discriminated) {
    json list = json::array();
    for (int i = 0; i < 11; ++i) {
      json props = {{"x" + std::to_string(i), {{"type", "string"}, {"minLength", 2}}},
                    {"y" + std::to_string(i), {{"type", "integer"}}}};
      if (discriminated) props["protocol"] = {{"enum", {"p" + std::to_string(i)}}};
      list.push_back(json{{"allOf", {{{"$ref", "#/$defs/base"}}, {{"properties", props}}}}});
    }
    return list;
  };
  json schema = {
      {"$defs",
       {{"base", json::parse(R"({"type": "object", "properties": {"enabled": {"type": "boolean"},
             "interval": {"type": "integer"}, "protocol": {"type": "string"}},
             "required": ["enabled"]})")}}},
      {"type", "array"},
      {"items", {{"oneOf", branches(false)}}}};
  const Status st = Refusal(schema);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("alternatives"), std::string::npos) << st.message();
  schema["items"]["oneOf"] = branches(true);
  const Schema discriminated(schema);
  EXPECT_TRUE(discriminated.Accepts(
      json::parse(R"([{"enabled": true, "protocol": "p1", "x1": "ab"}, {"enabled": false,
                      "protocol": "p7", "x0": 3}])")));
  EXPECT_FALSE(discriminated.Accepts(json::parse(R"([{"enabled": true}])"))) << "every branch";
  EXPECT_FALSE(
      discriminated.Accepts(json::parse(R"([{"enabled": true, "protocol": "p9", "x9": 1}])")));
  EXPECT_FALSE(discriminated.Accepts(json::parse(R"([{"enabled": true, "protocol": "q"}])")));
  // Valid (only branch 0 takes x1..x10 not strings), but without the discriminator: not
  // generated.
  json only_zero = {{"enabled", true}, {"x0", "ab"}};
  for (int i = 1; i < 11; ++i) only_zero["x" + std::to_string(i)] = i;
  EXPECT_FALSE(discriminated.Accepts(json::array({only_zero})));
  // Three branches: each is itself and not the other two, exactly (no discriminator asked).
  json three = schema;
  three["items"]["oneOf"] = json::array({branches(true)[0], branches(true)[1], branches(true)[2]});
  const Schema s(three);
  EXPECT_TRUE(s.Accepts(json::parse(R"([{"enabled": true, "protocol": "p1", "x1": "ab"}])")));
  EXPECT_TRUE(s.Accepts(json::parse(R"([{"enabled": true, "x0": "ab", "x1": 1, "x2": "c"}])")));
  EXPECT_FALSE(s.Accepts(json::parse(R"([{"enabled": true}])"))) << "every branch matches";
  EXPECT_FALSE(s.Accepts(json::parse(R"([{"enabled": true, "protocol": "p9"}])")));
}

TEST(JsonSchemaTest, PatternsFormatsAndRanges) {
  // `pattern` searches the decoded value; the text is JSON's.
  const Schema zip(json::parse(R"({"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"})"));
  EXPECT_TRUE(zip.Accepts(json("12345")));
  EXPECT_TRUE(zip.Accepts(json("12345-6789")));
  EXPECT_FALSE(zip.Accepts(json("1234")));
  EXPECT_FALSE(zip.Accepts(json("12345-")));
  // Anchors inside groups and alternatives (MaskBench's "^$|(^(?:\\S+\\s+){0,99}\\S+$)").
  const Schema inner(json::parse(R"~({"type": "string", "pattern": "(^$)|(^[0-9]+\\.[0-9]+$)"})~"));
  for (const char* ok : {"", "1.5", "10.25"}) EXPECT_TRUE(inner.Accepts(json(ok))) << ok;
  for (const char* bad : {"a1.5", "1.5a", "1", " "}) EXPECT_FALSE(inner.Accepts(json(bad))) << bad;
  const Schema words(
      json::parse(R"~({"type": "string", "pattern": "^$|(^(?:\\S+\\s+){0,2}\\S+$)"})~"));
  for (const char* ok : {"", "a", "a b", "a b c"}) EXPECT_TRUE(words.Accepts(json(ok))) << ok;
  for (const char* bad : {"a b c d", " a", "a "}) EXPECT_FALSE(words.Accepts(json(bad))) << bad;
  const Schema quote(json::parse(R"({"type": "string", "pattern": "\"x"})"));
  EXPECT_TRUE(quote.Accepts(json("a\"xb")));
  EXPECT_FALSE(quote.Accepts(json("ax")));
  const Schema date(json::parse(R"({"type": "string", "format": "date"})"));
  EXPECT_TRUE(date.Accepts(json("2026-12-02")));
  EXPECT_FALSE(date.Accepts(json("2026-13-02")));
  const Schema unknown(json::parse(R"({"type": "string", "format": "x-local"})"));
  EXPECT_TRUE(unknown.Accepts(json("anything"))) << "an unknown format annotates";
  const Schema pct(json::parse(R"({"type": "integer", "minimum": 0, "exclusiveMaximum": 100})"));
  EXPECT_TRUE(pct.Accepts(json(0)));
  EXPECT_TRUE(pct.Accepts(json(99)));
  EXPECT_FALSE(pct.Accepts(json(100)));
  EXPECT_FALSE(pct.Accepts(json(-1)));
  // Past 2^53 a validator reads 2^60 + 1 as 2^60: an exclusive bound is the next double past it.
  const Schema big(json::parse(
      R"({"type": "integer", "exclusiveMinimum": 1152921504606846976, "maximum": 2e18})"));
  EXPECT_FALSE(big.Accepts(std::string("1152921504606846976")));
  EXPECT_FALSE(big.Accepts(std::string("1152921504606846977")));
  EXPECT_FALSE(big.Accepts(std::string("1152921504606847103")));  // rounds to 2^60 too
  EXPECT_TRUE(big.Accepts(std::string("1152921504606847232")));   // 2^60 + 256, the next double
  const Schema big_max(json::parse(R"({"type": "integer", "exclusiveMaximum": 1e18})"));
  EXPECT_FALSE(big_max.Accepts(std::string("999999999999999999")));  // reads as 1e18
  EXPECT_TRUE(big_max.Accepts(std::string("999999999999999872")));   // the double below 1e18
  const Schema draft4(
      json::parse(R"({"type": "number", "minimum": 0.5, "exclusiveMinimum": true, "maximum": 1})"));
  EXPECT_FALSE(draft4.Accepts(std::string("0.5")));
  EXPECT_TRUE(draft4.Accepts(std::string("0.50001")));
  EXPECT_TRUE(draft4.Accepts(std::string("1.0")));
  EXPECT_FALSE(draft4.Accepts(std::string("1.01")));
  // A pattern beside a format: both (the format's expression one more pattern, anchored).
  const Schema both(json::parse(R"({"type": "string", "pattern": "^2026-", "format": "date"})"));
  EXPECT_TRUE(both.Accepts(json("2026-12-05")));
  EXPECT_FALSE(both.Accepts(json("2025-12-05")));  // the pattern
  EXPECT_FALSE(both.Accepts(json("2026-13-05")));  // the format
  EXPECT_FALSE(both.Accepts(json("2026-12-05x")));
  // A pointer's expression reads escapes, not the decoded value: refused beside a pattern.
  const Status pointer =
      Refusal(json::parse(R"({"type": "string", "pattern": "a", "format": "json-pointer"})"));
  EXPECT_NE(pointer.message().find("keyword \"format\" at \"/format\""), std::string::npos)
      << pointer.message();
  const Status lookahead =
      Refusal(json::parse(R"js({"properties": {"p": {"pattern": "(?=a)"}}})js"));
  EXPECT_NE(lookahead.message().find("keyword \"pattern\" at \"/properties/p/pattern\""),
            std::string::npos)
      << lookahead.message();
}

TEST(JsonSchemaTest, OneOfIsExactlyOneBranch) {
  const Schema types(json::parse(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})"));
  EXPECT_TRUE(types.Accepts(std::string("\"x\"")));
  EXPECT_TRUE(types.Accepts(std::string("3")));
  const Schema tagged(json::parse(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
       "required": ["kind"]},
      {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]})"));
  EXPECT_TRUE(tagged.Accepts(json::parse(R"({"kind": "a", "x": 1})")));
  EXPECT_TRUE(tagged.Accepts(json::parse(R"({"kind": "b"})")));
  // Branches that may overlap: each enforced as itself and not the others (exactly one).
  const Schema either(json::parse(R"({"type": "object",
      "properties": {"placement": {"type": "string"}, "placement_code": {"type": "string"}},
      "oneOf": [{"required": ["placement"]}, {"required": ["placement_code"]}]})"));
  EXPECT_TRUE(either.Accepts(json::parse(R"({"placement": "x"})")));
  EXPECT_TRUE(either.Accepts(json::parse(R"({"placement_code": "y"})")));
  EXPECT_FALSE(either.Accepts(json::parse(R"({"placement": "x", "placement_code": "y"})")));
  EXPECT_FALSE(either.Accepts(json::parse(R"({})")));
  // Every object of the names a, b, c against "exactly one branch's required are present".
  const std::vector<std::vector<std::string>> branches = {{"a", "b"}, {"c"}, {"b"}};
  json one_of = json::array();
  for (const auto& names : branches) one_of.push_back({{"required", names}});
  const Schema exactly(json{
      {"type", "object"},
      {"properties",
       {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}, {"c", {{"type", "integer"}}}}},
      {"oneOf", one_of}});
  for (int present = 0; present < 8; ++present) {
    json doc = json::object();
    for (int i = 0; i < 3; ++i)
      if (present >> i & 1) doc[std::string(1, static_cast<char>('a' + i))] = i;
    int matching = 0;
    for (const auto& names : branches) {
      bool all = true;
      for (const std::string& n : names) all = all && doc.contains(n);
      matching += all;
    }
    EXPECT_EQ(exactly.Accepts(doc), matching == 1) << doc.dump();
  }
  // Lengths: a string of one character matches only the first; longer ones both.
  const Schema lengths(json::parse(R"({"oneOf": [{"type": "string"},
      {"type": "string", "minLength": 2}]})"));
  EXPECT_TRUE(lengths.Accepts(json("a")));
  EXPECT_FALSE(lengths.Accepts(json("ab")));
  EXPECT_FALSE(lengths.Accepts(json(1)));
  // A number or an integer: an integer is both, so only numbers with a fraction (written with
  // it: the grammar's spelling, as for integers).
  const Schema fraction(json::parse(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})"));
  for (const char* ok : {"1.5", "-0.25", "2.50", "1.5e-3", "0.1E+0", "1e-07", "1.5e-07", "0.0001",
                         "99999999999999.5", "0.000000000000001"})
    EXPECT_TRUE(fraction.Accepts(std::string(ok))) << ok;
  // Integers as doubles (so both branches match): past 2^53, or under the smallest double.
  for (const char* bad : {"1", "0", "1.0", "-2.00", "\"x\"", "10e-1", "12345678901234567890.5",
                          "1.5e-400", "9007199254740993.5"})
    EXPECT_FALSE(fraction.Accepts(std::string(bad))) << bad;
  // A branch admitting no object (behind a $ref, through its oneOf and enum) beside an open
  // object: the object's complement is not asked of it (it was refused: "the object may have
  // any name").
  const Schema kinds(json::parse(R"({"$defs": {"s": {"oneOf": [{"type": "string"},
      {"enum": [1, 2]}]}}, "oneOf": [{"$ref": "#/$defs/s"},
      {"type": "object", "properties": {"a": {}}, "additionalProperties": false}]})"));
  for (const char* ok : {"\"x\"", "1", "{\"a\": 1}", "{}"})
    EXPECT_TRUE(kinds.Accepts(std::string(ok))) << ok;
  for (const char* bad : {"3", "{\"b\": 1}", "null", "[]"})
    EXPECT_FALSE(kinds.Accepts(std::string(bad))) << bad;
  // A branch whose negation is no form the compiler writes: refused, naming the pair and why.
  const Status overlap = Refusal(json::parse(R"({"oneOf": [{"type": "string"},
      {"type": "string", "format": "date"}]})"));
  EXPECT_EQ(overlap.code(), Status::Code::kUnsupported) << overlap.message();
  EXPECT_NE(overlap.message().find("keyword \"oneOf\" at \"/oneOf\": branches 0 and 1"),
            std::string::npos)
      << overlap.message();
  EXPECT_NE(overlap.message().find("not {format}"), std::string::npos) << overlap.message();
  // Branches apart by their lengths or ranges need no complement (the format's was refused); a
  // format not known is an annotation there too.
  Check({
      {R"({"type": "string", "oneOf": [{"maxLength": 0}, {"format": "x-selector", "minLength": 1}]})",
       {R"("")", R"("a b")"},
       {"1"}},
      {R"({"oneOf": [{"type": "integer", "maximum": 0}, {"type": "number", "exclusiveMinimum": 0},
                     {"type": "string"}]})",
       {"0", "-3", "0.5", "7", R"("s")"},
       {"null"}},
      {R"({"$schema": "http://json-schema.org/draft-04/schema#", "oneOf": [
           {"type": "number", "maximum": 0, "exclusiveMaximum": true},
           {"type": "number", "minimum": 0}]})",
       {"-1", "0", "2.5"},
       {R"("0")"}},
      // Touching ranges overlap at the bound: 0 matches both, so it is not taken.
      {R"({"oneOf": [{"type": "number", "maximum": 0}, {"type": "number", "minimum": 0}]})",
       {"-1", "2"},
       {"0"}},
      {R"({"type": "string", "oneOf": [{"maxLength": 2}, {"minLength": 2}]})",
       {R"("a")", R"("abc")"},
       {R"("ab")"}},
  });
  // Branches on one base ($ref in allOf): each is told from the others by their own parts, the
  // base's complement (merged with the branch to nothing) not written out.
  Check(
      {{R"({"$defs": {"base": {"type": "object", "properties": {
               "name": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
               "tags": {"type": "array", "items": {"type": "string", "pattern": "^#"}},
               "size": {"type": "integer", "minimum": 0}}, "required": ["name"]}},
           "oneOf": [
             {"allOf": [{"$ref": "#/$defs/base"}, {"required": ["a"]}]},
             {"allOf": [{"$ref": "#/$defs/base"}, {"required": ["b"]}, {"not": {"required": ["c"]}}]},
             {"allOf": [{"$ref": "#/$defs/base"}, {"required": ["a", "b", "c"]}]},
             {"$ref": "#/$defs/base", "required": ["d"]}]})",
        {R"({"name": "x", "a": 1})", R"({"name": "x", "b": 1})", R"({"name": "x", "a": 1, "c": 1})",
         R"({"name": "x", "tags": ["#t"], "size": 2, "d": 1})"},
        {R"({"name": "x", "a": 1, "b": 1})", R"({"name": "x", "a": 1, "b": 1, "c": 1})",
         R"({"name": "x", "b": 1, "c": 1})", R"({"name": "X", "a": 1})", R"({"a": 1})",
         R"({"name": "x", "a": 1, "d": 1})", R"({"name": "x", "tags": ["t"], "a": 1})"}}});
  // Branches that only ask of objects all match any other value: oneOf takes none of those, and
  // among objects the branches are apart (their discriminators).
  Check({{R"({"oneOf": [
             {"required": ["name", "code"], "properties": {"name": {"enum": ["a"]},
                                                          "code": {"type": "integer"}}},
             {"required": ["name"], "properties": {"name": {"enum": ["b"]}}},
             {"required": ["name"], "properties": {"name": {"const": "c"},
                                                   "error": {"type": "string"}}}]})",
          {R"({"name": "a", "code": 1})", R"({"name": "b"})", R"({"name": "c", "error": "x"})"},
          {R"("x")", "1", "null", "[]", R"({"name": "d"})", R"({"name": "a"})"}},
         // A string matches both; null, an object or a number of 3 or more only the second.
         {R"({"oneOf": [{"type": "string"}, {"minimum": 3}]})",
          {"null", "5", "{}", "[1]"},
          {R"("x")", "1"}}});
  // 1 and 1.0 are one value: both branches match it, and then nothing is left.
  const Status one = Refusal(json::parse(R"({"oneOf": [{"const": 1}, {"enum": [1.0, 2]}]})"));
  EXPECT_EQ(one.code(), Status::Code::kOk) << one.message();
  const Schema ones(json::parse(R"({"oneOf": [{"const": 1}, {"enum": [1.0, 2]}]})"));
  EXPECT_FALSE(ones.Accepts(std::string("1")));
  EXPECT_FALSE(ones.Accepts(std::string("1.0")));
  EXPECT_TRUE(ones.Accepts(std::string("2")));
  const Status unknown = Refusal(json::parse(R"({"type": "string", "not": {"format": "x-y"}})"));
  EXPECT_NE(unknown.message().find("no document"), std::string::npos) << unknown.message();
}

TEST(JsonSchemaTest, DraftsAndOrderOfRequiredOnes) {
  // Draft 7 ignores $ref's siblings; 2020-12 applies them.
  const json defs = json::parse(R"({"o": {"type": "object", "additionalProperties": false,
      "properties": {"n": {"type": "integer"}}}})");
  json old = {{"$schema", "http://json-schema.org/draft-07/schema#"},
              {"definitions", defs},
              {"properties", {{"p", {{"type", "string"}, {"$ref", "#/definitions/o"}}}}}};
  EXPECT_TRUE(Schema(old).Accepts(json::parse(R"({"p": {"n": 1}})")));
  json now = old;
  now.erase("$schema");
  const Schema both(now);  // p: a string and an object, so never present
  EXPECT_FALSE(both.Accepts(json::parse(R"({"p": {"n": 1}})")));
  EXPECT_FALSE(both.Accepts(json::parse(R"({"p": "s"})")));
  EXPECT_TRUE(both.Accepts(json::parse("{}")));
  // Required properties not listed come after the listed ones, in the order `required` lists them.
  const Schema req(json::parse(R"({"type": "object", "properties": {"z": {"type": "null"}},
      "required": ["b", "a", "z"]})"));
  EXPECT_TRUE(req.Accepts(std::string(R"({"z": null, "b": 1, "a": 2})")));
  EXPECT_FALSE(req.Accepts(std::string(R"({"z": null, "a": 2, "b": 1})")));
}

TEST(JsonSchemaTest, ArraysCountTheirItems) {
  const Schema s(json::parse(R"({"type": "array", "prefixItems": [{"type": "string"}],
      "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})"));
  EXPECT_FALSE(s.Accepts(json::parse(R"(["a"])")));
  EXPECT_TRUE(s.Accepts(json::parse(R"(["a", 1])")));
  EXPECT_TRUE(s.Accepts(json::parse(R"(["a", 1, 2, 3])")));
  EXPECT_FALSE(s.Accepts(json::parse(R"(["a", 1, 2, 3, 4])")));
  EXPECT_FALSE(s.Accepts(json::parse(R"([1, 1])")));
  const Schema tuple(
      json::parse(R"({"type": "array", "items": [{"type": "null"}, {"type": "boolean"}],
      "additionalItems": false})"));
  EXPECT_TRUE(tuple.Accepts(json::parse("[]")));
  EXPECT_TRUE(tuple.Accepts(json::parse("[null, true]")));
  EXPECT_FALSE(tuple.Accepts(json::parse("[null, true, 1]")));
  const Schema many(
      json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 3})"));
  EXPECT_FALSE(many.Accepts(json::parse("[1, 2]")));
  EXPECT_TRUE(many.Accepts(json::parse("[1, 2, 3, 4, 5, 6, 7, 8]")));
}

TEST(JsonSchemaTest, JsonObjectIsAnyObject) {
  std::shared_ptr<CompiledGrammar> c;
  ASSERT_TRUE(CompiledGrammar::Compile(JsonObjectGrammar(), TokenTrie::SingleBytes(), &c).ok());
  const auto accepts = [&](const std::string& t) {
    Matcher m(c);
    return m.Consume(t) && m.CanEnd();
  };
  EXPECT_TRUE(accepts("{}"));
  EXPECT_TRUE(accepts(R"({"a": [1, {"b": null}], "c": "\u00e9"})"));
  EXPECT_FALSE(accepts("[]"));
  EXPECT_FALSE(accepts("1"));
  EXPECT_FALSE(accepts(R"({"a": })"));
}

// Patterns that must all match (allOf, oneOf's exclusion), with a format, lengths and names
// excluded: one product automaton, each verdict as a validator's with format assertions.
TEST(JsonSchemaTest, SeveralPatternsAndAFormatAllHold) {
  const struct {
    const char* schema;
    std::vector<const char*> valid, invalid;
  } cases[] = {
      {R"~({"type": "string", "allOf": [{"pattern": "a"}, {"pattern": "b"}]})~",
       {R"~("ab")~", R"~("ba")~", R"~("xaxbx")~"},
       {R"~("a")~", R"~("b")~", R"~("")~"}},
      {R"~({"type": "string", "pattern": "^[a-z]+$", "allOf": [{"pattern": "q"}], "maxLength": 3})~",
       {R"~("q")~", R"~("aqa")~"},
       {R"~("aqaa")~", R"~("Q")~", R"~("aa")~"}},
      {R"~({"type": "string", "oneOf": [{"allOf": [{"pattern": "a"}, {"pattern": "b"}]}, {"pattern": "c"}]})~",
       {R"~("ab")~", R"~("c")~", R"~("ac")~"},
       {R"~("abc")~", R"~("x")~", R"~("a")~"}},
      {R"~({"type": "string", "not": {"allOf": [{"pattern": "a"}, {"pattern": "b"}]}})~",
       {R"~("a")~", R"~("b")~", R"~("")~"},
       {R"~("ab")~", R"~("bab")~"}},
      {R"~({"type": "string", "format": "email", "not": {"enum": ["a@b.co"]}})~",
       {R"~("x@b.co")~", R"~("a@b.com")~"},
       {R"~("a@b.co")~", R"~("ab")~"}},
      {R"~({"type": "string", "format": "uuid", "not": {"pattern": "^0"}})~",
       {R"~("1b4e28ba-2fa1-11d2-883f-0016d3cca427")~"},
       {R"~("0b4e28ba-2fa1-11d2-883f-0016d3cca427")~", R"~("1b4e28ba")~"}},
      {R"~({"type": "string", "format": "ipv4", "allOf": [{"pattern": "^10\\."}, {"pattern": "\\.1$"}]})~",
       {R"~("10.0.0.1")~", R"~("10.20.30.1")~"},
       {R"~("10.0.0.2")~", R"~("11.0.0.1")~", R"~("10.0.0.256.1")~"}},
  };
  for (const auto& c : cases) {
    const Schema s(json::parse(c.schema));
    for (const char* v : c.valid) EXPECT_TRUE(s.Accepts(std::string(v))) << c.schema << " " << v;
    for (const char* v : c.invalid) EXPECT_FALSE(s.Accepts(std::string(v))) << c.schema << " " << v;
  }
}

TEST(JsonSchemaTest, LengthsBesideAPatternOrAFormat) {
  const Schema code(json::parse(R"({"type": "string", "pattern": "^[A-Z]+[0-9]*$",
      "minLength": 3, "maxLength": 5})"));
  for (const char* ok : {"ABC", "AB1", "A1234", "ABCDE"}) EXPECT_TRUE(code.Accepts(json(ok))) << ok;
  for (const char* bad : {"AB", "ABCDEF", "A12345", "1AB", "abc"})
    EXPECT_FALSE(code.Accepts(json(bad))) << bad;
  // Characters, not bytes: "é" is one, an escape is one.
  const Schema chars(json::parse(R"({"type": "string", "pattern": "x", "maxLength": 2})"));
  EXPECT_TRUE(chars.Accepts(json("\xc3\xa9x")));
  EXPECT_TRUE(chars.Accepts(json("\nx")));
  EXPECT_FALSE(chars.Accepts(json("\xc3\xa9xx")));
  const Schema email(json::parse(R"({"type": "string", "format": "email", "maxLength": 7})"));
  EXPECT_TRUE(email.Accepts(json("a@b.com")));
  EXPECT_FALSE(email.Accepts(json("ab@b.com")));
  const Schema at_least(json::parse(R"({"type": "string", "format": "date", "minLength": 10})"));
  EXPECT_TRUE(at_least.Accepts(json("2026-12-05")));
  // No string is both: the schema admits no document.
  const Status never = Refusal(json::parse(R"({"type": "string", "format": "date",
      "maxLength": 9})"));
  EXPECT_EQ(never.code(), Status::Code::kInvalidArgument) << never.message();
  EXPECT_NE(never.message().find("no document"), std::string::npos) << never.message();
  // The alternative that cannot be is dropped, the other kept.
  const Schema either(json::parse(R"({"anyOf": [{"type": "string", "pattern": "^a$",
      "minLength": 2}, {"type": "string", "pattern": "^[0-9]{2}$",
      "maxLength": 2}]})"));
  EXPECT_TRUE(either.Accepts(json("12")));
  EXPECT_FALSE(either.Accepts(json("a")));
}

TEST(JsonSchemaTest, PatternPropertiesGovernTheKeysTheyMatch) {
  // Keys "^x-" take strings, keys of digits take integers, a key both match ("x-1" does not: the
  // second is anchored whole) takes both schemas; any other key a boolean; "a" is listed.
  const Schema s(json::parse(R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "x-a": {"maxLength": 1}},
      "patternProperties": {"^x-": {"type": "string"}, "^[0-9]+$": {"type": "integer"},
                            "1": {"minimum": 10}},
      "additionalProperties": {"type": "boolean"}})"));
  for (const char* ok : {R"({"a": 1, "x-b": "s", "12": 12, "b": true})",
                         R"({"x-": "", "7": 7, "z": false})", R"({"x-a": "s"})",
                         R"({"a": 2, "x-1": "y", "11": 11, "q1": true})",  // minimum: numbers only
                         R"({})"})
    EXPECT_TRUE(s.Accepts(json::parse(ok))) << ok;
  for (const char* bad : {
           R"({"x-b": 1})",           // a pattern's schema
           R"({"12": "s"})",          // a pattern's schema
           R"({"1": 5})",             // both patterns: minimum 10
           R"({"q1": 5})",            // "1" matches anywhere: minimum 10
           R"({"x-a": "st"})",        // listed and matched: both schemas (maxLength 1)
           R"({"x-a": 3})",           // listed and matched: a string
           R"({"b": "s"})",           // additionalProperties
           R"({"b": true, "a": 1})",  // the listed ones first
       })
    EXPECT_FALSE(s.Accepts(json::parse(bad))) << bad;
  // additionalProperties false: only the listed names and the keys a pattern matches.
  const Schema closed(json::parse(R"({"type": "object", "additionalProperties": false,
      "required": ["id", "x-req"],
      "properties": {"id": {"type": "integer"}},
      "patternProperties": {"^x-": {}, "^[a-z]+_url$": {"type": "string", "format": "uri"}}})"));
  EXPECT_TRUE(closed.Accepts(json::parse(R"({"id": 1, "x-req": null, "x-1": [1]})")));
  EXPECT_TRUE(closed.Accepts(json::parse(R"({"id": 1, "x-req": 2, "home_url": "https://a.b/"})")));
  EXPECT_FALSE(closed.Accepts(json::parse(R"({"id": 1, "x-req": 2, "home_url": "a b"})")));
  EXPECT_FALSE(closed.Accepts(json::parse(R"({"id": 1, "x-req": 2, "other": 1})")));
  EXPECT_FALSE(closed.Accepts(json::parse(R"({"id": 1})")));  // x-req is required
  // A key written with an escape JSON does not require is refused (one spelling per name).
  EXPECT_FALSE(closed.Accepts(std::string(R"({"id": 1, "x-req": 2, "x\u002d1": 1})")));
  // A pattern no key can match beside the listed names: those names only.
  const Schema listed(json::parse(R"({"type": "object", "properties": {"a": {"type": "null"}},
      "patternProperties": {"^a$": {"type": "null"}}, "additionalProperties": false})"));
  EXPECT_TRUE(listed.Accepts(json::parse(R"({"a": null})")));
  EXPECT_FALSE(listed.Accepts(json::parse(R"({"aa": null})")));
  // Refusals name the pattern.
  const Status bad = Refusal(json::parse(R"~({"patternProperties": {"(?=x)": {}}})~"));
  EXPECT_EQ(bad.code(), Status::Code::kUnsupported) << bad.message();
  EXPECT_NE(bad.message().find("keyword \"patternProperties\" at \"/patternProperties/(?=x)\""),
            std::string::npos)
      << bad.message();
}

TEST(JsonSchemaTest, RefusalsNameTheKeywordAndItsPointer) {
  const struct {
    const char* schema;
    const char* says;
  } cases[] = {
      {R"({"properties": {"tags": {"type": "array", "uniqueItems": true}}})",
       "keyword \"uniqueItems\" at \"/properties/tags/uniqueItems\""},
      {R"({"properties": {"a/b": {"not": {"multipleOf": 0.5}}}})",
       "keyword \"not\" at \"/properties/a~1b/not\""},
      {R"({"$ref": "https://example.com/x.json"})", "keyword \"$ref\" at \"/$ref\""},
      {R"({"type": "strin"})", "\"strin\" is not a JSON Schema type"},
      {R"({"$ref": "#/$defs/missing"})", "resolves nowhere"},
      {R"({"type": "string", "maxLength": 1000000000})", "keyword \"maxLength\" at \"/maxLength\""},
      // Found by json_schema_fuzz (2026-12-05): a bound past int64 (a cast without a defined
      // result), and the keyword Negate writes brought by the schema in another shape (threw).
      {R"({"type": "string", "maxLength": 1e30})", "keyword \"maxLength\" at \"/maxLength\""},
      {R"({"type": "array", "minItems": 1e300})", "keyword \"minItems\" at \"/minItems\""},
      {R"({"properties": {"a": {"$llmq_not_strings": {"c": ["a"]}}}})",
       "keyword \"$llmq_not_strings\" at \"/properties/a/$llmq_not_strings\""},
      {R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})",
       "keyword \"uniqueItems\" at \"/uniqueItems\""},
      {R"({"type": "object", "required": ["a"], "additionalProperties": false})",
       "keyword \"required\" at \"/required\""},
      // Bounds that are no numbers, merged (they threw from nlohmann: the daemon went down).
      {R"({"allOf": [{"minItems": "x"}, {"minItems": 2}]})", "keyword \"minItems\" at"},
      {R"({"type": "string", "oneOf": [{"maxLength": "0"}, {"minLength": 1}]})",
       "keyword \"maxLength\" at"},
      {R"({"type": "array", "items": {"enum": [1, 2]}, "minItems": "x",
           "allOf": [{"contains": {"const": 1}}, {"contains": {"minimum": 1}}]})",
       "keyword \"minItems\" at"},
      // An allOf that is not an array inside a branch merged with its siblings' allOf (found by
      // json_schema_fuzz: it threw from nlohmann instead of being refused).
      {R"({"allOf": [{"properties": {"x": {"type": "string"}}}, {"required": ["x"]}],
           "oneOf": [{"type": "object"}, {"allOf": "null"}]})",
       "keyword \"allOf\" at \"/oneOf/1/allOf\""},
  };
  for (const auto& c : cases) {
    const Status st = Refusal(json::parse(c.schema));
    EXPECT_FALSE(st.ok()) << c.schema;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.schema << ": " << st.message();
  }
  const Status never = Refusal(json::parse(R"({"type": "array", "minItems": 3, "maxItems": 2})"));
  EXPECT_EQ(never.code(), Status::Code::kInvalidArgument) << never.message();
  EXPECT_NE(never.message().find("no document"), std::string::npos) << never.message();
}

TEST(JsonSchemaTest, UniqueItemsOfAFewValuesRememberWhichCame) {
  Check({
      {R"({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": true})",
       {"[]", R"(["a"])", R"(["c", "a"])", R"(["b", "c", "a"])"},
       {R"(["a", "a"])", R"(["a", "b", "a"])", R"(["d"])", R"(["a", "b", "c", "a"])"}},
      // Numbers by value, as validators compare them: 2 and 2.0 are one value.
      {R"({"type": "array", "items": {"enum": [1, 2, 2.0]}, "uniqueItems": true})",
       {"[2, 1]", "[1.0, 2]"},
       {"[2, 2.0]", "[1, 1]", "[3]"}},
      {R"({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true, "minItems": 2})",
       {"[true, false]", "[false, true]"},
       {"[true]", "[true, true]", "[false, true, false]"}},
      {R"({"type": "array", "items": {"type": ["null", "boolean"]}, "uniqueItems": true})",
       {"[null, false, true]"},
       {"[null, null]"}},
      // The keywords beside the enum rule values out; maxItems bounds the count.
      {R"({"type": "array", "items": {"type": "string", "enum": ["a", "bb", 3], "maxLength": 1},
           "uniqueItems": true})",
       {R"(["a"])"},
       {R"(["bb"])", "[3]", R"(["a", "a"])"}},
      {R"({"type": "array", "items": {"enum": [1, 2, 3, 4]}, "uniqueItems": true, "maxItems": 2})",
       {"[4, 1]"},
       {"[1, 2, 3]", "[4, 4]"}},
      // From allOf parts, through $ref; an object or array among the values is one value.
      {R"({"allOf": [{"items": {"$ref": "#/$defs/c"}}, {"uniqueItems": true}],
           "$defs": {"c": {"enum": [{"x": 1}, [1, 2], "k"]}}})",
       {R"([{"x": 1}, [1, 2], "k"])", R"("not an array")"},
       {R"([{"x": 1}, {"x": 1}])", "[[1, 2], [1, 2]]"}},
      // Beside contains: which of the values written match it, counted.
      {R"({"type": "array", "items": {"enum": [1, 2, 3]}, "contains": {"const": 1},
           "uniqueItems": true})",
       {"[1]", "[2, 1]", "[3, 1, 2]"},
       {"[]", "[2, 3]", "[1, 1]"}},
      {R"({"type": "array", "items": {"enum": [1, 2, 3]}, "contains": {"minimum": 2},
           "minContains": 2, "maxContains": 2, "uniqueItems": true})",
       {"[2, 3]", "[1, 3, 2]", "[2, 3, 1]"},
       {"[1]", "[2]", "[1, 2]", "[]"}},
      {R"({"type": "array", "items": {"enum": [1, 2, 3]}, "contains": {"minimum": 2},
           "minContains": 0, "maxContains": 1, "uniqueItems": true})",
       {"[]", "[1]", "[3, 1]"},
       {"[2, 3]", "[1, 1]"}},
      // An enum of arrays: each value checked itself.
      {R"({"enum": [[1, 1], [1, 2], [{"a": 1, "b": 2}, {"b": 2, "a": 1.0}]], "uniqueItems": true})",
       {"[1, 2]"},
       {"[1, 1]", R"([{"a": 1, "b": 2}, {"b": 2, "a": 1.0}])"}},
      {R"({"type": "array", "items": {"enum": [{"a": 1, "b": 2}, {"b": 2, "a": 1}, 3]},
           "uniqueItems": true})",
       {R"([3, {"a": 1, "b": 2}])", R"([{"b": 2, "a": 1}])"},
       {R"([{"a": 1, "b": 2}, {"b": 2, "a": 1}])"}},
      // At most one item, or uniqueItems false: nothing to remember, whatever the items.
      {R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 1})",
       {R"(["x"])"},
       {R"(["x", "y"])"}},
      {R"({"type": "array", "items": {"type": "string"}, "uniqueItems": false})",
       {R"(["x", "x"])"},
       {}},
  });
  // More values than items may come: no document.
  const Status none = Refusal(json::parse(
      R"({"type": "array", "items": {"const": "x"}, "uniqueItems": true, "minItems": 2})"));
  EXPECT_NE(none.message().find("no document"), std::string::npos) << none.message();
  // 13 values: 8,192 sets of them unbounded, refused; with maxItems 3, 378.
  json many = json::parse(R"({"type": "array", "uniqueItems": true})");
  for (int i = 0; i < 13; ++i) many["items"]["enum"].push_back(i);
  const Status refused = Refusal(many);
  EXPECT_EQ(refused.code(), Status::Code::kUnsupported) << refused.message();
  EXPECT_NE(refused.message().find("keyword \"uniqueItems\" at \"/uniqueItems\": 13 values"),
            std::string::npos)
      << refused.message();
  many["maxItems"] = 3;
  const Schema bounded(many);
  EXPECT_TRUE(bounded.Accepts(json::parse("[12, 0, 7]")));
  EXPECT_FALSE(bounded.Accepts(json::parse("[12, 0, 12]")));
  for (const char* s :
       {R"({"type": "array", "prefixItems": [{"const": 1}], "items": {"const": 2},
                            "uniqueItems": true})",
        R"({"type": "array", "items": {"enum": ["a", "b"]}, "contains": {"format": "email"},
                            "uniqueItems": true})",
        R"({"type": "array", "items": {"anyOf": [{"const": 1}, {"const": 2}]},
                            "uniqueItems": true})",
        R"({"not": {"type": "array", "items": {"const": 1}, "uniqueItems": true}})"}) {
    const Status st = Refusal(json::parse(s));
    EXPECT_EQ(st.code(), Status::Code::kUnsupported) << s;
    EXPECT_NE(st.message().find("uniqueItems"), std::string::npos) << s << ": " << st.message();
  }
  const Status invalid = Refusal(json::parse(R"({"type": "array", "uniqueItems": 1})"));
  EXPECT_EQ(invalid.code(), Status::Code::kInvalidArgument) << invalid.message();
  // not {uniqueItems: false}: nothing fails it, so nothing is left.
  const Status nothing = Refusal(json::parse(R"({"not": {"uniqueItems": false}})"));
  EXPECT_NE(nothing.message().find("no document"), std::string::npos) << nothing.message();
}

TEST(JsonSchemaTest, DependenciesAskForOrForbidNames) {
  Check({
      // dependentRequired, the key before the name it asks for and after it.
      {R"({"properties": {"a": {}, "b": {}, "c": {}}, "dependentRequired": {"c": ["a"], "a": ["b"]}})",
       {R"({})", R"({"b": 1})", R"({"a": 1, "b": 2})", R"({"a": 1, "b": 2, "c": 3})",
        R"({"x": 1})"},
       {R"({"c": 1})", R"({"a": 1})", R"({"b": 1, "c": 1})", R"({"a": 1, "c": 2})"}},
      // draft-07 `dependencies` with a list, a name not listed that additionalProperties allows.
      {R"({"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"card": {}},
           "dependencies": {"card": ["billing"]}})",
       {R"({"card": 1, "billing": 2})", R"({"billing": 2})",
        R"({"card": 1, "billing": 2, "q": 3})"},
       {R"({"card": 1})", R"({"card": 1, "q": 3})"}},
      // A name no key may take: the key that asks for it can never be present.
      {R"({"properties": {"a": {}, "b": {}}, "additionalProperties": false,
           "dependentRequired": {"a": ["zz"]}})",
       {R"({})", R"({"b": 1})"},
       {R"({"a": 1})", R"({"a": 1, "b": 2})"}},
      // dependentSchemas: not required (exclusion), anyOf and oneOf of required, type.
      {R"({"properties": {"a": {}, "b": {}, "c": {}},
           "dependentSchemas": {"a": {"not": {"required": ["b"]}}, "c": {"type": "string"}}})",
       {R"({"a": 1})", R"({"b": 1})", R"({"a": 1, "x": 2})"},
       {R"({"a": 1, "b": 2})", R"({"c": 1})", R"({"b": 1, "c": 1})"}},
      {R"({"properties": {"a": {}, "b": {}, "c": {}},
           "dependentSchemas": {"a": {"anyOf": [{"required": ["b"]}, {"required": ["c"]}]}}})",
       {R"({"a": 1, "b": 2})", R"({"a": 1, "c": 2})", R"({"a": 1, "b": 2, "c": 3})", R"({})"},
       {R"({"a": 1})"}},
      {R"({"properties": {"a": {}, "b": {}, "c": {}},
           "dependentSchemas": {"a": {"oneOf": [{"required": ["b"]}, {"required": ["c"]}]}}})",
       {R"({"a": 1, "b": 2})", R"({"a": 1, "c": 2})", R"({"b": 2, "c": 3})"},
       {R"({"a": 1})", R"({"a": 1, "b": 2, "c": 3})"}},
      // A value that depends on another property: written after it, and before it.
      {R"({"properties": {"kind": {"type": "string"}, "items": {}},
           "dependentSchemas": {"items": {"properties": {"kind": {"const": "list"}}}}})",
       {R"({"kind": "x"})", R"({"kind": "list", "items": 1})", R"({"items": 1})"},
       {R"({"kind": "x", "items": 1})", R"({"kind": 3, "items": 1})"}},
      {R"({"properties": {"items": {}, "kind": {"type": "string"}},
           "dependentSchemas": {"items": {"properties": {"kind": {"const": "list"}},
                                          "required": ["kind"]}}})",
       {R"({"kind": "x"})", R"({"items": 1, "kind": "list"})"},
       {R"({"items": 1, "kind": "x"})", R"({"items": 1})"}},
      // Its own value, where present.
      {R"({"properties": {"n": {}}, "dependentSchemas": {"n": {"properties": {"n": {"type": "integer"}}}}})",
       {R"({"n": 3})", R"({})"},
       {R"({"n": "3"})"}},
  });
}

TEST(JsonSchemaTest, MinAndMaxPropertiesCountEveryMember) {
  Check({
      {R"({"type": "object", "minProperties": 1})",
       {R"({"x": 1})", R"({"x": 1, "y": 2})"},
       {R"({})"}},
      {R"({"properties": {"a": {}, "b": {}}, "additionalProperties": {"type": "integer"},
           "minProperties": 1, "maxProperties": 1})",
       {R"({"a": 1})", R"({"b": "x"})", R"({"q": 1})"},
       {R"({})", R"({"a": 1, "b": 2})", R"({"a": 1, "q": 1})", R"({"q": 1, "r": 2})"}},
      {R"({"maxProperties": 2})",
       {R"({})", R"({"a": 1, "b": 2})"},
       {R"({"a": 1, "b": 2, "c": 3})"}},
      {R"({"properties": {"id": {}, "a": {}, "b": {}, "c": {}}, "required": ["id"],
           "additionalProperties": false, "minProperties": 3, "maxProperties": 3})",
       {R"({"id": 1, "a": 2, "c": 3})", R"({"id": 1, "b": 2, "c": 3})"},
       {R"({"id": 1, "a": 2})", R"({"id": 1, "a": 2, "b": 3, "c": 4})",
        R"({"a": 1, "b": 2, "c": 3})"}},
  });
  // More members asked for than the object may have: no document.
  const Status none = Refusal(json::parse(
      R"({"type": "object", "properties": {"a": {}}, "additionalProperties": false,
          "minProperties": 2})"));
  EXPECT_NE(none.message().find("no document"), std::string::npos) << none.message();
}

TEST(JsonSchemaTest, DependentSchemasBeyondPresenceAreRefusedByName) {
  const Status st = Refusal(json::parse(
      R"({"properties": {"a": {}}, "dependentSchemas": {"a": {"additionalProperties": false}}})"));
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
  EXPECT_NE(
      st.message().find("\"dependentSchemas\" at \"/dependentSchemas/a/additionalProperties\""),
      std::string::npos)
      << st.message();
  const Status branch = Refusal(json::parse(R"({"dependencies": {"a": {"anyOf": [
      {"properties": {"b": {"type": "string"}}}, {"required": ["c"]}]}}})"));
  EXPECT_EQ(branch.code(), Status::Code::kUnsupported) << branch.message();
  EXPECT_NE(branch.message().find("/dependencies/a/anyOf/0/properties/b"), std::string::npos)
      << branch.message();
}

// allOf of two schemas that both give items, anyOf, or numeric bounds: each item both schemas',
// one branch of each anyOf, the tighter bound.
TEST(JsonSchemaTest, AllOfMergesItemsAnyOfAndBounds) {
  Check({
      {R"({"allOf": [{"type": "array", "items": {"type": "integer"}},
                     {"items": {"minimum": 2}, "maxItems": 2}]})",
       {R"([])", R"([2, 3])"},
       {R"([1])", R"([2, "x"])", R"([2, 3, 4])"}},
      {R"({"allOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]},
                     {"anyOf": [{"type": "integer", "minimum": 5},
                                {"type": "string", "maxLength": 1}]}]})",
       {R"(5)", R"("a")", R"(7)"},
       {R"(4)", R"("ab")", R"(null)"}},
      {R"({"allOf": [{"type": "number", "minimum": 1, "exclusiveMaximum": 10},
                     {"minimum": 3, "exclusiveMaximum": 8, "maximum": 7.5}]})",
       {R"(3)", R"(7.5)"},
       {R"(2)", R"(7.75)", R"(9)"}},
      // A part's items apply to the other's positional ones too (and the other way round).
      {R"({"allOf": [{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
                     {"items": {"type": ["integer", "null"]}}]})",
       {R"([])", R"([1])"},
       {R"([1, "a"])", R"([1, null])", R"([null])", R"(["a"])"}},
      {R"({"$schema": "http://json-schema.org/draft-07/schema#", "allOf": [
           {"type": "array", "items": [{"type": "integer"}], "additionalItems": false},
           {"items": [{"minimum": 2}, {"type": "string"}]}]})",
       {R"([2])", R"([])"},
       {R"([1])", R"([2, "a"])"}},
      // Draft 4's boolean exclusive bounds are not compared: the same bound both ways merges.
      {R"({"$schema": "http://json-schema.org/draft-04/schema#", "allOf": [
           {"type": "integer", "minimum": 0, "exclusiveMinimum": true}, {"minimum": 0}]})",
       {R"(1)"},
       {R"(0)"}},
  });
  const Status draft4 =
      Refusal(json::parse(R"({"$schema": "http://json-schema.org/draft-04/schema#",
      "allOf": [{"minimum": 0, "exclusiveMinimum": true}, {"minimum": 1}]})"));
  EXPECT_EQ(draft4.code(), Status::Code::kUnsupported) << draft4.message();
}

// allOf of parts that each have an anyOf (or a oneOf): their pairs, those that admit nothing
// dropped. Six if/then on one discriminator (each `not if` an anyOf over the name's types, 2^6
// pairs unmerged) were refused as "anyOf differs".
TEST(JsonSchemaTest, ContainsTheItemsDecideAreMergedAway) {
  Check({
      // oneOf of arrays of enums: "0 and not 1" asks an item not among 1's values, which every
      // item of 0 is: an item at least (the empty array matches every branch).
      {R"({"type": "object", "properties": {"s": {"oneOf": [
           {"type": "array", "maxItems": 3, "items": {"enum": ["a", "b"]}},
           {"type": "array", "maxItems": 3, "items": {"enum": ["c", "d"]}},
           {"type": "array", "maxItems": 3, "items": {"enum": ["e"]}}]}}})",
       {R"({"s": ["a"]})", R"({"s": ["d", "c"]})", R"({"s": ["e", "e"]})"},
       {R"({"s": []})", R"({"s": ["a", "c"]})", R"({"s": ["a", "a", "a", "a"]})"}},
      // Every item is at least 1 (an item at least); one of them is 1 (counted).
      {R"({"type": "array", "items": {"enum": [1, 2, 3]},
           "allOf": [{"contains": {"const": 1}}, {"contains": {"minimum": 1}}]})",
       {"[1]", "[2, 1]"},
       {"[]", "[2, 3]", "[4, 1]"}},
      {R"({"type": "array", "items": {"enum": ["x", 2]},
           "allOf": [{"contains": {"type": "string"}}, {"contains": {"not": {"const": 3}}}]})",
       {R"(["x"])", R"([2, "x"])"},
       {"[]", "[2]"}},
  });
  const Status none = Refusal(json::parse(R"({"type": "array", "items": {"enum": [1, 2]},
      "allOf": [{"contains": {"const": 1}}, {"contains": {"type": "string"}}]})"));
  EXPECT_NE(none.message().find("no document"), std::string::npos) << none.message();
  for (const char* s : {R"({"type": "array", "items": {"enum": [1, 2, 3]},
                            "allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}]})",
                        R"({"type": "array", "allOf": [{"contains": {"const": 1}},
                            {"contains": {"minimum": 1}}]})",
                        R"({"type": "array", "items": {"enum": [1, 2]}, "allOf": [
                            {"contains": {"const": 1}, "maxContains": 1},
                            {"contains": {"minimum": 1}}]})"}) {
    const Status st = Refusal(json::parse(s));
    EXPECT_EQ(st.code(), Status::Code::kUnsupported) << s;
    EXPECT_NE(st.message().find("\"contains\" differs"), std::string::npos) << st.message();
  }
}

// A recursive schema through allOf (a property's allOf of the $ref around it, a $ref with
// siblings from 2019-09 on, an anyOf beside other keywords) merges to the same schema at each
// level: one rule, met again (it was written out level after level, refused past 200).
TEST(JsonSchemaTest, RecursiveAllOfIsOneRule) {
  Check({{R"({"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
             "kids": {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/node"},
                                                           {"required": ["name"]}]}}}}},
           "$ref": "#/$defs/node"})",
          {R"({"kids": [{"name": "a", "kids": [{"name": "b", "kids": []}]}]})", "{}"},
          {R"({"kids": [{"name": "a", "kids": [{"kids": []}]}]})", R"({"kids": [{}]})"}},
         {R"({"$defs": {"n": {"type": "object", "properties": {
               "next": {"$ref": "#/$defs/n", "required": ["v"]}, "v": {"type": "integer"}}}},
           "$ref": "#/$defs/n"})",
          {R"({"next": {"next": {"v": 2}, "v": 1}})", R"({"v": 3})"},
          {R"({"next": {"next": {"v": 1}}})", R"({"next": {"v": "x"}})"}},
         // anyOf beside minProperties, a branch the $ref around it (JSON Schema Store's resjson).
         {R"({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
           "additionalProperties": {"minProperties": 1,
             "anyOf": [{"type": "string"}, {"$ref": "#/definitions/r"}]},
           "definitions": {"r": {"type": "object", "additionalProperties": {"minProperties": 1,
             "anyOf": [{"type": "string"}, {"$ref": "#/definitions/r"}]}}}})",
          {R"({"a": "x", "b": {"c": {"d": "y"}}})", "{}"},
          {R"({"a": {}})", R"({"a": 1})", R"({"a": {"b": {}}})"}}});
}

TEST(JsonSchemaTest, AllOfOfAlternativesPairsThem) {
  json cases = json::array();
  for (const char* n : {"a", "b", "c", "d", "e", "f"})
    cases.push_back({{"if", {{"properties", {{"name", {{"const", n}}}}}}},
                     {"then", {{"required", {std::string(n) + "x"}}}}});
  const Schema tagged(json{{"type", "object"},
                           {"properties", {{"name", {{"type", "string"}}}}},
                           {"required", {"name"}},
                           {"allOf", cases}});
  for (const char* ok : {R"({"name": "a", "ax": 1})", R"({"name": "f", "fx": "y"})",
                         R"({"name": "g"})", R"({"name": "b", "bx": null, "ax": 2})"})
    EXPECT_TRUE(tagged.Accepts(json::parse(ok))) << ok;
  for (const char* bad : {R"({"name": "a"})", R"({"name": "c", "ax": 1})", R"({"name": 1})"})
    EXPECT_FALSE(tagged.Accepts(json::parse(bad))) << bad;
  // Exactly one of each oneOf: every object of the names a, b, c, d.
  const std::vector<std::vector<std::string>> first = {{"a"}, {"b"}, {"a", "c"}};
  const std::vector<std::vector<std::string>> second = {{"c"}, {"d"}};
  const auto one_of = [](const std::vector<std::vector<std::string>>& branches) {
    json o = json::array();
    for (const auto& names : branches) o.push_back({{"required", names}});
    return json{{"oneOf", o}};
  };
  const Schema exactly(json{{"type", "object"},
                            {"properties",
                             {{"a", {{"type", "integer"}}},
                              {"b", {{"type", "integer"}}},
                              {"c", {{"type", "integer"}}},
                              {"d", {{"type", "integer"}}}}},
                            {"allOf", {one_of(first), one_of(second)}}});
  const auto matching = [](const json& doc, const std::vector<std::vector<std::string>>& bs) {
    int n = 0;
    for (const auto& names : bs) {
      bool all = true;
      for (const std::string& name : names) all = all && doc.contains(name);
      n += all;
    }
    return n;
  };
  for (int present = 0; present < 16; ++present) {
    json doc = json::object();
    for (int i = 0; i < 4; ++i)
      if (present >> i & 1) doc[std::string(1, static_cast<char>('a' + i))] = i;
    EXPECT_EQ(exactly.Accepts(doc), matching(doc, first) == 1 && matching(doc, second) == 1)
        << doc.dump();
  }
}

// allOf of objects with patternProperties: a part's patterns apply to the names other parts list,
// a part's additionalProperties to the keys its own properties and patterns leave, whatever the
// others list or match (key rules where they match more). These were refused ("patternProperties
// beside another schema's properties").
TEST(JsonSchemaTest, AllOfOfPatternPropertiesKeepsEachPartsTerms) {
  Check({
      // Patterns beside listed names: they apply to those names too.
      {R"({"allOf": [{"type": "object", "patternProperties": {"^/": {"type": "string",
           "pattern": "^/"}}}, {"properties": {"/a": {"type": "string"}, "b": {"type": "integer"}}}]})",
       {R"({"/a": "/x", "b": 1, "/c": "/y", "z": null})", R"({})"},
       {R"({"/a": "x"})", R"({"/c": 1})", R"({"b": "s"})"}},
      // A closed part: only its names, each also meeting the other part's patterns.
      {R"({"allOf": [{"properties": {"a": {}, "xb": {}}, "additionalProperties": false},
           {"patternProperties": {"^x": {"type": "integer"}}}]})",
       {R"({"a": "s", "xb": 1})", R"({})"},
       {R"({"xb": "s"})", R"({"xc": 1})", R"({"c": 1})"}},
      // additionalProperties beside the other part's patterns: "yz" is additional to the first.
      {R"({"allOf": [{"patternProperties": {"^x": {"type": "integer"}},
           "additionalProperties": {"type": "string"}}, {"patternProperties": {"^y": {"minimum": 5}}}]})",
       {R"({"yz": "s", "xa": 3, "q": "s"})", R"({"xa": 7})"},
       {R"({"yz": 7})", R"({"xa": "s"})", R"({"q": 1})"}},
      // Both parts' additionalProperties, each beside the other's pattern.
      {R"({"allOf": [{"patternProperties": {"^x": {}}, "additionalProperties": {"type": "integer"}},
           {"patternProperties": {"^y": {}}, "additionalProperties": {"minimum": 3}}]})",
       {R"({"xa": 5, "xb": "s", "ya": 2, "q": 4})"},
       {R"({"xa": 1})", R"({"ya": "s"})", R"({"q": 2})", R"({"q": 4.5})"}},
      // Its complement: some key breaks one of the parts' terms.
      {R"({"type": "object", "not": {"allOf": [{"patternProperties": {"^x": {"type": "integer"}},
           "additionalProperties": {"type": "string"}}, {"patternProperties": {"^y": {}}}]}})",
       {R"({"ya": 1})", R"({"xa": "s"})", R"({"q": 1, "xb": 2})"},
       {R"({"ya": "s", "xa": 1})", R"({})", R"({"q": "s"})"}},
      // Exactly one of a closed object and an open one with patterns (oneOf's "i and not j").
      {R"({"oneOf": [{"type": "object", "properties": {"id": {"type": "string"}},
           "patternProperties": {"^[a-z]+$": {"type": ["string", "number"]}}},
          {"type": "object", "properties": {"count": {"type": "number"}},
           "additionalProperties": false}]})",
       {R"({"id": "x", "n": 1})", R"({"count": "s"})", R"({"id": "a", "count": 1})"},
       {R"({"count": 1})", R"({})", R"({"n": null})"}},
  });
}

// propertyNames: every key's name, listed or not, as an enum, a pattern or lengths (beside
// patternProperties: more patterns each other key must match).
TEST(JsonSchemaTest, PropertyNamesLimitEveryKey) {
  Check({
      {R"({"type": "object", "properties": {"a": {}, "zz": {}}, "propertyNames": {"enum": ["a", "b", "c"]}})",
       {R"({})", R"({"a": 1})", R"({"a": 1, "b": 2})", R"({"b": 2, "c": 3})"},
       {R"({"zz": 1})", R"({"d": 1})", R"({"a": 1, "x": 2})"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"},
           "propertyNames": {"$ref": "#/$defs/id"}, "$defs": {"id": {"type": "string", "pattern": "^[a-z]+$"}}})",
       {R"({"ab": 1})", R"({"ab": 1, "c": 2})"},
       {R"({"Ab": 1})", R"({"a1": 1})", R"({"ab": "x"})", R"({"": 1})"}},
      {R"({"type": "object", "properties": {"y_1": {"type": "string"}},
           "patternProperties": {"^x": {"type": "integer"}}, "propertyNames": {"pattern": "_"}})",
       {R"({"y_1": "s"})", R"({"x_2": 3})", R"({"a_b": null})",
        R"({"y_1": "s", "x_3": 4, "q_": []})"},
       {R"({"x2": 3})", R"({"x_2": "s"})", R"({"ab": 1})", R"({"y_1": 3})"}},
      {R"({"type": "object", "propertyNames": false})", {R"({})"}, {R"({"a": 1})"}},
      // Lengths: one more pattern (characters, as validators count them), beside the pattern.
      {R"({"type": "object", "properties": {"abcd": {}}, "propertyNames": {"maxLength": 3, "minLength": 2, "pattern": "^[a-z\u00e9]+$"}})",
       {R"({})", R"({"ab": 1})", R"({"abc": 1, "\u00e9\u00e9\u00e9": 2})"},
       {R"({"abcd": 1})", R"({"a": 1})", R"({"AB": 1})", R"({"\u00e9\u00e9\u00e9\u00e9": 1})"}},
  });
  const Status required = Refusal(
      json::parse(R"({"type": "object", "required": ["a"], "propertyNames": {"enum": ["b"]}})"));
  EXPECT_NE(required.message().find("no document"), std::string::npos) << required.message();
  const Status format = Refusal(json::parse(R"({"propertyNames": {"format": "email"}})"));
  EXPECT_EQ(format.code(), Status::Code::kUnsupported) << format.message();
  EXPECT_NE(format.message().find("\"propertyNames\" at \"/propertyNames/format\""),
            std::string::npos)
      << format.message();
}

// multipleOf with an integer divisor: integer texts it divides, within +-(2^53 - 1), every prefix
// one a multiple in range can still complete; not {multipleOf} the numbers with a fraction and the
// integers it does not divide; a divisor with a fraction is refused.
TEST(JsonSchemaTest, MultipleOfAnIntegerDivisor) {
  Check({
      {R"({"type": "integer", "multipleOf": 5})",
       {R"(0)", R"(5)", R"(-10)", R"(1000)", R"(9007199254740990)"},
       {R"(3)", R"(12)", R"(-7)", R"(9007199254740995)"}},
      {R"({"type": "number", "multipleOf": 3, "minimum": 1, "maximum": 10})",
       {R"(3)", R"(6)", R"(9)"},
       {R"(0)", R"(12)", R"(1.5)", R"(4)"}},
      {R"({"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]})",
       {R"(12)", R"(24)", R"(-36)"},
       {R"(8)", R"(18)", R"(6)"}},
      {R"({"type": "number", "multipleOf": 1.0})", {R"(2)", R"(-3)"}, {R"(2.5)"}},
      // not {multipleOf}: a number with a fraction, or an integer it does not divide.
      {R"({"type": "number", "not": {"multipleOf": 3}})",
       {R"(1)", R"(-7)", R"(2.5)", R"(100)"},
       {R"(0)", R"(3)", R"(-9)", R"(99)"}},
      {R"({"type": "integer", "minimum": 0, "maximum": 20, "oneOf": [{"multipleOf": 2}, {"multipleOf": 3}]})",
       {R"(2)", R"(3)", R"(4)", R"(9)", R"(20)"},
       {R"(0)", R"(6)", R"(12)", R"(1)", R"(7)"}},
  });
  // Between 10 and 15 only 14 is a multiple of 7: "1" is live, "11" already dead.
  std::string rx;
  ASSERT_TRUE(IntegerRangeRegex(10, 15, &rx).ok());
  std::unique_ptr<Regex> re;
  ASSERT_TRUE(Regex::Compile(rx, Regex::Mode::kFull, &re).ok());
  std::unique_ptr<MultipleAutomaton> sevens;
  ASSERT_TRUE(MultipleAutomaton::Build(re.get(), 7, 0, &sevens).ok());
  const int one = sevens->Next(sevens->Start(), '1');
  ASSERT_NE(one, LexemeAutomaton::kDead);
  EXPECT_EQ(sevens->Next(one, '1'), LexemeAutomaton::kDead);
  EXPECT_EQ(sevens->Next(one, '5'), LexemeAutomaton::kDead);
  EXPECT_TRUE(sevens->Accepts(sevens->Next(one, '4')));
  const Status none =
      Refusal(json::parse(R"({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6})"));
  EXPECT_NE(none.message().find("no document"), std::string::npos) << none.message();
  const Status cents = Refusal(json::parse(R"({"type": "number", "multipleOf": 0.01})"));
  EXPECT_EQ(cents.code(), Status::Code::kUnsupported) << cents.message();
  EXPECT_NE(cents.message().find("keyword \"multipleOf\" at \"/multipleOf\""), std::string::npos)
      << cents.message();
}

}  // namespace
}  // namespace llmq
