// `llmq schema check` (daemon/cli_schema.cpp) on the real binary with the Llama 3 tokenizer of
// ../shared: a schema file, a test file in MaskBench's shape (valid instances accepted, invalid
// ones rejected at the token where they go wrong), a refused schema naming keyword and pointer,
// the --json shape, the exit status, and --reorder (MaskBench's creation step: a rejected instance
// walked again with its properties in the grammar's order).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;

std::vector<json> Lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

TEST(SchemaCheckCliTest, TestFilesAreWalkedTokenByToken) {
  const std::string model = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-llama32");
  const std::string dir = testing::CurrentTestDir();
  const std::string schema = R"({"type": "object", "additionalProperties": false,
      "properties": {"name": {"type": "string", "maxLength": 8},
                     "age": {"type": "integer", "minimum": 0}},
      "required": ["name"]})";
  const std::string plain = testing::WriteFileIn(dir, "person.json", schema);
  const std::string tests =
      testing::WriteFileIn(dir, "person.tests.json", R"({"schema": )" + schema + R"(, "tests": [
      {"data": {"name": "Ada", "age": 36}, "valid": true},
      {"data": {"name": "Grace"}, "valid": true},
      {"data": {"name": "Ada", "age": -1}, "valid": false},
      {"data": {"name": "Bartholomew"}, "valid": false},
      {"data": {"age": 3}, "valid": false}]})");
  const testing::RunResult r =
      testing::RunLlmq({"schema", "check", "--model", model, "--json", plain, tests});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::vector<json> files = Lines(r.out);
  ASSERT_EQ(files.size(), 2u) << r.out;
  EXPECT_EQ(files[0]["file"], plain);
  EXPECT_TRUE(files[0]["compiled"].get<bool>());
  EXPECT_TRUE(files[0]["error"].is_null());
  EXPECT_GT(files[0]["compile_us"].get<double>(), 0);
  EXPECT_EQ(files[0]["tests"].size(), 0u);
  const json& t = files[1]["tests"];
  ASSERT_EQ(t.size(), 5u) << r.out;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(t[i]["valid"].get<bool>());
    EXPECT_TRUE(t[i]["accepted"].get<bool>()) << t[i].dump();
    EXPECT_TRUE(t[i]["complete"].get<bool>()) << t[i].dump();
    EXPECT_TRUE(t[i]["rejected_at"].is_null());
    EXPECT_GT(t[i]["tokens"].get<int>(), 5);
    EXPECT_GE(t[i]["mask_us_max"].get<double>(), t[i]["mask_us_p50"].get<double>());
  }
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_FALSE(t[i]["accepted"].get<bool>()) << t[i].dump();
    EXPECT_LT(t[i]["rejected_at"].get<int>(), t[i]["tokens"].get<int>()) << t[i].dump();
  }
  // -1: refused after the minus sign (-0 is 0, which is in range); "Bartholomew": within the
  // name, past 8 characters; no name: at the first key.
  EXPECT_NE(t[2]["text_at"].get<std::string>().find("- | 1"), std::string::npos) << t[2].dump();
  EXPECT_NE(t[3]["text_at"].get<std::string>().find("Bar"), std::string::npos) << t[3].dump();
  EXPECT_EQ(t[4]["rejected_at"].get<int>(), 1) << t[4].dump();
}

TEST(SchemaCheckCliTest, RefusalsAndDisagreementsFailTheCheck) {
  const std::string model = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-llama32");
  const std::string dir = testing::CurrentTestDir();
  const std::string refused = testing::WriteFileIn(
      dir, "tags.json", R"({"properties": {"tags": {"type": "array", "uniqueItems": true}}})");
  const std::string wrong =
      testing::WriteFileIn(dir, "wrong.json", R"({"schema": {"type": "integer"},
      "tests": [{"data": "seven", "valid": true}]})");
  const std::string missing = dir + "/missing.json";
  testing::RunResult r = testing::RunLlmq({"schema", "check", "--model", model, refused});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("refused: json_schema: keyword \"uniqueItems\" at "
                       "\"/properties/tags/uniqueItems\""),
            std::string::npos)
      << r.out;
  r = testing::RunLlmq({"schema", "check", "--model", model, wrong});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("test 0 (valid): rejected at token 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<-- disagrees"), std::string::npos) << r.out;
  r = testing::RunLlmq({"schema", "check", "--model", model, missing, refused});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(missing + ": cannot open"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("tags.json: refused"), std::string::npos) << "the other files are checked";
}

// A schema enforced on fewer documents than it admits (a oneOf of eleven overlapping branches
// told apart by their discriminator, required): said beside "compiled", and in --json.
TEST(SchemaCheckCliTest, RestrictionsAreSaid) {
  const std::string model = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-llama32");
  nlohmann::json branches = nlohmann::json::array();
  for (int i = 0; i < 11; ++i)
    branches.push_back({{"type", "object"},
                        {"properties",
                         {{"kind", {{"const", "k" + std::to_string(i)}}},
                          {"a" + std::to_string(i), {{"type", "string"}}},
                          {"b" + std::to_string(i), {{"type", "integer"}}}}}});
  const std::string file = testing::WriteFileIn(testing::CurrentTestDir(), "kinds.json",
                                                nlohmann::json{{"oneOf", branches}}.dump());
  testing::RunResult r = testing::RunLlmq({"schema", "check", "--model", model, file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("restricted: keyword \"oneOf\" at \"/oneOf\": only objects with "
                       "\"kind\" (the branches' discriminator) are generated"),
            std::string::npos)
      << r.out;
  r = testing::RunLlmq({"schema", "check", "--model", model, "--json", file});
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["restrictions"].size(), 1u) << r.out;
  EXPECT_TRUE(j["compiled"].get<bool>());
}

// A valid instance whose properties are out of the schema's order is rejected as written (the
// grammar generates them in order) and accepted with --reorder, nested objects and arrays of them
// reordered too; an invalid one stays rejected however its properties are ordered (here: a
// required property missing; a string too long behind an out-of-order property, reordered against
// the schema without its value constraints first, as reorder.py does).
TEST(SchemaCheckCliTest, ReorderWalksPropertiesInTheGrammarsOrder) {
  const std::string model = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-llama32");
  const std::string dir = testing::CurrentTestDir();
  const std::string tests =
      testing::WriteFileIn(dir, "order.tests.json", R"({"schema": {"type": "object",
      "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 5},
        "tags": {"type": "array", "items": {"type": "object",
          "properties": {"k": {"type": "string"}, "v": {"type": "number"}}, "required": ["k"]}}},
      "required": ["id", "name"], "additionalProperties": false}, "tests": [
      {"data": {"name": "Ada", "id": 1}, "valid": true},
      {"data": {"tags": [{"v": 2, "k": "x"}], "name": "Ada", "id": 1}, "valid": true},
      {"data": {"id": 1, "name": "Ada"}, "valid": true},
      {"data": {"name": "Ada"}, "valid": false},
      {"data": {"name": "Bartholomew", "id": 1}, "valid": false}]})");
  testing::RunResult r = testing::RunLlmq({"schema", "check", "--model", model, "--json", tests});
  EXPECT_EQ(r.exit_code, 1) << "as written, the first two are rejected";
  std::vector<json> files = Lines(r.out);
  ASSERT_EQ(files.size(), 1u) << r.out;
  EXPECT_FALSE(files[0]["tests"][0]["accepted"].get<bool>());
  EXPECT_FALSE(files[0]["tests"][1]["accepted"].get<bool>());
  r = testing::RunLlmq({"schema", "check", "--model", model, "--json", "--reorder", tests});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  files = Lines(r.out);
  ASSERT_EQ(files.size(), 1u) << r.out;
  const json& t = files[0]["tests"];
  ASSERT_EQ(t.size(), 5u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(t[i]["accepted"].get<bool>() && t[i]["complete"].get<bool>()) << t[i].dump();
    EXPECT_EQ(t[i]["reordered"].get<bool>(), i < 2) << t[i].dump();
  }
  for (size_t i = 3; i < 5; ++i) EXPECT_FALSE(t[i]["accepted"].get<bool>()) << t[i].dump();
  EXPECT_TRUE(t[4]["reordered"].get<bool>()) << "reordered against the schema without maxLength";
  EXPECT_NE(t[4]["text_at"].get<std::string>().find("Bar"), std::string::npos) << t[4].dump();
}

}  // namespace
}  // namespace llmq
