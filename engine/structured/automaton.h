// LexemeAutomaton: what the Matcher (engine/structured/matcher.h) needs of a lexeme: a
// deterministic automaton over bytes whose states are ints, built lazily, in which every live
// state can still reach acceptance (so a refused byte is the only dead end). Regex is one; a
// JSON object key other than the listed names (KeyExceptAutomaton) is another.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace llmq {

class Regex;

class LexemeAutomaton {
 public:
  static constexpr int kDead = -1;
  virtual ~LexemeAutomaton() = default;
  virtual int Start() = 0;                        // kDead when nothing matches
  virtual int Next(int state, uint8_t byte) = 0;  // kDead when refused
  virtual bool Accepts(int state) const = 0;
};

// A JSON string, quotes included, whose text between the quotes is none of `names` (their JSON
// text, as JsonQuote writes it without the quotes): the key of a property a schema does not list.
// The string itself is checked by a Regex of JSON's string syntax run alongside a trie of the
// names; a name written with other escapes ("\u0061" for "a") is another text (documented).
class KeyExceptAutomaton : public LexemeAutomaton {
 public:
  explicit KeyExceptAutomaton(const std::vector<std::string>& names);
  ~KeyExceptAutomaton() override;
  int Start() override;
  int Next(int state, uint8_t byte) override;
  bool Accepts(int state) const override;

 private:
  static constexpr int kBefore = -2, kOut = -1;  // trie positions: before '"', left the trie
  int Intern(int trie, int str);
  std::vector<std::map<uint8_t, int>> children_;  // the names' trie; node 0 the root
  std::vector<char> end_;                         // a name ends at this node
  std::unique_ptr<Regex> string_;                 // "(?:char)*"
  std::vector<std::pair<int, int>> states_;       // (trie position, string_'s state)
  std::map<std::pair<int, int>, int> index_;
};

}  // namespace llmq
