// Grammar: what a structured output must be, as a context-free grammar over lexemes (issue 24).
// The JSON Schema compiler (engine/structured/json_schema.h) builds one; a Matcher
// (engine/structured/matcher.h) enforces it byte by byte and token by token.
//
// Two levels, as in LLGuidance: lexemes are regular expressions over bytes (Regex, matched whole:
// a string with its quotes, a number, `{` with the whitespace after it), and rules are
// alternatives of sequences of lexemes and rules, recursion allowed (nested objects, `$ref`).
//
// Contracts the Matcher relies on, checked by Validate (the rules) and CompileLexemes:
//   - no lexeme matches the empty string;
//   - lexemes are matched greedily: a lexeme ends only where the next byte cannot continue any
//     lexeme the grammar allows there (the longest match). A grammar must not need a lexeme to end
//     where it could go on: JSON always puts a delimiter between two values, and the compiler
//     folds whitespace into the delimiters' lexemes (`\{[ \t\n\r]{0,20}`), never two lexemes that
//     can both be all whitespace side by side;
//   - every rule reachable from the start derives at least one string (is productive): a prefix
//     the Matcher accepts can always be completed. Validate drops the alternatives that cannot be
//     completed and refuses a grammar whose start cannot.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/structured/regex.h"

namespace llmq {

class Grammar {
 public:
  struct Symbol {
    int32_t id = 0;
    bool lexeme = false;  // a lexeme's index, else a rule's
    bool operator==(const Symbol&) const = default;
  };
  struct Rule {
    std::string name;                               // for errors and Dump
    std::vector<std::vector<Symbol>> alternatives;  // an empty one derives the empty string
  };

  // A lexeme: a regex and how it is compiled (Regex::Options: kFull on raw bytes by default; a
  // JSON Schema `pattern` is kSearch, json_string and quoted). The same spec gives the same lexeme.
  struct LexemeSpec {
    std::string regex;
    Regex::Options options;
    // Instead of the regex: a JSON string whose text is none of these (KeyExceptAutomaton).
    std::vector<std::string> key_except;
    bool is_key_except = false;
    // Instead of the regex: a JSON string of min..max characters (StringLengthAutomaton); with
    // the regex too, one that also matches it (BoundedStringAutomaton).
    bool is_string_length = false;
    int64_t min_length = 0, max_length = -1;
    // Instead of the regex: a key whose text is none of `key_except` and which exactly the
    // patterns of `pattern_subset` match (KeyPatternAutomaton: patternProperties).
    bool is_key_pattern = false;
    std::vector<std::string> patterns;
    uint64_t pattern_subset = 0;
    // With the regex (integer texts): one whose value is also a multiple of `multiple_of` and
    // (> 0) not of `not_multiple_of` (MultipleAutomaton: multipleOf, not {multipleOf}).
    int64_t multiple_of = 0, not_multiple_of = 0;
  };
  Symbol Lexeme(std::string_view regex);  // kFull on raw bytes
  // What makes two specs the same lexeme (and their automata the same, state for state).
  static std::string SpecKey(const LexemeSpec& spec);
  Symbol Lexeme(const LexemeSpec& spec);
  // A lexeme matching exactly `text` (its bytes escaped for Regex).
  Symbol Literal(std::string_view text);
  // A new rule without alternatives yet (a recursive reference can be made before they are).
  Symbol NewRule(std::string name);
  void AddAlternative(Symbol rule, std::vector<Symbol> rhs);
  void set_start(Symbol rule) { start_ = rule.id; }

  // Checks the rules' contracts; drops the alternatives that can never be completed.
  // InvalidArgument names the rule at fault.
  [[nodiscard]] Status Validate();
  // Each lexeme's automaton, by index: Unsupported or InvalidArgument (an empty match, a regex
  // that cannot be compiled) names the lexeme.
  [[nodiscard]] Status CompileLexemes(std::vector<std::unique_ptr<LexemeAutomaton>>* out) const;

  const std::vector<LexemeSpec>& lexemes() const { return lexemes_; }
  const std::vector<Rule>& rules() const { return rules_; }
  int32_t start() const { return start_; }
  // A readable listing, one rule a line ("obj ::= L3 rule7 | ..."; lexemes by index).
  std::string Dump() const;

 private:
  std::vector<LexemeSpec> lexemes_;
  std::map<std::string, int32_t, std::less<>> lexeme_index_;
  std::vector<Rule> rules_;
  int32_t start_ = 0;
};

// `text` with every character Regex treats specially escaped.
std::string RegexEscape(std::string_view text);

// Makes `g` match `text` and up to 20 whitespace bytes before what it matched: the answer after a
// reasoning model's "</think>\n\n" (engine/text/reasoning.h), enforced lazily from the tag on.
// `text` must not be empty.
void StartAfter(std::string_view text, Grammar* g);

}  // namespace llmq
