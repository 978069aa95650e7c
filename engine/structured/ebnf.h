// The character-level grammar tree that GBNF (gbnf.h) and Lark (lark.h) grammars are parsed
// into, and its lowering into a Grammar (grammar.h) of lexemes and parser rules. Internal to
// engine/structured: the front ends' headers are the public ones.
//
// Exactly the language the tree defines, at the lexer's speed where that is safe. The tree is a
// grammar over characters with no lexer of its own; the Matcher parses lexemes (regular
// expressions matched whole and greedily, an Earley step each), so the lowering chooses them:
//   - a rule that references only such rules (not recursive) is one lexeme wherever a rule
//     references it (`string ::= "\"" [^"]* "\"" ws`), and so is a part of a rule that references
//     only such rules (`[0-9]+`, `"true" | "false"`) — llguidance's gbnf_to_lark makes the same
//     choice for rules;
//   - then it checks that greedy lexing loses no string: a lexeme A may end where some lexeme B
//     the lexer may run beside it (A itself included: both allowed from one position, by FOLLOW
//     sets over lexemes) could go on with a byte that could also begin what follows A. Where it
//     could (`num ::= [0-9]+` before `[0-9a]*`), B is taken apart (its parts become lexemes:
//     characters, or the rule's own structure) and the check runs again, down to lexemes of one
//     character, which never go on. So `("a" | "ab") "bc"` accepts both "abc" and "abbc".
// A reference to a rule whose language holds the empty string becomes optional (lexemes never
// match it).
//
// Bounded whatever the tree: terminal rules inline each other at most kMaxNesting deep (deeper
// ones are rules of the parser); the overlap check walks a bounded number of automaton states and
// lexemes, past which it takes apart more (never less exact). Every fixed point runs on a
// worklist, in time linear in what changes. The front ends bound what they build (kMaxRepeat,
// kMaxNesting, kMaxParts), refusing past them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/structured/grammar.h"

namespace llmq::ebnf {

constexpr int kMaxRepeat = 1000;  // a repetition's bounds
// Groups nested in a rule, and terminal rules inlined into one expression (past that, the part is
// taken apart instead): the compiler's recursion stays shallow whatever the grammar.
constexpr int kMaxNesting = 100;
// Literals, classes, references and groups in all: the compiler's work grows with them.
constexpr int kMaxParts = 50000;

// A part of a rule's body: characters are Unicode code points (matched as their UTF-8 bytes).
struct Node {
  enum Kind { kLiteral, kClass, kRef, kSeq, kAlt, kRepeat } kind = kSeq;
  std::u32string text;                                // kLiteral: code points
  std::vector<std::pair<char32_t, char32_t>> ranges;  // kClass: sorted, disjoint, no surrogates
  int rule = -1;                                      // kRef
  std::vector<Node> kids;                             // kSeq, kAlt; kRepeat: one
  int min = 0, max = -1;                              // kRepeat (-1: unbounded)
};

struct RuleDef {
  std::string name;
  Node body;
  bool defined = false;
  size_t first_use = 0;  // the offset of its first reference (for "not defined")
};

// Code point ranges sorted, merged and without the surrogates (which UTF-8 cannot carry); their
// complement (over the scalar values) when `negated`.
std::vector<std::pair<char32_t, char32_t>> Normalized(std::vector<std::pair<char32_t, char32_t>> r,
                                                      bool negated);

// "line L, column C" of byte offset `at` in `text` (columns count code points).
std::string LineColumn(std::string_view text, size_t at);

// A front end's syntax error at byte `at` of its text: each parser throws it and catches it in its
// own Compile function, which returns SyntaxStatus.
struct SyntaxError {
  size_t at;
  std::string message;
  bool unsupported = false;
};
// "line L, column C: message", as Unsupported or InvalidArgument.
Status SyntaxStatus(std::string_view text, const SyntaxError& e);

// The UTF-8 character at t[*i], advancing *i past it; false (nothing advanced) when the bytes
// there are not UTF-8.
bool NextUtf8(std::string_view t, size_t* i, char32_t* out);
// `digits` hex digits at t[*i] (advancing past those read) as a Unicode scalar value: the value,
// or -1 when a digit is missing, -2 when the value is no scalar value.
int64_t HexScalar(std::string_view t, size_t* i, int digits);

// Lowers `rules` (each defined; kRef names an index into them) into *out, whose start is
// rules[root]. Not OK only when a lexeme that cannot be taken apart does not compile.
[[nodiscard]] Status Lower(const std::vector<RuleDef>& rules, int root, Grammar* out);

}  // namespace llmq::ebnf
