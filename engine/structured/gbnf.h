// GBNF: llama.cpp's grammar format, which XGrammar reads as its EBNF (vLLM's
// `structured_outputs.grammar` / `guided_grammar`), compiled to a Grammar (engine/structured/
// grammar.h) that the Matcher enforces token by token.
//
// The syntax (llama.cpp's grammars/README.md):
//   name ::= alternatives         a rule (names of A-Z a-z 0-9 - _); the output is `root`
//   "text"                        a literal (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH)
//   [a-z_] [^"\\]                 a character class, negated with ^ (the same escapes)
//   .                             any character
//   ( ... )  x*  x+  x?  x{m}  x{m,}  x{m,n}  a | b
//   # comment to the end of the line
// A rule ends at the end of its line unless a group is open or the next line begins with `|`
// (XGrammar's leniency). Characters are Unicode code points, matched as their UTF-8 bytes.
// XGrammar's lookahead assertions `(= ...)` are refused, named. (A grammar with no `::=` line is
// Lark's: lark.h, CompileGrammarText.)
//
// Exactly the language the grammar defines, lowered into lexemes and parser rules as ebnf.h
// describes (greedy lexing checked to lose no string).
//
// Bounded whatever the text (a job line's grammar is untrusted): repetition bounds at most 1000,
// groups nested at most 100 deep, at most 50,000 parts (each refused, named); the lowering's
// bounds are ebnf.h's.
#pragma once

#include <string_view>

#include "base/status.h"
#include "engine/structured/grammar.h"

namespace llmq {

// Compiles `text` into *out (its start: root). InvalidArgument names the line and column of a
// syntax error ("line 3, column 7: expected '::='"), an undefined rule or a missing root;
// Unsupported names what is not enforced.
[[nodiscard]] Status CompileGbnf(std::string_view text, Grammar* out);

}  // namespace llmq
