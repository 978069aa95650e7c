// Every output line of real jobs (`llmq run` on a generated model and on a shared Qwen2 model:
// chat and completions, n, seeds, stops, logprobs, penalties, logit_bias onto control tokens,
// <unk> and parts of characters, bad lines; tool calls on a shared Qwen3 model) checked two ways:
//  - against OpenAI's own types (tests/oracle/openai: the official Node SDK's ChatCompletion,
//    Completion and ErrorObject, generated from OpenAI's OpenAPI spec, turned into strict JSON
//    Schema by ts-json-schema-generator, inside the spec's BatchRequestOutput, validated by Ajv,
//    all pinned by its package-lock.json; no npm package carries the spec itself);
//  - against the invariants the schemas leave unsaid, transcribed here as checks: custom_id is a
//    string on every line ("line-<n>" when the line had none), a refused line is an HTTP 400
//    naming the field as param, usage adds up, and a choice's logprobs spell its text (the
//    tokens' bytes, joined, are the text; text_offset are the code points before each token; no
//    top_logprobs entry is lost to a key two tokens share).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/text.h"
#include "engine/text/tokenizer.h"
#include "tests/openai_types.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

// The bytes a logprobs token name stands for: "bytes:\xNN..." spelled out, else the text itself.
bool TokenBytes(const std::string& token, std::string* bytes) {
  if (token.rfind("bytes:", 0) != 0) {
    *bytes = token;
    return true;
  }
  bytes->clear();
  for (size_t i = 6; i < token.size(); i += 4) {
    if (i + 4 > token.size() || token[i] != '\\' || token[i + 1] != 'x') return false;
    const std::string hex = token.substr(i + 2, 2);
    if (hex.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
    bytes->push_back(static_cast<char>(std::stoi(hex, nullptr, 16)));
  }
  return !IsUtf8(*bytes);  // valid UTF-8 is written as itself
}

int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Collects violations, each with the JSON path where it is.
class Checker {
 public:
  explicit Checker(std::vector<std::string>* out) : out_(out) {}

  void Need(bool ok, const std::string& at, const std::string& what) {
    if (!ok) out_->push_back(at + ": " + what);
  }
  // o[k] exists and `is(o[k])`, else the violation "`at`.k must be `what`".
  template <typename Is>
  bool Has(const json& o, const char* k, const std::string& at, Is is, const char* what) {
    const bool ok = o.is_object() && o.contains(k) && is(o[k]);
    Need(ok, at + "." + k, std::string("must be ") + what);
    return ok;
  }
  bool Str(const json& o, const char* k, const std::string& at) {
    return Has(
        o, k, at, [](const json& v) { return v.is_string(); }, "a string");
  }
  bool StrOrNull(const json& o, const char* k, const std::string& at) {
    return Has(
        o, k, at, [](const json& v) { return v.is_string() || v.is_null(); }, "a string or null");
  }
  bool Int(const json& o, const char* k, const std::string& at) {
    return Has(
        o, k, at, [](const json& v) { return v.is_number_integer(); }, "an integer");
  }
  bool Num(const json& o, const char* k, const std::string& at) {
    return Has(
        o, k, at, [](const json& v) { return v.is_number(); }, "a number");
  }
  bool Arr(const json& o, const char* k, const std::string& at) {
    return Has(
        o, k, at, [](const json& v) { return v.is_array(); }, "an array");
  }
  bool Obj(const json& o, const char* k, const std::string& at) {
    return Has(
        o, k, at, [](const json& v) { return v.is_object(); }, "an object");
  }
  // bytes: null or a list of integers 0-255; *b gets them.
  void Bytes(const json& o, const std::string& at, std::string* b) {
    b->clear();
    if (!o.contains("bytes") || o["bytes"].is_null()) return;
    Need(o["bytes"].is_array(), at + ".bytes", "must be an array or null");
    if (!o["bytes"].is_array()) return;
    for (const json& x : o["bytes"]) {
      const bool ok = x.is_number_integer() && x.get<int>() >= 0 && x.get<int>() <= 255;
      Need(ok, at + ".bytes", "must hold integers 0-255");
      if (ok) b->push_back(static_cast<char>(x.get<int>()));
    }
  }

 private:
  std::vector<std::string>* out_;
};

void CheckUsage(Checker& c, const json& body, const std::string& at) {
  if (!c.Obj(body, "usage", at)) return;
  const json& u = body["usage"];
  if (c.Int(u, "prompt_tokens", at + ".usage") && c.Int(u, "completion_tokens", at + ".usage") &&
      c.Int(u, "total_tokens", at + ".usage"))
    c.Need(u["total_tokens"] ==
               u["prompt_tokens"].get<int64_t>() + u["completion_tokens"].get<int64_t>(),
           at + ".usage.total_tokens", "must be prompt_tokens + completion_tokens");
}

// A token's name and bytes agree: the name is the bytes, or "bytes:..." when they are not UTF-8.
void CheckName(Checker& c, const std::string& token, const std::string& bytes,
               const std::string& at) {
  std::string named;
  c.Need(TokenBytes(token, &named), at + ".token", "a malformed bytes: name: " + token);
  c.Need(named == bytes, at + ".token", "names other bytes than its bytes: " + token);
}

// The fields both response bodies share (`object` is the body's), then `check` for each choice
// after its index and finish_reason (one of `reasons`).
template <typename Check>
void CheckBody(Checker& c, const json& body, const std::string& at, const char* object,
               const std::set<std::string>& reasons, Check check) {
  c.Str(body, "id", at);
  c.Need(body["object"] == object, at + ".object", std::string("must be \"") + object + "\"");
  c.Int(body, "created", at);
  c.Str(body, "model", at);
  if (body.contains("system_fingerprint")) c.StrOrNull(body, "system_fingerprint", at);
  CheckUsage(c, body, at);
  if (!c.Arr(body, "choices", at)) return;
  for (size_t i = 0; i < body["choices"].size(); ++i) {
    const json& ch = body["choices"][i];
    const std::string ca = at + ".choices[" + std::to_string(i) + "]";
    c.Need(ch["index"] == i, ca + ".index", "must be the choice's index");
    c.Need(ch["finish_reason"].is_string() && reasons.count(ch["finish_reason"]), ca,
           "finish_reason outside the enum");
    check(ch, ca);
  }
}

// CreateChatCompletionResponse, with the logprobs invariants.
void CheckChat(Checker& c, const json& body, const std::string& at, int top_logprobs) {
  CheckBody(c, body, at, "chat.completion",
            {"stop", "length", "tool_calls", "content_filter", "function_call"},
            [&](const json& ch, const std::string& ca) {
              if (!c.Obj(ch, "message", ca)) return;
              const json& m = ch["message"];
              c.Need(m["role"] == "assistant", ca + ".message.role", "must be \"assistant\"");
              c.StrOrNull(m, "content", ca + ".message");
              c.StrOrNull(m, "refusal", ca + ".message");
              // ChatCompletionMessageToolCalls: [{id, type: "function", function: {name,
              // arguments}}], beside finish_reason "tool_calls" (or "length": cut after them).
              const bool calls = m.contains("tool_calls");
              if (calls && c.Arr(m, "tool_calls", ca + ".message")) {
                c.Need(!m["tool_calls"].empty(), ca + ".message.tool_calls", "must not be empty");
                c.Need(ch["finish_reason"] == "tool_calls" || ch["finish_reason"] == "length",
                       ca + ".finish_reason", "must be \"tool_calls\" beside calls");
                for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
                  const json& t = m["tool_calls"][k];
                  const std::string ta = ca + ".message.tool_calls[" + std::to_string(k) + "]";
                  if (!c.Str(t, "id", ta) || !c.Obj(t, "function", ta)) continue;
                  c.Need(t["type"] == "function", ta + ".type", "must be \"function\"");
                  c.Str(t["function"], "name", ta + ".function");
                  if (c.Str(t["function"], "arguments", ta + ".function"))
                    c.Need(json::accept(t["function"]["arguments"].get<std::string>()),
                           ta + ".function.arguments", "must be JSON text");
                }
              }
              c.Need(ch.contains("logprobs"), ca + ".logprobs", "is required (null or an object)");
              if (!ch.contains("logprobs") || ch["logprobs"].is_null()) return;
              if (!c.Obj(ch, "logprobs", ca)) return;
              const json& lp = ch["logprobs"];
              c.Need(
                  lp.contains("refusal") && (lp["refusal"].is_null() || lp["refusal"].is_array()),
                  ca + ".logprobs.refusal", "must be an array or null");
              if (!c.Arr(lp, "content", ca + ".logprobs")) return;
              std::string joined;
              for (size_t k = 0; k < lp["content"].size(); ++k) {
                const json& t = lp["content"][k];
                const std::string ta = ca + ".logprobs.content[" + std::to_string(k) + "]";
                std::string bytes;
                if (!c.Str(t, "token", ta) || !c.Num(t, "logprob", ta)) continue;
                c.Bytes(t, ta, &bytes);
                CheckName(c, t["token"], bytes, ta);
                joined += bytes;
                if (!c.Arr(t, "top_logprobs", ta)) continue;
                c.Need(static_cast<int>(t["top_logprobs"].size()) == top_logprobs,
                       ta + ".top_logprobs", "must hold top_logprobs entries");
                for (size_t x = 0; x < t["top_logprobs"].size(); ++x) {
                  const json& e = t["top_logprobs"][x];
                  const std::string ea = ta + ".top_logprobs[" + std::to_string(x) + "]";
                  std::string eb;
                  if (!c.Str(e, "token", ea) || !c.Num(e, "logprob", ea)) continue;
                  c.Bytes(e, ea, &eb);
                  CheckName(c, e["token"], eb, ea);
                }
              }
              // (A message of calls: its tokens spell the content and the calls.)
              if (!calls)
                c.Need(joined == m["content"].get<std::string>(), ca + ".logprobs.content",
                       "its tokens' bytes, joined, must be the message's content");
            });
}

// CreateCompletionResponse, with the logprobs invariants.
void CheckCompletion(Checker& c, const json& body, const std::string& at, int logprobs) {
  CheckBody(
      c, body, at, "text_completion", {"stop", "length", "content_filter"},
      [&](const json& ch, const std::string& ca) {
        if (!c.Str(ch, "text", ca)) return;
        c.Need(ch.contains("logprobs"), ca + ".logprobs", "is required (null or an object)");
        if (!ch.contains("logprobs") || ch["logprobs"].is_null()) return;
        if (!c.Obj(ch, "logprobs", ca)) return;
        const json& lp = ch["logprobs"];
        const std::string la = ca + ".logprobs";
        if (!c.Arr(lp, "tokens", la) || !c.Arr(lp, "token_logprobs", la) ||
            !c.Arr(lp, "top_logprobs", la) || !c.Arr(lp, "text_offset", la))
          return;
        const size_t n = lp["tokens"].size();
        c.Need(lp["token_logprobs"].size() == n && lp["top_logprobs"].size() == n &&
                   lp["text_offset"].size() == n,
               la, "tokens, token_logprobs, top_logprobs and text_offset must have one per token");
        if (lp["token_logprobs"].size() != n || lp["top_logprobs"].size() != n ||
            lp["text_offset"].size() != n)
          return;
        std::string joined;
        for (size_t k = 0; k < n; ++k) {
          const std::string ka = "[" + std::to_string(k) + "]";
          const json& tok = lp["tokens"][k];
          c.Need(tok.is_string(), la + ".tokens" + ka, "must be a string");
          c.Need(lp["token_logprobs"][k].is_number(), la + ".token_logprobs" + ka,
                 "must be a number");
          c.Need(lp["text_offset"][k] == CodePoints(joined), la + ".text_offset" + ka,
                 "must be the code points of the text before the token");
          std::string bytes;
          if (tok.is_string()) {
            c.Need(TokenBytes(tok, &bytes), la + ".tokens" + ka, "a malformed bytes: name");
            joined += bytes;
          }
          const json& top = lp["top_logprobs"][k];
          c.Need(top.is_object(), la + ".top_logprobs" + ka, "must be an object");
          if (!top.is_object()) continue;
          // The top `logprobs` tokens and the chosen one: none lost to a shared key.
          c.Need(static_cast<int>(top.size()) >= logprobs &&
                     static_cast<int>(top.size()) <= logprobs + 1,
                 la + ".top_logprobs" + ka,
                 "must hold logprobs (+1) entries, has " + std::to_string(top.size()) + ": " +
                     top.dump());
          c.Need(tok.is_string() && top.contains(tok.get<std::string>()), la + ".top_logprobs" + ka,
                 "must hold the chosen token");
          for (const auto& [key, v] : top.items()) {
            std::string kb;
            c.Need(v.is_number(), la + ".top_logprobs" + ka, "values must be numbers");
            c.Need(TokenBytes(key, &kb), la + ".top_logprobs" + ka,
                   "a malformed bytes: key " + key);
          }
        }
        c.Need(joined == ch["text"].get<std::string>(), la + ".tokens",
               "the tokens' bytes, joined, must be the text");
      });
}

// A Response (/v1/responses), with the invariants its type leaves unsaid: usage adds up, the status
// says whether max_output_tokens cut it, and a message's logprobs spell its text.
void CheckResponse(Checker& c, const json& body, const std::string& at, int top_logprobs) {
  c.Str(body, "id", at);
  c.Need(body["object"] == "response", at + ".object", "must be \"response\"");
  c.Int(body, "created_at", at);
  const bool cut = body["status"] == "incomplete";
  c.Need(cut || body["status"] == "completed", at + ".status", "must be completed or incomplete");
  c.Need(cut ? body["incomplete_details"] == json{{"reason", "max_output_tokens"}}
             : body["incomplete_details"].is_null(),
         at + ".incomplete_details", "must say max_output_tokens exactly when incomplete");
  if (c.Obj(body, "usage", at)) {
    const json& u = body["usage"];
    if (c.Int(u, "input_tokens", at + ".usage") && c.Int(u, "output_tokens", at + ".usage") &&
        c.Int(u, "total_tokens", at + ".usage"))
      c.Need(
          u["total_tokens"] == u["input_tokens"].get<int64_t>() + u["output_tokens"].get<int64_t>(),
          at + ".usage.total_tokens", "must be input_tokens + output_tokens");
  }
  if (!c.Arr(body, "output", at)) return;
  for (size_t i = 0; i < body["output"].size(); ++i) {
    const json& item = body["output"][i];
    const std::string ia = at + ".output[" + std::to_string(i) + "]";
    c.Str(item, "id", ia);
    if (item["type"] == "function_call") {
      if (c.Str(item, "arguments", ia))
        c.Need(json::accept(item["arguments"].get<std::string>()), ia + ".arguments",
               "must be JSON text");
      continue;
    }
    if (item["type"] != "message" || !c.Arr(item, "content", ia)) continue;
    for (const json& part : item["content"]) {
      if (!part.contains("logprobs")) {
        c.Need(top_logprobs < 0, ia, "must carry logprobs when include asks for them");
        continue;
      }
      std::string joined;
      for (const json& t : part["logprobs"]) {
        std::string bytes;
        c.Bytes(t, ia + ".logprobs", &bytes);
        CheckName(c, t["token"], bytes, ia + ".logprobs");
        c.Need(static_cast<int>(t["top_logprobs"].size()) == top_logprobs, ia + ".logprobs",
               "must hold top_logprobs entries");
        joined += bytes;
      }
      c.Need(joined == part["text"], ia + ".logprobs",
             "its tokens' bytes, joined, must be the output_text's text");
    }
  }
}

// One line against BatchRequestOutput; `req` is its input line (null when it was no object).
std::vector<std::string> Violations(const json& l, const json& req) {
  std::vector<std::string> out;
  Checker c(&out);
  c.Need(l.is_object(), "$", "must be an object");
  if (!l.is_object()) return out;
  for (const auto& [k, v] : l.items())
    c.Need(k == "id" || k == "custom_id" || k == "response" || k == "error", "$." + k,
           "is not a field of BatchRequestOutput");
  c.Str(l, "id", "$");
  c.Str(l, "custom_id", "$");
  c.Need(l.contains("response") && (l["response"].is_null() || l["response"].is_object()),
         "$.response", "must be an object or null");
  c.Need(l.contains("error") && (l["error"].is_null() || l["error"].is_object()), "$.error",
         "must be an object or null");
  if (l["error"].is_object()) {
    c.Str(l["error"], "code", "$.error");
    c.Str(l["error"], "message", "$.error");
    c.Need(l["response"].is_null(), "$.response", "must be null beside an error");
  }
  if (!l["response"].is_object()) {
    c.Need(l["error"].is_object(), "$", "has neither response nor error");
    return out;
  }
  const json& r = l["response"];
  c.Int(r, "status_code", "$.response");
  c.Str(r, "request_id", "$.response");
  if (!c.Obj(r, "body", "$.response")) return out;
  const json& body = r["body"];
  if (r["status_code"] == 400) {
    if (!c.Obj(body, "error", "$.response.body")) return out;
    const json& e = body["error"];
    c.Str(e, "message", "$.response.body.error");
    c.Need(e["type"] == "invalid_request_error", "$.response.body.error.type",
           "must be \"invalid_request_error\"");
    c.StrOrNull(e, "param", "$.response.body.error");
    c.StrOrNull(e, "code", "$.response.body.error");
    return out;
  }
  c.Need(r["status_code"] == 200, "$.response.status_code", "must be 200 or 400");
  const json b = req.is_object() ? req["body"] : json::object();
  if (req.is_object() && req["url"] == "/v1/responses") {
    const bool included = b.contains("include");
    CheckResponse(c, body, "$.response.body", included ? b.value("top_logprobs", 0) : -1);
  } else if (req.is_object() && req["url"] == "/v1/chat/completions") {
    const int top = b.value("logprobs", false) ? b.value("top_logprobs", 0) : 0;
    CheckChat(c, body, "$.response.body", top);
  } else {
    CheckCompletion(c, body, "$.response.body", b.value("logprobs", 0));
  }
  return out;
}

// Runs `lines` (JSON values, or raw text for bad lines) through `llmq run` on `model`; checks
// every output line (here and against OpenAI's types) and returns them in order; *summary (when
// given) is its --summary-json.
std::vector<json> RunAndCheck(const std::string& name, const std::string& model,
                              const std::vector<std::string>& lines, json* summary = nullptr) {
  const std::string dir = testing::TmpDir(name);
  {
    std::ofstream in(dir + "/in.jsonl");
    for (const std::string& l : lines) in << l << "\n";
  }
  const auto r = testing::RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model",
                                   model, "--no-progress", "--backend", "cpu", "--summary-json",
                                   dir + "/summary.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (summary != nullptr) *summary = json::parse(testing::ReadText(dir + "/summary.json"));
  const std::vector<json> out = testing::ReadJsonl(dir + "/out.jsonl");
  EXPECT_EQ(out.size(), lines.size());
  for (size_t i = 0; i < out.size() && i < lines.size(); ++i) {
    const json req = json::parse(lines[i], nullptr, false);
    const std::vector<std::string> v = Violations(out[i], req);
    std::string all;
    for (const std::string& s : v) all += "\n  " + s;
    EXPECT_TRUE(v.empty()) << "line " << i + 1 << ": " << out[i].dump() << all;
  }
  std::vector<std::string> urls;
  for (const std::string& l : lines) {
    const json req = json::parse(l, nullptr, false);
    urls.push_back(req.is_object() ? req.value("url", "/v1/completions") : "/v1/completions");
  }
  testing::CheckWithOpenAisTypes(out, urls);
  return out;
}

std::string Line(const std::string& id, bool chat, const json& extra) {
  json body = {{"model", "m"}, {"max_tokens", 8}};
  if (chat) {
    body["messages"] = {{{"role", "user"}, {"content", "Tell me about the old red barn."}}};
  } else {
    body["prompt"] = "The old red barn stood";
  }
  body.update(extra);
  return json{{"custom_id", id},
              {"method", "POST"},
              {"url", chat ? "/v1/chat/completions" : "/v1/completions"},
              {"body", body}}
      .dump();
}

// The json of the output line whose custom_id is `id`.
const json& ById(const std::vector<json>& out, const std::string& id) {
  for (const json& o : out)
    if (o["custom_id"] == id) return o;
  static const json none;
  ADD_FAILURE() << "no output line " << id;
  return none;
}

class OpenAiShapeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::TmpDir("openai_shape_model");
    ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"})
                  .exit_code,
              0);
    ASSERT_TRUE(Tokenizer::Load(model_, &tok_).ok());
  }
  static void TearDownTestSuite() { tok_.reset(); }
  static std::string model_;
  static std::unique_ptr<Tokenizer> tok_;
};
std::string OpenAiShapeTest::model_;
std::unique_ptr<Tokenizer> OpenAiShapeTest::tok_;

// A job of every kind of line on a generated (sentencepiece, byte-fallback) model.
TEST_F(OpenAiShapeTest, EveryLineOfAMixedJobHasOpenAisShape) {
  const int bos = tok_->PieceToId("<s>"), unk = tok_->PieceToId("<unk>");
  ASSERT_GE(bos, 0);
  ASSERT_GE(unk, 0);
  ASSERT_TRUE(tok_->IsControl(bos));
  const std::string biased_bos = std::to_string(bos), biased_unk = std::to_string(unk);
  const std::vector<std::string> lines = {
      Line("chat", true, {{"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}}),
      Line("chat-n2", true,
           {{"n", 2}, {"seed", 7}, {"logprobs", true}, {"top_logprobs", 2}, {"stop", {" ", "e"}}}),
      Line("chat-pen", true,
           {{"presence_penalty", 1.5},
            {"frequency_penalty", 1},
            {"repetition_penalty", 1.2},
            {"seed", 3}}),
      Line("cmpl", false, {{"temperature", 0}, {"logprobs", 5}, {"ignore_eos", true}}),
      Line("cmpl-n3", false, {{"n", 3}, {"seed", 11}, {"logprobs", 2}, {"stop", "e"}}),
      Line("cmpl-pen", false,
           {{"presence_penalty", -1}, {"frequency_penalty", 2}, {"logprobs", 0}, {"seed", 1}}),
      // Control tokens and <unk>, drawn through logit_bias: their entries spell what the text has.
      Line("chat-bos", true,
           {{"temperature", 0},
            {"logprobs", true},
            {"top_logprobs", 2},
            {"ignore_eos", true},
            {"logit_bias", {{biased_bos, 100}}}}),
      Line("cmpl-bos", false,
           {{"temperature", 0},
            {"logprobs", 3},
            {"ignore_eos", true},
            {"logit_bias", {{biased_bos, 100}}}}),
      Line("cmpl-unk", false,
           {{"temperature", 0},
            {"logprobs", 3},
            {"ignore_eos", true},
            {"logit_bias", {{biased_unk, 100}}}}),
      Line("chat-unk", true,
           {{"temperature", 0},
            {"logprobs", true},
            {"ignore_eos", true},
            {"logit_bias", {{biased_unk, 100}}}}),
      // Bad lines: no usable custom_id (lines 11-14), a bad field, too long, a bad role, a
      // duplicate.
      "{\"custom_id\": \"x\", \"method\": ", "[1, 2]",
      json{{"method", "POST"}, {"url", "/v1/completions"}, {"body", {{"prompt", "x"}}}}.dump(),
      json{{"custom_id", 5},
           {"method", "POST"},
           {"url", "/v1/completions"},
           {"body", {{"prompt", "x"}}}}
          .dump(),
      Line("bad-max", false, {{"max_tokens", -1}}),
      Line("too-long", false, {{"max_tokens", 100000}}),
      json{{"custom_id", "bad-role"},
           {"method", "POST"},
           {"url", "/v1/chat/completions"},
           {"body", {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "robot"}}}}}}}
          .dump(),
      Line("chat", false, json::object()),  // a duplicate custom_id
  };
  json summary;
  const std::vector<json> out = RunAndCheck("openai_shape_mixed", model_, lines, &summary);
  ASSERT_EQ(out.size(), lines.size());
  // The refused lines (HTTP 400 responses) still count as failed; all but the one too long for
  // the context (found when it is tokenized, as it is fed) were refused when the file was read.
  EXPECT_EQ(summary["requests"], 18);
  EXPECT_EQ(summary["completed"], 10);
  EXPECT_EQ(summary["failed"], 8);
  EXPECT_EQ(summary["refused"], 7);

  // 1. custom_id is a string on every line: "line-<n>" when the line had none.
  for (int n : {11, 12, 13, 14}) {
    const json& o = out[n - 1];
    EXPECT_EQ(o["custom_id"], "line-" + std::to_string(n)) << o;
    EXPECT_EQ(o["response"]["status_code"], 400) << o;
    EXPECT_NE(testing::ErrorMessage(o).find("in.jsonl:" + std::to_string(n) + ": "),
              std::string::npos)
        << o;
  }
  EXPECT_TRUE(out[10]["response"]["body"]["error"]["param"].is_null());
  EXPECT_EQ(out[12]["response"]["body"]["error"]["param"], "custom_id");
  EXPECT_EQ(out[13]["response"]["body"]["error"]["param"], "custom_id");

  // 3. A refused line is an HTTP 400 response naming the field as param; error is null.
  const std::map<int, std::string> params = {
      {15, "max_tokens"}, {16, "max_tokens"}, {17, "messages[1].role"}, {18, "custom_id"}};
  for (const auto& [n, param] : params) {
    const json& o = out[n - 1];
    EXPECT_TRUE(o["error"].is_null()) << o;
    EXPECT_EQ(o["response"]["status_code"], 400) << o;
    EXPECT_EQ(o["response"]["body"]["error"]["param"], param) << o;
    EXPECT_EQ(o["response"]["body"]["error"]["type"], "invalid_request_error") << o;
    EXPECT_TRUE(o["response"]["body"]["error"]["code"].is_null()) << o;
  }
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(out[i]["response"]["status_code"], 200) << out[i];

  // 2. A control token adds no text: its entry is "" with no bytes, offsets stay on the text.
  const json& bos_chat = ById(out, "chat-bos")["response"]["body"]["choices"][0];
  EXPECT_EQ(bos_chat["message"]["content"], "");
  ASSERT_EQ(bos_chat["logprobs"]["content"].size(), 8u);
  for (const json& t : bos_chat["logprobs"]["content"]) {
    EXPECT_EQ(t["token"], "");
    EXPECT_EQ(t["bytes"], json::array());
  }
  const json& bos_cmpl = ById(out, "cmpl-bos")["response"]["body"]["choices"][0];
  EXPECT_EQ(bos_cmpl["text"], "");
  EXPECT_EQ(bos_cmpl["logprobs"]["text_offset"], json(std::vector<int>(8, 0)));
  // <unk> is named as the text shows it, not "<unk>".
  const json& unk_cmpl = ById(out, "cmpl-unk")["response"]["body"]["choices"][0];
  ASSERT_EQ(unk_cmpl["logprobs"]["tokens"].size(), 8u);
  EXPECT_NE(unk_cmpl["text"], "");
  for (const json& t : unk_cmpl["logprobs"]["tokens"]) {
    EXPECT_NE(t, "<unk>");
    EXPECT_NE(t, "");
  }
  // A stop string cut some sample (its tokens past the cut add nothing: RunAndCheck).
  int cut = 0;
  for (const char* id : {"chat-n2", "cmpl-n3"})
    for (const json& c : ById(out, id)["response"]["body"]["choices"])
      cut += c["finish_reason"] == "stop";
  EXPECT_GT(cut, 0);
  // The sampled lines ran what they asked for.
  EXPECT_EQ(ById(out, "chat-n2")["response"]["body"]["choices"].size(), 2u);
  EXPECT_EQ(ById(out, "cmpl-n3")["response"]["body"]["choices"].size(), 3u);
}

// A byte-level BPE model (Qwen2's real tokenizer): tokens that hold parts of characters, and
// <|im_start|> drawn through logit_bias.
TEST(OpenAiShapeSharedTest, ByteLevelTokensKeepEveryEntryAndSpellTheText) {
  const std::string model = testing::SharedModel("tiny-qwen2");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-qwen2");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(model, &tok).ok());
  const int im_start = tok->PieceToId("<|im_start|>");
  const int e2 = tok->PieceToId("\xc3\xa2");  // the byte 0xE2 in the byte-level alphabet ("â")
  ASSERT_GE(im_start, 0);
  ASSERT_GE(e2, 0);
  ASSERT_EQ(tok->TokenBytes(e2), "\xe2");
  const std::vector<std::string> lines = {
      Line("cmpl", false,
           {{"temperature", 0}, {"logprobs", 5}, {"max_tokens", 24}, {"ignore_eos", true}}),
      // Its first sample's top 5 at position 36 hold two parts of characters.
      Line("cmpl-seeded", false,
           {{"seed", 5}, {"n", 4}, {"logprobs", 5}, {"max_tokens", 64}, {"ignore_eos", true}}),
      Line("chat", true,
           {{"seed", 9},
            {"logprobs", true},
            {"top_logprobs", 20},
            {"max_tokens", 24},
            {"ignore_eos", true}}),
      Line("chat-im-start", true,
           {{"temperature", 0},
            {"logprobs", true},
            {"top_logprobs", 2},
            {"max_tokens", 4},
            {"ignore_eos", true},
            {"logit_bias", {{std::to_string(im_start), 100}}}}),
      Line("cmpl-e2", false,
           {{"temperature", 0},
            {"logprobs", 2},
            {"max_tokens", 4},
            {"ignore_eos", true},
            {"logit_bias", {{std::to_string(e2), 100}}}}),
  };
  const std::vector<json> out = RunAndCheck("openai_shape_qwen2", model, lines);
  ASSERT_EQ(out.size(), lines.size());
  const json& im = ById(out, "chat-im-start")["response"]["body"]["choices"][0];
  EXPECT_EQ(im["message"]["content"], "");
  for (const json& t : im["logprobs"]["content"]) EXPECT_EQ(t["token"], "");
  // Lone 0xE2 bytes never make a character: each is the U+FFFD the text shows for it.
  const json& lone = ById(out, "cmpl-e2")["response"]["body"]["choices"][0];
  EXPECT_EQ(lone["text"], "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(lone["logprobs"]["tokens"], json(std::vector<std::string>(4, "\xef\xbf\xbd")));
  // The job holds what the "bytes:" names are for: a completions top_logprobs with two parts of
  // characters, which one key "\ufffd" would have merged (RunAndCheck found every entry).
  int merged_before = 0;
  for (const json& o : out)
    for (const json& c : o["response"]["body"]["choices"])
      if (c["logprobs"].contains("top_logprobs"))
        for (const json& top : c["logprobs"]["top_logprobs"]) {
          int parts = 0;
          for (const auto& [key, v] : top.items()) parts += key.rfind("bytes:", 0) == 0;
          merged_before += parts >= 2;
        }
  EXPECT_GT(merged_before, 0) << "the job no longer exercises two parts of characters in one "
                                 "top_logprobs (a change of the model or its numerics?)";
}

// Tool-call lines (issue 25) on a family model whose template writes hermes calls: required, a
// named function, auto and none, one with logprobs, in OpenAI's shapes; the calls where asked.
TEST(OpenAiShapeSharedTest, ToolCallLinesHaveOpenAisShape) {
  const std::string model = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-qwen3");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
      "required": ["city"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "ping"}}])");
  auto tool_line = [&](const std::string& id, const json& choice, json extra) {
    extra["tools"] = tools;
    extra["tool_choice"] = choice;
    extra["max_tokens"] = 200;
    extra["parallel_tool_calls"] = false;
    return Line(id, true, extra);
  };
  const std::vector<std::string> lines = {
      tool_line("required", "required", {{"temperature", 0}}),
      tool_line("named", {{"type", "function"}, {"function", {{"name", "ping"}}}},
                {{"seed", 3}, {"logprobs", true}, {"top_logprobs", 2}}),
      tool_line("auto", "auto", {{"seed", 4}}),
      tool_line("none", "none", {{"seed", 5}}),
  };
  const std::vector<json> out = RunAndCheck("openai_shape_tools", model, lines);
  ASSERT_EQ(out.size(), lines.size());
  for (const char* id : {"required", "named"}) {
    const json& m = ById(out, id)["response"]["body"]["choices"][0]["message"];
    ASSERT_TRUE(m.contains("tool_calls")) << id << ": " << m.dump();
    EXPECT_EQ(m["tool_calls"].size(), 1u) << m.dump();
  }
  EXPECT_EQ(ById(out, "named")["response"]["body"]["choices"][0]["message"]["tool_calls"][0]
                              ["function"]["name"],
            "ping");
  EXPECT_FALSE(
      ById(out, "none")["response"]["body"]["choices"][0]["message"].contains("tool_calls"));
}

// /v1/responses lines on a family model (hermes calls), each beside the chat line it reads as
// (instructions as the system message, input items as messages, flat tools, text.format, include):
// the same tokens come out (greedy and seeded: text, calls, logprobs, usage), in OpenAI's
// Response shape.
TEST(OpenAiShapeSharedTest, ResponsesLinesRunAsTheirChatLinesInOpenAisResponseShape) {
  const std::string model = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-qwen3");
  // The lines keep their keys in the order written, as a client writes them (the template gets
  // tools and calls so): chat's {"type", "function": {...}} and the flat tools read as that.
  using ojson = nlohmann::ordered_json;
  const ojson params = ojson::parse(R"({"type": "object", "properties": {"city": {"type":
      "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": false})");
  const ojson chat_tools = {
      {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}},
      {{"type", "function"}, {"function", {{"name", "ping"}}}}};
  const ojson flat_tools = {{{"type", "function"}, {"name", "get_weather"}, {"parameters", params}},
                            {{"type", "function"}, {"name", "ping"}}};
  const ojson schema = ojson::parse(R"({"type": "object", "properties": {"title": {"type":
      "string", "maxLength": 12}, "year": {"type": "integer"}}, "required": ["title", "year"],
      "additionalProperties": false})");
  const ojson user = {{"role", "user"}, {"content", "Tell me about the old red barn."}};
  const ojson input_user = {
      {"role", "user"},
      {"content", {{{"type", "input_text"}, {"text", "Tell me about the old red barn."}}}}};
  struct Pair {
    std::string id;
    ojson chat, responses;  // the bodies
  };
  const std::vector<Pair> pairs = {
      {"plain",
       {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, user}},
        {"max_tokens", 12},
        {"temperature", 0}},
       {{"instructions", "Be brief."},
        {"input", "Tell me about the old red barn."},
        {"max_output_tokens", 12},
        {"temperature", 0}}},
      {"logprobs",
       {{"messages", {user}},
        {"max_tokens", 6},
        {"seed", 7},
        {"logprobs", true},
        {"top_logprobs", 2}},
       {{"input", {input_user}},
        {"max_output_tokens", 6},
        {"seed", 7},
        {"include", {"message.output_text.logprobs"}},
        {"top_logprobs", 2}}},
      {"schema",
       {{"messages", {user}},
        {"max_tokens", 80},
        {"temperature", 0},
        {"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "doc"}, {"schema", schema}}}}}},
       {{"input", {input_user}},
        {"max_output_tokens", 80},
        {"temperature", 0},
        {"text", {{"format", {{"type", "json_schema"}, {"name", "doc"}, {"schema", schema}}}}}}},
      {"required",
       {{"messages", {user}},
        {"tools", chat_tools},
        {"tool_choice", "required"},
        {"parallel_tool_calls", false},
        {"max_tokens", 200},
        {"temperature", 0}},
       {{"input", "Tell me about the old red barn."},
        {"tools", flat_tools},
        {"tool_choice", "required"},
        {"parallel_tool_calls", false},
        {"max_output_tokens", 200},
        {"temperature", 0}}},
      {"named",
       {{"messages", {user}},
        {"tools", chat_tools},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "ping"}}}}},
        {"max_tokens", 200},
        {"seed", 3}},
       {{"input", {input_user}},
        {"tools", flat_tools},
        {"tool_choice", {{"type", "function"}, {"name", "ping"}}},
        {"max_output_tokens", 200},
        {"seed", 3}}},
      // Calls restricted to a subset, every tool in the prompt (OpenAI's allowed_tools).
      {"allowed",
       {{"messages", {user}},
        {"tools", chat_tools},
        {"tool_choice",
         {{"type", "allowed_tools"},
          {"allowed_tools",
           {{"mode", "required"},
            {"tools", {{{"type", "function"}, {"function", {{"name", "ping"}}}}}}}}}},
        {"max_tokens", 200},
        {"temperature", 0}},
       {{"input", "Tell me about the old red barn."},
        {"tools", flat_tools},
        {"tool_choice",
         {{"type", "allowed_tools"},
          {"mode", "required"},
          {"tools", {{{"type", "function"}, {"name", "ping"}}}}}},
        {"max_output_tokens", 200},
        {"temperature", 0}}},
      // A conversation fed back: the model's call and its output, then the model again.
      {"history",
       {{"messages",
         {user,
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            {{{"id", "call_1"},
              {"type", "function"},
              {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Oslo"})"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "4 C and rain"}}}},
        {"tools", chat_tools},
        {"max_tokens", 24},
        {"seed", 4}},
       {{"input",
         {input_user,
          {{"type", "function_call"},
           {"call_id", "call_1"},
           {"name", "get_weather"},
           {"arguments", R"({"city": "Oslo"})"}},
          {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "4 C and rain"}}}},
        {"tools", flat_tools},
        {"max_output_tokens", 24},
        {"seed", 4}}},
  };
  std::vector<std::string> lines;
  for (const Pair& p : pairs) {
    ojson chat = p.chat, responses = p.responses;
    chat["model"] = responses["model"] = "m";
    lines.push_back(ojson{
        {"custom_id", p.id + "-chat"},
        {"method", "POST"},
        {"url", "/v1/chat/completions"},
        {"body", chat}}.dump());
    lines.push_back(ojson{
        {"custom_id", p.id + "-responses"},
        {"method", "POST"},
        {"url", "/v1/responses"},
        {"body",
         responses}}.dump());
  }
  // Refused where the engine finds it, naming the Responses field.
  lines.push_back(json::parse(R"({"custom_id": "bad-schema", "method": "POST", "url":
      "/v1/responses", "body": {"input": "x", "text": {"format": {"type": "json_schema", "name":
      "d", "schema": {"type": "string", "pattern": "(?=a)b"}}}}})")
                      .dump());
  lines.push_back(json::parse(R"({"custom_id": "bad-tool", "method": "POST", "url":
      "/v1/responses", "body": {"input": "x", "tool_choice": "required", "tools": [{"type":
      "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"type":
      "string", "pattern": "(?=a)b"}}}}]}})")
                      .dump());
  json summary;
  const std::vector<json> out = RunAndCheck("openai_shape_responses", model, lines, &summary);
  ASSERT_EQ(out.size(), lines.size());
  for (const auto& [id, param] : {std::pair{"bad-schema", "text.format.schema"},
                                  std::pair{"bad-tool", "tools[0].parameters"}}) {
    const json& r = ById(out, id)["response"];
    EXPECT_EQ(r["status_code"], 400) << r.dump();
    EXPECT_EQ(r["body"]["error"]["param"], param) << r.dump();
    EXPECT_NE(r["body"]["error"]["message"].get<std::string>().find(std::string("field 'body.") +
                                                                    param + "'"),
              std::string::npos)
        << r.dump();
  }
  int calls_seen = 0;
  for (const Pair& p : pairs) {
    SCOPED_TRACE(p.id);
    const json& c = ById(out, p.id + "-chat")["response"]["body"];
    const json& r = ById(out, p.id + "-responses")["response"]["body"];
    ASSERT_TRUE(c.contains("choices")) << c.dump();
    ASSERT_TRUE(r.contains("output")) << r.dump();
    const json& choice = c["choices"][0];
    const json& m = choice["message"];
    json text = nullptr, calls = json::array(), chat_calls = json::array(), logprobs = nullptr;
    for (const json& item : r["output"]) {
      if (item["type"] == "message") {
        text = item["content"][0]["text"];
        if (item["content"][0].contains("logprobs")) logprobs = item["content"][0]["logprobs"];
      } else if (item["type"] == "function_call") {
        calls.push_back({item["name"], item["arguments"]});
      }
    }
    for (const json& t : m.value("tool_calls", json::array()))
      chat_calls.push_back({t["function"]["name"], t["function"]["arguments"]});
    EXPECT_EQ(text, m["content"]) << r.dump();
    EXPECT_EQ(calls, chat_calls);
    calls_seen += static_cast<int>(calls.size());
    EXPECT_EQ(r["status"] == "incomplete", choice["finish_reason"] == "length");
    EXPECT_EQ(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"]);
    EXPECT_EQ(r["usage"]["output_tokens"], c["usage"]["completion_tokens"]);
    EXPECT_EQ(logprobs,
              choice["logprobs"].is_null() ? json(nullptr) : choice["logprobs"]["content"]);
  }
  EXPECT_GE(calls_seen, 3) << "required, named and allowed ask for a call each";
  // allowed_tools: only ping is called, though get_weather is in the prompt too, and is what the
  // same prompt calls unrestricted (greedy), so the restriction is what changed the call.
  EXPECT_EQ(ById(out, "required-chat")["response"]["body"]["choices"][0]["message"]["tool_calls"][0]
                                      ["function"]["name"],
            "get_weather")
      << "the model no longer calls get_weather unrestricted: restrict the calls to another tool";
  for (const json& item : ById(out, "allowed-responses")["response"]["body"]["output"])
    if (item["type"] == "function_call") {
      EXPECT_EQ(item["name"], "ping") << item.dump();
    }
  const json& required = ById(out, "required-chat")["response"]["body"]["usage"];
  const json& allowed = ById(out, "allowed-chat")["response"]["body"]["usage"];
  EXPECT_EQ(allowed["prompt_tokens"], required["prompt_tokens"]) << "the same prompt";
  // The summary counts a Response's function_call items as it counts a message's tool_calls.
  EXPECT_EQ(summary["tool_calls"]["calls"], 2 * calls_seen) << summary.dump();
  const json& named = ById(out, "named-responses")["response"]["body"];
  EXPECT_EQ(named["tool_choice"], json::parse(R"({"type": "function", "name": "ping"})"));
  EXPECT_EQ(named["tools"][1],
            json::parse(R"({"type": "function", "name": "ping", "description": null,
                "parameters": null, "strict": true})"));
}

// `base` with the value at `pointer` set to *value, or removed (value null).
json Mutated(const json& base, const std::string& pointer, const json* value) {
  json m = base;
  if (value != nullptr) {
    m[json::json_pointer(pointer)] = *value;
  } else {
    const json::json_pointer p(pointer);
    m[p.parent_pointer()].erase(p.back());
  }
  return m;
}

// The oracle is strict where the lines could go wrong: each of these departures from OpenAI's
// shapes (a field missing, one too many, a wrong type, a call's arguments not a string, a refused
// line as a top-level error) is found, and the line they were made from passes.
TEST(OpenAiTypesOracleTest, FindsWhatDepartsFromOpenAisShapes) {
  if (const std::string missing = testing::MissingOpenAisTypes(); !missing.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(missing);
  const json chat = json::parse(R"({"id": "batch_req_1", "custom_id": "a", "error": null,
      "response": {"status_code": 200, "request_id": "r1", "body": {"id": "chatcmpl-1",
      "object": "chat.completion", "created": 1, "model": "m", "usage": {"prompt_tokens": 3,
      "completion_tokens": 2, "total_tokens": 5}, "choices": [{"index": 0,
      "finish_reason": "tool_calls", "logprobs": null, "message": {"role": "assistant",
      "content": null, "refusal": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{}"}}]}}]}}})");
  const json refused = json::parse(R"({"id": "batch_req_2", "custom_id": "line-3", "error": null,
      "response": {"status_code": 400, "request_id": "r2", "body": {"error": {"message": "m",
      "type": "invalid_request_error", "param": "max_tokens", "code": null}}}})");
  const std::string kChat = "/v1/chat/completions";
  std::vector<std::pair<std::string, json>> lines = {{kChat, chat}, {kChat, refused}};
  auto mutated = [&](const json& base, const std::string& pointer, const json* value) {
    lines.emplace_back(kChat, Mutated(base, pointer, value));
  };
  const std::string msg = "/response/body/choices/0/message";
  const json null_value = nullptr, number = 5, args_object = {{"x", 1}}, text = "x",
             top_error = {{"code", "invalid_request"}, {"message", "m"}};
  mutated(chat, msg + "/refusal", nullptr);                               // 2: required
  mutated(chat, msg + "/tool_calls/0/function/arguments", &args_object);  // 3: a string
  mutated(chat, msg + "/reasoning", &text);                               // 4: not declared
  mutated(chat, "/custom_id", &null_value);                               // 5: a string
  mutated(chat, "/response/body/choices/0/finish_reason", &text);         // 6: an enum
  mutated(chat, "/response/body/usage/total_tokens", &text);              // 7: a number
  mutated(refused, "/response/body/error/param", &number);                // 8: string or null
  mutated(refused, "/response/body/error/type", nullptr);                 // 9: required
  mutated(refused, "/response/status_code", &number);                     // 10: 200 or 400 here
  json top = refused;                                                     // 11: both response and a
  top["error"] = top_error;                                               // top-level error are
  top["response"]["body"] = json::object();                               // allowed, but not an
  lines.emplace_back(kChat, top);                                         // empty 400 body
  json answer;
  ASSERT_TRUE(testing::AskOpenAisTypes(lines, &answer));
  std::set<size_t> flagged;
  for (const json& v : answer["violations"]) flagged.insert(v["index"].get<size_t>());
  std::set<size_t> want;
  for (size_t i = 2; i < lines.size(); ++i) want.insert(i);
  EXPECT_EQ(flagged, want) << answer["violations"].dump(2);
}

// The same for a Response: the API's shape, less the SDK's own output_text; each departure found.
TEST(OpenAiTypesOracleTest, FindsWhatDepartsFromOpenAisResponseShape) {
  if (const std::string missing = testing::MissingOpenAisTypes(); !missing.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(missing);
  const json line = json::parse(R"({"id": "batch_req_1", "custom_id": "a", "error": null,
      "response": {"status_code": 200, "request_id": "r1", "body": {"id": "resp_1",
      "object": "response", "created_at": 1, "status": "completed", "background": false,
      "error": null, "incomplete_details": null, "instructions": null, "max_output_tokens": null,
      "model": "m", "output": [{"id": "msg_1", "type": "message", "status": "completed",
      "role": "assistant", "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
      {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
      "name": "f", "arguments": "{}"}], "parallel_tool_calls": true,
      "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
      "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
      "tools": [{"type": "function", "name": "f", "description": null, "parameters": null,
      "strict": true}], "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled",
      "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0,
      "cache_write_tokens": 0}, "output_tokens": 2, "output_tokens_details":
      {"reasoning_tokens": 0}, "total_tokens": 5}, "metadata": null,
      "access_programs": null}}})");
  const std::string kUrl = "/v1/responses";
  std::vector<std::pair<std::string, json>> lines = {{kUrl, line}};
  auto mutated = [&](const std::string& pointer, const json* value) {
    lines.emplace_back(kUrl, Mutated(line, pointer, value));
  };
  const std::string b = "/response/body";
  const json text = "hi", done = "done", number = 5;
  mutated(b + "/output_text", &text);                                 // 1: the SDK's, not the API's
  mutated(b + "/access_programs", nullptr);                           // 2: required
  mutated(b + "/output/0/content/0/annotations", nullptr);            // 3: required
  mutated(b + "/status", &done);                                      // 4: an enum
  mutated(b + "/output/1/arguments", &number);                        // 5: a string
  mutated(b + "/usage/input_tokens_details/cached_tokens", nullptr);  // 6: required
  json answer;
  ASSERT_TRUE(testing::AskOpenAisTypes(lines, &answer));
  std::set<size_t> flagged;
  for (const json& v : answer["violations"]) flagged.insert(v["index"].get<size_t>());
  EXPECT_EQ(flagged, (std::set<size_t>{1, 2, 3, 4, 5, 6})) << answer["violations"].dump(2);
}

}  // namespace
}  // namespace llmq
