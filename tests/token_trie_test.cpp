// TokenTrie (engine/structured/token_trie.h): a walk allows exactly the tokens whose bytes the
// recognizer accepts whole, checked against a token-by-token brute force on hand-made vocabularies
// and on real ones (the Llama 3 and Qwen3 tokenizers of ../shared), for recognizers that refuse
// early and late; the recognizer is left where it started.
#include "engine/structured/token_trie.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

// A byte-level recognizer over a DFA given as a function (state, byte) -> next state (-1:
// refused), with the stack of states a walk pushes and pops. Counts its pushes.
class DfaRecognizer {
 public:
  using Step = int (*)(int state, uint8_t byte);
  DfaRecognizer(Step step, int start) : step_(step), stack_{start} {}
  bool Push(uint8_t b) {
    ++pushes_;
    const int next = step_(stack_.back(), b);
    if (next < 0) return false;
    stack_.push_back(next);
    return true;
  }
  void Pop(int n) {
    ASSERT_GE(n, 0);
    ASSERT_LT(static_cast<size_t>(n), stack_.size());
    stack_.resize(stack_.size() - static_cast<size_t>(n));
  }
  // Whether `bytes` are accepted whole from the start state (the brute force).
  bool Accepts(const std::string& bytes) const {
    int s = stack_.front();
    for (char c : bytes)
      if ((s = step_(s, static_cast<uint8_t>(c))) < 0) return false;
    return true;
  }
  size_t depth() const { return stack_.size() - 1; }
  int64_t pushes() const { return pushes_; }

 private:
  Step step_;
  std::vector<int> stack_;
  int64_t pushes_ = 0;
};

// Inside a JSON string: any byte but '"', '\\' and control characters (one state).
int StringChar(int, uint8_t b) {
  return b == '"' || b == '\\' || b < 0x20 ? -1 : 0;
}
// A JSON number's prefix, -?(0|[1-9][0-9]*)(\.[0-9]*)?: 0 start, 1 after '-', 2 after a leading
// 0, 3 in the integer digits, 4 after the point (digits follow).
int NumberPrefix(int s, uint8_t b) {
  const bool digit = b >= '0' && b <= '9';
  switch (s) {
    case 0:
      if (b == '-') return 1;
      [[fallthrough]];
    case 1:
      return b == '0' ? 2 : digit ? 3 : -1;
    case 2:
      return b == '.' ? 4 : -1;
    case 3:
      return digit ? 3 : b == '.' ? 4 : -1;
    case 4:
      return digit ? 4 : -1;
  }
  return -1;
}
// Prefixes of "{\"name\": \"" (what a schema with one string property forces first).
int KeyPrefix(int s, uint8_t b) {
  static const std::string kText = "{\"name\": \"";
  return static_cast<size_t>(s) < kText.size() && kText[static_cast<size_t>(s)] == b ? s + 1 : -1;
}

void ExpectWalkIsBruteForce(const std::vector<std::string>& vocab, DfaRecognizer::Step step,
                            const char* what) {
  const TokenTrie trie(vocab);
  DfaRecognizer r(step, 0);
  TokenMask mask(trie.vocab_size());
  trie.Walk(r, &mask);
  EXPECT_EQ(r.depth(), 0u) << what << ": the recognizer is back where it started";
  int expected = 0;
  for (size_t id = 0; id < vocab.size(); ++id) {
    const bool want = !vocab[id].empty() && r.Accepts(vocab[id]);
    expected += want;
    ASSERT_EQ(mask.Test(static_cast<int>(id)), want)
        << what << ": token " << id << " (" << vocab[id] << ")";
  }
  EXPECT_EQ(mask.Count(), expected) << what;
  std::printf("%-28s %7zu tokens, %8zu nodes: %6d allowed, %8lld pushes\n", what, vocab.size(),
              trie.num_nodes(), expected, static_cast<long long>(r.pushes()));
}

TEST(TokenTrieTest, HandMadeVocabulary) {
  // Duplicates, prefixes of one another, an empty (control) token, bytes >= 0x80.
  const std::vector<std::string> vocab = {"{",  "{\"", "{\"n", "\"", "name",     "{\"", "",
                                          "12", "1",   "-0.5", "0.", "\xc3\xa9", "x\"y"};
  ExpectWalkIsBruteForce(vocab, KeyPrefix, "key prefix (hand-made)");
  ExpectWalkIsBruteForce(vocab, NumberPrefix, "number (hand-made)");
  ExpectWalkIsBruteForce(vocab, StringChar, "string chars (hand-made)");
  const TokenTrie trie(vocab);
  DfaRecognizer r(KeyPrefix, 0);
  TokenMask mask(trie.vocab_size());
  trie.Walk(r, &mask);
  EXPECT_TRUE(mask.Test(0) && mask.Test(1) && mask.Test(2) && mask.Test(5));
  EXPECT_EQ(mask.Count(), 4) << "both copies of {\" and nothing else";
}

TEST(TokenTrieTest, EmptyAndSingleByteVocabularies) {
  const TokenTrie empty(std::vector<std::string>{});
  DfaRecognizer r(StringChar, 0);
  TokenMask none(0);
  empty.Walk(r, &none);
  EXPECT_EQ(none.Count(), 0);
  std::vector<std::string> bytes(256);
  for (int b = 0; b < 256; ++b)
    bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  ExpectWalkIsBruteForce(bytes, StringChar, "string chars (256 bytes)");
  ExpectWalkIsBruteForce(bytes, NumberPrefix, "number (256 bytes)");
}

// The real vocabularies: byte-level BPE with its 256 byte tokens (Llama 3.2, Qwen3), control
// tokens left out by FromTokenizer.
class TokenTrieVocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenTrieVocabTest, WalksEqualTheBruteForce) {
  const std::string dir = testing::SharedModel(GetParam());
  LLMQ_SKIP_WITHOUT_SHARED(dir, GetParam());
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::Load(dir, &tok).ok());
  std::vector<std::string> vocab(static_cast<size_t>(tok->vocab_size()));
  int controls = 0;
  for (int id = 0; id < tok->vocab_size(); ++id) {
    if (tok->IsControl(id)) {
      ++controls;
      continue;
    }
    vocab[static_cast<size_t>(id)] = tok->TokenBytes(id);
  }
  EXPECT_GT(controls, 0) << "the special tokens are control tokens";
  const TokenTrie from_tok = TokenTrie::FromTokenizer(*tok);
  EXPECT_EQ(from_tok.num_nodes(), TokenTrie(vocab).num_nodes());
  const std::string name = GetParam();
  ExpectWalkIsBruteForce(vocab, StringChar, (name + " string chars").c_str());
  ExpectWalkIsBruteForce(vocab, NumberPrefix, (name + " number").c_str());
  ExpectWalkIsBruteForce(vocab, KeyPrefix, (name + " key prefix").c_str());
  // EOS is a control token: never allowed through the trie.
  DfaRecognizer r(StringChar, 0);
  TokenMask mask(from_tok.vocab_size());
  from_tok.Walk(r, &mask);
  ASSERT_GE(tok->eos_id(), 0);
  EXPECT_FALSE(mask.Test(tok->eos_id()));
}

INSTANTIATE_TEST_SUITE_P(SharedTokenizers, TokenTrieVocabTest,
                         ::testing::Values("tiny-llama32", "tiny-qwen3"));

}  // namespace
}  // namespace llmq
