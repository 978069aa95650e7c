// llmq grammar check --model DIR FILE [--accept TEXT]... [--reject TEXT]... [--json]: whether a
// GBNF or Lark grammar (vLLM's structured_outputs.grammar, engine/structured/gbnf.h, lark.h; Lark
// where no line holds `::=`) will work with a model, before a night is spent on it. The grammar is
// compiled for the model's tokenizer (or refused, naming line and column); each --accept text must
// be taken whole, token by token through the masks, with EOS allowed at its end, and each --reject
// text must not (refused at a token, or only a prefix of a document; the walk is `llmq schema
// check`'s: engine/structured/schema_check.h). It says which syntax it read (--json: "syntax":
// "gbnf" or "lark"). Exit status 0 when the grammar compiled and every text agreed, 1 otherwise.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/structured/lark.h"
#include "engine/structured/schema_check.h"
#include "engine/text/tokenizer.h"

namespace llmq::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct GrammarFlags {
  std::string model, file;
  std::vector<std::string> accept, reject;
  bool json = false;
};

int Check(const CLI::App* cmd, const GrammarFlags& f) {
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return Fail(cmd, f.file + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  std::unique_ptr<Tokenizer> tok;
  if (Status st = Tokenizer::Load(f.model, &tok); !st.ok()) return Fail(cmd, st);
  const auto t0 = std::chrono::steady_clock::now();
  Grammar g;
  Status st = CompileGrammarText(text.str(), &g);
  const size_t rules = g.rules().size(), lexemes = g.lexemes().size();
  std::shared_ptr<CompiledGrammar> compiled;
  if (st.ok())
    st = CompiledGrammar::Compile(
        std::move(g), std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok)), &compiled);
  const double compile_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const char* syntax = LooksLikeLark(text.str()) ? "lark" : "gbnf";
  ojson out = {{"file", f.file}, {"syntax", syntax}, {"compiled", st.ok()}, {"error", nullptr}};
  if (!st.ok()) {
    out["error"] = st.message();
    if (f.json)
      std::printf("%s\n", out.dump(-1, ' ', false, ojson::error_handler_t::replace).c_str());
    else
      std::printf("%s: refused: %s\n", f.file.c_str(), st.message().c_str());
    return 1;
  }
  out["compile_us"] = compile_us;
  out["rules"] = rules;
  out["lexemes"] = lexemes;
  out["texts"] = ojson::array();
  if (!f.json)
    std::printf("%s: compiled in %.0f us (%s: %zu rules, %zu lexemes)\n", f.file.c_str(),
                compile_us, syntax[0] == 'l' ? "Lark" : "GBNF", rules, lexemes);
  bool all = true;
  TokenMask mask(tok->vocab_size());
  for (const bool want : {true, false}) {
    for (const std::string& t : want ? f.accept : f.reject) {
      SchemaTestResult r;
      r.valid = want;
      WalkText(compiled, *tok, t, &mask, &r);
      const bool agrees = r.complete == want;  // taken whole, or not (a mere prefix is not)
      all = all && agrees;
      std::vector<double> us = r.mask_us;
      const double p50 = Percentile(&us, 50), max = Percentile(&us, 100);
      out["texts"].push_back({{"text", t},
                              {"expected", want ? "accept" : "reject"},
                              {"accepted", r.accepted},
                              {"complete", r.complete},
                              {"rejected_at", r.rejected_at},
                              {"tokens", r.tokens},
                              {"agrees", agrees},
                              {"mask_us_p50", p50},
                              {"mask_us_max", max},
                              {"mask_work_max", r.mask_work_max},
                              {"mask_given_up", r.exhausted}});
      if (f.json) continue;
      const std::string verdict =
          r.accepted
              ? (r.complete ? "accepted" : "accepted, but EOS not allowed at its end")
              : "rejected at token " + std::to_string(r.rejected_at) + " (" + r.text_at + ")" +
                    (r.exhausted ? ", its mask given up (more than " +
                                       std::to_string(compiled->mask_fuel()) +
                                       " steps of the parser: a request would fail there)"
                                 : "");
      std::printf("  %s %s: %s; %d tokens, mask p50 %.1f us, max %.1f us%s\n",
                  want ? "accept" : "reject", ojson(t).dump().c_str(), verdict.c_str(), r.tokens,
                  p50, max, agrees ? "" : "  <-- disagrees");
    }
  }
  if (f.json)
    std::printf("%s\n", out.dump(-1, ' ', false, ojson::error_handler_t::replace).c_str());
  return all ? 0 : 1;
}

}  // namespace

void AddGrammarCommand(CLI::App* app, int* rc) {
  CLI::App* grammar = app->add_subcommand(
      "grammar", "GBNF and Lark grammars for structured outputs (structured_outputs.grammar)");
  grammar->require_subcommand(1);
  auto f = std::make_shared<GrammarFlags>();
  CLI::App* cmd = grammar->add_subcommand("check",
                                          "Compile a GBNF or Lark grammar for the model's "
                                          "tokenizer and walk each text's tokens through the "
                                          "masks");
  cmd->add_option("--model", f->model, "Model folder (its tokenizer)")->required();
  cmd->add_option(
         "FILE", f->file,
         "The grammar (GBNF: llama.cpp's, XGrammar's EBNF; Lark where no line holds '::=')")
      ->required();
  // One text an occurrence, as written (CLI11 would split "[a, b]" into a list otherwise).
  cmd->add_option("--accept", f->accept, "A text the grammar must take whole (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--reject", f->reject, "A text the grammar must not take (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--json", f->json,
                "One JSON object: {file, compiled, error, compile_us, rules, lexemes, texts: "
                "[{text, expected, accepted, complete, rejected_at, tokens, agrees, mask_us_p50, "
                "mask_us_max}]}");
  cmd->callback([cmd, f, rc] { *rc = Check(cmd, *f); });
}

}  // namespace llmq::cli
