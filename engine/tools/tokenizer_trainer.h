// The tokenizer trainer of the model maker (a dev tool, in llmq_tools): a sentencepiece model
// trained on text the project generates itself, for generated test and benchmark models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace llmq {

// Trains a sentencepiece BPE model (byte fallback, <unk>=0 <s>=1 </s>=2, no pad, digits split,
// identity normalisation, whitespace kept) of exactly `vocab_size` pieces on text the project
// generates itself (engine/tools/corpus.h) and writes it atomically to `out_path` (DurableFile:
// temporary file, fsync, rename). Same seed -> byte-identical file. Takes ~0.1 s for 512 pieces,
// ~3 s for 32000 (more on a busy machine). Errors (vocab_size too small for the byte pieces and
// characters, unwritable path) name `out_path`; the trainer logs nothing below ERROR.
// `control_symbols` (special, never produced from text, e.g. chatml's <|im_start|>) and
// `user_defined_symbols` (always one piece when they occur in text) are added to the vocabulary.
struct TokenizerExtras {
  std::vector<std::string> control_symbols;
  std::vector<std::string> user_defined_symbols;
};
Status TrainTokenizer(int vocab_size, uint64_t seed, const std::string& out_path,
                      const TokenizerExtras& extras = {});

}  // namespace llmq
