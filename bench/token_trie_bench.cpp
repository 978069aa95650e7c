// The token trie's walk (engine/structured/token_trie.h, issue 24): the time of one mask over a
// real vocabulary for the recognizer states a JSON document passes through, a plain walk with no
// cache. It says where the mask time goes before any caching: inside a string almost every token
// continues (the walk visits every node), inside a number almost none does.
//
//   build/bench/token_trie_bench [MODEL_DIR...]   (default: the shared tiny-llama32 and tiny-qwen3)
#include <filesystem>
#include <memory>
#include <vector>

#include "bench/bench_util.h"
#include "engine/structured/token_trie.h"
#include "engine/text/tokenizer.h"

namespace fs = std::filesystem;
using llmq::bench::Clock;
using llmq::bench::Since;

namespace {

// A one-function DFA with its stack of states, as the tests' recognizer.
class Dfa {
 public:
  using Step = int (*)(int, uint8_t);
  explicit Dfa(Step step) : step_(step), stack_{0} { stack_.reserve(256); }
  bool Push(uint8_t b) {
    const int next = step_(stack_.back(), b);
    if (next < 0) return false;
    stack_.push_back(next);
    return true;
  }
  void Pop(int n) { stack_.resize(stack_.size() - static_cast<size_t>(n)); }

 private:
  Step step_;
  std::vector<int> stack_;
};

int InString(int, uint8_t b) {
  return b == '"' || b == '\\' || b < 0x20 ? -1 : 0;
}
int InNumber(int s, uint8_t b) {  // integer digits, then a point and digits
  const bool digit = b >= '0' && b <= '9';
  if (s == 0) return digit ? 0 : b == '.' ? 1 : -1;
  return digit ? 1 : -1;
}
int AfterValue(int s, uint8_t b) {  // whitespace, then ',' or '}'
  if (s == 0) return b == ' ' || b == '\n' ? 0 : b == ',' || b == '}' ? 1 : -1;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path shared = LLMQ_SHARED_DIR;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) dirs.push_back(argv[i]);
  if (dirs.empty())
    for (const char* m : {"tiny-llama32", "tiny-qwen3"})
      dirs.push_back((shared / "models" / m).string());
  std::printf("token_trie_bench: one mask, plain walk, one thread (%s)\n",
              llmq::bench::Stamp().c_str());
  std::printf("%-14s %8s %8s  %-12s %8s %10s\n", "vocabulary", "tokens", "nodes", "state",
              "allowed", "us/mask");
  for (const std::string& dir : dirs) {
    std::unique_ptr<llmq::Tokenizer> tok;
    llmq::bench::Check(llmq::Tokenizer::Load(dir, &tok), dir.c_str());
    const auto t0 = Clock::now();
    const llmq::TokenTrie trie = llmq::TokenTrie::FromTokenizer(*tok);
    const double build = Since(t0);
    const std::string name = fs::path(dir).filename().string();
    const std::pair<const char*, Dfa::Step> states[] = {
        {"in a string", InString}, {"in a number", InNumber}, {"after a value", AfterValue}};
    for (const auto& [what, step] : states) {
      llmq::TokenMask mask(trie.vocab_size());
      std::vector<double> us;
      for (int rep = 0; rep < 200; ++rep) {
        Dfa r(step);
        mask.Clear();
        const auto t = Clock::now();
        trie.Walk(r, &mask);
        us.push_back(Since(t) * 1e6);
      }
      std::printf("%-14s %8d %8zu  %-12s %8d %10.1f\n", name.c_str(), trie.vocab_size(),
                  trie.num_nodes(), what, mask.Count(), llmq::bench::Median(us));
    }
    std::printf("%-14s trie built in %.0f ms\n", name.c_str(), build * 1e3);
  }
  return 0;
}
