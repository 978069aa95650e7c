// libFuzzer target for the Lark front end (engine/structured/lark.h): a job line's
// structured_outputs.grammar is untrusted text, read as Lark where no line holds `::=`. The input
// is a grammar, a NUL, and a document. Whatever the bytes: the grammar compiles or is refused with
// InvalidArgument / Unsupported (never a crash, a hang or unbounded recursion); a compiled one is
// walked over the document as gbnf_fuzz walks it (fuzz/matcher_walk.h).
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file writes a seed corpus into argv[1].
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/structured/lark.h"
#include "engine/structured/matcher.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/matcher_walk.h"

#ifndef LLMQ_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [text, doc] = SplitAtNul(data, size);
  llmq::Grammar g;
  const llmq::Status s = llmq::CompileLark(text, &g);  // before g is moved
  std::string why;
  const auto c = CompileOrRefused(s, std::move(g), &why);
  if (c != nullptr) WalkDocument(c, doc, 5);
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

int main(int argc, char** argv) {
  const std::string nul(1, '\0');
  const std::string kSeeds[] = {
      // Lark's JSON example, with common terminals and %ignore.
      "?start: value\n?value: object | array | string | SIGNED_NUMBER -> number\n"
      "  | \"true\" | \"false\" | \"null\"\narray: \"[\" [value (\",\" value)*] \"]\"\n"
      "object: \"{\" [pair (\",\" pair)*] \"}\"\npair: string \":\" value\n"
      "string: ESCAPED_STRING\n%import common.ESCAPED_STRING\n%import common.SIGNED_NUMBER\n"
      "%import common.WS\n%ignore WS\n" +
          nul + "{\"a\": [1, -2.5e3, true]}",
      // Regular expressions: classes, flags, groups, bounds, Unicode shorthands.
      "start: ID (\",\" ID)~0..3 | /(?i)x[^\\n\\]]{1,3}(?:y|z)*?/s | /\\d+\\s*\\w/\n"
      "ID: /[a-z_][a-z0-9_]*/\n%ignore \" \"\n" +
          nul + "ab, c_1",
      // Ranges, any-case strings, priorities, aliases, ? and !, terminals from terminals.
      "?start: sum\n?sum: product | sum \"+\" product -> add\n!product: atom | product \"*\" atom\n"
      "atom: NUM | \"(\" sum \")\" | \"pi\"i\nNUM.2: DIGIT+ (\".\" DIGIT+)?\nDIGIT: "
      "\"0\"..\"9\"\n" +
          nul + "(1+2.5)*PI",
      // Comments of both kinds, alternatives on following lines, LLGuidance's braces.
      "// a list\nstart: item{1,3}  # items\n     | \"-\"\nitem: \"a\" | \"b\"{2,}\n" + nul +
          "abbb",
  };
  return WriteSeeds(argc, argv, kSeeds);
}

#endif  // LLMQ_FUZZ_SEEDS
