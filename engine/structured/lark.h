// Lark grammars: the syntax of the Lark parsing toolkit (lark-parser), as LLGuidance reads it and
// as vLLM takes it in `structured_outputs.grammar` / `guided_grammar` (its guidance backend reads
// Lark; its xgrammar backend converts a grammar that has no `::=` from Lark to EBNF). Compiled to
// the same tree as GBNF (ebnf.h), so the language is enforced exactly, token by token.
//
// The syntax (https://lark-parser.readthedocs.io/en/latest/grammar.html):
//   start: ...                 the output is rule `start`
//   name: a b | c              a rule (lowercase name; `?name`, `!name` and a priority `name.2`
//                              shape Lark's tree, not the language: accepted); an alternative may
//                              begin the next line with `|`
//   NAME: ...                  a terminal (uppercase): strings, expressions and other terminals,
//                              never rules
//   "text"  "text"i            a string (Python's escapes); i: any case
//   "a".."z"                   a range of characters
//   /regex/flags               Python's `re` syntax on str (below); flags i, s, m (m changes
//                              nothing without anchors), u
//   ( ... )  [ ... ]  x?  x*  x+  x ~ n  x ~ n..m  and LLGuidance's x{n} x{n,} x{,m} x{n,m}
//   -> alias                   ignored (it names a tree node)
//   // comment, # comment
//   %ignore X                  X (terminals, strings, expressions) may come before any terminal
//                              and at the end, as Lark skips it between tokens
//   %import common.NAME [-> ALIAS]   %import common (A, B, ...)
//                              Lark's common.lark terminals (DIGIT, HEXDIGIT, INT, SIGNED_INT,
//                              DECIMAL, FLOAT, SIGNED_FLOAT, NUMBER, SIGNED_NUMBER, ESCAPED_STRING,
//                              LCASE_LETTER, UCASE_LETTER, LETTER, WORD, CNAME, WS_INLINE, WS, CR,
//                              LF, NEWLINE, SH_COMMENT, CPP_COMMENT, C_COMMENT, SQL_COMMENT),
//                              written here without lookbehind
// Regular expressions: alternation, groups ((...), (?:...), (?P<name>...), (?#...), scoped flags
// (?i:...) and global ones at the start (?i)), the quantifiers * + ? {n} {n,} {,m} {n,m} (lazy
// forms match the same strings), classes with ranges and negation, `.` (no newline unless s),
// \d \w \s and their negations with Python's Unicode meaning on str (\d: category Nd; \w: letters,
// numbers and _; \s: Python's str.isspace), and the escapes \a \f \n \r \t \v \0 \ooo \xHH \uHHHH
// \UHHHHHHHH.
//
// The language: every text that splits into terminals that `start` derives, with ignored text
// before any of them and at the end, a terminal being every string its expression matches (lazy
// and greedy quantifiers alike). That is what Lark's Earley parser with lexer="dynamic_complete"
// accepts (tests/lark_test.cpp checks it against Lark), except where Python's backtracking would
// never return a longer match of a terminal (a lazy `d{2,}?`, `a|ab`: Lark's lexer then never
// sees "ddd" or "ab"; LLGuidance's lexer, like llmq, takes them).
//
// Refused, named (Unsupported): templates, %declare, %override, %extend, imports other than
// common's, anchors (^ $ \A \Z \b \B), lookaround, backreferences, possessive quantifiers and
// atomic groups, the x and L flags, \N{...}, and LLGuidance's own additions (%json, %llguidance,
// <special tokens>, @grammar references). Syntax errors, undefined names, a terminal naming a rule
// and a missing `start` are InvalidArgument; each names line and column. Bounded as GBNF is:
// repetition bounds at most 1000, groups nested at most 100 deep, at most 50,000 parts.
#pragma once

#include <string_view>

#include "base/status.h"
#include "engine/structured/grammar.h"

namespace llmq {

// Compiles `text` into *out (its start: `start`, then anything %ignore'd).
[[nodiscard]] Status CompileLark(std::string_view text, Grammar* out);

// Whether a grammar's text is Lark rather than GBNF: vLLM's test (grammar_is_likely_lark): no line,
// without its comment (# or //), holds `::=`.
bool LooksLikeLark(std::string_view text);

// CompileLark or CompileGbnf (gbnf.h), as LooksLikeLark says: what a job line's grammar field
// holds.
[[nodiscard]] Status CompileGrammarText(std::string_view text, Grammar* out);

}  // namespace llmq
