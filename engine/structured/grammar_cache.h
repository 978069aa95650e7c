// GrammarCache: the compiled grammars of one model's vocabulary, by schema (issue 24): a job of
// 100,000 requests with one schema compiles it once, whether at ingest (to refuse what cannot be
// enforced before a night is spent) or when its requests are fed to the engine. Refusals are
// kept too, so a file of 100,000 lines with one unsupported schema is refused 100,000 times for
// the cost of one compile. The vocabulary's token trie is built on first use.
//
// Bounded: past kMaxEntries schemas the oldest entry is dropped (requests hold their grammar
// themselves; a dropped one is compiled again when asked for). Thread-safe: ingest validates
// lines on several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "engine/structured/tool_calls.h"
#include "engine/text/tokenizer.h"

namespace llmq {

class GrammarCache {
 public:
  static constexpr size_t kMaxEntries = 1024;
  // `tok` outlives the cache.
  explicit GrammarCache(const Tokenizer* tok) : tok_(tok) {}
  // Starts building the vocabulary's token trie on a thread of its own (the first compile waits
  // for it): a server calls it while its weights load, so that the first schema of the night
  // does not wait 0.1 s (a 128k vocabulary) for it. Only before any compile.
  void BuildTrieInBackground();

  // Each grammar may be asked for `after` a text ("" = none): it then begins with that text and up
  // to 20 whitespace bytes (StartAfter): the answer after a reasoning model's "</think>", enforced
  // lazily from the tag on (engine/text/reasoning.h). Cached apart from the plain one.
  //
  // The grammar of a JSON Schema given as its JSON text (key order kept: properties are
  // generated in that order). Not OK as CompileJsonSchema says (`json_schema: keyword "K" at
  // "/ptr": why`), or InvalidArgument when the text is not JSON.
  [[nodiscard]] Status JsonSchema(const std::string& schema_json,
                                  std::shared_ptr<CompiledGrammar>* out,
                                  const std::string& after = "");
  // The text the regular expression `pattern` matches whole (ECMAScript syntax, engine/structured/
  // regex.h: vLLM's structured_outputs regex and choice). Not OK as the regex compiler says
  // (naming the construct and its offset), or when it matches the empty string.
  [[nodiscard]] Status MatchRegex(const std::string& pattern, std::shared_ptr<CompiledGrammar>* out,
                                  const std::string& after = "");
  // The language of a GBNF or a Lark grammar (engine/structured/gbnf.h, lark.h: vLLM's
  // structured_outputs grammar; Lark where no line holds `::=`, as vLLM tells them apart). Not OK
  // as CompileGbnf / CompileLark say (naming line and column).
  [[nodiscard]] Status Ebnf(const std::string& text, std::shared_ptr<CompiledGrammar>* out,
                            const std::string& after = "");
  // Any JSON object (response_format json_object).
  [[nodiscard]] Status JsonObject(std::shared_ptr<CompiledGrammar>* out,
                                  const std::string& after = "");
  // The calls of a message (tool_choice required, a named function, or auto's lazy grammar:
  // tool_calls.h), by the format, parallel_tool_calls and the tools' names and parameters: a job
  // whose requests declare the same tools compiles them once. Not OK as BuildToolCallGrammar says.
  [[nodiscard]] Status ToolCalls(const ToolCallGrammarSpec& spec,
                                 std::shared_ptr<CompiledGrammar>* out,
                                 const std::string& after = "");

  struct Stats {
    int64_t compiled = 0;  // schemas compiled (refusals included)
    int64_t refused = 0;
    int64_t hits = 0;            // answered from the cache
    double compile_seconds = 0;  // spent compiling, in all
    double max_compile_seconds = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    Status status;
    std::shared_ptr<CompiledGrammar> grammar;
  };
  // Compiles `g` (the schema's Status so far in *e) and counts it. Holds mu_.
  void Compile(Grammar g, Entry* e, std::chrono::steady_clock::time_point start);
  // map_'s entry for `key` (`after` included), built by `build` (a grammar, or why not) and then
  // StartAfter(`after`) when absent. Holds mu_.
  const Entry& Find(const std::string& key, const std::string& after,
                    const std::function<Status(Grammar*)>& build);
  const std::shared_ptr<const TokenTrie>& Trie();

  const Tokenizer* tok_;
  mutable std::mutex mu_;
  std::shared_ptr<const TokenTrie> trie_;
  std::future<std::shared_ptr<const TokenTrie>> building_;  // BuildTrieInBackground's
  // By the schema's text; tool calls by "tools\n" and their spec; json_object by "object\n";
  // regexes by "regex\n" and the pattern; GBNF and Lark grammars by "ebnf\n" and the text; any of
  // them after a text with "after <length>:<text>\n" before (no JSON text begins so).
  std::unordered_map<std::string, Entry> map_;
  std::deque<std::string> order_;  // keys, oldest first
  Stats stats_;
};

}  // namespace llmq
