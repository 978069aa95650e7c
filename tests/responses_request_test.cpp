// Tests for /v1/responses lines (jobs/batch_request.h, jobs/batch_output.h): the Responses API's
// body read into a conversation as a chat line's is (instructions, input items, flat tools,
// text.format, include), refusals naming the Responses field, and the Response object written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "jobs/batch_output.h"
#include "jobs/batch_request.h"

namespace llmq::jobs {
namespace {

using nlohmann::json;

json ResponsesLine(const json& body) {
  json b = {{"model", "m"}};
  b.update(body);
  return {{"custom_id", "r-1"}, {"method", "POST"}, {"url", "/v1/responses"}, {"body", b}};
}

BatchRequest Parse(const json& j) {
  return ParseBatchLine(j.dump(), 4, "jobs.jsonl");
}

// The error of a line whose body is `body`, and its OpenAI param.
std::pair<std::string, std::string> Refusal(const json& body) {
  const BatchRequest r = Parse(ResponsesLine(body));
  return {r.error, r.error_param};
}

TEST(ResponsesRequestTest, InstructionsAndAStringInputAreAChatConversation) {
  const BatchRequest r = Parse(ResponsesLine({{"instructions", "Be brief."},
                                              {"input", "Hello"},
                                              {"max_output_tokens", 32},
                                              {"temperature", 0},
                                              {"top_p", 0.5}}));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.endpoint, Endpoint::kResponses);
  EXPECT_TRUE(IsChat(r.endpoint));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hello");
  EXPECT_EQ(r.max_tokens, 32);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  const json echo = json::parse(r.responses_echo);
  EXPECT_EQ(echo["instructions"], "Be brief.");
  EXPECT_EQ(echo["max_output_tokens"], 32);
  EXPECT_EQ(echo["top_p"], 0.5);
  EXPECT_EQ(echo["text"], json::parse(R"({"format": {"type": "text"}})"));
  EXPECT_EQ(echo["tools"], json::array());
  EXPECT_EQ(echo["tool_choice"], "none");
}

// A conversation fed back as OpenAI returns it: the model's message and calls (one assistant turn,
// text then calls, with the thought before them), the calls' outputs as tool messages.
TEST(ResponsesRequestTest, ItemsBecomeMessagesCallsJoinTheirAssistantTurn) {
  const json input = json::parse(R"([
    {"role": "developer", "content": "Use tools."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in"},
                                                   {"type": "input_text", "text": "Oslo?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [],
     "content": [{"type": "reasoning_text", "text": "I should call it."}]},
    {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "weather",
     "arguments": "{\"city\": \"Oslo\", \"unit\": \"C\"}", "status": "completed"},
    {"type": "function_call", "call_id": "call_b", "name": "time", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_a", "output": "4 C"},
    {"type": "function_call_output", "call_id": "call_b",
     "output": [{"type": "input_text", "text": "noon"}]},
    {"type": "function_call", "call_id": "call_c", "name": "time", "arguments": "{}"}
  ])");
  const BatchRequest r = Parse(ResponsesLine({{"input", input}}));
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Weather in\nOslo?");
  const ChatMessage& turn = r.messages[2];
  EXPECT_EQ(turn.role, "assistant");
  EXPECT_EQ(turn.content, "Checking.");
  EXPECT_FALSE(turn.content_null);
  EXPECT_EQ(turn.reasoning, "I should call it.");
  // The chat shape the templates read, arguments parsed in the order written.
  EXPECT_EQ(turn.tool_calls,
            R"([{"id":"call_a","type":"function","function":{"name":"weather","arguments":)"
            R"({"city":"Oslo","unit":"C"}}},{"id":"call_b","type":"function","function":)"
            R"({"name":"time","arguments":{}}}])");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_a");
  EXPECT_EQ(r.messages[3].content, "4 C");
  EXPECT_EQ(r.messages[4].content, "noon");
  // A call after a tool output opens an assistant turn of its own, without content.
  EXPECT_EQ(r.messages[5].role, "assistant");
  EXPECT_TRUE(r.messages[5].content_null);
  EXPECT_FALSE(r.messages[5].reasoning.has_value());
  EXPECT_NE(r.messages[5].tool_calls.find("call_c"), std::string::npos);
}

TEST(ResponsesRequestTest, FlatToolsAreGivenToTheTemplateInTheChatShape) {
  const std::string line = R"({"custom_id": "t", "method": "POST", "url": "/v1/responses",
    "body": {"input": "x", "tools": [
      {"type": "function", "name": "weather", "description": "Now.", "strict": false,
       "parameters": {"type": "object", "properties": {"z": {"type": "string"},
                                                      "a": {"type": "number"}}}},
      {"type": "function", "name": "ping"}],
    "tool_choice": {"type": "function", "name": "ping"}, "parallel_tool_calls": false}})";
  const BatchRequest r = ParseBatchLine(line, 1, "f.jsonl");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "weather");
  EXPECT_EQ(r.tools[0].description, "Now.");
  // Key order kept: properties are generated in it.
  EXPECT_EQ(r.tools[0].parameters,
            R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"number"}}})");
  EXPECT_EQ(r.tools[0].json,
            R"({"type":"function","function":{"name":"weather","description":"Now.",)"
            R"("strict":false,"parameters":{"type":"object","properties":{"z":{"type":"string"},)"
            R"("a":{"type":"number"}}}}})");
  EXPECT_EQ(r.tools[1].json, R"({"type":"function","function":{"name":"ping"}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_choice_name, "ping");
  EXPECT_FALSE(r.parallel_tool_calls);
  // The Response repeats them in OpenAI's shape: every field, strict true unless said otherwise.
  const json echo = json::parse(r.responses_echo);
  EXPECT_EQ(echo["tool_choice"], json::parse(R"({"type": "function", "name": "ping"})"));
  EXPECT_EQ(echo["tools"][0]["strict"], false);
  EXPECT_EQ(echo["tools"][1], json::parse(R"({"type": "function", "name": "ping",
      "description": null, "parameters": null, "strict": true})"));
  EXPECT_EQ(echo["parallel_tool_calls"], false);
}

// allowed_tools in the Responses API's shape: the mode's choice, calls restricted, and repeated
// in the Response as given.
TEST(ResponsesRequestTest, AllowedToolsRestrictTheCalls) {
  const BatchRequest r =
      Parse(ResponsesLine({{"input", "x"},
                           {"tools", json::parse(R"([{"type": "function", "name": "f"},
                                 {"type": "function", "name": "g"}])")},
                           {"tool_choice", json::parse(R"({"type": "allowed_tools", "mode": "auto",
                                       "tools": [{"type": "function", "name": "g"}]})")}}));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(r.allowed_tools, std::vector<std::string>{"g"});
  EXPECT_EQ(json::parse(r.responses_echo)["tool_choice"],
            json::parse(R"({"type": "allowed_tools", "mode": "auto",
                            "tools": [{"type": "function", "name": "g"}]})"));
}

TEST(ResponsesRequestTest, TextFormatIsTheResponseFormat) {
  const std::string line =
      R"({"custom_id": "s", "method": "POST", "url": "/v1/responses", "body": {"input": "x",)"
      R"( "text": {"format": {"type": "json_schema", "name": "doc", "strict": true, "schema":)"
      R"( {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type":)"
      R"( "string"}}}}}, "include": ["message.output_text.logprobs"], "top_logprobs": 3}})";
  const BatchRequest r = ParseBatchLine(line, 1, "f.jsonl");
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(r.json_schema_name, "doc");
  EXPECT_EQ(
      r.json_schema,
      R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}})");
  EXPECT_EQ(r.structured_field, "body.text.format");
  EXPECT_EQ(r.logprobs, 3);
  const json echo = json::parse(r.responses_echo);
  EXPECT_EQ(echo["text"]["format"]["name"], "doc");
  EXPECT_EQ(echo["top_logprobs"], 3);

  const BatchRequest o = Parse(ResponsesLine(
      {{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}, {"top_logprobs", 2}}));
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.response_format, ResponseFormat::kJsonObject);
  EXPECT_EQ(o.logprobs, -1) << "logprobs come with include, as vLLM reads them";
}

// Each refusal names the Responses field at fault, and OpenAI's param for it.
TEST(ResponsesRequestTest, RefusalsNameTheResponsesField) {
  struct Case {
    json body;
    std::string field, says;
  };
  const std::vector<Case> cases = {
      {{{"model", "m"}}, "body.input", "is missing"},
      {{{"input", json::array()}}, "body.input", "non-empty list of input items"},
      {{{"input", "x"}, {"max_tokens", 5}},
       "body.max_tokens",
       "not a field llmq knows for /v1/responses"},
      {{{"input", "x"}, {"messages", json::array()}}, "body.messages", "/v1/responses"},
      {{{"input", "x"}, {"previous_response_id", "resp_1"}},
       "body.previous_response_id",
       "put the whole conversation in input"},
      {{{"input", "x"}, {"conversation", "conv_1"}}, "body.conversation", "keeps no conversations"},
      {{{"input", "x"}, {"prompt", {{"id", "p"}}}}, "body.prompt", "no stored prompt templates"},
      {{{"input", "x"}, {"stream", true}}, "body.stream", "cannot stream"},
      {{{"input", "x"}, {"background", true}}, "body.background", "must be false"},
      {{{"input", "x"}, {"truncation", "auto"}}, "body.truncation", "\"disabled\""},
      {{{"input", "x"}, {"reasoning", {{"effort", "high"}}}},
       "body.reasoning.effort",
       "reasoning-effort"},
      {{{"input", "x"}, {"include", {"reasoning.encrypted_content"}}},
       "body.include[0]",
       "message.output_text.logprobs"},
      {{{"input", "x"}, {"top_logprobs", 21}}, "body.top_logprobs", "[0, 20]"},
      {{{"input", "x"}, {"max_output_tokens", 0}}, "body.max_output_tokens", "positive"},
      {{{"input", "x"}, {"text", {{"verbosity", "low"}}}}, "body.text.verbosity", "verbosity"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "grammar"}}}}}},
       "body.text.format.type",
       "json_schema"},
      {{{"input", "x"},
        {"text", {{"format", {{"type", "json_schema"}, {"schema", json::object()}}}}}},
       "body.text.format.name",
       "is missing"},
      {{{"input", json::parse(R"([{"type": "item_reference", "id": "msg_1"}])")}},
       "body.input[0].type",
       "item_reference"},
      {{{"input", json::parse(R"([{"role": "user", "content": [{"type": "input_image",
          "image_url": "http://x"}]}])")}},
       "body.input[0].content[0].type",
       "only text content"},
      {{{"input", json::parse(R"([{"role": "tool", "content": "x"}])")}},
       "body.input[0].role",
       "\"assistant\""},
      {{{"input", json::parse(R"([{"type": "function_call", "call_id": "c", "name": "f",
          "arguments": "[1]"}])")}},
       "body.input[0].arguments",
       "JSON object as text"},
      {{{"input", json::parse(R"([{"type": "function_call_output", "output": "x"}])")}},
       "body.input[0].call_id",
       "is missing"},
      {{{"input", json::parse(R"([{"type": "reasoning", "summary": [],
          "encrypted_content": "gAAA"}])")}},
       "body.input[0].encrypted_content",
       "encrypted"},
      {{{"input", "x"}, {"tools", json::parse(R"([{"type": "web_search"}])")}},
       "body.tools[0].type",
       "function tools only"},
      {{{"input", "x"},
        {"tools", json::parse(R"([{"type": "function", "function": {"name": "f"}}])")}},
       "body.tools[0].function",
       "not a field of body.tools[0]"},
      {{{"input", "x"},
        {"tools", json::parse(R"([{"type": "function", "name": "f"}])")},
        {"tool_choice", {{"type", "function"}, {"name", "g"}}}},
       "body.tool_choice.name",
       "one of body.tools"},
      {{{"input", "x"}, {"tool_choice", "required"}}, "body.tool_choice", "only allowed when"},
      {{{"input", "x"},
        {"tools", json::parse(R"([{"type": "function", "name": "f"}])")},
        {"tool_choice", json::parse(R"({"type": "allowed_tools", "mode": "auto",
            "tools": [{"type": "function", "name": "g"}]})")}},
       "body.tool_choice.tools[0].name",
       "one of body.tools"},
      {{{"input", "x"},
        {"tools", json::parse(R"([{"type": "function", "name": "f"}])")},
        {"tool_choice", json::parse(R"({"type": "allowed_tools", "mode": "sometimes",
            "tools": [{"type": "function", "name": "f"}]})")}},
       "body.tool_choice.mode",
       "\"required\""},
  };
  for (const Case& c : cases) {
    const auto [error, param] = Refusal(c.body);
    EXPECT_NE(error.find("jobs.jsonl:4: field '" + c.field + "'"), std::string::npos)
        << c.body.dump() << "\n  " << error;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.body.dump() << "\n  " << error;
    EXPECT_EQ(param, ParamOfField(c.field)) << c.body.dump();
  }
}

// What OpenAI's Responses API takes without complaint on a request that calls no tool.
TEST(ResponsesRequestTest, AcceptsWhatTheApiTakesWithoutTools) {
  const BatchRequest r = Parse(ResponsesLine({{"input", "x"},
                                              {"tool_choice", "auto"},
                                              {"parallel_tool_calls", true},
                                              {"store", false},
                                              {"metadata", {{"run", "7"}}},
                                              {"truncation", "disabled"},
                                              {"reasoning", {{"effort", nullptr}}},
                                              {"max_tool_calls", 3},
                                              {"user", "u"},
                                              {"text", {{"verbosity", "medium"}}},
                                              {"seed", 11},
                                              {"stop", "END"}}));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(r.seed, 11);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(json::parse(r.responses_echo)["metadata"], json::parse(R"({"run": "7"})"));
}

// Every field of the Responses API's table is honoured, ignored or refused by name: a value of
// each (accepted, or refused naming it), and every rule for /v1/responses among them.
TEST(ResponsesRequestTest, EveryFieldIsHonouredIgnoredOrRefusedByName) {
  struct Case {
    const char* name;
    const char* value;
    bool accepted;
  };
  const std::vector<Case> cases = {
      {"model", R"("m")", true},
      {"input", R"("x")", true},
      {"instructions", R"("Be brief.")", true},
      {"instructions", "3", false},
      {"max_output_tokens", "16", true},
      {"temperature", "0.5", true},
      {"top_p", "0.5", true},
      {"stop", R"(["x"])", true},
      {"seed", "3", true},
      {"stream", "false", true},
      {"presence_penalty", "1", true},
      {"frequency_penalty", "1", true},
      {"logit_bias", R"({"5": 1})", true},
      {"top_logprobs", "2", true},
      {"tools", R"([{"type": "function", "name": "f"}])", true},
      {"tool_choice", R"("none")", true},
      {"parallel_tool_calls", "false", true},
      {"top_k", "5", true},
      {"min_p", "0.1", true},
      {"ignore_eos", "true", true},
      {"repetition_penalty", "1.1", true},
      {"min_tokens", "1", true},
      {"stop_token_ids", "[2]", true},
      {"chat_template_kwargs", R"({"enable_thinking": false})", true},
      {"user", R"("u")", true},
      {"store", "true", true},
      {"service_tier", R"("auto")", true},
      {"prompt_cache_key", R"("k")", true},
      {"safety_identifier", R"("s")", true},
      {"stream_options", R"({"include_usage": true})", false},
      {"text", R"({"format": {"type": "text"}})", true},
      {"include", R"(["message.output_text.logprobs"])", true},
      {"reasoning", R"({"summary": null})", true},
      {"truncation", R"("disabled")", true},
      {"background", "false", true},
      {"metadata", R"({"a": "b"})", true},
      {"metadata", R"("a")", false},
      {"max_tool_calls", "4", true},
      {"prompt_cache_retention", R"("24h")", true},
      {"previous_response_id", R"("resp_1")", false},
      {"conversation", R"("conv_1")", false},
      {"prompt", R"({"id": "pmpt_1"})", false},
      // Chat's and completions' names for what the Responses API names otherwise.
      {"messages", R"([{"role": "user", "content": "x"}])", false},
      {"max_tokens", "8", false},
      {"response_format", R"({"type": "json_object"})", false},
      {"n", "2", false},
      {"logprobs", "true", false},
      {"guided_json", R"({"type": "string"})", false},
  };
  std::set<std::string> covered;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " = " + c.value);
    json body = {{"input", "x"}};
    body[c.name] = json::parse(c.value);
    const BatchRequest r = Parse(ResponsesLine(body));
    covered.insert(c.name);
    if (c.accepted) {
      EXPECT_EQ(r.error, "");
    } else {
      EXPECT_EQ(r.error.rfind("jobs.jsonl:4: field 'body." + std::string(c.name), 0), 0u)
          << r.error;
    }
  }
  for (const FieldRule& rule : BodyFieldRules()) {
    if (rule.responses) {
      EXPECT_TRUE(covered.count(rule.name)) << rule.name;
    }
  }
}

TEST(ResponsesRequestTest, FieldOnNamesTheResponsesFields) {
  EXPECT_EQ(FieldOn(Endpoint::kResponses, "body.messages[3].content"), "body.input");
  EXPECT_EQ(FieldOn(Endpoint::kResponses, "body.max_tokens"), "body.max_output_tokens");
  EXPECT_EQ(FieldOn(Endpoint::kResponses, "body.tools[2].function.parameters"),
            "body.tools[2].parameters");
  EXPECT_EQ(FieldOn(Endpoint::kResponses, "body.tools"), "body.tools");
  EXPECT_EQ(FieldOn(Endpoint::kChatCompletions, "body.tools[2].function.parameters"),
            "body.tools[2].function.parameters");
}

BatchRequest OutputRequest(const json& body) {
  BatchRequest r = Parse(ResponsesLine(body));
  EXPECT_EQ(r.error, "");
  return r;
}

json Body(const std::string& line) {
  return json::parse(line)["response"]["body"];
}

TEST(ResponsesOutputTest, AMessageIsOneOutputTextItem) {
  const BatchRequest r = OutputRequest({{"input", "x"},
                                        {"instructions", "Be brief."},
                                        {"max_output_tokens", 8},
                                        {"metadata", {{"k", "v"}}}});
  const Usage usage{10, 4, 6, 0};
  const std::string line = SuccessLine(r, {Choice{"Hello!", "stop", {}}}, usage, "batch_req_1",
                                       1700000000, "tiny", "fp_x");
  const json out = json::parse(line);
  EXPECT_EQ(out["custom_id"], "r-1");
  EXPECT_EQ(out["response"]["status_code"], 200);
  const json b = out["response"]["body"];
  EXPECT_EQ(b["object"], "response");
  EXPECT_EQ(b["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(b["created_at"], 1700000000);
  EXPECT_EQ(b["status"], "completed");
  EXPECT_TRUE(b["incomplete_details"].is_null());
  EXPECT_EQ(b["model"], "tiny");
  EXPECT_EQ(b["instructions"], "Be brief.");
  EXPECT_EQ(b["max_output_tokens"], 8);
  EXPECT_EQ(b["metadata"], json::parse(R"({"k": "v"})"));
  ASSERT_EQ(b["output"].size(), 1u);
  const json& m = b["output"][0];
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["status"], "completed");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "output_text", "text": "Hello!",
      "annotations": []}])"));
  EXPECT_EQ(b["usage"], json::parse(R"({"input_tokens": 10, "input_tokens_details":
      {"cached_tokens": 6, "cache_write_tokens": 0}, "output_tokens": 4,
      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 14})"));
  // The ids are the line's: the same in a resumed run, distinct between lines.
  const json other =
      Body(SuccessLine(r, {Choice{"Hello!", "stop", {}}}, usage, "batch_req_2", 1, "tiny"));
  EXPECT_NE(other["id"], b["id"]);
  EXPECT_NE(other["output"][0]["id"], m["id"]);
  EXPECT_EQ(Body(line), Body(SuccessLine(r, {Choice{"Hello!", "stop", {}}}, usage, "batch_req_1",
                                         1700000000, "tiny")));
}

TEST(ResponsesOutputTest, ACutMessageIsIncomplete) {
  const BatchRequest r = OutputRequest({{"input", "x"}, {"max_output_tokens", 2}});
  const json b =
      Body(SuccessLine(r, {Choice{"Hel", "length", {}}}, Usage{3, 2, 0, 0}, "q", 1, "t"));
  EXPECT_EQ(b["status"], "incomplete");
  EXPECT_EQ(b["incomplete_details"], json::parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(b["output"][0]["status"], "incomplete");
  EXPECT_EQ(b["output"][0]["content"][0]["text"], "Hel");
}

TEST(ResponsesOutputTest, CallsAreFunctionCallItemsAfterTheThoughtAndText) {
  const BatchRequest r = OutputRequest(
      {{"input", "x"}, {"tools", json::parse(R"([{"type": "function", "name": "f"}])")}});
  Choice calls{"", "tool_calls", {}};
  calls.tool_calls = {{"call_aaa", "f", R"({"a": 1})"}, {"call_bbb", "f", "{}"}};
  calls.reasoning_parsed = true;
  calls.reasoning_content = "think";
  const json b = Body(SuccessLine(r, {calls}, Usage{3, 9, 0, 4}, "q", 1, "t"));
  EXPECT_EQ(b["status"], "completed");
  ASSERT_EQ(b["output"].size(), 3u) << "a thought, no message (calls alone), two calls";
  EXPECT_EQ(b["output"][0]["type"], "reasoning");
  EXPECT_EQ(b["output"][0]["content"],
            json::parse(R"([{"type": "reasoning_text", "text": "think"}])"));
  EXPECT_EQ(b["output"][0]["summary"], json::array());
  for (int k = 0; k < 2; ++k) {
    const json& c = b["output"][1 + k];
    EXPECT_EQ(c["type"], "function_call");
    EXPECT_EQ(c["name"], "f");
    EXPECT_EQ(c["status"], "completed");
    EXPECT_EQ(c["id"].get<std::string>().rfind("fc_", 0), 0u);
  }
  EXPECT_EQ(b["output"][1]["call_id"], "call_aaa");
  EXPECT_EQ(b["output"][1]["arguments"], R"({"a": 1})");
  EXPECT_NE(b["output"][1]["id"], b["output"][2]["id"]);
  EXPECT_EQ(b["usage"]["output_tokens_details"]["reasoning_tokens"], 4);
  EXPECT_EQ(b["tool_choice"], "auto");
  EXPECT_EQ(b["tools"][0]["name"], "f");

  // Text before the calls is a message item before them.
  calls.text = "Let me look.";
  calls.reasoning_parsed = false;
  const json t = Body(SuccessLine(r, {calls}, Usage{3, 9, 0, 0}, "q", 1, "t"));
  ASSERT_EQ(t["output"].size(), 3u);
  EXPECT_EQ(t["output"][0]["type"], "message");
  EXPECT_EQ(t["output"][0]["content"][0]["text"], "Let me look.");
  EXPECT_EQ(t["output"][1]["type"], "function_call");
}

TEST(ResponsesOutputTest, LogprobsAreTheOutputTextsWhenIncluded) {
  const BatchRequest r = OutputRequest(
      {{"input", "x"}, {"include", {"message.output_text.logprobs"}}, {"top_logprobs", 1}});
  Choice c{"ab", "stop", {}};
  c.logprobs = {TokenLogprob{{"a", "a", -0.5}, {{"a", "a", -0.5}}},
                TokenLogprob{{"b", "b", -1.0}, {{"c", "c", -0.25}}}};
  const json b = Body(SuccessLine(r, {c}, Usage{1, 2, 0, 0}, "q", 1, "t"));
  EXPECT_EQ(b["output"][0]["content"][0]["logprobs"], json::parse(R"([
      {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs":
        [{"token": "a", "logprob": -0.5, "bytes": [97]}]},
      {"token": "b", "logprob": -1.0, "bytes": [98], "top_logprobs":
        [{"token": "c", "logprob": -0.25, "bytes": [99]}]}])"));
  EXPECT_EQ(b["top_logprobs"], 1);
}

}  // namespace
}  // namespace llmq::jobs
