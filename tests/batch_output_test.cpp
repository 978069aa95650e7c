// Tests for jobs/batch_output.h: success, refused (HTTP 400) and error lines in the OpenAI Batch
// API output shape, every field checked, text that is not valid UTF-8 written with U+FFFD, and
// token bytes that are not UTF-8 spelled "bytes:\xNN".
#include "jobs/batch_output.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmq::jobs {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<std::string> Keys(const ojson& j) {
  std::vector<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.push_back(it.key());
  return k;
}

BatchRequest Request(Endpoint e) {
  BatchRequest r;
  r.custom_id = "doc-17";
  r.endpoint = e;
  r.model = "whatever-the-user-wrote";
  return r;
}

TEST(BatchOutputTest, ChatSuccessLineShape) {
  const std::string line =
      SuccessLine(Request(Endpoint::kChatCompletions), {{"Hello there.", "stop", {}}},
                  {/*prompt=*/12, /*completion=*/3, /*cached=*/8}, "req-abc", 1700000000,
                  "stories260K", "fp_llmq-0.1.0_0123456789abcdef");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const ojson j = ojson::parse(line);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"id", "custom_id", "response", "error"}));
  EXPECT_EQ(j["id"], "req-abc");
  EXPECT_EQ(j["custom_id"], "doc-17");
  EXPECT_TRUE(j["error"].is_null());
  const ojson& resp = j["response"];
  EXPECT_EQ(Keys(resp), (std::vector<std::string>{"status_code", "request_id", "body"}));
  EXPECT_EQ(resp["status_code"], 200);
  // Distinct from the line's id, derived from it (a rerun writes the same).
  EXPECT_EQ(resp["request_id"], ResponseRequestId("req-abc"));
  EXPECT_NE(resp["request_id"], "req-abc");
  EXPECT_EQ(resp["request_id"].get<std::string>().size(), 4u + 32u);
  const ojson& body = resp["body"];
  EXPECT_EQ(Keys(body), (std::vector<std::string>{"id", "object", "created", "model", "choices",
                                                  "usage", "system_fingerprint"}));
  EXPECT_EQ(body["system_fingerprint"], "fp_llmq-0.1.0_0123456789abcdef");
  EXPECT_EQ(body["id"], "chatcmpl-req-abc");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "stories260K");
  ASSERT_EQ(body["choices"].size(), 1u);
  const ojson& c = body["choices"][0];
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"index", "message", "logprobs", "finish_reason"}));
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(Keys(c["message"]), (std::vector<std::string>{"role", "content", "refusal"}));
  EXPECT_TRUE(c["message"]["refusal"].is_null());
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hello there.");
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  const ojson& u = body["usage"];
  EXPECT_EQ(Keys(u),
            (std::vector<std::string>{"prompt_tokens", "completion_tokens", "total_tokens",
                                      "prompt_tokens_details", "completion_tokens_details"}));
  EXPECT_EQ(u["completion_tokens_details"], ojson({{"reasoning_tokens", 0},
                                                   {"audio_tokens", 0},
                                                   {"accepted_prediction_tokens", 0},
                                                   {"rejected_prediction_tokens", 0}}));
  EXPECT_EQ(u["prompt_tokens"], 12);
  EXPECT_EQ(u["completion_tokens"], 3);
  EXPECT_EQ(u["total_tokens"], 15);
  EXPECT_EQ(u["prompt_tokens_details"], ojson({{"cached_tokens", 8}}));
}

TEST(BatchOutputTest, ChatSuccessLineExactText) {
  EXPECT_EQ(
      SuccessLine(Request(Endpoint::kChatCompletions), {{"Hi", "length", {}}}, {4, 2, 0}, "r1", 5,
                  "m"),
      R"({"id":"r1","custom_id":"doc-17","response":{"status_code":200,"request_id":")" +
          ResponseRequestId("r1") +
          R"(","body":{"id":"chatcmpl-r1","object":"chat.completion","created":5,"model":"m",)"
          R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null},)"
          R"("logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":4,)"
          R"("completion_tokens":2,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0},)"
          R"("completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,)"
          R"("accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},)"
          R"("system_fingerprint":null}},"error":null})");
}

TEST(BatchOutputTest, CompletionsSuccessLineShape) {
  const std::string line =
      SuccessLine(Request(Endpoint::kCompletions),
                  {{" there was a cat", "length", {}}, {" it rained", "stop", {}}}, {5, 9, 0},
                  "req-2", 42, "m");
  const ojson j = ojson::parse(line);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"id", "custom_id", "response", "error"}));
  EXPECT_EQ(j["id"], "req-2");
  EXPECT_EQ(j["custom_id"], "doc-17");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["response"]["status_code"], 200);
  EXPECT_EQ(j["response"]["request_id"], ResponseRequestId("req-2"));
  const ojson& body = j["response"]["body"];
  EXPECT_EQ(Keys(body), (std::vector<std::string>{"id", "object", "created", "model", "choices",
                                                  "usage", "system_fingerprint"}));
  EXPECT_EQ(body["id"], "cmpl-req-2");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 42);
  EXPECT_EQ(body["model"], "m");
  ASSERT_EQ(body["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const ojson& c = body["choices"][i];
    EXPECT_EQ(Keys(c), (std::vector<std::string>{"index", "text", "logprobs", "finish_reason"}));
    EXPECT_EQ(c["index"], i);
    EXPECT_TRUE(c["logprobs"].is_null());
  }
  EXPECT_EQ(body["choices"][0]["text"], " there was a cat");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["text"], " it rained");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 9);
  EXPECT_EQ(body["usage"]["total_tokens"], 14);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

// A refused line is OpenAI's HTTP 400 response (openai-openapi#302), top-level error null.
TEST(BatchOutputTest, RefusedLineIsAnHttp400Response) {
  const std::string line =
      RefusedLine("doc-3", 3, "req-9",
                  "jobs.jsonl:3: field 'body.max_tokens' must be a positive integer", "max_tokens");
  EXPECT_EQ(line,
            R"({"id":"req-9","custom_id":"doc-3","response":{"status_code":400,"request_id":")" +
                ResponseRequestId("req-9") +
                R"(","body":{"error":{"message":"jobs.jsonl:3: field 'body.max_tokens' must be a )"
                R"(positive integer","type":"invalid_request_error","param":"max_tokens",)"
                R"("code":null}}},"error":null})");
  // No single field at fault: param null.
  const ojson j = ojson::parse(RefusedLine("doc-3", 3, "req-9", "jobs.jsonl:3: too long", ""));
  EXPECT_TRUE(j["response"]["body"]["error"]["param"].is_null());
}

// A failure outside HTTP keeps the top-level error, with its code.
TEST(BatchOutputTest, ErrorLineShape) {
  const std::string line =
      ErrorLine("doc-3", 3, "req-9", kCancelledCode, "jobs.jsonl:3: cancelled by llmq cancel");
  EXPECT_EQ(line, R"({"id":"req-9","custom_id":"doc-3","response":null,"error":{"code":)"
                  R"("batch_cancelled","message":"jobs.jsonl:3: cancelled by llmq cancel"}})");
  const ojson j = ojson::parse(line);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"id", "custom_id", "response", "error"}));
  EXPECT_EQ(Keys(j["error"]), (std::vector<std::string>{"code", "message"}));
}

// custom_id is a string on every line: "line-<n>" when the line had none that could be read.
TEST(BatchOutputTest, ALineWithoutCustomIdIsNamedByItsLineNumber) {
  const ojson r = ojson::parse(RefusedLine("", 12, "req-1", "jobs.jsonl:12: invalid JSON", ""));
  EXPECT_EQ(r["custom_id"], "line-12");
  const ojson e = ojson::parse(ErrorLine("", 7, "req-1", kEngineErrorCode, "jobs.jsonl:7: x"));
  EXPECT_EQ(e["custom_id"], "line-7");
  EXPECT_EQ(OutputCustomId("doc-1", 7), "doc-1");
}

// Bytes that are not UTF-8 are spelled as OpenAI spells them, so that they stay distinct.
TEST(BatchOutputTest, TokenTextSpellsInvalidUtf8AsBytes) {
  EXPECT_EQ(TokenText("Hi"), "Hi");
  EXPECT_EQ(TokenText(""), "");
  EXPECT_EQ(TokenText("\xe2\x80\xa6"), "\xe2\x80\xa6");  // "…", whole
  EXPECT_EQ(TokenText("\xe2\x80"), "bytes:\\xe2\\x80");
  EXPECT_EQ(TokenText("\xa6"), "bytes:\\xa6");
  EXPECT_EQ(TokenText("a\xff"), "bytes:\\x61\\xff");
  EXPECT_EQ(TokenText("\xed\xa0\x80"), "bytes:\\xed\\xa0\\x80");  // a surrogate
}

// Two tokens that hold different parts of characters keep two top_logprobs keys.
TEST(BatchOutputTest, PartialCharactersKeepDistinctTopLogprobsKeys) {
  BatchRequest req = Request(Endpoint::kCompletions);
  req.logprobs = 2;
  const std::vector<TokenLogprob> lps = {
      {{TokenText("\xe2\x80"), "\xe2\x80", -0.1},
       {{TokenText("\xe2\x80"), "\xe2\x80", -0.1}, {TokenText("\xe2\x82"), "\xe2\x82", -3}}},
      {{TokenText("\xa6"), "\xa6", -0.2}, {{TokenText("\xa6"), "\xa6", -0.2}}}};
  const ojson j =
      ojson::parse(SuccessLine(req, {{"\xe2\x80\xa6", "length", lps}}, {1, 2, 0}, "r", 0, "m"));
  const ojson& lp = j["response"]["body"]["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], ojson({"bytes:\\xe2\\x80", "bytes:\\xa6"}));
  EXPECT_EQ(lp["top_logprobs"][0].dump(), R"({"bytes:\\xe2\\x80":-0.1,"bytes:\\xe2\\x82":-3.0})");
  // The character split over both counts at the first.
  EXPECT_EQ(lp["text_offset"], ojson({0, 1}));
}

TEST(BatchOutputTest, InvalidUtf8IsReplaced) {
  const std::string bad = "ok \xff\xfe end \xe2\x82";  // stray bytes and a cut 3-byte character
  std::string line;
  ASSERT_NO_THROW(line = SuccessLine(Request(Endpoint::kChatCompletions), {{bad, "length", {}}},
                                     {1, 1, 0}, "r", 0, "m\xc3"));
  const ojson j = ojson::parse(line);  // valid UTF-8 JSON
  const std::string content = j["response"]["body"]["choices"][0]["message"]["content"];
  EXPECT_EQ(content.rfind("ok ", 0), 0u);
  EXPECT_NE(content.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
  EXPECT_NE(content.find(" end "), std::string::npos);
  EXPECT_EQ(content.find('\xff'), std::string::npos);

  std::string err;
  ASSERT_NO_THROW(err = ErrorLine("id\xff", 1, "r", kEngineErrorCode, "bad byte \xc0 here"));
  const ojson e = ojson::parse(err);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_NE(e["custom_id"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(BatchOutputTest, UnicodeAndEscapesRoundTrip) {
  const std::string text = "Grüße \"quoted\"\n\ttab 世界 🙂 \x01";
  const ojson j = ojson::parse(
      SuccessLine(Request(Endpoint::kCompletions), {{text, "stop", {}}}, {1, 1, 0}, "r", 0, "m"));
  EXPECT_EQ(j["response"]["body"]["choices"][0]["text"], text);
}

TEST(BatchOutputTest, CarriesParsedCustomId) {
  const BatchRequest req = ParseBatchLine(
      R"({"custom_id": "a/b \"c\"", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})",
      1, "f.jsonl");
  ASSERT_EQ(req.error, "");
  const ojson j = ojson::parse(SuccessLine(req, {{"y", "stop", {}}}, {1, 1, 0}, "r", 0, "m"));
  EXPECT_EQ(j["custom_id"], "a/b \"c\"");
  EXPECT_EQ(j["response"]["body"]["object"], "text_completion");
}

// Two tokens: "Hi" (its top list holds another token first) and a byte-level piece of "é".
std::vector<TokenLogprob> TwoTokens() {
  return {
      {{"Hi", "Hi", -0.5}, {{"Ho", "Ho", -0.25}, {"Hi", "Hi", -0.5}}},
      {{"bytes:\\xc3", "\xC3", -std::numeric_limits<double>::infinity()}, {{" a", " a", -1.0}}}};
}

TEST(BatchOutputTest, ChatLogprobsInOpenAiShape) {
  BatchRequest req = Request(Endpoint::kChatCompletions);
  req.logprobs = 2;
  const ojson j =
      ojson::parse(SuccessLine(req, {{"Hi?", "length", TwoTokens()}}, {1, 2, 0}, "r", 0, "m"));
  const ojson& lp = j["response"]["body"]["choices"][0]["logprobs"];
  EXPECT_EQ(Keys(lp), (std::vector<std::string>{"content", "refusal"}));
  EXPECT_TRUE(lp["refusal"].is_null());
  ASSERT_EQ(lp["content"].size(), 2u);
  const ojson& t0 = lp["content"][0];
  EXPECT_EQ(Keys(t0), (std::vector<std::string>{"token", "logprob", "bytes", "top_logprobs"}));
  EXPECT_EQ(t0["token"], "Hi");
  EXPECT_EQ(t0["logprob"], -0.5);
  EXPECT_EQ(t0["bytes"], ojson({72, 105}));
  ASSERT_EQ(t0["top_logprobs"].size(), 2u);
  EXPECT_EQ(t0["top_logprobs"][0],
            ojson({{"token", "Ho"}, {"logprob", -0.25}, {"bytes", {72, 111}}}));
  const ojson& t1 = lp["content"][1];
  EXPECT_EQ(t1["token"], "bytes:\\xc3");
  EXPECT_EQ(t1["bytes"], ojson({0xC3}));
  EXPECT_EQ(t1["logprob"], -9999.0);  // -inf, as OpenAI writes it
}

TEST(BatchOutputTest, CompletionsLogprobsInOpenAiShape) {
  BatchRequest req = Request(Endpoint::kCompletions);
  req.logprobs = 1;
  const ojson j =
      ojson::parse(SuccessLine(req, {{"Hi?", "length", TwoTokens()}}, {1, 2, 0}, "r", 0, "m"));
  const ojson& lp = j["response"]["body"]["choices"][0]["logprobs"];
  EXPECT_EQ(Keys(lp),
            (std::vector<std::string>{"tokens", "token_logprobs", "top_logprobs", "text_offset"}));
  EXPECT_EQ(lp["tokens"], ojson({"Hi", "bytes:\\xc3"}));
  EXPECT_EQ(lp["token_logprobs"], ojson({-0.5, -9999.0}));
  // The top entries, then the chosen token when it is not among them.
  EXPECT_EQ(lp["top_logprobs"][0].dump(), R"({"Ho":-0.25,"Hi":-0.5})");
  EXPECT_EQ(lp["top_logprobs"][1], ojson({{" a", -1.0}, {"bytes:\\xc3", -9999.0}}));
  EXPECT_EQ(lp["text_offset"], ojson({0, 2}));
}

TEST(BatchOutputTest, NoLogprobsAskedWritesNull) {
  const ojson j = ojson::parse(SuccessLine(
      Request(Endpoint::kCompletions), {{"Hi?", "length", TwoTokens()}}, {1, 2, 0}, "r", 0, "m"));
  EXPECT_TRUE(j["response"]["body"]["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace llmq::jobs
