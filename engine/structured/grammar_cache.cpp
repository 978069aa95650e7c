#include "engine/structured/grammar_cache.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/structured/json_schema.h"

namespace llmq {

const std::shared_ptr<const TokenTrie>& GrammarCache::Trie() {
  if (!trie_) trie_ = std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok_));
  return trie_;
}

const GrammarCache::Entry& GrammarCache::Lookup(const std::string& key, bool object) {
  if (auto it = map_.find(key); it != map_.end()) {
    ++stats_.hits;
    return it->second;
  }
  const auto start = std::chrono::steady_clock::now();
  Entry e;
  Grammar g;
  if (object) {
    g = JsonObjectGrammar();
  } else {
    const auto schema = nlohmann::ordered_json::parse(key.begin() + 1, key.end(), nullptr,
                                                      /*allow_exceptions=*/false);
    e.status = schema.is_discarded()
                   ? Status::InvalidArgument("json_schema: the schema is not JSON")
                   : CompileJsonSchema(schema, &g);
  }
  if (e.status.ok()) e.status = CompiledGrammar::Compile(std::move(g), Trie(), &e.grammar);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.compiled;
  stats_.refused += !e.status.ok();
  stats_.compile_seconds += secs;
  stats_.max_compile_seconds = std::max(stats_.max_compile_seconds, secs);
  if (map_.size() >= kMaxEntries) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  return map_.emplace(key, std::move(e)).first->second;
}

Status GrammarCache::JsonSchema(const std::string& schema_json,
                                std::shared_ptr<CompiledGrammar>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = Lookup("s" + schema_json, false);  // keys: the kind, then the schema's text
  *out = e.grammar;
  return e.status;
}

Status GrammarCache::JsonObject(std::shared_ptr<CompiledGrammar>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = Lookup("o", true);
  *out = e.grammar;
  return e.status;
}

GrammarCache::Stats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace llmq
