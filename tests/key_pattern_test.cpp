// KeyPatternAutomaton (engine/structured/automaton.h): the keys of patternProperties, against a
// brute force over every key of a small alphabet: a JSON string of the required escapes only,
// decoded, matched by std::regex (ECMAScript) pattern by pattern, and not a listed name. Every
// automaton of every subset accepts exactly the keys of that subset, and a prefix is dead exactly
// when no such key extends it (within the lengths enumerated).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/automaton.h"

namespace llmq {
namespace {

// The decoded text of a key (quotes included) written with the escapes JSON requires only, or
// nullopt when it is not one.
std::optional<std::string> Decode(const std::string& key) {
  if (key.size() < 2 || key.front() != '"' || key.back() != '"') return std::nullopt;
  std::string text;
  for (size_t i = 1; i + 1 < key.size(); ++i) {
    const char c = key[i];
    if (c == '"') return std::nullopt;
    if (c != '\\') {
      text += c;
      continue;
    }
    if (++i + 1 >= key.size()) return std::nullopt;  // '\' then the closing quote
    switch (key[i]) {
      case '"':
        text += '"';
        break;
      case '\\':
        text += '\\';
        break;
      case 'b':
        text += '\b';
        break;
      default:
        return std::nullopt;
    }
  }
  return text;
}

TEST(KeyPatternAutomatonTest, EveryKeyOfASmallAlphabetAgainstBruteForce) {
  const std::vector<std::string> patterns = {"^a", "b$", "^(a|ab)$", "1", "^\\\\"};
  // JSON text of the names: a, ab, b", 1a, \ (the last four also matched by patterns).
  const std::vector<std::string> names = {"a", "ab", "b\\\"", "1a", "\\\\"};
  const std::set<std::string> name_texts = {"a", "ab", "b\"", "1a", "\\"};
  std::vector<std::regex> re;
  for (const std::string& p : patterns) re.emplace_back(p, std::regex::ECMAScript);
  const std::string alphabet = "ab1\"\\";
  constexpr size_t kMax = 7;
  // Every string of the alphabet up to kMax bytes (all start with '"': nothing else is a key).
  std::vector<std::string> all = {"\""};
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].size() < kMax)
      for (const char c : alphabet) all.push_back(all[i] + c);
  // The keys: the subset each is matched by exactly.
  std::map<std::string, uint64_t> keys;
  std::set<uint64_t> seen;
  for (const std::string& s : all) {
    const std::optional<std::string> text = Decode(s);
    if (!text.has_value() || name_texts.count(*text)) continue;
    uint64_t bits = 0;
    for (size_t i = 0; i < re.size(); ++i)
      if (std::regex_search(*text, re[i])) bits |= uint64_t{1} << i;
    keys[s] = bits;
    seen.insert(bits);
  }
  std::unique_ptr<KeyPatternAutomaton> probe;
  ASSERT_TRUE(KeyPatternAutomaton::Build(names, patterns, 0, &probe).ok());
  const std::set<uint64_t> subsets(probe->subsets().begin(), probe->subsets().end());
  for (const uint64_t s : seen) EXPECT_TRUE(subsets.count(s)) << s;
  EXPECT_TRUE(subsets.count(0b101) && subsets.count(0b111));
  int live_starts = 0;
  for (uint64_t subset = 0; subset < (uint64_t{1} << patterns.size()); ++subset) {
    std::unique_ptr<KeyPatternAutomaton> a;
    ASSERT_TRUE(KeyPatternAutomaton::Build(names, patterns, subset, &a).ok());
    // "a", "ab" are the only keys of {^a, ^(a|ab)$} and {^a, b$, ^(a|ab)$}: names, so none.
    if (subset == 0b101 || subset == 0b111) EXPECT_EQ(a->Start(), LexemeAutomaton::kDead);
    live_starts += a->Start() != LexemeAutomaton::kDead;
    // subsets() counts the names' too: "a" and "ab" make 0b101 and 0b111 there.
    if (a->Start() != LexemeAutomaton::kDead) EXPECT_TRUE(subsets.count(subset)) << subset;
    // The prefixes of the subset's keys (of at most kMax bytes).
    std::set<std::string> extended;
    for (const auto& [k, bits] : keys)
      if (bits == subset)
        for (size_t n = 0; n <= k.size(); ++n) extended.insert(k.substr(0, n));
    for (const std::string& s : all) {
      int state = a->Start();
      for (const char c : s) state = a->Next(state, static_cast<uint8_t>(c));
      const auto it = keys.find(s);
      const bool want = it != keys.end() && it->second == subset;
      EXPECT_EQ(state != LexemeAutomaton::kDead && a->Accepts(state), want)
          << "subset " << subset << " key " << s;
      // Dead: no key of the subset extends it. Live (short prefixes): one does within kMax.
      if (state == LexemeAutomaton::kDead)
        EXPECT_FALSE(extended.count(s)) << "subset " << subset << " prefix " << s;
      else if (s.size() <= 3)
        EXPECT_TRUE(extended.count(s)) << "subset " << subset << " prefix " << s;
    }
  }
  EXPECT_GE(live_starts, 8);
}

TEST(KeyPatternAutomatonTest, ManyNamesCostWhatOneDoesAndBadPatternsAreNamed) {
  // A hundred listed names under one pattern: the product is the pattern's, the names a trie.
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back("core/block-" + std::to_string(i));
  std::unique_ptr<KeyPatternAutomaton> a;
  ASSERT_TRUE(KeyPatternAutomaton::Build(names, {"^[a-z][a-z0-9-]*/[a-z][a-z0-9-]*$"}, 1, &a).ok());
  const auto walk = [&](const std::string& s) {
    int q = a->Start();
    for (const char c : s) q = a->Next(q, static_cast<uint8_t>(c));
    return q;
  };
  EXPECT_TRUE(a->Accepts(walk("\"core/block-100\"")));
  EXPECT_TRUE(a->Accepts(walk("\"core/block-1x\"")));
  EXPECT_EQ(walk("\"core/block-42\""), LexemeAutomaton::kDead);  // listed
  EXPECT_EQ(walk("\"Core/x\""), LexemeAutomaton::kDead);         // not the pattern
  std::unique_ptr<KeyPatternAutomaton> bad;
  const Status st = KeyPatternAutomaton::Build({}, {"a", "(?<=x)"}, 0, &bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("pattern 1"), std::string::npos) << st.message();
  std::vector<std::string> many(KeyPatternAutomaton::kMaxPatterns + 1, "a");
  EXPECT_EQ(KeyPatternAutomaton::Build({}, many, 0, &bad).code(), Status::Code::kUnsupported);
}

}  // namespace
}  // namespace llmq
