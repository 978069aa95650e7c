// Tests for jobs/batch_request.h: OpenAI Batch API input lines, accepted and refused, with errors
// that name the file, the line and the field; and the speed of parsing a large file.
#include "jobs/batch_request.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace llmq::jobs {
namespace {

using nlohmann::json;

json ChatLine() {
  return json::parse(R"({"custom_id": "doc-17", "method": "POST", "url": "/v1/chat/completions",
    "body": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hello"}],
             "max_tokens": 256, "temperature": 0}})");
}

json CompletionLine() {
  return json::parse(R"({"custom_id": "c-1", "method": "POST", "url": "/v1/completions",
    "body": {"model": "m", "prompt": "Once upon a time"}})");
}

BatchRequest Parse(const json& j, int line = 17) {
  return ParseBatchLine(j.dump(), line, "jobs.jsonl");
}

TEST(BatchRequestTest, ParsesChatLine) {
  const BatchRequest r = Parse(ChatLine());
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.line, 17);
  EXPECT_EQ(r.custom_id, "doc-17");
  EXPECT_EQ(r.endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hello");
  ASSERT_TRUE(r.max_tokens.has_value());
  EXPECT_EQ(*r.max_tokens, 256);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.top_p, 1.0);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.min_p, 0.0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_TRUE(r.stop.empty());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_FALSE(r.prompt_is_ids);
}

TEST(BatchRequestTest, ParsesEverySamplingField) {
  json j = ChatLine();
  j["body"].update(json::parse(R"({"max_tokens": 5, "temperature": 1.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "seed": -7, "stop": ["\n\n", "END"], "n": 3,
      "ignore_eos": true, "stream": false})"));
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_DOUBLE_EQ(r.temperature, 1.5);
  EXPECT_DOUBLE_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_DOUBLE_EQ(r.min_p, 0.05);
  ASSERT_TRUE(r.seed.has_value());
  EXPECT_EQ(*r.seed, -7);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(BatchRequestTest, NestingBeyond512LevelsIsRefusedBeforeParsing) {
  const std::string head =
      R"({"custom_id": "d", "method": "POST", "url": "/v1/completions", "body": {"prompt": )";
  // 510 levels inside the body's 2: parsed (and refused for what the prompt is, not its depth).
  BatchRequest ok =
      ParseBatchLine(head + std::string(510, '[') + std::string(510, ']') + "}}", 3, "f.jsonl");
  EXPECT_EQ(ok.error.find("nested deeper"), std::string::npos) << ok.error;
  // One more: refused, naming the column of the bracket that went too deep.
  BatchRequest deep =
      ParseBatchLine(head + std::string(511, '[') + std::string(511, ']') + "}}", 3, "f.jsonl");
  EXPECT_NE(deep.error.find("f.jsonl:3: nested deeper than 512 levels at column " +
                            std::to_string(head.size() + 511)),
            std::string::npos)
      << deep.error;
  EXPECT_EQ(deep.custom_id, "");
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  BatchRequest text = ParseBatchLine(
      head + "\"" + std::string(5000, '[') + "\\\"" + std::string(5000, '{') + "\"}}", 4,
      "f.jsonl");
  EXPECT_TRUE(text.error.empty()) << text.error;
}

TEST(BatchRequestTest, DefaultsWhenAbsent) {
  json chat = ChatLine();
  chat["body"].erase("max_tokens");
  chat["body"].erase("temperature");
  const BatchRequest c = Parse(chat);
  ASSERT_EQ(c.error, "");
  EXPECT_FALSE(c.max_tokens.has_value());  // chat: up to the context
  EXPECT_EQ(c.temperature, 1.0);
  const BatchRequest p = Parse(CompletionLine());
  ASSERT_EQ(p.error, "");
  ASSERT_TRUE(p.max_tokens.has_value());
  EXPECT_EQ(*p.max_tokens, 16);  // OpenAI's completions default
}

TEST(BatchRequestTest, NullMeansAbsentAndFieldsOpenAiIgnoresAreIgnored) {
  json j = ChatLine();
  j["body"].update(json::parse(R"({"max_tokens": null, "temperature": null, "seed": null,
      "stop": null, "logprobs": false, "user": "u", "frequency_penalty": 0.5,
      "response_format": {"type": "text"}})"));
  j["extra"] = {1, 2, 3};
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_TRUE(r.stop.empty());
}

// response_format: json_object, json_schema with the schema's text in the order it was written
// (its properties are generated in that order), on both endpoints; each malformed shape refused
// naming its field.
TEST(BatchRequestTest, ResponseFormatJsonSchemaKeepsTheSchemasKeyOrder) {
  const std::string line =
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x",
      "response_format": {"type": "json_schema", "json_schema": {"name": "rec_1", "strict": true,
      "schema": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha":
      {"enum": [2, 1]}}, "required": ["zeta"]}}}}})";
  const BatchRequest r = ParseBatchLine(line, 1, "f.jsonl");
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(r.json_schema_name, "rec_1");
  EXPECT_EQ(r.json_schema,
            R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"enum":[2,1]}},)"
            R"("required":["zeta"]})");
  json chat = ChatLine();
  chat["body"]["response_format"] = {{"type", "json_object"}};
  EXPECT_EQ(Parse(chat).response_format, ResponseFormat::kJsonObject);
  EXPECT_EQ(Parse(ChatLine()).response_format, ResponseFormat::kText);

  const std::pair<const char*, const char*> bad[] = {
      {R"({"type": "json_schema"})", "'body.response_format.json_schema' is missing"},
      {R"({"type": "json_schema", "json_schema": {"schema": {}}})",
       "'body.response_format.json_schema.name' is missing"},
      {R"({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}})",
       "'body.response_format.json_schema.name' must be a name"},
      {R"({"type": "json_schema", "json_schema": {"name": "n"}})",
       "'body.response_format.json_schema.schema' is missing"},
      {R"({"type": "json_schema", "json_schema": {"name": "n", "schema": [1]}})",
       "'body.response_format.json_schema.schema' must be a JSON Schema"},
      {R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "strict": 1}})",
       "'body.response_format.json_schema.strict' must be a boolean"},
      {R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "extra": 1}})",
       "'body.response_format.json_schema.extra' is not supported"},
      {R"({"type": "json_object", "schema": {}})",
       "'body.response_format.schema' is not supported"},
      {R"({"type": "xml"})", "'body.response_format.type' must be"},
      {R"("json")", "'body.response_format' must be an object"},
  };
  for (const auto& [rf, want] : bad) {
    json j = ChatLine();
    j["body"]["response_format"] = json::parse(rf);
    const BatchRequest b = Parse(j);
    EXPECT_NE(b.error.find(want), std::string::npos) << rf << "\n" << b.error;
  }
  json j = ChatLine();
  j["body"]["response_format"] = {{"type", "json_object"}};
  j["body"]["min_tokens"] = 2;
  EXPECT_NE(Parse(j).error.find("field 'body.min_tokens' cannot be combined with response_format "
                                "json_object"),
            std::string::npos)
      << Parse(j).error;
  // Nor a stop string or stop token (they would cut the document); empty ones are harmless.
  j["body"].erase("min_tokens");
  j["body"]["response_format"] = {
      {"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"type", "object"}}}}}};
  j["body"]["stop"] = json::array();
  j["body"]["stop_token_ids"] = json::array();
  EXPECT_EQ(Parse(j).error, "");
  j["body"]["stop"] = "}";
  EXPECT_NE(Parse(j).error.find("field 'body.stop' cannot be combined with response_format "
                                "json_schema"),
            std::string::npos)
      << Parse(j).error;
  j["body"].erase("stop");
  j["body"]["stop_token_ids"] = {7};
  EXPECT_NE(Parse(j).error.find("field 'body.stop_token_ids' cannot be combined"),
            std::string::npos)
      << Parse(j).error;
}

TEST(BatchRequestTest, MaxCompletionTokensIsAcceptedAndWins) {
  json j = ChatLine();
  j["body"].erase("max_tokens");
  j["body"]["max_completion_tokens"] = 9;
  EXPECT_EQ(*Parse(j).max_tokens, 9);
  j["body"]["max_tokens"] = 100;
  EXPECT_EQ(*Parse(j).max_tokens, 9);  // as vLLM: the newer name wins
}

TEST(BatchRequestTest, IntegralFloatsCountAsIntegers) {
  json j = ChatLine();
  j["body"]["max_tokens"] = 32.0;
  j["body"]["n"] = 2.0;
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(*r.max_tokens, 32);
  EXPECT_EQ(r.n, 2);
}

TEST(BatchRequestTest, StopAsString) {
  json j = ChatLine();
  j["body"]["stop"] = "###";
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.stop, std::vector<std::string>{"###"});
}

TEST(BatchRequestTest, TopKMinusOneMeansNoLimit) {
  json j = ChatLine();
  j["body"]["top_k"] = -1;
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.top_k, 0);
}

TEST(BatchRequestTest, ContentPartsAreConcatenated) {
  json j = ChatLine();
  j["body"]["messages"][1]["content"] =
      json::parse(R"([{"type": "text", "text": "first"}, {"type": "text", "text": "second"}])");
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.messages[1].content, "first\nsecond");  // joined as vLLM joins them
}

TEST(BatchRequestTest, DeveloperRoleIsSystem) {
  json j = ChatLine();
  j["body"]["messages"][0]["role"] = "developer";
  const BatchRequest r = Parse(j);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.messages[0].role, "system");
}

TEST(BatchRequestTest, ParsesCompletionsPrompts) {
  BatchRequest r = Parse(CompletionLine());
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.endpoint, Endpoint::kCompletions);
  EXPECT_EQ(r.custom_id, "c-1");
  EXPECT_EQ(r.prompt, "Once upon a time");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_TRUE(r.messages.empty());

  json ids = CompletionLine();
  ids["body"]["prompt"] = {1, 403, 407, 0};
  r = Parse(ids);
  ASSERT_EQ(r.error, "");
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_token_ids, (std::vector<int32_t>{1, 403, 407, 0}));

  json one = CompletionLine();
  one["body"]["prompt"] = {"in a list"};
  r = Parse(one);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.prompt, "in a list");
}

TEST(BatchRequestTest, AcceptsUnicodeAndCrlf) {
  json j = ChatLine();
  j["body"]["messages"][1]["content"] = "Grüße, 世界 🙂";
  const BatchRequest r = ParseBatchLine(j.dump() + "\r", 3, "jobs.jsonl");
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.messages[1].content, "Grüße, 世界 🙂");
}

// --- errors -------------------------------------------------------------------------------------

TEST(BatchRequestTest, InvalidJsonNamesFileAndLine) {
  const BatchRequest r = ParseBatchLine(R"({"custom_id": "x", "method": )", 17, "jobs.jsonl");
  EXPECT_EQ(r.error.rfind("jobs.jsonl:17: invalid JSON: ", 0), 0u) << r.error;
  EXPECT_EQ(r.custom_id, "");
  EXPECT_EQ(r.error_param, "") << "no single field is at fault";
  EXPECT_EQ(r.line, 17);

  const BatchRequest bad_utf8 = ParseBatchLine("{\"custom_id\": \"a\xff\"}", 4, "jobs.jsonl");
  EXPECT_EQ(bad_utf8.error.rfind("jobs.jsonl:4: invalid JSON: ", 0), 0u) << bad_utf8.error;

  const BatchRequest trailing = ParseBatchLine(ChatLine().dump() + " x", 5, "jobs.jsonl");
  EXPECT_EQ(trailing.error.rfind("jobs.jsonl:5: invalid JSON: ", 0), 0u) << trailing.error;
}

TEST(BatchRequestTest, EmptyLineAndNonObjectsAreRefused) {
  EXPECT_EQ(ParseBatchLine("   ", 2, "f.jsonl").error,
            "f.jsonl:2: empty line (expected a JSON object)");
  EXPECT_EQ(ParseBatchLine("[1, 2]", 3, "f.jsonl").error,
            "f.jsonl:3: expected a JSON object, got a list of 2");
  EXPECT_EQ(ParseBatchLine("42", 4, "f.jsonl").error, "f.jsonl:4: expected a JSON object, got 42");
}

TEST(BatchRequestTest, ExactMessages) {
  json j = ChatLine();
  j["body"]["max_tokens"] = -3;
  EXPECT_EQ(Parse(j).error,
            "jobs.jsonl:17: field 'body.max_tokens' must be a positive integer, got -3");
  j = ChatLine();
  j["url"] = "/v1/embeddings";
  EXPECT_EQ(Parse(j).error,
            "jobs.jsonl:17: field 'url' is not a supported endpoint (supported: "
            "/v1/chat/completions, /v1/completions, /v1/responses), got \"/v1/embeddings\"");
  j = ChatLine();
  j["body"]["messages"][1].erase("content");
  EXPECT_EQ(Parse(j).error,
            "jobs.jsonl:17: field 'body.messages[1].content' is missing (expected a string)");
  j = ChatLine();
  j["body"]["stream"] = true;
  EXPECT_EQ(
      Parse(j).error,
      "jobs.jsonl:17: field 'body.stream' must be false: a batch job cannot stream, got true");
}

struct BadCase {
  const char* name;
  bool completions;     // start from CompletionLine() instead of ChatLine()
  const char* pointer;  // JSON pointer of the field to change
  const char* value;    // its new value as JSON; nullptr: remove the field
  const char* field;    // the field the error must name
};

// Every kind of refusal: the message is "jobs.jsonl:<line>: field '<field>' ...", and custom_id
// is kept whenever it could be read.
TEST(BatchRequestTest, EachErrorNamesLineAndField) {
  const BadCase cases[] = {
      {"custom_id missing", false, "/custom_id", nullptr, "custom_id"},
      {"custom_id empty", false, "/custom_id", R"("")", "custom_id"},
      {"custom_id number", false, "/custom_id", "17", "custom_id"},
      {"method GET", false, "/method", R"("GET")", "method"},
      {"method missing", false, "/method", nullptr, "method"},
      {"method number", false, "/method", "1", "method"},
      {"url missing", false, "/url", nullptr, "url"},
      {"url embeddings", false, "/url", R"("/v1/embeddings")", "url"},
      {"url not string", false, "/url", "[]", "url"},
      {"body missing", false, "/body", nullptr, "body"},
      {"body string", false, "/body", R"("hello")", "body"},
      {"body list", false, "/body", "[]", "body"},
      {"model number", false, "/body/model", "3", "body.model"},
      {"messages missing", false, "/body/messages", nullptr, "body.messages"},
      {"messages empty", false, "/body/messages", "[]", "body.messages"},
      {"messages object", false, "/body/messages", R"({"role": "user"})", "body.messages"},
      {"message string", false, "/body/messages/1", R"("hi")", "body.messages[1]"},
      {"role missing", false, "/body/messages/1/role", nullptr, "body.messages[1].role"},
      {"role number", false, "/body/messages/1/role", "1", "body.messages[1].role"},
      {"role unknown", false, "/body/messages/1/role", R"("function")", "body.messages[1].role"},
      {"content missing", false, "/body/messages/1/content", nullptr, "body.messages[1].content"},
      {"content number", false, "/body/messages/1/content", "5", "body.messages[1].content"},
      {"content object", false, "/body/messages/0/content", R"({"text": "x"})",
       "body.messages[0].content"},
      {"content part image", false, "/body/messages/1/content",
       R"([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}])",
       "body.messages[1].content[1].type"},
      {"content part no text", false, "/body/messages/1/content", R"([{"type": "text"}])",
       "body.messages[1].content[0].text"},
      {"content part text number", false, "/body/messages/1/content",
       R"([{"type": "text", "text": 1}])", "body.messages[1].content[0].text"},
      {"content part string", false, "/body/messages/1/content", R"(["a"])",
       "body.messages[1].content[0]"},
      {"prompt missing", true, "/body/prompt", nullptr, "body.prompt"},
      {"prompt number", true, "/body/prompt", "3", "body.prompt"},
      {"prompt object", true, "/body/prompt", "{}", "body.prompt"},
      {"prompt empty list", true, "/body/prompt", "[]", "body.prompt"},
      {"prompt two strings", true, "/body/prompt", R"(["a", "b"])", "body.prompt"},
      {"prompt list of lists", true, "/body/prompt", "[[1, 2]]", "body.prompt"},
      {"prompt negative id", true, "/body/prompt", "[1, -2]", "body.prompt[1]"},
      {"prompt float id", true, "/body/prompt", "[1, 2.5]", "body.prompt[1]"},
      {"prompt huge id", true, "/body/prompt", "[1, 4294967296]", "body.prompt[1]"},
      {"max_tokens zero", false, "/body/max_tokens", "0", "body.max_tokens"},
      {"max_tokens negative", false, "/body/max_tokens", "-3", "body.max_tokens"},
      {"max_tokens string", false, "/body/max_tokens", R"("10")", "body.max_tokens"},
      {"max_tokens fraction", false, "/body/max_tokens", "1.5", "body.max_tokens"},
      {"max_tokens bool", false, "/body/max_tokens", "true", "body.max_tokens"},
      {"max_tokens huge", false, "/body/max_tokens", "1e12", "body.max_tokens"},
      {"max_completion_tokens", false, "/body/max_completion_tokens", "0",
       "body.max_completion_tokens"},
      {"temperature high", false, "/body/temperature", "2.5", "body.temperature"},
      {"temperature negative", false, "/body/temperature", "-0.1", "body.temperature"},
      {"temperature string", false, "/body/temperature", R"("hot")", "body.temperature"},
      {"temperature bool", false, "/body/temperature", "false", "body.temperature"},
      {"top_p zero", false, "/body/top_p", "0", "body.top_p"},
      {"top_p above one", false, "/body/top_p", "1.01", "body.top_p"},
      {"top_p string", false, "/body/top_p", R"("0.5")", "body.top_p"},
      {"top_k fraction", false, "/body/top_k", "2.5", "body.top_k"},
      {"top_k below -1", false, "/body/top_k", "-2", "body.top_k"},
      {"top_k string", false, "/body/top_k", R"("5")", "body.top_k"},
      {"min_p above one", false, "/body/min_p", "1.5", "body.min_p"},
      {"min_p negative", false, "/body/min_p", "-1", "body.min_p"},
      {"seed fraction", false, "/body/seed", "1.5", "body.seed"},
      {"seed string", false, "/body/seed", R"("42")", "body.seed"},
      {"stop number", false, "/body/stop", "5", "body.stop"},
      {"stop empty string", false, "/body/stop", R"("")", "body.stop"},
      {"stop five", false, "/body/stop", R"(["a", "b", "c", "d", "e"])", "body.stop"},
      {"stop item number", false, "/body/stop", R"(["a", 3])", "body.stop[1]"},
      {"stop item empty", false, "/body/stop", R"(["a", ""])", "body.stop[1]"},
      {"n zero", false, "/body/n", "0", "body.n"},
      {"n too many", false, "/body/n", "129", "body.n"},
      {"n string", false, "/body/n", R"("2")", "body.n"},
      {"ignore_eos string", false, "/body/ignore_eos", R"("yes")", "body.ignore_eos"},
      {"stream true", false, "/body/stream", "true", "body.stream"},
      {"stream string", false, "/body/stream", R"("no")", "body.stream"},
      {"completions max_tokens", true, "/body/max_tokens", "-1", "body.max_tokens"},
  };
  int line = 1;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    json j = c.completions ? CompletionLine() : ChatLine();
    const json::json_pointer ptr(c.pointer);
    if (c.value) {
      j[ptr] = json::parse(c.value);
    } else {
      j[ptr.parent_pointer()].erase(ptr.back());
    }
    ++line;
    const BatchRequest r = Parse(j, line);
    const std::string want = "jobs.jsonl:" + std::to_string(line) + ": field '" + c.field + "' ";
    EXPECT_EQ(r.error.rfind(want, 0), 0u) << r.error;
    // The field, carried out as OpenAI's error param: the body's field path, or the line's own.
    EXPECT_EQ(r.error_param, ParamOfField(c.field)) << r.error;
    EXPECT_EQ(r.error_param.rfind("body.", 0), std::string::npos) << r.error_param;
    EXPECT_EQ(r.line, line);
    if (std::string(c.pointer) != "/custom_id") {
      EXPECT_EQ(r.custom_id, c.completions ? "c-1" : "doc-17");
    }
  }
}

TEST(BatchRequestTest, FirstErrorWinsAndCustomIdIsKept) {
  json j = ChatLine();
  j["method"] = "PUT";
  j["body"]["max_tokens"] = -1;
  const BatchRequest r = Parse(j);
  EXPECT_EQ(r.error.rfind("jobs.jsonl:17: field 'method' ", 0), 0u) << r.error;
  EXPECT_EQ(r.custom_id, "doc-17");
  // A bad custom_id is reported even when later fields are bad too.
  j["custom_id"] = 5;
  EXPECT_EQ(Parse(j).error.rfind("jobs.jsonl:17: field 'custom_id' ", 0), 0u);
  EXPECT_EQ(Parse(j).error_param, "custom_id");
}

TEST(BatchRequestTest, ParamOfFieldIsTheBodysFieldPath) {
  EXPECT_EQ(ParamOfField("body.max_tokens"), "max_tokens");
  EXPECT_EQ(ParamOfField("body.messages[1].role"), "messages[1].role");
  EXPECT_EQ(ParamOfField("body.response_format.json_schema.schema"),
            "response_format.json_schema.schema");
  EXPECT_EQ(ParamOfField("custom_id"), "custom_id");
  EXPECT_EQ(ParamOfField("body"), "body");
  EXPECT_EQ(ParamOfField(""), "");
}

TEST(BatchRequestTest, LongValuesAreShortenedInMessages) {
  json j = ChatLine();
  j["url"] = std::string(5000, 'x');
  const BatchRequest r = Parse(j);
  EXPECT_LT(r.error.size(), 300u) << r.error;
}

// Truncations and byte flips of valid lines: never a throw, always either parsed or refused with a
// message that starts with the file and line.
TEST(BatchRequestTest, NeverThrowsOnMangledLines) {
  std::mt19937 rng(7);
  json full = ChatLine();
  full["body"].update(json::parse(R"({"stop": ["a"], "seed": 3, "n": 2, "top_k": 4})"));
  const std::vector<std::string> bases = {full.dump(), CompletionLine().dump()};
  for (const std::string& base : bases) {
    for (size_t cut = 0; cut <= base.size(); ++cut) {
      BatchRequest r;
      ASSERT_NO_THROW(r = ParseBatchLine(base.substr(0, cut), 9, "f.jsonl"));
      if (cut < base.size()) {
        EXPECT_EQ(r.error.rfind("f.jsonl:9: ", 0), 0u) << r.error;
      }
    }
    for (int k = 0; k < 2000; ++k) {
      std::string s = base;
      for (int f = 0; f < 3; ++f) s[rng() % s.size()] = static_cast<char>(rng() % 256);
      BatchRequest r;
      ASSERT_NO_THROW(r = ParseBatchLine(s, 9, "f.jsonl"));
      if (!r.error.empty()) {
        EXPECT_EQ(r.error.rfind("f.jsonl:9: ", 0), 0u) << r.error;
      }
    }
  }
}

// (How fast: queue_bench's "store" measure parses these lines.)
TEST(BatchRequestTest, Parses10000Lines) {
  std::vector<std::string> lines;
  for (int i = 0; i < 10000; ++i) {
    json j = i % 2 ? ChatLine() : CompletionLine();
    j["custom_id"] = "req-" + std::to_string(i);
    if (i % 2) {
      j["body"]["messages"][1]["content"] =
          "Please summarise the following text in two sentences: " + std::string(400, 'a' + i % 26);
    } else {
      j["body"]["prompt"] = "Once upon a time there was a line number " + std::to_string(i);
    }
    lines.push_back(j.dump());
  }
  int ok = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const BatchRequest r = ParseBatchLine(lines[i], static_cast<int>(i + 1), "big.jsonl");
    ok += r.error.empty() && r.custom_id == "req-" + std::to_string(i);
  }
  EXPECT_EQ(ok, 10000);
}

}  // namespace
}  // namespace llmq::jobs

namespace llmq::jobs {
namespace {

// Every body field llmq knows (BodyFieldRules) and a few it does not: honoured ones parse to the
// documented value, ignored ones change nothing, refused ones give an error naming the field.
struct FieldCase {
  const char* name;  // the field as BodyFieldRules names it
  bool completions;  // on /v1/completions (else chat)
  const char* value;
  // Honoured: checks the parsed request; null for a refused value.
  std::function<void(const BatchRequest&)> check;
};

TEST(BatchRequestFieldsTest, EveryFieldIsHonouredIgnoredOrRefusedByName) {
  const BatchRequest plain_chat = ParseBatchLine(ChatLine().dump(), 3, "f.jsonl");
  const BatchRequest plain_cmpl = ParseBatchLine(CompletionLine().dump(), 3, "f.jsonl");
  auto unchanged = [&](const BatchRequest& r) {
    const BatchRequest& p = r.endpoint == Endpoint::kChatCompletions ? plain_chat : plain_cmpl;
    EXPECT_EQ(r.max_tokens, p.max_tokens);
    EXPECT_EQ(r.temperature, p.temperature);
    EXPECT_EQ(r.n, p.n);
    EXPECT_EQ(r.logprobs, -1);
    EXPECT_TRUE(r.logit_bias.empty());
  };
  using R = const BatchRequest&;
  const std::vector<FieldCase> cases = {
      {"model", false, R"("other")", [](R r) { EXPECT_EQ(r.model, "other"); }},
      {"messages", false, R"([{"role": "user", "content": "x"}])",
       [](R r) { EXPECT_EQ(r.messages.size(), 1u); }},
      {"prompt", true, "[5, 6]", [](R r) { EXPECT_TRUE(r.prompt_is_ids); }},
      {"max_tokens", false, "7", [](R r) { EXPECT_EQ(*r.max_tokens, 7); }},
      {"max_completion_tokens", true, "9", [](R r) { EXPECT_EQ(*r.max_tokens, 9); }},
      {"temperature", false, "0.5", [](R r) { EXPECT_EQ(r.temperature, 0.5); }},
      {"top_p", true, "0.5", [](R r) { EXPECT_EQ(r.top_p, 0.5); }},
      {"n", false, "3", [](R r) { EXPECT_EQ(r.n, 3); }},
      {"stop", true, R"("\n")", [](R r) { EXPECT_EQ(r.stop.size(), 1u); }},
      {"seed", false, "11", [](R r) { EXPECT_EQ(*r.seed, 11); }},
      {"stream", true, "false", [](R r) { EXPECT_EQ(r.error, ""); }},
      {"stream", false, "true", nullptr},
      {"presence_penalty", false, "1.5", [](R r) { EXPECT_EQ(r.presence_penalty, 1.5); }},
      {"presence_penalty", false, "2.5", nullptr},
      {"frequency_penalty", true, "-0.5", [](R r) { EXPECT_EQ(r.frequency_penalty, -0.5); }},
      {"frequency_penalty", true, "-3", nullptr},
      {"logit_bias", false, R"({"50": -100, "7": 2.5})",
       [](R r) {
         EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int64_t, double>>{{7, 2.5}, {50, -100}}));
       }},
      {"logit_bias", false, R"({"50": 101})", nullptr},
      {"logit_bias", true, R"({"abc": 1})", nullptr},
      {"logprobs", false, "true", [](R r) { EXPECT_EQ(r.logprobs, 0); }},
      {"logprobs", false, "false", [](R r) { EXPECT_EQ(r.logprobs, -1); }},
      {"logprobs", true, "5", [](R r) { EXPECT_EQ(r.logprobs, 5); }},
      {"logprobs", true, "6", nullptr},
      {"top_logprobs", false, "20", nullptr},  // without logprobs: true
      {"response_format", false, R"({"type": "text"})", unchanged},
      {"response_format", false, R"({"type": "json_object"})",
       [](R r) { EXPECT_EQ(r.response_format, ResponseFormat::kJsonObject); }},
      {"response_format", true, R"({"type": "json_schema", "json_schema": {"name": "n", "schema":
       true}})",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
         EXPECT_EQ(r.json_schema, "true");
       }},
      {"response_format", false, R"({"type": "grammar"})", nullptr},
      {"modalities", false, R"(["text"])", unchanged},
      {"modalities", false, R"(["text", "audio"])", nullptr},
      {"echo", true, "false", unchanged},
      {"echo", true, "true", nullptr},
      {"suffix", true, R"("")", unchanged},
      {"suffix", true, R"("the end")", nullptr},
      {"best_of", true, "1", unchanged},
      {"best_of", true, "3", nullptr},
      {"top_k", false, "5", [](R r) { EXPECT_EQ(r.top_k, 5); }},
      {"min_p", true, "0.2", [](R r) { EXPECT_EQ(r.min_p, 0.2); }},
      {"ignore_eos", false, "true", [](R r) { EXPECT_TRUE(r.ignore_eos); }},
      {"repetition_penalty", false, "1.3", [](R r) { EXPECT_EQ(r.repetition_penalty, 1.3); }},
      {"repetition_penalty", false, "0", nullptr},
      {"min_tokens", true, "4", [](R r) { EXPECT_EQ(r.min_tokens, 4); }},
      {"min_tokens", true, "17", nullptr},  // beyond max_tokens (16 by default... set below)
      {"stop_token_ids", false, "[2, 9]",
       [](R r) {
         EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{2, 9}));
       }},
      {"stop_token_ids", false, "[-1]", nullptr},
      {"chat_template_kwargs", false, R"({"enable_thinking": false, "a": [1, {"z": 0, "b": 1}]})",
       [](R r) {  // (the case's line is written with its keys sorted)
         EXPECT_EQ(r.chat_template_kwargs, R"({"a":[1,{"b":1,"z":0}],"enable_thinking":false})");
       }},
      {"chat_template_kwargs", false, "{}", [](R r) { EXPECT_EQ(r.chat_template_kwargs, ""); }},
      {"chat_template_kwargs", false, R"(["enable_thinking"])", nullptr},
      {"chat_template_kwargs", false, R"({"x": 1, "messages": []})", nullptr},  // .messages
      {"chat_template_kwargs", false, R"({"add_generation_prompt": false})", nullptr},
      {"chat_template_kwargs", true, R"({"enable_thinking": false})", nullptr},
      {"add_generation_prompt", false, "false",
       [](R r) {
         EXPECT_FALSE(r.add_generation_prompt);
         EXPECT_FALSE(r.continue_final_message);
       }},
      {"add_generation_prompt", false, "1", nullptr},
      {"add_generation_prompt", true, "false", nullptr},
      {"continue_final_message", false, "false", [](R r) { EXPECT_TRUE(r.add_generation_prompt); }},
      {"continue_final_message", false, "true", nullptr},  // with add_generation_prompt's default
      {"continue_final_message", true, "true", nullptr},
      {"user", false, R"("u-1")", unchanged},
      {"metadata", false, R"({"k": "v"})", unchanged},
      {"store", false, "true", unchanged},
      {"service_tier", true, R"("auto")", unchanged},
      {"prompt_cache_key", false, R"("k")", unchanged},
      {"safety_identifier", false, R"("s")", unchanged},
      {"tools", false, R"([{"type": "function", "function": {"name": "f"}}])",
       [](R r) {
         ASSERT_EQ(r.tools.size(), 1u);
         EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
       }},
      {"tools", false, R"([{"type": "code_interpreter"}])", nullptr},
      {"tool_choice", false, R"("none")", [](R r) { EXPECT_EQ(r.tool_choice, ToolChoice::kNone); }},
      {"tool_choice", false, R"("auto")", nullptr},      // without tools
      {"parallel_tool_calls", false, "false", nullptr},  // without tools
      {"tools", true, R"([{"type": "function", "function": {"name": "f"}}])", nullptr},
      {"functions", false, R"([{"name": "f"}])", nullptr},
      {"function_call", false, R"("auto")", nullptr},
      {"stream_options", true, R"({"include_usage": true})", nullptr},
      {"audio", false, R"({"voice": "alloy"})", nullptr},
      {"prediction", false, R"({"type": "content", "content": "x"})", nullptr},
      {"reasoning_effort", false, R"("low")", nullptr},
      {"verbosity", false, R"("low")", nullptr},
      {"web_search_options", false, "{}", nullptr},
      // Not fields of this endpoint, or of any.
      {"echo", false, "false", nullptr},
      {"top_logprobs", true, "2", nullptr},
      {"messages", true, R"([{"role": "user", "content": "x"}])", nullptr},
      {"skip_special_tokens", true, "false", nullptr},
      // vLLM's structured outputs, on both endpoints.
      {"structured_outputs", false, R"({"choice": ["yes", "no"]})",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kChoice);
         EXPECT_EQ(r.choices, (std::vector<std::string>{"yes", "no"}));
         EXPECT_EQ(r.structured_field, "body.structured_outputs.choice");
       }},
      {"structured_outputs", true, R"({"regex": "[0-9]{3}"})",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kRegex);
         EXPECT_EQ(r.regex, "[0-9]{3}");
       }},
      {"structured_outputs", false, R"({"json": {"type": "object", "required": ["b", "a"]}})",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
         EXPECT_EQ(r.json_schema, R"({"required":["b","a"],"type":"object"})");  // sorted line
         EXPECT_EQ(r.structured_field, "body.structured_outputs.json");
       }},
      {"structured_outputs", false, R"({"json": "{\"type\": \"integer\"}"})",
       [](R r) { EXPECT_EQ(r.json_schema, R"({"type":"integer"})"); }},
      {"structured_outputs", true, R"({"json_object": true})",
       [](R r) { EXPECT_EQ(r.response_format, ResponseFormat::kJsonObject); }},
      {"structured_outputs", false, R"({"json_object": false})",
       [](R r) { EXPECT_EQ(r.response_format, ResponseFormat::kText); }},
      {"structured_outputs", true, R"({"grammar": "root ::= \"a\""})",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kGrammar);
         EXPECT_EQ(r.grammar, "root ::= \"a\"");
         EXPECT_EQ(r.structured_field, "body.structured_outputs.grammar");
       }},
      {"structured_outputs", false, R"({"grammar": ""})", nullptr},
      {"structured_outputs", false, R"({"grammar": "root ::= \"a\"", "regex": "a"})", nullptr},
      {"structured_outputs", false, R"({"structural_tag": "{}"})", nullptr},
      {"structured_outputs", false, R"({"regex": "a", "choice": ["a"]})", nullptr},
      {"structured_outputs", false, R"({"regex": "a", "whitespace_pattern": " "})", nullptr},
      {"structured_outputs", false, R"({})", nullptr},
      {"structured_outputs", false, R"({"json": "not json"})", nullptr},
      {"guided_json", false, R"({"type": "string"})",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
         EXPECT_EQ(r.structured_field, "body.guided_json");
       }},
      {"guided_json", false, "3", nullptr},
      {"guided_regex", true, R"("\\d+")", [](R r) { EXPECT_EQ(r.regex, "\\d+"); }},
      {"guided_regex", true, R"("")", nullptr},
      {"guided_choice", false, R"(["a", "b"])",
       [](R r) { EXPECT_EQ(r.response_format, ResponseFormat::kChoice); }},
      {"guided_choice", false, R"(["a", "a"])", nullptr},
      {"guided_choice", false, R"(["a", ""])", nullptr},
      {"guided_choice", false, "[]", nullptr},
      {"guided_decoding_backend", true, R"("xgrammar")", unchanged},
      {"guided_grammar", false, R"("root ::= \"a\"")",
       [](R r) {
         EXPECT_EQ(r.response_format, ResponseFormat::kGrammar);
         EXPECT_EQ(r.structured_field, "body.guided_grammar");
       }},
      {"guided_grammar", false, R"(["root ::= \"a\""])", nullptr},
      {"grammar", true, R"("root ::= [0-9]+")",
       [](R r) {
         EXPECT_EQ(r.grammar, "root ::= [0-9]+");
         EXPECT_EQ(r.structured_field, "body.grammar");
       }},
      {"guided_whitespace_pattern", false, R"(" ")", nullptr},
  };
  std::set<std::string> covered;
  int line = 100;
  for (const FieldCase& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " = " + c.value + (c.completions ? " (completions)" : ""));
    json j = c.completions ? CompletionLine() : ChatLine();
    j["body"][c.name] = json::parse(c.value);
    if (std::string(c.name) == "min_tokens") j["body"]["max_tokens"] = 16;
    const BatchRequest r = ParseBatchLine(j.dump(), ++line, "f.jsonl");
    covered.insert(c.name);
    if (c.check) {
      ASSERT_EQ(r.error, "");
      c.check(r);
    } else {
      const std::string want = "f.jsonl:" + std::to_string(line) + ": field 'body." + c.name;
      EXPECT_EQ(r.error.rfind(want, 0), 0u) << r.error;
    }
  }
  // (The Responses API's own fields: responses_request_test.cpp.)
  for (const FieldRule& rule : BodyFieldRules())
    if (rule.chat || rule.completions) {
      EXPECT_TRUE(covered.count(rule.name)) << rule.name;
    }
}

TEST(BatchRequestFieldsTest, ChatTopLogprobsWithLogprobsAndItsLimit) {
  json j = ChatLine();
  j["body"]["logprobs"] = true;
  j["body"]["top_logprobs"] = 20;
  EXPECT_EQ(ParseBatchLine(j.dump(), 1, "f").logprobs, 20);
  j["body"]["top_logprobs"] = 21;
  EXPECT_EQ(ParseBatchLine(j.dump(), 1, "f").error.rfind("f:1: field 'body.top_logprobs'", 0), 0u);
  j["body"]["logprobs"] = 1;
  j["body"]["top_logprobs"] = 2;
  EXPECT_EQ(ParseBatchLine(j.dump(), 1, "f").error.rfind("f:1: field 'body.logprobs'", 0), 0u);
}

}  // namespace
}  // namespace llmq::jobs

namespace llmq::jobs {
namespace {

// Tools: body.tools, tool_choice, parallel_tool_calls and the messages that carry tool calls and
// their results, accepted in every form OpenAI accepts and refused naming the field otherwise.

json ToolLine(const std::string& body_extra) {
  json j = ChatLine();
  j["body"].update(json::parse(body_extra));
  return j;
}

const char* const kWeatherTool =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather at a place",
        "parameters": {"type": "object", "properties": {"zeta": {"type": "string"},
        "alpha": {"type": "integer"}}, "required": ["zeta"]}, "strict": true}})";

// chat_template_kwargs reach the template in the key order written (a template's tojson lists
// them so); the CLI flag reads them the same way and names itself in its errors.
// continue_final_message (vLLM): only with add_generation_prompt false, and a final message with
// text to continue.
TEST(BatchRequestTest, ContinueFinalMessageNeedsNoGenerationPromptAndAFinalText) {
  json j = ChatLine();
  j["body"]["messages"] = json::parse(R"([{"role": "user", "content": "List colours."},
      {"role": "assistant", "content": "Red, "}])");
  j["body"]["continue_final_message"] = true;
  j["body"]["add_generation_prompt"] = false;
  BatchRequest r = ParseBatchLine(j.dump(), 5, "c.jsonl");
  ASSERT_EQ(r.error, "");
  EXPECT_TRUE(r.continue_final_message);
  EXPECT_FALSE(r.add_generation_prompt);
  j["body"]["messages"][1] = json::parse(
      R"({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "f", "arguments": "{}"}}]})");
  r = ParseBatchLine(j.dump(), 6, "c.jsonl");
  EXPECT_EQ(r.error.rfind("c.jsonl:6: field 'body.continue_final_message' needs a final message "
                          "with text content",
                          0),
            0u)
      << r.error;
}

TEST(BatchRequestTest, ChatTemplateKwargsKeepTheirKeyOrder) {
  const std::string line =
      R"({"custom_id": "k", "method": "POST", "url": "/v1/chat/completions", "body": {"messages":
      [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"zeta": {"y": 1, "b": [2]},
      "enable_thinking": false}}})";
  const BatchRequest r = ParseBatchLine(line, 3, "k.jsonl");
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.chat_template_kwargs, R"({"zeta":{"y":1,"b":[2]},"enable_thinking":false})");
  std::string flag;
  ASSERT_TRUE(ParseChatTemplateKwargs(R"({"z": 1, "a": 2})", "--chat-template-kwargs", &flag).ok());
  EXPECT_EQ(flag, R"({"z":1,"a":2})");
  const Status st = ParseChatTemplateKwargs(R"({"tools": []})", "--chat-template-kwargs", &flag);
  EXPECT_EQ(
      st.message().rfind("--chat-template-kwargs: field 'body.chat_template_kwargs.tools'", 0), 0u)
      << st.message();
}

TEST(BatchRequestToolsTest, ToolsAreKeptParsedAndAsWritten) {
  // Keys out of alphabetical order: the template gets them as written.
  const std::string line =
      R"({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": {"messages":
      [{"role": "user", "content": "Weather?"}], "tools": [)" +
      std::string(kWeatherTool) +
      R"(, {"function": {"name": "now"}, "type": "function"}], "parallel_tool_calls": false}})";
  const BatchRequest r = ParseBatchLine(line, 4, "t.jsonl");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools[0].description, "Weather at a place");
  EXPECT_EQ(
      r.tools[0].parameters,
      R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},)"
      R"("required":["zeta"]})");
  EXPECT_TRUE(r.tools[0].strict);
  EXPECT_EQ(r.tools[0].json,
            R"({"type":"function","function":{"name":"get_weather","description":"Weather at a )"
            R"(place","parameters":{"type":"object","properties":{"zeta":{"type":"string"},)"
            R"("alpha":{"type":"integer"}},"required":["zeta"]},"strict":true}})");
  EXPECT_EQ(r.tools[1].name, "now");
  EXPECT_EQ(r.tools[1].description, "");
  EXPECT_EQ(r.tools[1].parameters, "");
  EXPECT_FALSE(r.tools[1].strict);
  EXPECT_EQ(r.tools[1].json, R"({"function":{"name":"now"},"type":"function"})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);  // OpenAI's default with tools
  EXPECT_FALSE(r.parallel_tool_calls);
}

TEST(BatchRequestToolsTest, EveryToolChoice) {
  const std::string tools = std::string(R"({"tools": [)") + kWeatherTool + "]";
  struct Case {
    const char* choice;
    ToolChoice want;
    const char* name;
  };
  for (const Case& c :
       {Case{R"("none")", ToolChoice::kNone, ""}, Case{R"("auto")", ToolChoice::kAuto, ""},
        Case{R"("required")", ToolChoice::kRequired, ""},
        Case{R"({"type": "function", "function": {"name": "get_weather"}})", ToolChoice::kNamed,
             "get_weather"},
        Case{"null", ToolChoice::kAuto, ""}}) {
    SCOPED_TRACE(c.choice);
    const BatchRequest r = Parse(ToolLine(tools + R"(, "tool_choice": )" + c.choice + "}"));
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.tool_choice, c.want);
    EXPECT_EQ(r.tool_choice_name, c.name);
    EXPECT_TRUE(r.parallel_tool_calls);
  }
  // allowed_tools: the mode's choice, the calls restricted to the tools it names (each once).
  const std::string two =
      std::string(R"({"tools": [)") + kWeatherTool +
      R"(, {"type": "function", "function": {"name": "ping"}}], "tool_choice": {"type":
      "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function",
      "function": {"name": "ping"}}, {"type": "function", "function": {"name": "ping"}}]}}})";
  const BatchRequest allowed = Parse(ToolLine(two));
  ASSERT_EQ(allowed.error, "");
  EXPECT_EQ(allowed.tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(allowed.allowed_tools, std::vector<std::string>{"ping"});
  EXPECT_EQ(allowed.tools.size(), 2u) << "every tool is still given to the template";
  // Without tools: "none", OpenAI's default then.
  const BatchRequest none = Parse(ToolLine(R"({"tool_choice": "none"})"));
  ASSERT_EQ(none.error, "");
  EXPECT_EQ(none.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(Parse(ChatLine()).tool_choice, ToolChoice::kNone);
}

TEST(BatchRequestToolsTest, ToolMessagesAndToolCalls) {
  // The arguments' own key order is kept; the call's keys stay as written.
  const std::string line =
      R"({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [
      {"role": "user", "content": "Weather in Paris?", "name": "ann"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"zeta\": \"Paris\", \"alpha\": 2}"}},
        {"function": {"arguments": "{}", "name": "now"}, "type": "function", "id": "call_2"}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
      {"role": "assistant", "tool_calls": [{"id": "c3", "type": "function",
        "function": {"name": "now", "arguments": "{}"}}]},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c4", "type": "function",
        "function": {"name": "now", "arguments": " { } "}}]}],
      "tools": [)" +
      std::string(kWeatherTool) + R"(, {"type": "function", "function": {"name": "now"}}]}})";
  const BatchRequest r = ParseBatchLine(line, 2, "t.jsonl");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0].name, "ann");
  EXPECT_EQ(r.messages[0].tool_calls, "");
  EXPECT_FALSE(r.messages[0].content_null);
  EXPECT_TRUE(r.messages[1].content_null);
  EXPECT_EQ(r.messages[1].tool_calls,
            R"([{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":)"
            R"({"zeta":"Paris","alpha":2}}},{"function":{"arguments":{},"name":"now"},)"
            R"("type":"function","id":"call_2"}])");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].content, "sunny");
  EXPECT_EQ(r.messages[3].content, "noon");
  EXPECT_TRUE(r.messages[4].content_null);   // content absent
  EXPECT_FALSE(r.messages[5].content_null);  // content "" as written
  EXPECT_EQ(r.messages[5].tool_calls,
            R"([{"id":"c4","type":"function","function":{"name":"now","arguments":{}}}])");
}

// vLLM's structured outputs: one grammar per line (two of them, or one beside response_format, is
// refused naming the second), and the rules of a document's end (min_tokens, stop) name the field.
TEST(BatchRequestTest, OneStructuredOutputPerLine) {
  auto error = [](const json& extra) {
    json j = ChatLine();
    for (const auto& [k, v] : extra.items()) j["body"][k] = v;
    return ParseBatchLine(j.dump(), 4, "s.jsonl").error;
  };
  const std::string two = error({{"guided_choice", json::array({"a"})}, {"guided_regex", "a"}});
  EXPECT_EQ(two.rfind("s.jsonl:4: field 'body.guided_choice' cannot be combined with "
                      "body.guided_regex",
                      0),
            0u)
      << two;
  EXPECT_EQ(error({{"response_format", {{"type", "json_object"}}}, {"guided_json", json::object()}})
                .rfind("s.jsonl:4: field 'body.guided_json' cannot be combined with "
                       "body.response_format",
                       0),
            0u);
  EXPECT_EQ(error({{"response_format", {{"type", "text"}}}, {"guided_choice", json::array({"a"})}}),
            "");
  const std::string stop = error({{"guided_choice", {"a", "b"}}, {"stop", "x"}});
  EXPECT_EQ(
      stop.rfind("s.jsonl:4: field 'body.stop' cannot be combined with body.guided_choice", 0), 0u)
      << stop;
  const std::string min =
      error({{"structured_outputs", {{"regex", "a+"}}}, {"min_tokens", 2}, {"max_tokens", 9}});
  EXPECT_NE(min.find("field 'body.min_tokens' cannot be combined with "
                     "body.structured_outputs.regex"),
            std::string::npos)
      << min;
}

// An earlier turn's thought, under vLLM's two names: "reasoning" first, empty or null as none,
// other roles' ignored; not a string is refused naming the field.
TEST(BatchRequestTest, AnAssistantsThought) {
  auto messages = [](const std::string& assistant) {
    return ParseBatchLine(
        R"({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [
        {"role": "user", "content": "Hi", "reasoning": "ignored"}, )" +
            assistant + R"(, {"role": "user", "content": "And?"}]}})",
        3, "t.jsonl");
  };
  auto thought = [&](const std::string& assistant) {
    const BatchRequest r = messages(assistant);
    EXPECT_EQ(r.error, "") << assistant;
    EXPECT_FALSE(r.messages.at(0).reasoning);
    return r.messages.at(1).reasoning;
  };
  EXPECT_EQ(thought(R"({"role": "assistant", "content": "A", "reasoning_content": "Why"})"), "Why");
  EXPECT_EQ(thought(R"({"role": "assistant", "content": "A", "reasoning": "R",
                       "reasoning_content": "C"})"),
            "R");
  EXPECT_EQ(thought(R"({"role": "assistant", "content": "A", "reasoning": "",
                       "reasoning_content": "C"})"),
            "C");
  EXPECT_FALSE(thought(R"({"role": "assistant", "content": "A", "reasoning_content": null})"));
  EXPECT_FALSE(thought(R"({"role": "assistant", "content": "A"})"));
  const BatchRequest bad =
      messages(R"({"role": "assistant", "content": "A", "reasoning_content": ["x"]})");
  EXPECT_NE(bad.error.find("body.messages[1].reasoning_content"), std::string::npos) << bad.error;
}

TEST(BatchRequestToolsTest, RefusedFormsNameTheField) {
  const std::string tool = kWeatherTool;
  const std::string user = R"({"role": "user", "content": "x"})";
  auto call = [](const std::string& args) {
    return R"({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function":
             {"name": "f", "arguments": )" +
           args + "}}]}";
  };
  struct Case {
    std::string body;
    const char* field;
  };
  const std::vector<Case> cases = {
      {R"({"tools": []})", "body.tools"},
      {R"({"tools": {"type": "function"}})", "body.tools"},
      {R"({"tools": ["f"]})", "body.tools[0]"},
      {R"({"tools": [{"function": {"name": "f"}}]})", "body.tools[0].type"},
      {R"({"tools": [{"type": "retrieval", "function": {"name": "f"}}]})", "body.tools[0].type"},
      {R"({"tools": [{"type": "function"}]})", "body.tools[0].function"},
      {R"({"tools": [{"type": "function", "function": "f"}]})", "body.tools[0].function"},
      {R"({"tools": [{"type": "function", "function": {}}]})", "body.tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "get weather"}}]})",
       "body.tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'a') +
           R"("}}]})",
       "body.tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]})",
       "body.tools[0].function.description"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]})",
       "body.tools[0].function.parameters"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]})",
       "body.tools[0].function.strict"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "returns": {}}}]})",
       "body.tools[0].function.returns"},
      {R"({"tools": [{"type": "function", "function": {"name": "f"}, "extra": 1}]})",
       "body.tools[0].extra"},
      {R"({"tools": [)" + tool + "," + tool + "]}", "body.tools[1].function.name"},
      {R"({"tool_choice": "auto"})", "body.tool_choice"},
      {R"({"tool_choice": "required"})", "body.tool_choice"},
      {R"({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
       "body.tool_choice"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": "any"})", "body.tool_choice"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "allowed_tools"}})",
       "body.tool_choice.allowed_tools"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "allowed_tools", "allowed_tools":
          {"mode": "any", "tools": [{"type": "function", "function": {"name": "get_weather"}}]}}})",
       "body.tool_choice.allowed_tools.mode"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "allowed_tools", "allowed_tools":
          {"mode": "auto", "tools": []}}})",
       "body.tool_choice.allowed_tools.tools"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "allowed_tools", "allowed_tools":
          {"mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]}}})",
       "body.tool_choice.allowed_tools.tools[0].function.name"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "allowed_tools", "allowed_tools":
          {"mode": "auto", "tools": [{"type": "mcp", "server_label": "x"}]}}})",
       "body.tool_choice.allowed_tools.tools[0].type"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": 1})", "body.tool_choice"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "function", "function": {"name":
         "other"}}})",
       "body.tool_choice.function.name"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "tool", "function": {"name":
         "get_weather"}}})",
       "body.tool_choice.type"},
      {R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "function"}})",
       "body.tool_choice.function"},
      {R"({"tools": [)" + tool + R"(], "parallel_tool_calls": "yes"})", "body.parallel_tool_calls"},
      {R"({"parallel_tool_calls": true})", "body.parallel_tool_calls"},
      // Messages.
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "body.messages[0].tool_call_id"},
      {R"({"messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]})",
       "body.messages[0].tool_call_id"},
      {R"({"messages": [{"role": "tool", "tool_call_id": "c"}]})", "body.messages[0].content"},
      {R"({"messages": [{"role": "user", "tool_call_id": "c", "content": "x"}]})",
       "body.messages[0].tool_call_id"},
      {R"({"messages": [{"role": "function", "name": "f", "content": "x"}]})",
       "body.messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x", "name": 1}]})", "body.messages[0].name"},
      {R"({"messages": [{"role": "assistant"}]})", "body.messages[0].content"},
      {R"({"messages": [{"role": "user", "tool_calls": [], "content": "x"}]})",
       "body.messages[0].tool_calls"},
      {R"({"messages": [)" + user + R"(, {"role": "assistant", "tool_calls": []}]})",
       "body.messages[1].tool_calls"},
      {R"({"messages": [)" + user + "," + call(R"("{\"a\": ")") + "]}",
       "body.messages[1].tool_calls[0].function.arguments"},
      {R"({"messages": [)" + user + "," + call(R"("[1, 2]")") + "]}",
       "body.messages[1].tool_calls[0].function.arguments"},
      {R"({"messages": [)" + user + "," + call(R"({"a": 1})") + "]}",
       "body.messages[1].tool_calls[0].function.arguments"},
      {R"({"messages": [)" + user + R"(, {"role": "assistant", "tool_calls": [{"type": "function",
         "function": {"name": "f", "arguments": "{}"}}]}]})",
       "body.messages[1].tool_calls[0].id"},
      {R"({"messages": [)" + user + R"(, {"role": "assistant", "tool_calls": [{"id": "c", "type":
         "custom", "function": {"name": "f", "arguments": "{}"}}]}]})",
       "body.messages[1].tool_calls[0].type"},
      {R"({"messages": [)" + user + R"(, {"role": "assistant", "tool_calls": [{"id": "c", "type":
         "function", "function": {"arguments": "{}"}}]}]})",
       "body.messages[1].tool_calls[0].function.name"},
      {R"({"messages": [)" + user + R"(, {"role": "assistant", "tool_calls": [{"id": "c", "type":
         "function", "function": {"name": "f"}}]}]})",
       "body.messages[1].tool_calls[0].function.arguments"},
      {R"({"messages": [)" + user + R"(, {"role": "assistant", "tool_calls": ["c"]}]})",
       "body.messages[1].tool_calls[0]"},
  };
  int line = 40;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const BatchRequest r = Parse(ToolLine(c.body), ++line);
    const std::string want = "jobs.jsonl:" + std::to_string(line) + ": field '" + c.field + "'";
    EXPECT_EQ(r.error.rfind(want, 0), 0u) << r.error;
    EXPECT_EQ(r.custom_id, "doc-17");
  }
}

TEST(BatchRequestToolsTest, CommandLineToolsAndMessagesAreReadAsTheBodys) {
  std::vector<ToolDef> tools;
  ASSERT_TRUE(ParseChatTools(std::string("[") + kWeatherTool + "]", "--tools", &tools).ok());
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].json.find(R"("properties":{"zeta")"), tools[0].json.find("\"properties\""));
  Status st = ParseChatTools(R"([{"type": "function"}])", "--tools", &tools);
  EXPECT_EQ(st.message(),
            "--tools: field 'body.tools[0].function' is missing (expected "
            "{\"name\", \"description\", \"parameters\"})");
  st = ParseChatTools("[", "--tools", &tools);
  EXPECT_EQ(st.message().rfind("--tools: invalid JSON: ", 0), 0u) << st.message();
  std::vector<ChatMessage> msgs;
  ASSERT_TRUE(ParseChatMessages(R"([{"role": "assistant", "tool_calls": [{"id": "c", "type":
      "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "ok"}])",
                                "--messages", &msgs)
                  .ok());
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].tool_calls,
            R"([{"id":"c","type":"function","function":{"name":"f","arguments":{"b":1,"a":2}}}])");
  EXPECT_EQ(msgs[1].tool_call_id, "c");
  st = ParseChatMessages(R"([{"role": "tool", "content": "ok"}])", "--messages", &msgs);
  EXPECT_EQ(st.message().rfind("--messages: field 'body.messages[0].tool_call_id'", 0), 0u)
      << st.message();
}

}  // namespace
}  // namespace llmq::jobs
