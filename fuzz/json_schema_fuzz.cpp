// libFuzzer target for the JSON Schema compiler (engine/structured/json_schema.h): schemas are
// input from job files. The input is a schema (JSON text), a NUL, and a document. Whatever the
// bytes: the schema compiles or is refused with InvalidArgument / Unsupported naming
// "json_schema:" or "grammar:" (never a crash, a hang or unbounded recursion); a compiled one is
// matched against the document byte by byte over a one-byte-per-token trie, where each mask must
// hold exactly the bytes Consume accepts, and EOS only where the document may end.
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file writes a seed corpus into argv[1].
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/matcher_walk.h"

#ifndef LLMQ_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [text, doc] = SplitAtNul(data, size);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  llmq::Grammar g;
  const llmq::Status s = llmq::CompileJsonSchema(schema, &g);  // before g is moved
  std::string why;
  const auto c = CompileOrRefused(s, std::move(g), &why);
  if (c == nullptr) {
    FUZZ_CHECK(why.rfind("json_schema:", 0) == 0 || why.rfind("grammar:", 0) == 0);
    return 0;
  }
  WalkDocument(c, doc, 7);
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

int main(int argc, char** argv) {
  const std::string kSeeds[] = {
      R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}},
          "required": ["a"], "additionalProperties": false})" +
          std::string(1, '\0') + R"({"a": 12})",
      R"({"$defs": {"n": {"type": "object", "properties": {"k": {"type": "array",
          "items": {"$ref": "#/$defs/n"}}}}}, "$ref": "#/$defs/n"})" +
          std::string(1, '\0') + R"({"k": [{"k": []}]})",
      R"({"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"enum": [1, null]}]})" +
          std::string(1, '\0') + R"("abc")",
      R"({"allOf": [{"properties": {"x": {"type": "string", "format": "date"}}},
          {"required": ["x"]}], "oneOf": [{"type": "object"}, {"type": "null"}]})" +
          std::string(1, '\0') + R"({"x": "2026-12-02"})",
      R"({"type": "array", "prefixItems": [{"const": "a"}], "items": {"type": "number",
          "exclusiveMaximum": 10}, "minItems": 2, "maxItems": 4})" +
          std::string(1, '\0') + R"(["a", 9.5])",
      R"({"type": "object", "properties": {"x-a": {"maxLength": 2}}, "required": ["x-b"],
          "patternProperties": {"^x-": {"type": "string"}, "[0-9]$": {"type": "integer"}},
          "additionalProperties": false})" +
          std::string(1, '\0') + R"({"x-a": "s", "x-b": "t", "x-1": 5})",
      R"({"properties": {"a": {}, "b": {"type": "string"}, "c": {}}, "minProperties": 2,
          "maxProperties": 3, "dependentRequired": {"c": ["a"]}, "dependentSchemas":
          {"a": {"oneOf": [{"required": ["b"]}, {"not": {"required": ["c"]}}]}}})" +
          std::string(1, '\0') + R"({"a": 1, "b": "x", "c": 2})",
      // Bounds merged by allOf, oneOf's exclusions, uniqueItems and contains over an enum: a
      // byte turns a number into a string ("1" for 1: it threw from the compiler, 496c4b1).
      R"({"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": true, "minItems": 1,
          "allOf": [{"maxItems": 3}, {"maxItems": 2}, {"contains": {"const": 1}},
          {"contains": {"minimum": 1}}], "oneOf": [{"maxItems": 1}, {"minItems": 2}]})" +
          std::string(1, '\0') + R"([2, 1])",
  };
  return WriteSeeds(argc, argv, kSeeds);
}

#endif  // LLMQ_FUZZ_SEEDS
