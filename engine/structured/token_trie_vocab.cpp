// TokenTrie::FromTokenizer, apart from the trie itself so that what needs only the trie (the
// fuzz targets) does not link the tokenizers.
#include "engine/structured/token_trie.h"

namespace llmq {

TokenTrie TokenTrie::FromTokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  for (int id = 0; id < tok.vocab_size(); ++id)
    if (!tok.IsControl(id)) bytes[static_cast<size_t>(id)] = tok.TokenBytes(id);
  return TokenTrie(bytes);
}

}  // namespace llmq
