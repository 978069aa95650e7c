#include "engine/structured/matcher.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <unordered_set>

namespace llmq {

// --- CompiledGrammar ---------------------------------------------------------------------------

Status CompiledGrammar::Compile(Grammar g, std::shared_ptr<const TokenTrie> trie,
                                std::shared_ptr<CompiledGrammar>* out) {
  LLMQ_RETURN_IF_ERROR(g.Validate());
  std::shared_ptr<CompiledGrammar> c(new CompiledGrammar());
  c->trie_ = std::move(trie);
  LLMQ_RETURN_IF_ERROR(g.CompileLexemes(&c->regex_));
  for (const Grammar::LexemeSpec& spec : g.lexemes())
    c->lexeme_keys_.push_back(Grammar::SpecKey(spec));
  c->shared_ = SharedMasks::For(c->trie_);
  const auto& rules = g.rules();
  c->rule_prods_.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const auto& alt : rules[r].alternatives) {
      c->rule_prods_[r].push_back(static_cast<int32_t>(c->prods_.size()));
      c->prods_.push_back({static_cast<int32_t>(r), alt});
    }
  // Nullable rules: a fixpoint.
  c->nullable_.assign(rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Production& p : c->prods_) {
      if (c->nullable_[static_cast<size_t>(p.lhs)]) continue;
      bool all = true;
      for (const Grammar::Symbol& s : p.rhs)
        all = all && !s.lexeme && c->nullable_[static_cast<size_t>(s.id)];
      if (all) c->nullable_[static_cast<size_t>(p.lhs)] = changed = true;
    }
  }
  c->grammar_ = std::move(g);
  *out = std::move(c);
  return Status::Ok();
}

size_t CompiledGrammar::num_lexer_states() const {
  std::shared_lock lock(mu_);
  return lex_.size();
}

size_t CompiledGrammar::num_cached_masks() const {
  std::shared_lock lock(mu_);
  return static_cast<size_t>(
      std::count_if(cache_.begin(), cache_.end(), [](const auto& c) { return c != nullptr; }));
}

size_t CompiledGrammar::num_kept_masks() const {
  std::lock_guard<std::mutex> lock(masks_mu_);
  return kept_.size();
}

int32_t CompiledGrammar::Intern(std::vector<std::pair<int32_t, int32_t>> live) {
  if (live.empty()) return kDead;
  if (const auto it = lex_index_.find(live); it != lex_index_.end()) return it->second;
  auto s = std::make_unique<LexState>();
  for (const auto& [lexeme, q] : live)
    if (regex_[static_cast<size_t>(lexeme)]->Accepts(q)) s->accepted.push_back(lexeme);
  s->accepted_id =
      accepted_index_.emplace(s->accepted, static_cast<int32_t>(accepted_index_.size()))
          .first->second;
  std::fill(std::begin(s->next), std::end(s->next), kUnknown);
  s->live = live;
  const auto id = static_cast<int32_t>(lex_.size());
  lex_.push_back(std::move(s));
  cache_.emplace_back();
  lex_index_.emplace(std::move(live), id);
  return id;
}

int32_t CompiledGrammar::LexStart(const std::vector<int32_t>& lexemes) {
  if (const auto it = start_index_.find(lexemes); it != start_index_.end()) return it->second;
  std::vector<std::pair<int32_t, int32_t>> live;
  for (const int32_t l : lexemes) {
    const int q = regex_[static_cast<size_t>(l)]->Start();
    if (q != Regex::kDead) live.emplace_back(l, q);
  }
  const int32_t id = Intern(std::move(live));
  start_index_.emplace(lexemes, id);
  ++built_;
  return id;
}

int32_t CompiledGrammar::LexStep(int32_t state, uint8_t byte) {
  if (state < 0) return kDead;
  if (const int32_t n = lex_[static_cast<size_t>(state)]->next[byte]; n != kUnknown) return n;
  std::vector<std::pair<int32_t, int32_t>> live;
  for (const auto& [lexeme, q] : lex_[static_cast<size_t>(state)]->live) {
    const int q2 = regex_[static_cast<size_t>(lexeme)]->Next(q, byte);
    if (q2 != Regex::kDead) live.emplace_back(lexeme, q2);
  }
  const int32_t n = Intern(std::move(live));
  lex_[static_cast<size_t>(state)]->next[byte] = n;  // lex_ may have grown: index again
  ++built_;
  return n;
}

int32_t CompiledGrammar::KnownStart(const std::vector<int32_t>& lexemes) const {
  const auto it = start_index_.find(lexemes);
  return it == start_index_.end() ? kUnknown : it->second;
}

int32_t CompiledGrammar::KnownStep(int32_t state, uint8_t byte) const {
  return state < 0 ? kDead : lex_[static_cast<size_t>(state)]->next[byte];
}

const CompiledGrammar::MaskCache* CompiledGrammar::KnownCache(int32_t state) const {
  const int32_t cls = lex_[static_cast<size_t>(state)]->mask_class;
  return cls == kUnknown ? nullptr : cache_[static_cast<size_t>(cls)].get();
}

int64_t CompiledGrammar::ChartChild(int64_t chart, int32_t accepted_id) {
  if (charts_.size() >= kMaxCharts) charts_.clear();
  const auto [it, added] = charts_.emplace(std::pair{chart, accepted_id}, next_chart_);
  next_chart_ += added;
  return it->second;
}

bool CompiledGrammar::FindMask(const MaskKey& key, TokenMask* mask, int32_t* only,
                               bool* exhausted) const {
  std::shared_ptr<const KeptMask> found;
  {
    std::lock_guard<std::mutex> lock(masks_mu_);
    const auto it = kept_.find(key);
    if (it == kept_.end()) return false;
    found = it->second;
  }
  const KeptMask& k = *found;
  if (k.base == nullptr) {
    *mask = TokenMask(trie_->vocab_size());
  } else {
    *mask = k.base->inside;
    for (const auto& [i, w] : k.words) mask->SetWord(i, w);
  }
  *only = k.only;
  *exhausted = k.exhausted;
  return true;
}

void CompiledGrammar::PutMask(const MaskKey& key, const TokenMask& mask,
                              std::shared_ptr<const SharedMask> base, int32_t only,
                              bool exhausted) {
  auto k = std::make_shared<KeptMask>(KeptMask{std::move(base), {}, only, exhausted});
  if (k->base != nullptr) {
    const std::vector<uint32_t>& inside = k->base->inside.words();
    const std::vector<uint32_t>& w = mask.words();
    for (size_t i = 0; i < w.size(); ++i)
      if (w[i] != inside[i]) k->words.emplace_back(static_cast<uint32_t>(i), w[i]);
  }
  const size_t bytes = sizeof(KeptMask) + k->words.size() * sizeof(k->words[0]);
  std::lock_guard<std::mutex> lock(masks_mu_);
  if (kept_bytes_ + bytes > kMaxKeptBytes) {
    kept_.clear();
    kept_bytes_ = 0;
  }
  if (kept_.emplace(key, std::move(k)).second) kept_bytes_ += bytes;
}

bool CompiledGrammar::IsFinal(int32_t state) {
  LexState& s = *lex_[static_cast<size_t>(state)];
  if (s.final < 0) {
    bool any = false;
    for (int b = 0; b < 256 && !any; ++b) any = LexStep(state, static_cast<uint8_t>(b)) != kDead;
    lex_[static_cast<size_t>(state)]->final = !any && !s.accepted.empty();
  }
  return lex_[static_cast<size_t>(state)]->final > 0;
}

// The cache's walk: the lexer alone, from one state; where a byte would end the lexeme, the node
// is noted as a crossing and not gone below.
struct CompiledGrammar::LexerWalk {
  CompiledGrammar* g;
  SharedMask* c;
  std::vector<int32_t> stack;
  bool TakesAll(const TokenTrie::ByteSet& bytes) { return bytes.SubsetOf(g->Loops(stack.back())); }
  bool Push(uint8_t byte, uint32_t node) {
    const int32_t cur = stack.back();
    const int32_t next = g->LexStep(cur, byte);
    if (next >= 0) {
      stack.push_back(next);
      return true;
    }
    if (!g->lex_[static_cast<size_t>(cur)]->accepted.empty()) c->crossings.push_back(node);
    return false;
  }
  void Pop(int n) { stack.resize(stack.size() - static_cast<size_t>(n)); }
};

const TokenTrie::ByteSet& CompiledGrammar::Loops(int32_t state) {
  if (!lex_[static_cast<size_t>(state)]->loops_known) {
    TokenTrie::ByteSet loops;
    for (int b = 0; b < 256; ++b)
      if (LexStep(state, static_cast<uint8_t>(b)) == state) loops.Add(static_cast<uint8_t>(b));
    lex_[static_cast<size_t>(state)]->loops = loops;
    lex_[static_cast<size_t>(state)]->loops_known = 1;
  }
  return lex_[static_cast<size_t>(state)]->loops;
}

std::shared_ptr<const SharedMask> CompiledGrammar::SharedFor(int32_t state) {
  // Found under its key (the lexemes' specs and their automata's states), or walked once and kept.
  std::string key;
  for (const auto& [lexeme, q] : lex_[static_cast<size_t>(state)]->live)
    key += lexeme_keys_[static_cast<size_t>(lexeme)] + '\x1f' +
           regex_[static_cast<size_t>(lexeme)]->StateKey(q) + '\x1e';
  if (std::shared_ptr<const SharedMask> found = shared_->Find(key)) return found;
  const auto& live = lex_[static_cast<size_t>(state)]->live;
  if (live.size() == 1) {
    const auto [lexeme, q] = live[0];
    if (auto* keys = dynamic_cast<KeyExceptAutomaton*>(regex_[static_cast<size_t>(lexeme)].get())) {
      // The key of a property the schema does not list is a JSON string (of the required escapes
      // only) but where it would close on a listed name: that string's mask (shared by every
      // such key, whatever the names), less the tokens that are exactly such a closing. Its
      // crossings are the string's: CacheFor keeps those where this lexeme had matched and all
      // died.
      static const std::string plain = [] {
        Grammar::LexemeSpec spec;  // a plain string lexeme's: Grammar::Lexeme(regex)
        spec.regex = KeyExceptAutomaton::kStringRegex;
        return Grammar::SpecKey(spec);
      }();
      const std::string base_key = plain + '\x1f' + keys->StringStateKey(q) + '\x1e';
      std::shared_ptr<const SharedMask> base = shared_->Find(base_key);
      if (base == nullptr) {
        const int32_t without = Intern({{lexeme, keys->WithoutNames(q)}});
        auto m = std::make_shared<SharedMask>();
        m->inside = TokenMask(trie_->vocab_size());
        LexerWalk walk{this, m.get(), {without}};
        trie_->WalkSubtree(walk, 0, &m->inside);
        shared_->Put(base_key, m);
        base = std::move(m);
      }
      const std::vector<std::string> closings = keys->ClosingsOnNames(q);
      if (closings.empty()) return base;
      auto m = std::make_shared<SharedMask>(*base);
      for (const std::string& c : closings) trie_->ClearExactly(c, &m->inside);
      shared_->Put(key, m);
      return m;
    }
    const auto* len =
        dynamic_cast<const StringLengthAutomaton*>(regex_[static_cast<size_t>(lexeme)].get());
    if (len != nullptr && StringLengthAutomaton::BetweenQuotes(q)) {
      // A string of bounded length, between its quotes: the unbounded string's tokens from the
      // same position in a character (its layers), less those that would start a character
      // past max, and the closing ones only where the count is within the bounds there. Its
      // crossings are the unbounded string's: CacheFor keeps those where this lexeme closed.
      const std::shared_ptr<const StringLayers> l =
          shared_->Layers(*trie_, StringLengthAutomaton::AtCount(q, 0));
      const int64_t n = StringLengthAutomaton::CountOf(q);
      const int64_t room = len->max_length() < 0 ? std::numeric_limits<int64_t>::max()
                                                 : len->max_length() - n;  // characters left
      auto m = std::make_shared<SharedMask>();
      const auto& open = l->open_by_chars;
      const auto cut = std::upper_bound(open.begin(), open.end(),
                                        std::pair{room, std::numeric_limits<int32_t>::max()});
      if (cut - open.begin() >= open.end() - cut) {
        m->inside = l->open;  // most fit: the few that do not taken out
        for (auto it = cut; it != open.end(); ++it) m->inside.Reset(it->second);
      } else {
        m->inside = TokenMask(trie_->vocab_size());
        for (auto it = open.begin(); it != cut; ++it) m->inside.Set(it->second);
      }
      for (const auto& [chars, id] : l->closed_by_chars)
        if (chars <= room && n + chars >= len->min_length()) m->inside.Set(id);
      m->crossings = l->crossings;
      shared_->Put(key, m);
      return m;
    }
  }
  auto m = std::make_shared<SharedMask>();
  m->inside = TokenMask(trie_->vocab_size());
  LexerWalk walk{this, m.get(), {state}};
  trie_->WalkSubtree(walk, 0, &m->inside);
  shared_->Put(key, m);
  return m;
}

const CompiledGrammar::MaskCache& CompiledGrammar::CacheFor(int32_t state) {
  // States that differ only beyond the longest token share one mask (LexemeAutomaton::MaskClass),
  // found once per state: Mask calls this at every step.
  if (const int32_t known = lex_[static_cast<size_t>(state)]->mask_class; known != kUnknown) {
    state = known;
  } else {
    std::vector<std::pair<int32_t, int32_t>> live = lex_[static_cast<size_t>(state)]->live;
    bool changed = false;
    for (auto& [lexeme, q] : live) {
      const int c = regex_[static_cast<size_t>(lexeme)]->MaskClass(q, trie_->max_token_bytes());
      changed = changed || c != q;
      q = c;
    }
    const int32_t cls = changed ? Intern(std::move(live)) : state;
    lex_[static_cast<size_t>(state)]->mask_class = cls;
    state = cls;
  }
  if (cache_[static_cast<size_t>(state)] != nullptr) return *cache_[static_cast<size_t>(state)];
  auto c = std::make_unique<MaskCache>();
  const std::vector<std::pair<int32_t, int32_t>> live = lex_[static_cast<size_t>(state)]->live;
  if (live.size() == 1) {
    c->shared = SharedFor(state);
  } else {
    // Several lexemes alive (the keys an object allows next, the types a value may take): the
    // union of each one's own. A token stays inside the combined lexeme iff it stays inside one of
    // them (a lexeme once dead stays dead), and the combined lexeme can only end where one of them
    // does; each lexeme's own mask is shared by every state, and every grammar, it appears in.
    auto m = std::make_shared<SharedMask>();
    m->inside = TokenMask(trie_->vocab_size());
    for (const auto& one : live) {
      const std::shared_ptr<const SharedMask> s = SharedFor(Intern({one}));
      m->inside.Or(s->inside);
      m->crossings.insert(m->crossings.end(), s->crossings.begin(), s->crossings.end());
    }
    std::sort(m->crossings.begin(), m->crossings.end());
    m->crossings.erase(std::unique(m->crossings.begin(), m->crossings.end()), m->crossings.end());
    c->shared = std::move(m);
  }
  // This grammar's lexer state at each crossing: the lexer run over the node's path.
  // A crossing is where every lexeme of this state has died after one of them had matched.
  for (const uint32_t node : c->shared->crossings) {
    const std::string path = trie_->Path(node);
    int32_t at = state;
    for (size_t i = 0; i + 1 < path.size() && at >= 0; ++i)
      at = LexStep(at, static_cast<uint8_t>(path[i]));
    if (at >= 0 && !lex_[static_cast<size_t>(at)]->accepted.empty() &&
        LexStep(at, static_cast<uint8_t>(path.back())) == kDead)
      c->crossings.emplace_back(at, node);
  }
  std::stable_sort(c->crossings.begin(), c->crossings.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  cache_[static_cast<size_t>(state)] = std::move(c);
  ++built_;
  return *cache_[static_cast<size_t>(state)];
}

// --- SharedMasks --------------------------------------------------------------------------------

std::shared_ptr<SharedMasks> SharedMasks::For(const std::shared_ptr<const TokenTrie>& trie) {
  static std::mutex mu;
  static std::vector<std::pair<std::weak_ptr<const TokenTrie>, std::shared_ptr<SharedMasks>>> all;
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(all, [](const auto& e) { return e.first.expired(); });
  for (const auto& [t, m] : all)
    if (t.lock() == trie) return m;
  all.emplace_back(trie, std::make_shared<SharedMasks>());
  return all.back().second;
}

std::shared_ptr<const SharedMask> SharedMasks::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

std::shared_ptr<const StringLayers> SharedMasks::Layers(const TokenTrie& trie, int start) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = layers_.find(start); it != layers_.end()) return it->second;
  }
  auto l = std::make_shared<StringLayers>();
  l->open = TokenMask(trie.vocab_size());
  StringLengthAutomaton any(0, -1);
  trie.ForEachNode(start, [&](uint32_t node, uint8_t byte, int parent) {
    const int s = any.Next(parent, byte);
    if (s < 0) {
      if (any.Accepts(parent)) l->crossings.push_back(node);
      return s;
    }
    const int64_t chars = StringLengthAutomaton::CountOf(s);
    for (const int32_t id : trie.TokensAt(node)) {
      if (any.Accepts(s)) {
        l->closed_by_chars.emplace_back(chars, id);
      } else {
        l->open_by_chars.emplace_back(chars, id);
        l->open.Set(id);
      }
    }
    return s;
  });
  std::sort(l->open_by_chars.begin(), l->open_by_chars.end());
  std::sort(l->closed_by_chars.begin(), l->closed_by_chars.end());
  std::lock_guard<std::mutex> lock(mu_);
  return layers_.emplace(start, std::move(l)).first->second;
}

void SharedMasks::Put(const std::string& key, std::shared_ptr<const SharedMask> mask) {
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.size() >= kMaxEntries) map_.clear();
  map_.emplace(key, std::move(mask));
}

// --- Matcher -----------------------------------------------------------------------------------

Matcher::Matcher(std::shared_ptr<CompiledGrammar> g) : g_(std::move(g)) {
  std::unique_lock lock(g_->mu_);
  Set first;
  const int32_t start = g_->grammar_.start();
  for (const int32_t p : g_->rule_prods_[static_cast<size_t>(start)])
    first.items.push_back({p, 0, 0});
  sets_.push_back(std::move(first));
  Close(&sets_.back(), 0);
  Seal(&sets_.back());
  lex_ = sets_.back().lex_start;
  len_ = 0;
}

void Matcher::Close(Set* set, int32_t k) {
  std::unordered_set<uint64_t> seen;
  const auto key = [](const Item& it) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(it.prod)) << 40) ^
           (static_cast<uint64_t>(static_cast<uint32_t>(it.dot)) << 32) ^
           static_cast<uint32_t>(it.origin);
  };
  for (const Item& it : set->items) seen.insert(key(it));
  const auto add = [&](const Item& it) {
    if (seen.insert(key(it)).second) set->items.push_back(it);
  };
  for (size_t i = 0; i < set->items.size(); ++i) {
    const Item it = set->items[i];
    const CompiledGrammar::Production& p = g_->prods_[static_cast<size_t>(it.prod)];
    if (static_cast<size_t>(it.dot) == p.rhs.size()) {
      // Completed: advance the items of its origin waiting for p.lhs (an empty completion in this
      // set is covered by the nullable advance below).
      if (it.origin == k) continue;
      const Set& from = sets_[static_cast<size_t>(it.origin)];
      const auto range =
          std::equal_range(from.waiting.begin(), from.waiting.end(), std::pair{p.lhs, INT32_MIN},
                           [](const auto& x, const auto& y) { return x.first < y.first; });
      for (auto w = range.first; w != range.second; ++w) {
        const Item& item = from.items[static_cast<size_t>(w->second)];
        add({item.prod, item.dot + 1, item.origin});
      }
      continue;
    }
    const Grammar::Symbol s = p.rhs[static_cast<size_t>(it.dot)];
    if (s.lexeme) continue;
    for (const int32_t q : g_->rule_prods_[static_cast<size_t>(s.id)]) add({q, 0, k});
    if (g_->nullable_[static_cast<size_t>(s.id)]) add({it.prod, it.dot + 1, it.origin});
  }
  if (metered_) fuel_ -= static_cast<int64_t>(set->items.size());
}

void Matcher::Seal(Set* set) {
  std::vector<int32_t> next;
  set->complete = false;
  set->waiting.clear();
  const int32_t start = g_->grammar_.start();
  for (size_t i = 0; i < set->items.size(); ++i) {
    const Item& it = set->items[i];
    const auto& p = g_->prods_[static_cast<size_t>(it.prod)];
    if (static_cast<size_t>(it.dot) < p.rhs.size()) {
      const Grammar::Symbol s = p.rhs[static_cast<size_t>(it.dot)];
      if (s.lexeme)
        next.push_back(s.id);
      else
        set->waiting.push_back({s.id, static_cast<int32_t>(i)});
    } else if (p.lhs == start && it.origin == 0) {
      set->complete = true;
    }
  }
  std::sort(set->waiting.begin(), set->waiting.end());
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  set->lex_start = next.empty() ? CompiledGrammar::kDead : Start(next);
}

bool Matcher::Scan(int32_t at) {
  const CompiledGrammar::LexState& from = *g_->lex_[static_cast<size_t>(at)];
  const std::vector<int32_t>& lexemes = from.accepted;
  Set next;
  next.scanned = from.accepted_id;
  if (metered_) fuel_ -= static_cast<int64_t>(sets_.back().items.size());
  for (const Item& it : sets_.back().items) {
    const auto& p = g_->prods_[static_cast<size_t>(it.prod)];
    if (static_cast<size_t>(it.dot) < p.rhs.size() && p.rhs[static_cast<size_t>(it.dot)].lexeme &&
        std::binary_search(lexemes.begin(), lexemes.end(), p.rhs[static_cast<size_t>(it.dot)].id))
      next.items.push_back({it.prod, it.dot + 1, it.origin});
  }
  if (next.items.empty()) return false;
  sets_.push_back(std::move(next));
  Close(&sets_.back(), static_cast<int32_t>(sets_.size() - 1));
  Seal(&sets_.back());
  return true;
}

int32_t Matcher::Step(int32_t state, uint8_t byte) {
  if (!reading_) return g_->LexStep(state, byte);
  const int32_t n = g_->KnownStep(state, byte);
  if (n != CompiledGrammar::kUnknown) return n;
  missed_ = true;
  return CompiledGrammar::kDead;
}

int32_t Matcher::Start(const std::vector<int32_t>& lexemes) {
  if (!reading_) return g_->LexStart(lexemes);
  const int32_t n = g_->KnownStart(lexemes);
  if (n != CompiledGrammar::kUnknown) return n;
  missed_ = true;
  return CompiledGrammar::kDead;
}

bool Matcher::Push(uint8_t byte) {
  if (metered_ && --fuel_ < 0) {  // the mask is given up: the walk goes no further
    ran_out_ = true;
    return false;
  }
  int32_t n = Step(lex_, byte);
  if (n >= 0) {
    undo_.push_back({lex_, len_, false});
    lex_ = n;
    ++len_;
    return true;
  }
  if (lex_ < 0 || len_ == 0) return false;
  // The byte goes on no live lexeme: end one that matched, and start the next with it.
  const std::vector<int32_t>& accepted = g_->lex_[static_cast<size_t>(lex_)]->accepted;
  if (accepted.empty() || !Scan(lex_)) return false;
  n = Step(sets_.back().lex_start, byte);
  if (n < 0) {
    sets_.pop_back();
    return false;
  }
  undo_.push_back({lex_, len_, true});
  lex_ = n;
  len_ = 1;
  return true;
}

void Matcher::Pop(int n) {
  for (; n > 0; --n) {
    const Undo u = undo_.back();
    undo_.pop_back();
    if (u.scanned) sets_.pop_back();
    lex_ = u.lex;
    len_ = u.len;
  }
}

void Matcher::EndFinalLexeme() {
  if (len_ == 0 || lex_ < 0 || !g_->IsFinal(lex_)) return;
  // A scan of an allowed lexeme that matched always yields a set (its item is in the top set).
  if (Scan(lex_)) {
    lex_ = sets_.back().lex_start;
    len_ = 0;
  }
}

bool Matcher::Consume(std::string_view bytes) {
  std::unique_lock lock(g_->mu_);
  const size_t mark = undo_.size(), committed = sets_.size();
  for (const char c : bytes)
    if (!Push(static_cast<uint8_t>(c))) {
      Pop(static_cast<int>(undo_.size() - mark));
      return false;
    }
  undo_.clear();  // the sets pushed stay: they are the chart now
  EndFinalLexeme();
  for (size_t k = committed; k < sets_.size(); ++k)
    sets_[k].chart = g_->ChartChild(sets_[k - 1].chart, sets_[k].scanned);
  return true;
}

bool Matcher::CanEnd() {
  const Key now = Now();
  if (now == can_end_of_) return can_end_;
  std::unique_lock lock(g_->mu_);
  can_end_of_ = now;
  if (len_ == 0) return can_end_ = sets_.back().complete;
  const std::vector<int32_t>& accepted = g_->lex_[static_cast<size_t>(lex_)]->accepted;
  if (accepted.empty() || !Scan(lex_)) return can_end_ = false;
  can_end_ = sets_.back().complete;
  sets_.pop_back();
  return can_end_;
}

bool Matcher::IsTerminated() {
  if (!CanEnd()) return false;
  std::unique_lock lock(g_->mu_);
  if (len_ == 0) return sets_.back().lex_start < 0;
  // Inside a lexeme that matched: terminated when it cannot go on and nothing can follow it.
  for (int b = 0; b < 256; ++b)
    if (g_->LexStep(lex_, static_cast<uint8_t>(b)) >= 0) return false;
  if (!Scan(lex_)) return true;
  const bool none = sets_.back().lex_start < 0;
  sets_.pop_back();
  return none;
}

void Matcher::Mask(TokenMask* mask) {
  *mask = Mask();
}

void Matcher::MaskAfresh(TokenMask* mask) {
  std::shared_ptr<const SharedMask> base;
  std::unique_lock lock(g_->mu_);
  ComputeMask(mask, &base);
}

void Matcher::ComputeMaskLocked(TokenMask* mask, std::shared_ptr<const SharedMask>* base) {
  if (!cold_) {
    // From the tables as built, beside the other matchers of the grammar.
    std::shared_lock lock(g_->mu_);
    reading_ = true;
    missed_ = false;
    ComputeMask(mask, base);
    reading_ = false;
    if (!missed_) return;
  }
  // A table was missing (the walk refused where it would have built it): again, building. While
  // masks keep building tables (a grammar's first documents), the next is computed this way
  // straight away.
  std::unique_lock lock(g_->mu_);
  const int64_t built = g_->built_;
  ComputeMask(mask, base);
  cold_ = g_->built_ != built;
}

const TokenMask& Matcher::Mask() {
  const Key now = Now();
  if (now == memo_of_) return memo_;  // this matcher's own state: no lock
  memo_of_ = now;
  ++masks_computed_;
  // Kept for the grammar's matchers by another of them (or this one, earlier)?
  const CompiledGrammar::MaskKey key{sets_.back().chart, lex_, len_ > 0};
  if (g_->FindMask(key, &memo_, &memo_only_, &exhausted_)) return memo_;
  std::shared_ptr<const SharedMask> base;
  ComputeMaskLocked(&memo_, &base);
  exhausted_ = ran_out_;
  memo_only_ = llmq::OnlyToken(memo_.words().data(), memo_.words().size());
  g_->PutMask(key, memo_, std::move(base), memo_only_, exhausted_);
  return memo_;
}

int32_t Matcher::OnlyToken() {
  (void)Mask();
  return memo_only_;
}

void Matcher::ComputeMask(TokenMask* mask, std::shared_ptr<const SharedMask>* base) {
  metered_ = true;
  ran_out_ = false;
  fuel_ = g_->mask_fuel_;
  WalkMask(mask, base);
  metered_ = false;
  mask_work_ = g_->mask_fuel_ - fuel_;
  if (ran_out_) {
    *mask = TokenMask(g_->trie_->vocab_size());
    base->reset();
  }
}

void Matcher::WalkMask(TokenMask* mask, std::shared_ptr<const SharedMask>* base) {
  base->reset();
  if (lex_ < 0) {
    *mask = TokenMask(g_->trie_->vocab_size());
    return;
  }
  const CompiledGrammar::MaskCache* known = reading_ ? g_->KnownCache(lex_) : nullptr;
  if (reading_ && known == nullptr) {
    missed_ = true;
    return;
  }
  const CompiledGrammar::MaskCache& c = reading_ ? *known : g_->CacheFor(lex_);
  *mask = c.shared->inside;  // every word written: no clearing first
  *base = c.shared;
  // Below each crossing the lexeme ends: the parser scans it once per lexer state there, and the
  // byte of the crossing's node starts the next lexeme.
  const int32_t lex = lex_, len = len_;
  for (size_t i = 0; i < c.crossings.size();) {
    const int32_t at = c.crossings[i].first;
    size_t j = i;
    while (j < c.crossings.size() && c.crossings[j].first == at) ++j;
    if (Scan(at)) {
      for (size_t k = i; k < j; ++k) {
        lex_ = sets_.back().lex_start;
        len_ = 0;
        g_->trie_->WalkSubtree(*this, c.crossings[k].second, mask);
      }
      sets_.pop_back();
    }
    i = j;
  }
  lex_ = lex;
  len_ = len;
}

}  // namespace llmq
