// Matcher: enforces a Grammar (engine/structured/grammar.h) on a model's output, byte by byte and
// token by token (issue 24): the exact set of tokens whose bytes continue a document the grammar
// admits, and whether the document may end there.
//
// How (LLGuidance's design, with XGrammar's cache of what does not depend on the parse):
//   - a lexer: the set of lexemes the parser allows next, run side by side as one lazily built
//     DFA whose state is the set of (lexeme, Regex state) pairs still alive ("lexer state",
//     interned in the CompiledGrammar, shared by all its matchers);
//   - an Earley parser over lexemes: a chart of item sets, one per lexeme consumed, pushed when a
//     lexeme ends and popped on backtracking, so a walk over the token trie can try a byte and
//     undo it;
//   - a lexeme ends greedily: when the next byte continues none of the live lexemes and one of
//     them has matched (Grammar's contract), the parser scans it and the byte starts the next;
//   - the mask: a walk of the token trie (engine/structured/token_trie.h). What a lexer state
//     allows without ending its lexeme does not depend on the parse: it is computed once per lexer
//     state and cached in the CompiledGrammar (the tokens inside a JSON string: one copy of a
//     bitset), together with the trie nodes where a token would end the lexeme ("crossings");
//     only below those does a mask walk the parser (`",` `"}` after a string: a few thousand
//     nodes of a 128k vocabulary, most refused at once).
//
// After each token the matcher ends a lexeme that cannot go on (a string's closing quote), so the
// state a mask starts from is one the cache knows. A CompiledGrammar is shared by every request
// with the same schema; its lazily built tables are guarded by one mutex, held for a whole
// Consume or Mask. A Matcher is copyable (a copy is an independent state) and not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/structured/grammar.h"
#include "engine/structured/regex.h"
#include "engine/structured/token_trie.h"

namespace llmq {

// What a lexer state allows without ending its lexeme, and the trie nodes where a token would
// end it: the same for every grammar over one vocabulary whose lexer state has the same key (the
// lexemes' specs and their automata's states), so the inside of a plain JSON string is walked
// once per process, not once per schema. Bounded (cleared when full); thread-safe.
struct SharedMask {
  TokenMask inside;
  std::vector<uint32_t> crossings;
};
class SharedMasks {
 public:
  static constexpr size_t kMaxEntries = 4096;  // 16 KB each for a 128k vocabulary
  // The masks of `trie` (one object per trie while it lives).
  static std::shared_ptr<SharedMasks> For(const std::shared_ptr<const TokenTrie>& trie);
  std::shared_ptr<const SharedMask> Find(const std::string& key);
  void Put(const std::string& key, std::shared_ptr<const SharedMask> mask);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const SharedMask>> map_;
};

class CompiledGrammar {
 public:
  // Validates `g` (Grammar::Validate) and compiles its lexemes; `trie`: the model's vocabulary.
  [[nodiscard]] static Status Compile(Grammar g, std::shared_ptr<const TokenTrie> trie,
                                      std::shared_ptr<CompiledGrammar>* out);
  const Grammar& grammar() const { return grammar_; }
  const TokenTrie& trie() const { return *trie_; }
  size_t num_lexer_states() const;  // built so far
  size_t num_cached_masks() const;  // lexer states whose mask is cached

 private:
  friend class Matcher;
  CompiledGrammar() = default;

  struct Production {
    int32_t lhs;
    std::vector<Grammar::Symbol> rhs;
  };
  // A lexer state: the lexemes still alive and their Regex states (sorted by lexeme).
  struct LexState {
    std::vector<std::pair<int32_t, int32_t>> live;
    std::vector<int32_t> accepted;  // lexemes that have matched whole here (sorted)
    int8_t final = -1;              // accepted and no byte goes on (-1: not yet known)
    int8_t loops_known = 0;         // `loops` computed
    int32_t mask_class = kUnknown;  // the state whose mask this one uses (MaskClass), once known
    TokenTrie::ByteSet loops;       // the bytes that lead back to this state
    int32_t next[256];              // kUnknown, kDead or a lexer state
  };
  // What a lexer state allows without ending its lexeme, and where a token would end it.
  struct MaskCache {
    std::shared_ptr<const SharedMask> shared;             // the tokens inside, the crossings
    std::vector<std::pair<int32_t, uint32_t>> crossings;  // (lexer state there, trie node), sorted
  };
  static constexpr int32_t kUnknown = -2, kDead = -1;
  struct LexerWalk;

  int32_t LexStart(const std::vector<int32_t>& lexemes);  // the state before a lexeme's first byte
  int32_t LexStep(int32_t state, uint8_t byte);           // kDead when no lexeme goes on
  int32_t Intern(std::vector<std::pair<int32_t, int32_t>> live);
  bool IsFinal(int32_t state);
  const TokenTrie::ByteSet& Loops(int32_t state);
  const MaskCache& CacheFor(int32_t state);
  // The mask of a state's lexemes alone, shared across grammars (SharedMasks).
  std::shared_ptr<const SharedMask> SharedFor(int32_t state);

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<Production> prods_;
  std::vector<std::vector<int32_t>> rule_prods_;         // by rule: its productions
  std::vector<char> nullable_;                           // by rule
  std::vector<std::unique_ptr<LexemeAutomaton>> regex_;  // by lexeme
  std::vector<std::string> lexeme_keys_;                 // by lexeme: Grammar::SpecKey
  std::shared_ptr<SharedMasks> shared_;

  mutable std::mutex mu_;  // guards what follows (and regex_'s lazy DFAs)
  std::vector<std::unique_ptr<LexState>> lex_;
  std::map<std::vector<std::pair<int32_t, int32_t>>, int32_t> lex_index_;
  std::map<std::vector<int32_t>, int32_t> start_index_;  // allowed lexemes -> LexStart
  std::vector<std::unique_ptr<MaskCache>> cache_;        // by lexer state (null: not built)
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<CompiledGrammar> g);
  const CompiledGrammar* grammar() const { return g_.get(); }

  // Consumes `bytes` (a token's); false when the grammar refuses them, the state then unchanged.
  [[nodiscard]] bool Consume(std::string_view bytes);
  // Whether the document is complete here (EOS allowed).
  [[nodiscard]] bool CanEnd();
  // Sets exactly the tokens of the trie whose bytes Consume would accept (cleared first; of the
  // trie's vocab_size bits). EOS is the caller's: CanEnd.
  void Mask(TokenMask* mask);
  // The same mask, the matcher's own copy (valid until its next call). The mask is a function of
  // the chart (which only grows: a committed set is never taken back) and the lexer state, so it
  // is kept and given again until a token changes either: inside a string, where most of a
  // document's tokens are, a token changes neither.
  const TokenMask& Mask();
  int64_t masks_computed() const { return masks_computed_; }  // the rest were the kept one
  // Whether nothing more can follow (the document is complete and admits no continuation).
  [[nodiscard]] bool IsTerminated();

  // The walk's recognizer (TokenTrie::WalkSubtree): one byte, and undoing bytes. Held: g_->mu_.
  bool Push(uint8_t byte);
  void Pop(int n);

 private:
  struct Item {
    int32_t prod, dot, origin;
    bool operator==(const Item&) const = default;
  };
  struct Set {
    std::vector<Item> items;
    int32_t lex_start = CompiledGrammar::kDead;  // the lexer state for the next lexeme
    bool complete = false;                       // the start rule derives all that came before
  };
  struct Undo {
    int32_t lex, len;
    bool scanned;  // a set was pushed
  };
  // Ends the current lexeme as one of `lexemes`: pushes the next set (false: none, nothing pushed).
  bool Scan(const std::vector<int32_t>& lexemes);
  void Close(Set* set, int32_t k);    // predictions and completions of set k (the top)
  void Seal(Set* set);                // its next lexemes' start state, completeness
  void EndFinalLexeme();              // after a token: ends a lexeme that cannot go on
  void ComputeMask(TokenMask* mask);  // Mask's work. Held: g_->mu_.

  std::shared_ptr<CompiledGrammar> g_;
  std::vector<Set> sets_;                 // the chart: one set per lexeme consumed, and the first
  int32_t lex_ = CompiledGrammar::kDead;  // the current lexeme's lexer state
  int32_t len_ = 0;                       // its bytes so far
  std::vector<Undo> undo_;
  // The last mask computed, and what it was computed from: (chart length, lexer state, whether
  // a lexeme is under way); the length -1 when none was.
  TokenMask memo_;
  std::tuple<int64_t, int32_t, bool> memo_of_{-1, 0, false};
  int64_t masks_computed_ = 0;
};

}  // namespace llmq
