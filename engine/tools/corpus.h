// Corpus: deterministic English-like training text for the tokenizers llmq trains itself (test and
// benchmark models), so that no data files are needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmq {

struct CorpusOptions {
  uint64_t seed = 0;
  size_t num_sentences = 2000;
  // Distinct pseudo-words (built from syllables) besides the built-in common English words; the
  // number of distinct words bounds how many BPE merges the text can support.
  size_t num_pseudo_words = 1000;
};

// Returns `num_sentences` lines (no newlines inside): common English words and pseudo-words drawn
// with Zipf-like frequencies, capitalised names, punctuation, numbers (years, prices, times,
// percentages) and some accented, Greek, Cyrillic and CJK words. Never contains emoji, so emoji
// always take the byte-fallback path of a tokenizer trained on it. Same options -> same text.
std::vector<std::string> GenerateCorpus(const CorpusOptions& opt);

}  // namespace llmq
