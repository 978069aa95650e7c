// The reorder step of engine/structured/schema_check.h (MaskBench's creation step): a document's
// members rewritten in an order the grammar takes. reorder.py's choice (a key after which every
// other possible key can come next) where it works; backtracking where it leads nowhere, as a
// dependency makes it: after `po` (which asks for `street`), `ext` may come next and so may
// `street`, but only `ext` first leaves the other one a place.
#include "engine/structured/schema_check.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<CompiledGrammar> Compile(const char* schema) {
  Grammar g;
  EXPECT_TRUE(CompileJsonSchema(json::parse(schema), &g).ok()) << schema;
  std::shared_ptr<CompiledGrammar> c;
  EXPECT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
  return c;
}

std::string Keys(const json& o) {
  std::string k;
  for (const auto& [name, v] : o.items()) k += name + " ";
  return k;
}

TEST(SchemaCheckTest, ReorderBacktracksWhereTheGreedyChoiceLeadsNowhere) {
  const auto g = Compile(R"({"type": "object", "properties": {"po": {}, "ext": {}, "street": {},
      "city": {}}, "dependentRequired": {"po": ["street"]}, "additionalProperties": false})");
  json r;
  ASSERT_TRUE(
      ReorderProperties(g, json::parse(R"({"street": 1, "city": 2, "po": 3, "ext": 4})"), &r));
  EXPECT_EQ(Keys(r), "po ext street city ");
  Matcher m(g);
  EXPECT_TRUE(m.Consume(PythonJsonDumps(r)) && m.CanEnd());
  // No order fits: `po` without `street`.
  EXPECT_FALSE(ReorderProperties(g, json::parse(R"({"city": 2, "po": 3})"), &r));
}

TEST(SchemaCheckTest, ReorderNestsAndKeepsTheGreedyOrderWhereItWorks) {
  const auto g = Compile(R"({"type": "object", "properties": {"a": {"type": "object",
      "properties": {"x": {}, "y": {}}}, "b": {}}})");
  json r;
  ASSERT_TRUE(ReorderProperties(g, json::parse(R"({"b": 1, "a": {"y": 2, "x": 3}, "q": 4})"), &r));
  EXPECT_EQ(PythonJsonDumps(r), R"({"a": {"x": 3, "y": 2}, "b": 1, "q": 4})");
}

}  // namespace
}  // namespace llmq
