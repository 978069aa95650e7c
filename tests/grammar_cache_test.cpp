// engine/structured/grammar_cache.h: one compile per distinct schema (refusals too), the object
// grammar apart from the schemas, and what it reports.
#include "engine/structured/grammar_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/test_util.h"

namespace llmq {
namespace {

TEST(GrammarCache, CompilesEachSchemaOnceAndKeepsRefusals) {
  const std::string dir = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama32");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  GrammarCache cache(tok.get());
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  std::shared_ptr<CompiledGrammar> a, b, o;
  ASSERT_TRUE(cache.JsonSchema(schema, &a).ok());
  ASSERT_TRUE(cache.JsonSchema(schema, &b).ok());
  EXPECT_EQ(a, b);  // the same grammar, not a second compile
  ASSERT_TRUE(cache.JsonObject(&o).ok());
  EXPECT_NE(o, a);
  Matcher m(a);
  EXPECT_TRUE(m.Consume(R"({"a": 12})") && m.CanEnd());

  const std::string bad = R"({"type":"array","uniqueItems":true})";
  std::shared_ptr<CompiledGrammar> none;
  const Status st = cache.JsonSchema(bad, &none);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("keyword \"uniqueItems\" at \"/uniqueItems\""), std::string::npos)
      << st.message();
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(cache.JsonSchema(bad, &none).message(), st.message());  // kept, not recompiled
  EXPECT_EQ(cache.JsonSchema("{not json", &none).code(), Status::Code::kInvalidArgument);

  const GrammarCache::Stats s = cache.stats();
  EXPECT_EQ(s.compiled, 4);  // the schema, the object, the refused one, the text that is not JSON
  EXPECT_EQ(s.refused, 2);
  EXPECT_EQ(s.hits, 2);
  EXPECT_GT(s.compile_seconds, 0);
  EXPECT_GE(s.compile_seconds, s.max_compile_seconds);
}

// Tool-call grammars by their spec: the same tools compile once; another format, another
// parallel_tool_calls or other parameters are other grammars; a refusal names the tool.
TEST(GrammarCache, ToolCallGrammarsByTheirSpec) {
  const std::string dir = testing::SharedModel("tiny-qwen3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-qwen3");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  GrammarCache cache(tok.get());
  const ToolSchema weather{"get_weather",
                           R"({"type":"object","properties":{"city":{"type":"string"}}})"};
  const ToolCallGrammarSpec spec{ToolCallFormat::kHermes, {weather}, true};
  std::shared_ptr<CompiledGrammar> a, b, c, d, e;
  ASSERT_TRUE(cache.ToolCalls(spec, &a).ok());
  ASSERT_TRUE(cache.ToolCalls(spec, &b).ok());
  EXPECT_EQ(a, b);
  ASSERT_TRUE(cache.ToolCalls({ToolCallFormat::kHermes, {weather}, false}, &c).ok());
  ASSERT_TRUE(cache.ToolCalls({ToolCallFormat::kLlama3Json, {weather}, true}, &d).ok());
  ASSERT_TRUE(cache.ToolCalls({ToolCallFormat::kHermes, {{"get_weather", ""}}, true}, &e).ok());
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_NE(a, e);
  Matcher m(a);
  EXPECT_TRUE(m.Consume("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Oslo\"}}\n</tool_call>") &&
              m.CanEnd());
  std::shared_ptr<CompiledGrammar> none;
  const Status st =
      cache.ToolCalls({ToolCallFormat::kHermes,
                       {weather, {"dedupe", R"({"type":"array","uniqueItems":true})"}},
                       true},
                      &none);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("tools[1].function.parameters"), std::string::npos) << st.message();
  EXPECT_EQ(cache.stats().compiled, 5);
  EXPECT_EQ(cache.stats().hits, 1);
}

// The trie built on a thread of its own while a server loads (BuildTrieInBackground) is the one
// built in place: the same masks along a document, asked for before the build is known to be
// done (the first compile waits for it).
TEST(GrammarCache, ATrieBuiltInTheBackgroundGivesTheSameMasks) {
  const std::string dir = testing::SharedModel("tiny-llama32");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama32");
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  GrammarCache background(tok.get()), in_place(tok.get());
  background.BuildTrieInBackground();
  background.BuildTrieInBackground();  // a second call changes nothing
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}}})";
  std::shared_ptr<CompiledGrammar> a, b;
  ASSERT_TRUE(background.JsonSchema(schema, &a).ok());
  ASSERT_TRUE(in_place.JsonSchema(schema, &b).ok());
  EXPECT_EQ(a->trie().num_nodes(), b->trie().num_nodes());
  Matcher ma(a), mb(b);
  for (const std::string piece : {"{", "\"name", "\": \"", "x y", "\", ", "\"n\": ", "12", "}"}) {
    ASSERT_EQ(ma.Mask().words(), mb.Mask().words()) << "before '" << piece << "'";
    ASSERT_TRUE(ma.Consume(piece) && mb.Consume(piece)) << piece;
  }
  EXPECT_TRUE(ma.CanEnd() && mb.CanEnd());
}

}  // namespace
}  // namespace llmq
