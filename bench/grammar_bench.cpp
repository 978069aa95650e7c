// GBNF and Lark grammars (engine/structured/gbnf.h, lark.h) on a real vocabulary: llama.cpp's
// example grammars (fetched, never committed) and any .lark file beside them (read as a job line's
// grammar is: Lark where no line holds `::=`), each compiled for the Llama 3 tokenizer and walked
// token by token at random: at each step the mask is computed (timed), a token drawn uniformly from
// it, and the matcher must take it; a document ends when the grammar allows it and a draw says so
// (or at
// --max-tokens). Each finished document is walked again byte by byte by a fresh matcher, which
// must take it whole (the masks and the byte walk agree). Prints compile time, the grammar's size
// and the masks' times.
//
//   mkdir /tmp/grammars && cp <llama.cpp>/grammars/*.gbnf /tmp/grammars
//   build/bench/grammar_bench --dir /tmp/grammars [--model DIR] [--walks 32] [--max-tokens 96]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/structured/lark.h"
#include "engine/structured/matcher.h"
#include "engine/structured/schema_check.h"
#include "engine/text/tokenizer.h"

namespace fs = std::filesystem;
using llmq::bench::Clock;
using llmq::bench::Since;

int main(int argc, char** argv) {
  std::string dir, model = (fs::path(LLMQ_SHARED_DIR) / "models" / "tiny-llama32").string();
  int walks = 32, max_tokens = 96;
  llmq::bench::Flags(argc, argv,
                     "usage: grammar_bench --dir DIR_OF_GBNF [--model DIR] [--walks N] "
                     "[--max-tokens N]")
      .Get("--dir", &dir)
      .Get("--model", &model)
      .Get("--walks", &walks)
      .Get("--max-tokens", &max_tokens)
      .Done();
  if (dir.empty()) llmq::bench::Die("--dir is required");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gbnf" || e.path().extension() == ".lark")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) llmq::bench::Die("no .gbnf or .lark file in " + dir);

  std::unique_ptr<llmq::Tokenizer> tok;
  llmq::bench::Check(llmq::Tokenizer::Load(model, &tok), "tokenizer");
  auto t0 = Clock::now();
  const auto trie = std::make_shared<const llmq::TokenTrie>(llmq::TokenTrie::FromTokenizer(*tok));
  std::printf(
      "%s\nvocabulary %d tokens (%s), trie built in %.0f ms; %d walks a grammar, at most "
      "%d tokens each\n\n",
      llmq::bench::Stamp().c_str(), tok->vocab_size(), model.c_str(), Since(t0) * 1e3, walks,
      max_tokens);
  std::printf(
      "| grammar | compile ms | rules | lexemes | ended | tokens | mask p50 us | p99 us | "
      "max us | max work |\n|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  int failures = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    t0 = Clock::now();
    llmq::Grammar g;
    llmq::Status st = llmq::CompileGrammarText(text.str(), &g);
    const size_t rules = g.rules().size(), lexemes = g.lexemes().size();
    std::shared_ptr<llmq::CompiledGrammar> c;
    if (st.ok()) st = llmq::CompiledGrammar::Compile(std::move(g), trie, &c);
    const double compile_ms = Since(t0) * 1e3;
    if (!st.ok()) {
      std::printf("| %s | refused: %s |\n", f.filename().c_str(), st.message().c_str());
      ++failures;
      continue;
    }
    std::mt19937 rng(7);
    std::vector<double> mask_us;
    int ended = 0, tokens = 0;
    int64_t work = 0;  // the parser's work of the costliest mask (CompiledGrammar's fuel)
    bool given_up = false;
    for (int w = 0; w < walks; ++w) {
      llmq::Matcher m(c);
      std::string doc;
      bool done = false;
      for (int t = 0; t < max_tokens && !done; ++t) {
        const auto m0 = Clock::now();
        const int64_t computed = m.masks_computed();
        const llmq::TokenMask& mask = m.Mask();
        mask_us.push_back(Since(m0) * 1e6);
        if (m.masks_computed() != computed) work = std::max(work, m.mask_work());
        if (m.exhausted()) {
          given_up = true;
          break;
        }
        std::vector<int32_t> allowed;
        for (int id = 0; id < mask.size(); ++id)
          if (mask.Test(id)) allowed.push_back(id);
        if (m.CanEnd() && (allowed.empty() || rng() % 6 == 0)) {
          done = true;
          break;
        }
        if (allowed.empty()) {
          std::printf("| %s | stranded after %d tokens: %s |\n", f.filename().c_str(), t,
                      doc.c_str());
          ++failures;
          break;
        }
        const int32_t id = allowed[rng() % allowed.size()];
        const std::string bytes = tok->TokenBytes(id);
        if (!m.Consume(bytes)) {
          std::printf("| %s | token %d in the mask refused |\n", f.filename().c_str(), id);
          ++failures;
          break;
        }
        doc += bytes;
        ++tokens;
      }
      if (!done) continue;
      ++ended;
      llmq::Matcher again(c);
      bool whole = true;
      for (char b : doc) whole = whole && again.Consume(std::string(1, b));
      if (!whole || !again.CanEnd()) {
        std::printf("| %s | a finished document not taken byte by byte |\n", f.filename().c_str());
        ++failures;
      }
    }
    std::printf("| %s | %.1f | %zu | %zu | %d/%d | %d | %.1f | %.0f | %.0f | %s |\n",
                f.filename().c_str(), compile_ms, rules, lexemes, ended, walks, tokens,
                llmq::Percentile(&mask_us, 50), llmq::Percentile(&mask_us, 99),
                llmq::Percentile(&mask_us, 100),
                given_up ? "given up" : std::to_string(work).c_str());
  }
  return failures == 0 ? 0 : 1;
}
