// Regex: a regular expression compiled to a byte-level automaton that a structured-output matcher
// walks one byte at a time (issue 24): JSON Schema's `pattern` and the formats' expressions, and
// the JSON lexemes (strings, numbers) the grammar is made of.
//
// The syntax is ECMAScript's (what JSON Schema specifies), the subset real schemas use:
// alternation, groups ((...), (?:...), (?<name>...)), the quantifiers * + ? {n} {n,} {n,m} (lazy
// forms accepted: they match the same strings), classes [...] with ranges and negation, the
// escapes \d \D \w \W \s \S \b-less literals (\. \\ \/ \- \n \r \t \f \v \0 \xHH \uHHHH
// \u{...}), `.` (any character but a line terminator), and ^ / $ (without the m flag: the start
// and the end of the text) anywhere. Anything else (backreferences, lookaround, \b, \p{..}) is
// refused with Unsupported naming it and its offset: never relaxed.
//
// Characters are Unicode code points matched as their UTF-8 bytes: a class becomes byte-sequence
// alternatives (as RE2 and Rust's regex-syntax do), so the automaton never accepts a byte string
// that is not UTF-8 and `.` matches "é" as one character.
//
// Matching is lazy determinization of a Thompson NFA: a DFA state is the set of NFA states a
// prefix can be in (only states from which a match is still reachable), built the first time a
// byte leads to it and cached, so a state is "dead" exactly when no continuation can match.
// ^ and $ inside the expression are assertion edges: ^ followed only in the closure before the
// text's first byte, $ only where the text ends (acceptance; quoted: before the closing quote);
// a state is kept where a match is reachable reading bytes and then only $ edges.
// Counted repetitions are expanded (each bound at most kMaxRepeat, the whole at most
// kMaxNfaStates: a pattern past them is refused).
//
// JSON-string mode (Options::json_string): the pattern applies to the decoded value of a JSON
// string (JSON Schema's `pattern`) but the automaton reads the raw text between the quotes. Each
// character the pattern matches is matched in its JSON-encoded forms: a code point >= 0x20 other
// than '"' and '\' as its UTF-8 bytes, '"' as \", '\' as \\, '/' as / or \/, a control
// character (< 0x20) as its short escape where one exists (\b \f \n \r \t) and as \u00XX (hex
// digits in either case). Nothing else: no raw control character, no other \uXXXX form (so a
// surrogate pair never), which every text of Python's json.dumps(ensure_ascii=False) fits. The
// quotes are not part of the match; kSearch's unanchored ends match any encoded characters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/structured/automaton.h"

namespace llmq {

class Regex : public LexemeAutomaton {
 public:
  // kSearch: JSON Schema's `pattern`, which matches anywhere in the string unless anchored (so
  // "[0-9]" accepts "a1b"); kFull: the whole string must match (the grammar's lexemes).
  enum class Mode { kSearch, kFull };
  // InvalidArgument for a syntax error, Unsupported for what is not enforced; both name the
  // construct and its byte offset in `pattern`.
  struct Options {
    Mode mode = Mode::kFull;
    bool json_string = false;  // match the JSON-encoded body of a string (see above)
    bool quoted = false;       // the automaton reads '"', the match, '"' (a whole JSON string)
  };
  static Status Compile(std::string_view pattern, const Options& options,
                        std::unique_ptr<Regex>* out);
  // Compile(pattern, {mode}, out): the pattern on raw UTF-8 text.
  static Status Compile(std::string_view pattern, Mode mode, std::unique_ptr<Regex>* out);
  ~Regex() override;
  // LexemeAutomaton: start(), Step(), IsAccepting().
  int Start() override { return start_; }
  int Next(int state, uint8_t byte) override { return Step(state, byte); }
  bool Accepts(int state) const override { return IsAccepting(state); }
  std::string StateKey(int state) const override;  // its NFA states

  static constexpr int kDead = -1;  // no continuation can match
  static constexpr int kMaxRepeat = 1000;
  static constexpr int kMaxNfaStates = 200000;  // nested repetitions multiply
  int start() const { return start_; }
  // The state after `byte` from `state` (kDead when refused). Lazily built, cached: not
  // thread-safe (one Regex per matcher thread, or built ahead).
  int Step(int state, uint8_t byte);
  bool IsAccepting(int state) const;
  // Whether the whole of `text` matches.
  bool Matches(std::string_view text);
  // Whether `text` can still be continued into a match (every byte accepted).
  bool IsViablePrefix(std::string_view text);
  size_t num_nfa_states() const;
  size_t num_dfa_states() const { return dfa_.size(); }

 private:
  Regex();
  struct Nfa;
  struct DState {
    std::vector<int32_t> set;  // sorted NFA states (closed under epsilon, all productive)
    bool at_start = false;     // before the text's first byte (^ holds)
    bool can_end = false;      // the text may end here ($ holds)
    bool accepting = false;
    int32_t next[256];  // kUnknown until computed, kDead, or a state
  };
  int Intern(std::vector<int32_t> set, bool at_start, bool can_end);
  std::unique_ptr<Nfa> nfa_;
  std::vector<std::unique_ptr<DState>> dfa_;
  std::map<std::vector<int32_t>, int> index_;  // set -> DFA state (but the one at the start)
  int start_ = kDead;
};

}  // namespace llmq
