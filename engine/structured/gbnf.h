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
// XGrammar's lookahead assertions `(= ...)` and Lark grammars are refused, named.
//
// Exactly the language the grammar defines, at the lexer's speed where that is safe. GBNF has no
// lexer: it is a grammar over characters. The Matcher parses lexemes (regular expressions matched
// whole and greedily, an Earley step each), so the compiler chooses them:
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
// Bounded whatever the text (a job line's grammar is untrusted): repetition bounds at most 1000,
// groups nested at most 100 deep, at most 50,000 parts (each refused, named); terminal rules
// inline each other at most 100 deep (deeper ones are rules of the parser); the overlap check
// walks a bounded number of automaton states and lexemes, past which it takes apart more (never
// less exact). Every fixed point runs on a worklist, in time linear in what changes.
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
