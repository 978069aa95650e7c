// Structured outputs against an independent validator (issue 24): random schemas
// (tests/json_schema_gen.h, without the compiler's known deviations) compiled against each shared
// family model's vocabulary (tiny-qwen3, tiny-qwen2, tiny-llama32), and constrained requests
// through a real LlmEngine on the CPU backend: greedy and seeded temperature / top-k / top-p
// sampling, some with penalties, min_p, logprobs or ignore_eos, some with n > 1, max_tokens from 32
// to 160; the engine's invariants checked after every step. The models' weights are random, so the
// walk through each grammar is a fuzz test of the masks, the matcher and the engine. Then, in one
// node run per model, Ajv (tests/oracle/jsonschema, 8.17.1 pinned) validates every output that
// finished with `stop` against its schema; every `length` output is a prefix the grammar accepts
// (a fresh Matcher: Ajv cannot judge prefixes) of exactly max_tokens tokens. No sample may hit a
// dead end (a row whose mask the model could not draw from).
//
// Half the schemas come from the generator as the diff test uses it, half from its `bounded` mode
// (strings with a maxLength, arrays with a maxItems, closed objects, bounded numbers): random
// weights rarely close an unbounded string, so the first half ends by length about half the time
// (prefixes checked), the second mostly with `stop` (documents checked by Ajv).
//
// Not reached by a random walk at any useful rate: a number of 16+ significant digits within half
// a double's spacing of a bound (read as a double, it is the bound). json_regex_test's
// NumberRangesAgreeWithTheDoubleComparison checks those texts against strtod.
//
// LLMQ_STRUCTURED_OUTPUTS_DIFF_SEED=N adds N to the seeds (other schemas and draws).
// Skips with a message (fails under LLMQ_REQUIRE_REFERENCES=1) without a shared model, node or the
// oracle's node_modules.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/text.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "tests/json_schema_gen.h"
#include "tests/node_oracle.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;

const std::filesystem::path kOracleDir = testing::OracleDir("jsonschema");

struct Schema {
  json schema;
  bool bounded;  // from the generator's bounded mode
  std::shared_ptr<CompiledGrammar> grammar;
};

// A request and the schema it was asked under.
struct Asked {
  size_t schema;
  Request req;
};

// One completion, for a failure's message: enough to run it again.
std::string Describe(const json& schema, const Request& r, size_t sample, const Completion& c,
                     uint32_t seed) {
  const SamplingParams& p = r.params;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "\nrequest %s sample %zu (test seed %u; request seed %llu, temperature %g, top_k "
                "%d, top_p %g, min_p %g, penalties %g/%g/%g, ignore_eos %d, max_tokens %d, n %d): "
                "%s after %zu tokens",
                r.id.c_str(), sample, seed, static_cast<unsigned long long>(*p.seed), p.temperature,
                p.top_k, p.top_p, p.min_p, p.presence_penalty, p.frequency_penalty,
                p.repetition_penalty, p.ignore_eos, p.max_tokens, r.n, c.finish_reason.c_str(),
                c.ids.size());
  return "schema " + schema.dump() + buf + "\ntext " +
         json(c.text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// `text` as the detokenizer releases `bytes` (the completion's token bytes) at the end of a
// generation: the same, but an incomplete UTF-8 character at the end becomes U+FFFD.
bool TextOfBytes(const std::string& text, const std::string& bytes) {
  if (text == bytes) return true;
  size_t whole = 0;
  while (whole < bytes.size()) {
    const size_t n = Utf8SequenceLength(bytes.data(), bytes.size(), whole);
    if (n == 0) break;
    whole += n;
  }
  return text.compare(0, whole, bytes, 0, whole) == 0 && text.size() > whole &&
         text.substr(whole) == "\xEF\xBF\xBD";
}

class StructuredOutputsDiff : public ::testing::TestWithParam<const char*> {};

TEST_P(StructuredOutputsDiff, StopOutputsValidateAndLengthOutputsArePrefixes) {
  const std::string dir = testing::SharedModel(GetParam());
  LLMQ_SKIP_WITHOUT_SHARED(dir, GetParam());
  const std::string missing = testing::MissingNodeOracle(kOracleDir, "ajv/dist/2020.js");
  if (!missing.empty()) LLMQ_SKIP_OR_FAIL_MISSING(missing);
  const auto t0 = std::chrono::steady_clock::now();

  Model model;
  ASSERT_TRUE(LoadModel(dir, &model).ok());
  const auto trie = std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*model.tokenizer));

  uint32_t seed = 20261230;
  for (const char* p = GetParam(); *p; ++p) seed = seed * 31 + static_cast<uint8_t>(*p);
  if (const char* env = std::getenv("LLMQ_STRUCTURED_OUTPUTS_DIFF_SEED"))
    seed += static_cast<uint32_t>(std::stoul(env));
  constexpr int kSchemas = 40;
  // Three streams from the seed: the two generators' and the requests'.
  uint32_t seeds[3];
  std::seed_seq(&seed, &seed + 1).generate(seeds, seeds + 3);
  testing::Gen free_gen(seeds[0], /*known=*/false), bounded_gen(seeds[1], false, /*bounded=*/true);
  std::vector<Schema> schemas;
  int refused = 0, unsatisfiable = 0;
  for (int i = 0; i < kSchemas; ++i) {
    Schema s;
    s.bounded = i % 2 == 1;
    s.schema = (s.bounded ? bounded_gen : free_gen).Schema();
    const auto compiled = testing::CompileGenerated(s.schema, trie, &s.grammar);
    refused += compiled == testing::Compiled::kRefused;
    unsatisfiable += compiled == testing::Compiled::kUnsatisfiable;
    if (compiled == testing::Compiled::kGrammar) schemas.push_back(std::move(s));
  }

  // Requests: one or two per schema, their sampling drawn from the same seed.
  std::mt19937 rng(seeds[2]);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Asked> asked;
  for (size_t i = 0; i < schemas.size(); ++i)
    for (int k = pick(1, 2); k > 0; --k) {
      Request r;
      r.id = "s" + std::to_string(i) + "r" + std::to_string(k);
      r.prompt_ids = model.tokenizer->Encode("JSON " + r.id + ":");
      r.grammar = schemas[i].grammar;
      r.params.max_tokens = pick(32, 160);
      r.params.seed = rng();
      switch (pick(0, 5)) {
        case 0:
          r.params.temperature = 0;
          break;
        case 1:
          r.params.top_k = pick(1, 40);
          break;
        case 2:
          r.params.top_p = 0.5f + 0.1f * static_cast<float>(pick(0, 4));
          break;
        case 3:
          r.params.temperature = 0.5f + 0.25f * static_cast<float>(pick(0, 4));
          r.params.top_k = pick(0, 1) ? 0 : 50;
          r.params.top_p = pick(0, 1) ? 1.f : 0.9f;
          break;
        case 4:
          // Penalties and min_p change the logits after the mask; logprobs read them raw;
          // ignore_eos does not hold a constrained sample past its document's end.
          r.params.presence_penalty = 0.5f;
          r.params.frequency_penalty = 0.25f;
          r.params.repetition_penalty = 1.3f;
          r.params.min_p = 0.05f;
          r.params.logprobs = pick(0, 2);
          r.params.ignore_eos = pick(0, 1) == 1;
          break;
        default:
          break;  // temperature 1, nothing cut
      }
      if (pick(0, 5) == 0) r.n = pick(2, 3);
      asked.push_back({i, std::move(r)});
    }

  EngineOptions opt;
  opt.num_blocks = 1024;
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(
      LlmEngine::Create(model.cfg, model.backend.get(), model.tokenizer.get(), opt, &engine).ok());
  for (const Asked& a : asked) engine->Add(a.req);
  std::vector<RequestOutput> done;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step(&done).ok());
    ASSERT_TRUE(engine->CheckInvariants().ok());
  }
  ASSERT_EQ(done.size(), asked.size());
  std::map<std::string, const RequestOutput*> by_id;
  for (const RequestOutput& o : done) by_id[o.id] = &o;

  // Stop outputs to Ajv, grouped by schema (their messages kept); length outputs checked here.
  std::vector<std::vector<std::string>> stopped(schemas.size()), described(schemas.size());
  int completions = 0, stops = 0, lengths = 0, bounded_completions = 0, bounded_stops = 0;
  for (const Asked& a : asked) {
    const RequestOutput& o = *by_id.at(a.req.id);
    ASSERT_TRUE(o.ok()) << a.req.id << ": " << o.error;
    ASSERT_EQ(o.completions.size(), static_cast<size_t>(a.req.n));
    const Schema& schema = schemas[a.schema];
    for (size_t k = 0; k < o.completions.size(); ++k) {
      const Completion& c = o.completions[k];
      const std::string what = Describe(schema.schema, a.req, k, c, seed);
      ++completions;
      bounded_completions += schema.bounded;
      if (c.finish_reason == "stop") {
        ++stops;
        bounded_stops += schema.bounded;
        Matcher m(schema.grammar);
        EXPECT_TRUE(m.Consume(c.text) && m.CanEnd()) << "not a document of the grammar\n" << what;
        EXPECT_TRUE(IsUtf8(c.text)) << what;
        stopped[a.schema].push_back(c.text);
        described[a.schema].push_back(what);
        continue;
      }
      ++lengths;
      ASSERT_EQ(c.finish_reason, "length") << what;
      EXPECT_EQ(c.ids.size(), static_cast<size_t>(a.req.params.max_tokens)) << what;
      // Ajv cannot judge a prefix: the grammar does (its documents are the schema's, as
      // json_schema_diff_test checks against Ajv). The token bytes, and the text made of them.
      std::string bytes;
      for (int id : c.ids) bytes += model.tokenizer->TokenBytes(id);
      Matcher m(schema.grammar);
      EXPECT_TRUE(m.Consume(bytes)) << "not a prefix the grammar accepts\n" << what;
      EXPECT_TRUE(TextOfBytes(c.text, bytes)) << what;
    }
  }

  json in = json::array();
  for (size_t i = 0; i < schemas.size(); ++i)
    in.push_back({{"schema", schemas[i].schema}, {"instances", stopped[i]}});
  nlohmann::json verdicts;
  ASSERT_TRUE(testing::RunNodeOracle(kOracleDir / "oracle.mjs",
                                     in.dump(-1, ' ', false, json::error_handler_t::replace),
                                     &verdicts));
  ASSERT_EQ(verdicts.size(), schemas.size());
  int valid = 0;
  for (size_t i = 0; i < schemas.size(); ++i) {
    ASSERT_EQ(verdicts[i].size(), stopped[i].size());
    for (size_t k = 0; k < stopped[i].size(); ++k) {
      const nlohmann::json& v = verdicts[i][k];
      if (v.value("valid", false))
        ++valid;
      else
        ADD_FAILURE() << "ajv: " << v.dump() << "\n" << described[i][k];
    }
  }

  const EngineStats& stats = engine->stats();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%s (seed %u): %d schemas (%d refused, %d unsatisfiable), %zu requests, %d completions: %d "
      "stop (%d valid per ajv; %d of %d from bounded schemas), %d length; %lld tokens (%lld "
      "forced), %.1f s\n",
      GetParam(), seed, kSchemas, refused, unsatisfiable, asked.size(), completions, stops, valid,
      bounded_stops, bounded_completions, lengths, static_cast<long long>(stats.tokens_generated),
      static_cast<long long>(stats.forced_tokens), seconds);
  EXPECT_EQ(stats.grammar_dead_ends, 0);
  EXPECT_EQ(stats.constrained_requests, static_cast<int64_t>(asked.size()));
  EXPECT_LT(refused, kSchemas / 10);
  // Enough documents for the comparison to mean something.
  EXPECT_GE(stops, completions / 3);
}

INSTANTIATE_TEST_SUITE_P(SharedModels, StructuredOutputsDiff,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "tiny-llama32"));

}  // namespace
}  // namespace llmq
