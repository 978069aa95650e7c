#include "engine/structured/grammar_cache.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/lark.h"
#include "engine/structured/regex.h"

namespace llmq {

void GrammarCache::BuildTrieInBackground() {
  std::lock_guard<std::mutex> lock(mu_);
  if (trie_ || building_.valid()) return;
  building_ = std::async(std::launch::async, [tok = tok_] {
    return std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok));
  });
}

const std::shared_ptr<const TokenTrie>& GrammarCache::Trie() {
  if (!trie_)
    trie_ = building_.valid() ? building_.get()
                              : std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok_));
  return trie_;
}

void GrammarCache::Compile(Grammar g, Entry* e, std::chrono::steady_clock::time_point start) {
  if (e->status.ok()) e->status = CompiledGrammar::Compile(std::move(g), Trie(), &e->grammar);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.compiled;
  stats_.refused += !e->status.ok();
  stats_.compile_seconds += secs;
  stats_.max_compile_seconds = std::max(stats_.max_compile_seconds, secs);
}

namespace {

std::string KeyAfter(const std::string& after, const std::string& key) {
  return after.empty() ? key : "after " + std::to_string(after.size()) + ":" + after + "\n" + key;
}

}  // namespace

const GrammarCache::Entry& GrammarCache::Find(const std::string& plain_key,
                                              const std::string& after,
                                              const std::function<Status(Grammar*)>& build) {
  const std::string key = KeyAfter(after, plain_key);
  auto it = map_.find(key);
  if (it != map_.end()) {
    ++stats_.hits;
    return it->second;
  }
  const auto start = std::chrono::steady_clock::now();
  Entry e;
  Grammar g;
  e.status = build(&g);
  if (e.status.ok() && !after.empty()) StartAfter(after, &g);
  Compile(std::move(g), &e, start);
  if (map_.size() >= kMaxEntries) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  return map_.emplace(key, std::move(e)).first->second;
}

Status GrammarCache::JsonSchema(const std::string& schema_json,
                                std::shared_ptr<CompiledGrammar>* out, const std::string& after) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = Find(schema_json, after, [&schema_json](Grammar* g) {
    const auto schema = nlohmann::ordered_json::parse(schema_json, nullptr, false);
    return schema.is_discarded() ? Status::InvalidArgument("json_schema: the schema is not JSON")
                                 : CompileJsonSchema(schema, g);
  });
  *out = e.grammar;
  return e.status;
}

Status GrammarCache::ToolCalls(const ToolCallGrammarSpec& spec,
                               std::shared_ptr<CompiledGrammar>* out, const std::string& after) {
  // Lengths before the texts: no two specs give one key.
  std::string key = std::string("tools\n") + ToolCallFormatName(spec.format) +
                    (spec.parallel ? " parallel" : " one");
  for (const ToolSchema& t : spec.tools)
    key += "\n" + std::to_string(t.name.size()) + ":" + t.name +
           std::to_string(t.parameters.size()) + ":" + t.parameters;
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = Find(key, after, [&spec](Grammar* g) { return BuildToolCallGrammar(spec, g); });
  *out = e.grammar;
  return e.status;
}

Status GrammarCache::JsonObject(std::shared_ptr<CompiledGrammar>* out, const std::string& after) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = Find("object\n", after, [](Grammar* g) {
    *g = JsonObjectGrammar();
    return Status::Ok();
  });
  *out = e.grammar;
  return e.status;
}

Status GrammarCache::MatchRegex(const std::string& pattern, std::shared_ptr<CompiledGrammar>* out,
                                const std::string& after) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = Find("regex\n" + pattern, after, [&pattern](Grammar* g) {
    // Checked here, so that the refusal speaks of the expression (not of a grammar's lexeme).
    std::unique_ptr<Regex> re;
    LLMQ_RETURN_IF_ERROR(Regex::Compile(pattern, Regex::Mode::kFull, &re));
    if (re->start() == Regex::kDead)
      return Status::InvalidArgument("the regular expression matches nothing");
    if (re->IsAccepting(re->start()))
      return Status::InvalidArgument("the regular expression matches the empty string");
    const Grammar::Symbol start = g->NewRule("regex");
    g->AddAlternative(start, {g->Lexeme(pattern)});
    g->set_start(start);
    return Status::Ok();
  });
  *out = e.grammar;
  return e.status;
}

Status GrammarCache::Ebnf(const std::string& text, std::shared_ptr<CompiledGrammar>* out,
                          const std::string& after) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e =
      Find("ebnf\n" + text, after, [&text](Grammar* g) { return CompileGrammarText(text, g); });
  *out = e.grammar;
  return e.status;
}

GrammarCache::Stats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace llmq
