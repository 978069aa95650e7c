// LexemeAutomaton: what the Matcher (engine/structured/matcher.h) needs of a lexeme: a
// deterministic automaton over bytes whose states are ints, built lazily, in which every live
// state can still reach acceptance (so a refused byte is the only dead end). Regex is one; a
// JSON object key other than the listed names (KeyExceptAutomaton) is another.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
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
  // A state that every string of at most `horizon` bytes leads where `state` leads (accepted or
  // not, refused or not): the key a mask is cached under, so that states that differ only beyond
  // the longest token share one (a string's count of characters far from its bounds).
  virtual int MaskClass(int state, int horizon) const {
    (void)horizon;
    return state;
  }
  // What `state` is, the same for every automaton built from the same spec: with the spec, the
  // key of a mask shared by all grammars over a vocabulary.
  virtual std::string StateKey(int state) const { return std::to_string(state); }
};

// A JSON string, quotes included, whose text between the quotes is none of `names` (their JSON
// text, as JsonQuote writes it without the quotes): the key of a property a schema does not list.
// The string itself is checked by a Regex of JSON's string syntax run alongside a trie of the
// names, with only the escapes JSON requires, as JsonQuote and Python's json.dumps write them
// (\" \\ \b \f \n \r \t, \u00XX for the other controls): each name has one spelling, so a
// listed name cannot pass for another written with other escapes ("\u0061" for "a", "\/").
class KeyExceptAutomaton : public LexemeAutomaton {
 public:
  explicit KeyExceptAutomaton(const std::vector<std::string>& names);
  ~KeyExceptAutomaton() override;
  int Start() override;
  int Next(int state, uint8_t byte) override;
  bool Accepts(int state) const override;
  std::string StateKey(int state) const override;

  // The regex of JSON's string syntax the key is checked with (its escapes the required ones):
  // every key of every grammar over a vocabulary shares its masks (CompiledGrammar::SharedFor).
  static const char* const kStringRegex;
  // Masks derived from a plain string's (CompiledGrammar::SharedFor): this key automaton differs
  // from the plain string only where a listed name is closed. The state of the same string
  // position with no name left to avoid (a plain string's behaviour: its mask is the string's);
  // the string automaton's StateKey there; and the byte strings that, from `state`, close the
  // string on a listed name (the only tokens the plain string allows and this refuses whole).
  int WithoutNames(int state);
  std::string StringStateKey(int state) const;
  std::vector<std::string> ClosingsOnNames(int state) const;

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

namespace llmq {

// A JSON string, quotes included, of `min` to `max` characters (max < 0: unbounded), characters
// counted as validators count them: code points, an escape one, a surrogate pair written as two
// \u escapes one (Ajv's ucs2length). The text is JSON's: any well-formed UTF-8 character but '"',
// '\' and controls, or an escape; a surrogate escape only as a high one followed by its low one
// (I-JSON, RFC 7493: strict parsers such as nlohmann::json and serde_json refuse a lone surrogate,
// so no document a grammar allowed fails to parse there). Counting is arithmetic, not an unrolled
// automaton, so maxLength 100000 costs what maxLength 10 does.
class StringLengthAutomaton : public LexemeAutomaton {
 public:
  StringLengthAutomaton(int64_t min, int64_t max) : min_(min), max_(max) {}
  int Start() override { return Pack(0, kBefore); }
  int Next(int state, uint8_t byte) override;
  bool Accepts(int state) const override { return state >= 0 && Sub(state) == kClosed; }
  // The count matters only near the bounds: beyond `horizon` characters from max (or with no
  // max), a count at or past min is min's, one more than `horizon` short of min is 0's.
  int MaskClass(int state, int horizon) const override;

  // Masks derived from the unbounded string's (CompiledGrammar::SharedFor): a byte does to the
  // count what it does in any string, and the bounds only refuse a character past max and a
  // closing quote short of min.
  int64_t min_length() const { return min_; }
  int64_t max_length() const { return max_; }  // -1: none
  static bool BetweenQuotes(int state) {
    return state >= 0 && Sub(state) != kBefore && Sub(state) != kClosed;
  }
  static int64_t CountOf(int state) { return Count(state); }
  static int AtCount(int state, int64_t count) { return Pack(count, Sub(state)); }

 private:
  // Where in a character the text is: before the opening quote, between characters, after '\',
  // after "\u" and k hex digits, inside a UTF-8 sequence (the bytes left and the range the next
  // must be in), after the closing quote. After a high surrogate's escape (\uD800-\uDBFF,
  // counted), an escape is counted only once it is known not to be the low surrogate
  // (\uDC00-\uDFFF) completing the pair.
  enum Sub : int {
    kBefore,
    kBetween,
    kEscape,
    kHex0,
    kHex1,
    kHex2,
    kHex3,
    kHexD1,     // "\uD": a surrogate or not, by the next digit
    kHighHex2,  // "\uD8".."\uDB": a high surrogate
    kHighHex3,
    kAfterHigh,        // between characters, right after a high surrogate
    kEscapeAfterHigh,  // its '\', not counted yet
    kHexAfterHigh0,    // "\u"
    kHexAfterHigh1,    // "\uD"
    kCont1,            // one continuation byte left, 80-BF
    kCont2,            // two left, 80-BF
    kCont2E0,          // after E0: A0-BF, then one
    kCont2ED,          // after ED: 80-9F, then one
    kCont3,            // three left, 80-BF
    kCont3F0,          // after F0: 90-BF, then two
    kCont3F4,          // after F4: 80-8F, then two
    kClosed,
    kSubs
  };
  static int Pack(int64_t count, int sub) { return static_cast<int>(count * kSubs + sub); }
  static int64_t Count(int state) { return state / kSubs; }
  static int Sub(int state) { return state % kSubs; }
  int64_t min_, max_;
};

}  // namespace llmq
