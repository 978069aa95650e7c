// SchemaChecker: whether a JSON Schema will work, before a night is spent on it (issue 24): the
// engine of `llmq schema check` and of bench/mask_bench (MaskBench's harness, in C++).
//
// A file is a JSON Schema, or a test file {"schema": ..., "tests": [{"data": ..., "valid": bool},
// ...]} (MaskBench's shape, and the JSON Schema Test Suite's cases). The schema is compiled for
// the model's vocabulary (the compile time measured); each test's `data` is serialized as
// MaskBench does (Python's json.dumps(data, ensure_ascii=False): separators ", " and ": "),
// tokenized with the model's tokenizer (no special tokens), and walked through a Matcher: at each
// token the mask is computed (timed) and the token must be in it; then committed. As in MaskBench,
// a test is accepted when every token was in its mask; `complete` says whether EOS was allowed
// after the last (a valid instance must end there).
//
// Property order: the grammar generates an object's properties in the schema's order (as
// LLGuidance and OpenAI's strict mode do), while JSON Schema lets an instance list them in any.
// MaskBench's data was made for that: its creation step (maskbench/creation/reorder.py) rewrote
// every instance LLGuidance rejected with its properties in an order LLGuidance accepts. The
// `reorder` option does the same for this grammar: a rejected instance is rewritten, object by
// object, greedily (the first property that the grammar accepts next and after which every other
// property left could still follow), then walked again. As in reorder.py, an invalid instance is
// first reordered against the schema without its value constraints (so the fault it was written
// to have stays), then against the schema; an instance no order of which fits is kept as written.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "engine/text/tokenizer.h"

namespace llmq {

struct SchemaTestResult {
  bool valid = false;           // what the test says the instance is
  bool accepted = false;        // every token was in its mask
  bool complete = false;        // accepted, and EOS allowed after the last token
  int rejected_at = -1;         // the first token not in its mask (-1: none)
  std::string text_at;          // the instance's text up to that token, and the token (its bytes)
  int tokens = 0;               // tokens of the instance
  bool reordered = false;       // walked with its properties reordered (SchemaCheckOptions)
  std::vector<double> mask_us;  // each mask computed, in microseconds
  int64_t mask_work_max = 0;    // the most parser work a mask took (CompiledGrammar::mask_fuel)
  bool exhausted = false;       // rejected because the mask there was given up (ran out of fuel)
  bool agrees() const { return accepted == valid && (!valid || complete); }
};

struct SchemaCheckResult {
  bool compiled = false;
  std::string error;      // why not (a refusal names the keyword and its JSON pointer)
  double compile_us = 0;  // the schema to a grammar ready for matching
  std::vector<std::string> restrictions;  // CompileJsonSchema's: documents not generated
  std::vector<SchemaTestResult> tests;
  bool passing() const;  // compiled and every test agrees
};

struct SchemaCheckOptions {
  bool reorder = false;  // MaskBench's reorder step (above)
};

class SchemaChecker {
 public:
  explicit SchemaChecker(const Tokenizer* tok);  // `tok` outlives the checker
  // `file`: a schema or a test file (parsed keeping key order).
  SchemaCheckResult Check(const nlohmann::ordered_json& file,
                          const SchemaCheckOptions& opt = {}) const;
  // One file's result as `llmq schema check --json` prints it.
  static nlohmann::ordered_json ToJson(const std::string& name, const SchemaCheckResult& r);

 private:
  const Tokenizer* tok_;
  std::shared_ptr<const TokenTrie> trie_;
};

// `data` with each object's properties in an order `grammar` accepts from its start (the reorder
// step above); false when none fits within `budget` ways back (a key tried after another's
// members led nowhere). The search is exponential where many orders start alike: MaskBench's
// documents that fit no order take seconds each at 2000, the diff test's small ones need it.
[[nodiscard]] bool ReorderProperties(const std::shared_ptr<CompiledGrammar>& grammar,
                                     const nlohmann::ordered_json& data,
                                     nlohmann::ordered_json* out, int budget = 20);
// `schema` without its value constraints (reorder.py's remove_constraints, to the letter: lengths,
// patterns, formats, bounds, counts; below a "properties" only the properties are visited).
nlohmann::ordered_json WithoutValueConstraints(const nlohmann::ordered_json& schema);

// Walks `text`'s tokens (the tokenizer's, no special tokens) through a matcher of `g` into `tr`:
// each token's mask computed (timed) into *mask, the token checked against it and committed
// (SchemaChecker::Check's rule; `llmq grammar check`'s too). Sets all of *tr but `valid` and
// `reordered`.
void WalkText(const std::shared_ptr<CompiledGrammar>& g, const Tokenizer& tok,
              const std::string& text, TokenMask* mask, SchemaTestResult* tr);

// The p-th percentile (0..100) of `v` (sorted in place), nearest rank; 0 when empty.
double Percentile(std::vector<double>* v, double p);

}  // namespace llmq
