// LexemeAutomaton: what the Matcher (engine/structured/matcher.h) needs of a lexeme: a
// deterministic automaton over bytes whose states are ints, built lazily, in which every live
// state can still reach acceptance (so a refused byte is the only dead end). Regex is one; a
// JSON object key other than the listed names (KeyExceptAutomaton) is another.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

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

// The key of a property that `patternProperties` governs: a JSON string (of the required escapes
// only, as KeyExceptAutomaton) whose text is none of `names` (their JSON text, as there) and whose
// decoded value is matched by exactly the patterns in `subset` (bit i: patterns[i]; JSON Schema's
// `pattern`: anywhere unless anchored, Regex kSearch in JSON-string mode) and by no other. A key
// several patterns match takes all their schemas, so each set of patterns a key can match exactly
// is a lexeme of its own (subset 0: a key no pattern matches, additionalProperties' own).
//
// Two parts. The product of the string's automaton and every pattern's, built whole by Build
// (breadth first; its states numbered in the order found, so one spec gives the same states):
// from each product state, whether a key of `subset` can still be closed and how many ways (a
// count capped past the names). And the names' trie, walked beside it: a state is (trie node,
// product state), and where the key is still on the trie it is live only if some way to close it
// is not a listed name (more ways than names below the node, else the few ways enumerated). A
// product the names never multiply, so 100 names cost what one does. Pairs are found as Next meets
// them (not thread-safe, as Regex: the Matcher steps lexemes under its grammar's exclusive lock).
class KeyPatternAutomaton : public LexemeAutomaton {
 public:
  static constexpr int kMaxPatterns = 63;   // a subset is a bit set of 63 bits
  static constexpr int kMaxStates = 20000;  // states of the product, before pruning
  // InvalidArgument or Unsupported from a pattern (naming it by index and its offset), or
  // Unsupported past kMaxPatterns patterns or kMaxStates states. The product of one (names,
  // patterns) is built once for all its subsets (the last few are kept).
  [[nodiscard]] static Status Build(const std::vector<std::string>& names,
                                    const std::vector<std::string>& patterns, uint64_t subset,
                                    std::unique_ptr<KeyPatternAutomaton>* out);
  ~KeyPatternAutomaton() override;
  // Every set of patterns that some key is matched by exactly, ascending, the same whatever
  // `subset` was built: the names' own sets too (a subset whose keys are all names has a dead
  // Start).
  const std::vector<uint64_t>& subsets() const;

  int Start() override { return start_; }
  int Next(int state, uint8_t byte) override;
  bool Accepts(int state) const override;
  std::string StateKey(int state) const override;

  struct Product;  // automaton.cpp

 private:
  KeyPatternAutomaton() = default;
  int Intern(int trie, int q);       // kDead where no key of the subset can be closed
  bool LiveOnTrie(int trie, int q);  // some way to close from q is not a name below `trie`
  std::shared_ptr<const Product> product_;
  std::vector<char> live_;      // by product state: a key of the subset closes from there
  std::vector<uint64_t> ways_;  // by product state: ways to close (capped: names + 1)
  std::vector<std::pair<int, int>> states_;  // (trie node or kOff, product state)
  std::map<std::pair<int, int>, int> index_;
  int start_ = kDead;
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

// A JSON string of `min` to `max` characters (max < 0: unbounded; counted as
// StringLengthAutomaton counts them) that a Regex also matches: a `pattern` or a `format` beside
// minLength/maxLength. Built by Build: the product of the regex's automaton and the position in a
// character (without the count), breadth first, and for each product state the numbers of
// characters that can still close a string the regex accepts (a bit each up to the bound: max,
// or min where there is no max, the last bit then "min or more"), layer by layer backwards from
// the closing states. A state is (product state, count), found as Next meets it (not
// thread-safe, as Regex), live exactly when a count within the bounds can still be reached.
class BoundedStringAutomaton : public LexemeAutomaton {
 public:
  static constexpr int kMaxStates = 20000;               // product states
  static constexpr int64_t kMaxBits = int64_t{1} << 25;  // product states x (bound + 1)
  // `re` reads the whole string, quotes included (a Grammar lexeme's Regex); min <= max where
  // max >= 0, and min > 0 or max >= 0. Unsupported past kMaxStates or kMaxBits. A `key` (what
  // makes the regex and the bounds: Grammar::SpecKey) keeps the tables for the next Build of
  // the same key (the last few): a schema's compiler checks a lexeme that its grammar builds.
  [[nodiscard]] static Status Build(Regex* re, int64_t min, int64_t max,
                                    std::unique_ptr<BoundedStringAutomaton>* out,
                                    const std::string& key = "");
  // Whether every string `re` matches has at least `min` characters (then minLength adds
  // nothing to it): the shortest found breadth first by characters, within kMaxStates states
  // (false past them).
  static bool AllAtLeast(Regex* re, int64_t min);
  struct Table;  // automaton.cpp
  int Start() override { return start_; }
  int Next(int state, uint8_t byte) override;
  bool Accepts(int state) const override;
  std::string StateKey(int state) const override;

 private:
  BoundedStringAutomaton() = default;
  int Intern(int32_t node, int64_t count);  // kDead where no count within the bounds is reached
  bool Reaches(int32_t node, int64_t lo, int64_t hi) const;  // a closing count in [lo, hi]
  std::shared_ptr<const Table> t_;
  int64_t min_ = 0, max_ = -1, bound_ = 0;
  std::vector<std::pair<int32_t, int64_t>> states_;
  std::map<std::pair<int32_t, int64_t>, int> index_;
  int start_ = kDead;
};

}  // namespace llmq

namespace llmq {

// An integer text a Regex (`range`, on raw bytes: IntegerRangeRegex's texts) matches whose value
// is a multiple of `divisor` (JSON Schema's multipleOf with an integer divisor): the regex's
// state beside the value's residue, read digit by digit. Built whole at once over the bytes an
// integer is written with ('-', digits), with the states from which no multiple can still close
// dropped (no live prefix without a completion). The range must keep |value| below 2^53, where a
// validator's float division x / divisor is an integer exactly when the divisor divides x.
class MultipleAutomaton : public LexemeAutomaton {
 public:
  static constexpr int64_t kMaxDivisor = 1000000;
  static constexpr int kMaxStates = 200000;
  // Unsupported past kMaxDivisor (of their least common multiple) or kMaxStates states.
  // `not_divisor` > 0: also one it does not divide (not {multipleOf}; `divisor` 1: only that).
  [[nodiscard]] static Status Build(Regex* range, int64_t divisor, int64_t not_divisor,
                                    std::unique_ptr<MultipleAutomaton>* out);
  int Start() override { return start_; }
  int Next(int state, uint8_t byte) override;
  bool Accepts(int state) const override { return state >= 0 && accepts_[size_t(state)]; }
  std::string StateKey(int state) const override;

 private:
  MultipleAutomaton() = default;
  std::vector<std::pair<int32_t, int64_t>> states_;  // (the regex's state, the residue)
  std::vector<std::array<int32_t, 11>> next_;        // by '-', '0'..'9': kDead or a state
  std::vector<char> accepts_;
  int start_ = kDead;
};

}  // namespace llmq
