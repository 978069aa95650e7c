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
// state a mask starts from is one the cache knows.
//
// A mask is a function of the chart and the lexer state, and the chart of the lexeme lists its
// sets were scanned with (not of the lexemes' text): documents of one structure, whatever their
// strings and numbers, have one chart. A chart is named by an id interned in the grammar (its
// parent's id and the list scanned), and masks are kept in the grammar under (chart id, lexer
// state, whether a lexeme is under way), as the words where they differ from the lexer state's
// cached mask: the matchers of a job's documents, which share their structure, compute each such
// mask once.
//
// A CompiledGrammar is shared by every request with the same schema; its lazily built tables are
// guarded by one reader-writer lock. A mask is
// first computed under the shared lock from the tables as built (the matchers of one grammar side
// by side); a mask that needs a table not built yet is computed again under the exclusive lock,
// which Consume and CanEnd hold. A Matcher is copyable (a copy is an independent state) and not
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
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
// What every token does to a JSON string from one position in a character, counting from 0 with
// no bounds (StringLengthAutomaton): the masks of a length-bounded string at every count derive
// from it, without a walk of the trie per count.
struct StringLayers {
  TokenMask open;                                            // the tokens that leave it open
  std::vector<std::pair<int64_t, int32_t>> open_by_chars;    // (characters they add, token)
  std::vector<std::pair<int64_t, int32_t>> closed_by_chars;  // tokens ending on the closing quote
  std::vector<uint32_t> crossings;  // the nodes right after a closing quote (SharedMask's)
};
class SharedMasks {
 public:
  static constexpr size_t kMaxEntries = 4096;  // 16 KB each for a 128k vocabulary
  // The masks of `trie` (one object per trie while it lives).
  static std::shared_ptr<SharedMasks> For(const std::shared_ptr<const TokenTrie>& trie);
  std::shared_ptr<const SharedMask> Find(const std::string& key);
  void Put(const std::string& key, std::shared_ptr<const SharedMask> mask);
  // The layers from a StringLengthAutomaton state at count 0 (built once, kept while the trie is).
  std::shared_ptr<const StringLayers> Layers(const TokenTrie& trie, int start);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const SharedMask>> map_;
  std::map<int, std::shared_ptr<const StringLayers>> layers_;
};

class CompiledGrammar {
 public:
  // Validates `g` (Grammar::Validate) and compiles its lexemes; `trie`: the model's vocabulary.
  [[nodiscard]] static Status Compile(Grammar g, std::shared_ptr<const TokenTrie> trie,
                                      std::shared_ptr<CompiledGrammar>* out);
  const Grammar& grammar() const { return grammar_; }
  const TokenTrie& trie() const { return *trie_; }
  // The parser's work one mask may take: Earley items scanned and closed, and bytes pushed below
  // the lexer state's crossings. Past it the mask is given up (empty) and the matcher says
  // `exhausted()`: a grammar nested inside itself (`ws ::= ([ \t\n] ws [ \t\n]?)?`) walks every
  // whitespace token of a vocabulary through an ambiguous rule, 8.7 million steps and 1.3 s a
  // mask on the Llama 3 vocabulary, and would stall a whole batch (LLGuidance stops such a step
  // with its fuel limits too). The costliest masks measured: 268,000 steps over all of
  // JSONSchemaBench (MaskBench), 426,000 for llama.cpp's extreme.gbnf (bench/RESULTS.md). A
  // function of the matcher's state alone, whichever matcher computes it (a mask given up is kept
  // as the others are): a request fails so on every run and in any batch.
  static constexpr int64_t kDefaultMaskFuel = int64_t{1} << 21;
  void set_mask_fuel(int64_t fuel) { mask_fuel_ = fuel; }  // before any mask (tests)
  int64_t mask_fuel() const { return mask_fuel_; }
  size_t num_lexer_states() const;  // built so far
  size_t num_cached_masks() const;  // lexer states whose mask is cached
  size_t num_kept_masks() const;    // masks kept for the grammar's matchers (by chart id)

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
    int32_t accepted_id = -1;       // `accepted`'s id: equal lists, equal ids
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
  // The same as built so far (kUnknown: not yet); under the shared lock.
  int32_t KnownStart(const std::vector<int32_t>& lexemes) const;
  int32_t KnownStep(int32_t state, uint8_t byte) const;
  const MaskCache* KnownCache(int32_t state) const;  // null: not yet
  int32_t Intern(std::vector<std::pair<int32_t, int32_t>> live);
  bool IsFinal(int32_t state);
  const TokenTrie::ByteSet& Loops(int32_t state);
  const MaskCache& CacheFor(int32_t state);
  // The mask of a state's lexemes alone, shared across grammars (SharedMasks).
  std::shared_ptr<const SharedMask> SharedFor(int32_t state);

  // The id of the chart that extends `chart` by a set scanned with the lexeme list `accepted_id`
  // (the first set's chart: 0). Ids are never given twice, so a table forgotten when full only
  // costs masks computed again. Held: mu_, exclusive.
  int64_t ChartChild(int64_t chart, int32_t accepted_id);
  // A mask kept for the grammar's matchers: its words where they differ from `base`'s inside
  // mask (none where no lexeme is allowed: then base is null and the mask empty).
  struct MaskKey {
    int64_t chart;
    int32_t lex;
    bool in_lexeme;
    bool operator==(const MaskKey&) const = default;
  };
  struct MaskKeyHash {
    size_t operator()(const MaskKey& k) const {
      return std::hash<uint64_t>()(static_cast<uint64_t>(k.chart) * 0x9E3779B97F4A7C15ull ^
                                   (static_cast<uint64_t>(static_cast<uint32_t>(k.lex)) << 1) ^
                                   static_cast<uint64_t>(k.in_lexeme));
    }
  };
  struct KeptMask {
    std::shared_ptr<const SharedMask> base;
    std::vector<std::pair<uint32_t, uint32_t>> words;  // (index, word)
    int32_t only;                                      // Matcher::OnlyToken
    bool exhausted;                                    // given up (empty)
  };
  // Takes masks_mu_ (not mu_). `exhausted`: the mask was given up (kDefaultMaskFuel).
  bool FindMask(const MaskKey& key, TokenMask* mask, int32_t* only, bool* exhausted) const;
  void PutMask(const MaskKey& key, const TokenMask& mask, std::shared_ptr<const SharedMask> base,
               int32_t only, bool exhausted);
  static constexpr size_t kMaxCharts = size_t{1} << 18;     // ids interned (then forgotten)
  static constexpr size_t kMaxKeptBytes = size_t{8} << 20;  // kept masks' words (then cleared)

  Grammar grammar_;
  int64_t mask_fuel_ = kDefaultMaskFuel;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<Production> prods_;
  std::vector<std::vector<int32_t>> rule_prods_;         // by rule: its productions
  std::vector<char> nullable_;                           // by rule
  std::vector<std::unique_ptr<LexemeAutomaton>> regex_;  // by lexeme
  std::vector<std::string> lexeme_keys_;                 // by lexeme: Grammar::SpecKey
  std::shared_ptr<SharedMasks> shared_;

  mutable std::shared_mutex mu_;  // guards what follows (and regex_'s lazy DFAs)
  std::vector<std::unique_ptr<LexState>> lex_;
  std::map<std::vector<std::pair<int32_t, int32_t>>, int32_t> lex_index_;
  std::map<std::vector<int32_t>, int32_t> start_index_;     // allowed lexemes -> LexStart
  std::vector<std::unique_ptr<MaskCache>> cache_;           // by lexer state (null: not built)
  std::map<std::vector<int32_t>, int32_t> accepted_index_;  // LexState::accepted -> its id
  struct ChartHash {
    size_t operator()(const std::pair<int64_t, int32_t>& k) const {
      return std::hash<uint64_t>()(static_cast<uint64_t>(k.first) * 0x9E3779B97F4A7C15ull ^
                                   static_cast<uint32_t>(k.second));
    }
  };
  std::unordered_map<std::pair<int64_t, int32_t>, int64_t, ChartHash> charts_;
  int64_t next_chart_ = 1;
  int64_t built_ = 0;  // tables built (transitions, starts, cached masks): Matcher::cold_

  mutable std::mutex masks_mu_;  // guards the kept masks
  std::unordered_map<MaskKey, std::shared_ptr<const KeptMask>, MaskKeyHash> kept_;
  size_t kept_bytes_ = 0;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<CompiledGrammar> g);
  const CompiledGrammar* grammar() const { return g_.get(); }

  // Consumes `bytes` (a token's); false when the grammar refuses them, the state then unchanged.
  [[nodiscard]] bool Consume(std::string_view bytes);
  // Whether the document is complete here (EOS allowed). Kept as the mask is (below).
  [[nodiscard]] bool CanEnd();
  // Sets exactly the tokens of the trie whose bytes Consume would accept (cleared first; of the
  // trie's vocab_size bits). EOS is the caller's: CanEnd.
  void Mask(TokenMask* mask);
  // The same computed from the chart alone under the exclusive lock, building tables as needed,
  // neither kept nor found kept: the reference the kept masks, and the masks computed from the
  // tables as built, are tested against.
  void MaskAfresh(TokenMask* mask);
  // The same mask, the matcher's own copy (valid until its next call or Consume). The mask is a
  // function of the chart (which only grows: a committed set is never taken back) and the lexer
  // state, so it is kept and given again until a token changes either: inside a string, where
  // most of a document's tokens are, a token changes neither. A kept mask is given without taking
  // the grammar's lock.
  const TokenMask& Mask();
  // The one token Mask() allows (EOS aside), or -1 when it allows none or several.
  int32_t OnlyToken();
  int64_t masks_computed() const { return masks_computed_; }  // the rest were the kept one
  // Whether the current mask was given up: it ran past the grammar's mask fuel and is empty.
  // The request must fail (the engine reports it, naming the grammar's cost).
  bool exhausted() const { return exhausted_; }
  // The parser's work of the last mask this matcher computed itself (0: none; see mask_fuel).
  int64_t mask_work() const { return mask_work_; }
  // Whether nothing more can follow (the document is complete and admits no continuation).
  [[nodiscard]] bool IsTerminated();

  // The walk's recognizer (TokenTrie::WalkSubtree): one byte, and undoing bytes. Held: g_->mu_
  // (shared while reading_).
  bool Push(uint8_t byte);
  void Pop(int n);

 private:
  struct Item {
    int32_t prod, dot, origin;
    bool operator==(const Item&) const = default;
  };
  struct Set {
    std::vector<Item> items;
    int64_t chart = 0;     // the chart up to this set (CompiledGrammar::ChartChild; once committed)
    int32_t scanned = -1;  // the accepted_id of the lexemes it was scanned with (the first: -1)
    int32_t lex_start = CompiledGrammar::kDead;  // the lexer state for the next lexeme
    bool complete = false;                       // the start rule derives all that came before
    // (rule, item index) of the items whose dot stands before a rule, sorted (Seal): a completion
    // of that rule finds the items it advances without a pass over the whole set.
    std::vector<std::pair<int32_t, int32_t>> waiting;
  };
  struct Undo {
    int32_t lex, len;
    bool scanned;  // a set was pushed
  };
  // Ends the current lexeme as one of lexer state `at`'s accepted lexemes: pushes the next set
  // (false: none, nothing pushed).
  bool Scan(int32_t at);
  void Close(Set* set, int32_t k);  // predictions and completions of set k (the top)
  void Seal(Set* set);              // its next lexemes' start state, completeness
  void EndFinalLexeme();            // after a token: ends a lexeme that cannot go on
  // Mask's work, metered (the mask empty and ran_out_ set past the grammar's fuel); *base: the
  // cached mask it starts from (null: none). Held: g_->mu_ (shared while reading_).
  void ComputeMask(TokenMask* mask, std::shared_ptr<const SharedMask>* base);
  void WalkMask(TokenMask* mask, std::shared_ptr<const SharedMask>* base);  // ComputeMask's walk
  void ComputeMaskLocked(TokenMask* mask, std::shared_ptr<const SharedMask>* base);  // takes it
  // The grammar's lexer tables: built as needed, or, while reading_, as built so far (a table not
  // built yet sets missed_ and refuses: the mask is then computed again, building).
  int32_t Step(int32_t state, uint8_t byte);
  int32_t Start(const std::vector<int32_t>& lexemes);

  std::shared_ptr<CompiledGrammar> g_;
  std::vector<Set> sets_;                  // the chart: one set per lexeme consumed, and the first
  int32_t lex_ = CompiledGrammar::kDead;   // the current lexeme's lexer state
  int32_t len_ = 0;                        // its bytes so far
  bool reading_ = false, missed_ = false;  // Step, Start
  bool cold_ = false;  // the last mask computed built tables: compute the next building
  std::vector<Undo> undo_;
  // What a mask and CanEnd are functions of: (chart length, lexer state, whether a lexeme is
  // under way); the length -1: none yet.
  using Key = std::tuple<int64_t, int32_t, bool>;
  Key Now() const { return {static_cast<int64_t>(sets_.size()), lex_, len_ > 0}; }
  // The last mask computed, what it was computed from, and its only token (OnlyToken).
  TokenMask memo_;
  Key memo_of_{-1, 0, false};
  int32_t memo_only_ = -1;
  // The last CanEnd, and what it was computed from.
  bool can_end_ = false;
  Key can_end_of_{-1, 0, false};
  int64_t masks_computed_ = 0;
  // The metering of a mask's walk (ComputeMask): Push and Close spend fuel_ while metered_.
  bool metered_ = false, ran_out_ = false, exhausted_ = false;
  int64_t fuel_ = 0, mask_work_ = 0;
};

}  // namespace llmq
