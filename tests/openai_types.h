// Output lines checked against OpenAI's own types: tests/oracle/openai (the official Node SDK's
// ChatCompletion, Completion, Response and ErrorObject, generated from OpenAI's OpenAPI spec, as
// strict JSON Schema inside the spec's BatchRequestOutput, validated by Ajv; see its oracle.mjs).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/node_oracle.h"
#include "tests/test_util.h"

namespace llmq::testing {

// Why OpenAI's types cannot be asked here, or "".
inline std::string MissingOpenAisTypes() {
  return MissingNodeOracle(OracleDir("openai"), "ts-json-schema-generator");
}

// The oracle's answer for `out` (output lines, each with its request's url, which says its body's
// type): {"definitions": [...], "violations": [{"index", "errors"}]}. Wipes CurrentTestDir().
inline ::testing::AssertionResult AskOpenAisTypes(
    const std::vector<std::pair<std::string, nlohmann::json>>& out, nlohmann::json* answer) {
  nlohmann::json input = {{"lines", nlohmann::json::array()}};
  for (const auto& [url, line] : out) input["lines"].push_back({{"url", url}, {"line", line}});
  return RunNodeOracle(OracleDir("openai") / "oracle.mjs", input.dump(), answer);
}

// Every line of `out` validates against OpenAI's types; urls[i] is line i's request's url.
// Skips (fails under LLMQ_REQUIRE_REFERENCES) without the oracle. Wipes CurrentTestDir().
inline void CheckWithOpenAisTypes(const std::vector<nlohmann::json>& out,
                                  const std::vector<std::string>& urls) {
  if (const std::string missing = MissingOpenAisTypes(); !missing.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(missing);
  ASSERT_EQ(out.size(), urls.size());
  std::vector<std::pair<std::string, nlohmann::json>> typed;
  for (size_t i = 0; i < out.size(); ++i) typed.emplace_back(urls[i], out[i]);
  nlohmann::json answer;
  ASSERT_TRUE(AskOpenAisTypes(typed, &answer));
  // The SDK still types what the lines hold (an update that renamed them would check nothing).
  for (const char* def :
       {"ChatCompletion", "ChatCompletionMessageFunctionToolCall", "Completion",
        "CompletionChoice.Logprobs", "ChatCompletionTokenLogprob", "ErrorObject", "Response",
        "ResponseOutputMessage", "ResponseFunctionToolCall", "ResponseReasoningItem"})
    EXPECT_NE(std::find(answer["definitions"].begin(), answer["definitions"].end(), def),
              answer["definitions"].end())
        << def;
  for (const nlohmann::json& v : answer["violations"]) {
    const size_t i = v["index"].get<size_t>();
    ADD_FAILURE() << "line " << i + 1 << " against OpenAI's types: " << out[i].dump() << "\n  "
                  << v["errors"].dump(2);
  }
}

}  // namespace llmq::testing
