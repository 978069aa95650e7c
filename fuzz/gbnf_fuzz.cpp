// libFuzzer target for the GBNF compiler (engine/structured/gbnf.h) and the Matcher over what it
// writes: a job line's structured_outputs.grammar / guided_grammar is untrusted text. The input is
// a grammar, a NUL, and a document. Whatever the bytes: the grammar compiles or is refused with
// InvalidArgument / Unsupported (never a crash, a hang or unbounded recursion); a compiled one is
// matched against the document byte by byte over a one-byte-per-token trie, where each mask must
// hold exactly the bytes Consume accepts, and EOS only where the document may end (CanEnd agrees
// with a copy asked again).
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file writes a seed corpus into argv[1].
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/structured/gbnf.h"
#include "engine/structured/matcher.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/matcher_walk.h"

#ifndef LLMQ_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [text, doc] = SplitAtNul(data, size);
  llmq::Grammar g;
  const llmq::Status s = llmq::CompileGbnf(text, &g);  // before g is moved
  std::string why;
  const auto c = CompileOrRefused(s, std::move(g), &why);
  if (c == nullptr) return 0;
  WalkDocument(c, doc, 5);
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

int main(int argc, char** argv) {
  const std::string nul(1, '\0');
  const std::string kSeeds[] = {
      // llama.cpp's grammars/json.gbnf, abridged.
      "root ::= object\n"
      "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
      "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
      "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
      "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" "
      "[0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
      "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] "
      "[1-9]{0,15})? ws\n"
      "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n" +
          nul + "{\"a\": [1, \"x\", true]}",
      // Ambiguous and left-recursive: every split of the string is a parse.
      "root ::= x \".\"\nx ::= \"a\" | x x | x \"a\" | \"a\" x\n" + nul + "aaaaaaa.",
      "root ::= s\ns ::= s s | \"a\" | \"b\" |\n" + nul + "abba",
      // Greedy lexing that must be taken apart, repetition bounds, classes, any character.
      "root ::= (\"a\" | \"ab\") \"bc\" num [0-9a]*\nnum ::= [0-9]+\n" + nul + "abbc12a3",
      "root ::= item{2,4} ( \"-\" . )?\nitem ::= [^\\n,]{1,3} \",\"\n" + nul + "ab,c,-\xc3\xa9",
      // Lines continued by '|' and by an open group, comments, \u escapes.
      "# comment\nroot ::= ( \"x\"\n  | \"\\u00e9\" )\n  | [\\U0001F600-\\U0001F64F]+ # faces\n" +
          nul + "\xf0\x9f\x98\x80",
      // Arithmetic, recursive through parentheses.
      "root ::= expr\nexpr ::= term (( \"+\" | \"-\" ) term)*\nterm ::= factor (( \"*\" | \"/\" ) "
      "factor)*\nfactor ::= [0-9]+ | \"(\" expr \")\"\n" +
          nul + "(1+2)*34-5",
  };
  return WriteSeeds(argc, argv, kSeeds);
}

#endif  // LLMQ_FUZZ_SEEDS
