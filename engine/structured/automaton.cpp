#include "engine/structured/automaton.h"

#include "engine/structured/regex.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_map>

namespace llmq {

namespace {

// Adds `word` to the trie of `children` (node 0 the root; a node's children numbered after it)
// and marks its last node in `end`.
void AddToTrie(std::string_view word, std::vector<std::map<uint8_t, int>>* children,
               std::vector<char>* end) {
  int at = 0;
  for (const char c : word) {
    const auto b = static_cast<uint8_t>(c);
    auto& kids = (*children)[static_cast<size_t>(at)];
    if (const auto it = kids.find(b); it != kids.end()) {
      at = it->second;
      continue;
    }
    at = static_cast<int>(children->size());
    kids.emplace(b, at);
    children->emplace_back();  // last: `kids` moves with the vector
    end->push_back(0);
  }
  (*end)[static_cast<size_t>(at)] = 1;
}

}  // namespace

KeyExceptAutomaton::KeyExceptAutomaton(const std::vector<std::string>& names)
    : children_(1), end_(1, 0) {
  for (const std::string& name : names) AddToTrie(name, &children_, &end_);
  // JSON's string syntax: any character but '"', '\' and controls, or an escape.
  const Status st = Regex::Compile(kStringRegex, Regex::Mode::kFull, &string_);
  (void)st;  // a fixed pattern: compiles
}

KeyExceptAutomaton::~KeyExceptAutomaton() = default;

const char* const KeyExceptAutomaton::kStringRegex =
    "\"(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\bfnrt]|\\\\u00(?:0[0-7bef]|1[0-9a-f]))*\"";

int KeyExceptAutomaton::WithoutNames(int state) {
  if (state < 0) return kDead;
  return Intern(kOut, states_[static_cast<size_t>(state)].second);
}

std::string KeyExceptAutomaton::StringStateKey(int state) const {
  return state < 0 ? "dead" : string_->StateKey(states_[static_cast<size_t>(state)].second);
}

std::vector<std::string> KeyExceptAutomaton::ClosingsOnNames(int state) const {
  std::vector<std::string> out;
  if (state < 0) return out;
  const int trie = states_[static_cast<size_t>(state)].first;
  if (trie == kOut) return out;
  // Each name's bytes left from here (all of it, after the opening quote, before it), then '"'.
  std::vector<std::pair<int, std::string>> stack = {
      {trie == kBefore ? 0 : trie, trie == kBefore ? "\"" : ""}};
  while (!stack.empty()) {
    auto [at, text] = std::move(stack.back());
    stack.pop_back();
    if (end_[static_cast<size_t>(at)]) out.push_back(text + '"');
    for (const auto& [b, child] : children_[static_cast<size_t>(at)])
      stack.emplace_back(child, text + static_cast<char>(b));
  }
  return out;
}

int KeyExceptAutomaton::Intern(int trie, int str) {
  if (str == Regex::kDead) return kDead;
  const auto [it, fresh] =
      index_.emplace(std::make_pair(trie, str), static_cast<int>(states_.size()));
  if (fresh) states_.emplace_back(trie, str);
  return it->second;
}

int KeyExceptAutomaton::Start() {
  return Intern(kBefore, string_->start());
}

int KeyExceptAutomaton::Next(int state, uint8_t byte) {
  if (state < 0) return kDead;
  const auto [trie, str] = states_[static_cast<size_t>(state)];
  const int s2 = string_->Step(str, byte);
  if (s2 == Regex::kDead) return kDead;
  int t2 = kOut;
  if (trie == kBefore) {
    t2 = 0;  // the opening quote: at the trie's root
  } else if (trie >= 0) {
    if (byte == '"' && string_->IsAccepting(s2)) {
      if (end_[static_cast<size_t>(trie)]) return kDead;  // a listed name, closed
    } else if (const auto it = children_[static_cast<size_t>(trie)].find(byte);
               it != children_[static_cast<size_t>(trie)].end()) {
      t2 = it->second;
    }
  }
  return Intern(t2, s2);
}

std::string KeyExceptAutomaton::StateKey(int state) const {
  if (state < 0) return "dead";
  return std::to_string(states_[static_cast<size_t>(state)].first) + "/" +
         string_->StateKey(states_[static_cast<size_t>(state)].second);
}

bool KeyExceptAutomaton::Accepts(int state) const {
  return state >= 0 && string_->IsAccepting(states_[static_cast<size_t>(state)].second);
}

struct KeyPatternAutomaton::Product {
  // The names' trie over their quoted JSON text ('"', the name, '"'): node 0 the root.
  std::vector<std::map<uint8_t, int>> children;
  std::vector<char> end;        // a whole quoted name ends here
  std::vector<uint64_t> below;  // names ending at the node or under it
  // The product of the string's automaton and the patterns': state 0 the start.
  std::vector<int32_t> next;  // [state * 256 + byte]: the next state or kDead
  std::vector<int64_t> sig;   // where the key has closed: the patterns matching it; else -1
  std::vector<uint64_t> subsets;
};

namespace {

constexpr int kOff = -1;

// The last few tables built, by the key they were built from (read-only once built, shared): a
// schema's compiler builds a lexeme's automaton to check it, then its grammar builds it again.
template <typename T>
class Recent {
 public:
  std::shared_ptr<const T> Find(const std::string& key) {
    const std::lock_guard<std::mutex> lock(mu_);
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (it->first == key) {
        items_.splice(items_.begin(), items_, it);
        return it->second;
      }
    return nullptr;
  }
  void Put(const std::string& key, std::shared_ptr<const T> value) {
    const std::lock_guard<std::mutex> lock(mu_);
    items_.emplace_front(key, std::move(value));
    if (items_.size() > 8) items_.pop_back();
  }

 private:
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const T>>> items_;
};  // a trie position: off the names' trie

Status Explore(const std::vector<std::string>& names, const std::vector<std::string>& patterns,
               KeyPatternAutomaton::Product* p) {
  p->children.assign(1, {});
  p->end.assign(1, 0);
  for (const std::string& name : names) AddToTrie('"' + name + '"', &p->children, &p->end);
  p->below.assign(p->children.size(), 0);
  for (size_t n = p->children.size(); n-- > 0;) {  // children are numbered after their parents
    p->below[n] += p->end[n];
    for (const auto& [b, c] : p->children[n]) p->below[n] += p->below[static_cast<size_t>(c)];
  }
  std::vector<std::unique_ptr<Regex>> re(patterns.size() + 1);
  if (Status st = Regex::Compile(KeyExceptAutomaton::kStringRegex, Regex::Mode::kFull, &re[0]);
      !st.ok())
    return st;
  for (size_t i = 0; i < patterns.size(); ++i)
    if (Status st = Regex::Compile(patterns[i], {Regex::Mode::kSearch, true, true}, &re[i + 1]);
        !st.ok())
      return (st.code() == Status::Code::kUnsupported
                  ? Status::Unsupported
                  : Status::InvalidArgument)("pattern " + std::to_string(i) + ": " + st.message());
  // A product state: the string's state, then each pattern's (kDead once it can no longer match),
  // packed as bytes to be looked up.
  const size_t m = re.size();
  std::unordered_map<std::string, int32_t> index;
  std::vector<std::string> tuples;
  const auto intern = [&](std::string t) {
    const auto [it, fresh] = index.emplace(t, static_cast<int32_t>(tuples.size()));
    if (fresh) tuples.push_back(std::move(t));
    return it->second;
  };
  const auto at = [](const std::string& t, size_t i) {
    int32_t v;
    std::memcpy(&v, t.data() + i * sizeof v, sizeof v);
    return v;
  };
  std::string start(m * sizeof(int32_t), '\0');
  for (size_t i = 0; i < m; ++i) {
    const int32_t v = re[i]->start();
    std::memcpy(start.data() + i * sizeof v, &v, sizeof v);
  }
  intern(std::move(start));
  for (size_t k = 0; k < tuples.size(); ++k) {
    if (tuples.size() > static_cast<size_t>(KeyPatternAutomaton::kMaxStates))
      return Status::Unsupported("the keys' automaton passes " +
                                 std::to_string(KeyPatternAutomaton::kMaxStates) + " states");
    const std::string cur = tuples[k];
    int64_t bits = -1;
    if (re[0]->IsAccepting(at(cur, 0))) {
      bits = 0;
      for (size_t i = 1; i < m; ++i)
        if (at(cur, i) != Regex::kDead && re[i]->IsAccepting(at(cur, i)))
          bits |= int64_t{1} << (i - 1);
    }
    p->sig.push_back(bits);
    std::string t(cur.size(), '\0');
    for (int b = 0; b < 256; ++b) {
      const int32_t str = re[0]->Step(at(cur, 0), static_cast<uint8_t>(b));
      if (str == Regex::kDead) {
        p->next.push_back(LexemeAutomaton::kDead);
        continue;
      }
      std::memcpy(t.data(), &str, sizeof str);
      for (size_t i = 1; i < m; ++i) {
        const int32_t q = at(cur, i);
        const int32_t v =
            q == Regex::kDead ? Regex::kDead : re[i]->Step(q, static_cast<uint8_t>(b));
        std::memcpy(t.data() + i * sizeof v, &v, sizeof v);
      }
      p->next.push_back(intern(t));
    }
  }
  for (const int64_t s : p->sig)
    if (s >= 0) p->subsets.push_back(static_cast<uint64_t>(s));
  std::sort(p->subsets.begin(), p->subsets.end());
  p->subsets.erase(std::unique(p->subsets.begin(), p->subsets.end()), p->subsets.end());
  return Status::Ok();
}

}  // namespace

Status KeyPatternAutomaton::Build(const std::vector<std::string>& names,
                                  const std::vector<std::string>& patterns, uint64_t subset,
                                  std::unique_ptr<KeyPatternAutomaton>* out) {
  if (patterns.size() > static_cast<size_t>(kMaxPatterns))
    return Status::Unsupported("more than " + std::to_string(kMaxPatterns) + " patterns");
  // The product of (names, patterns), built once for the lexemes of each subset.
  static Recent<Product> recent;
  std::string key;
  for (const auto* list : {&names, &patterns}) {
    for (const std::string& x : *list) key += std::to_string(x.size()) + ":" + x;
    key += ';';
  }
  std::shared_ptr<const Product> product = recent.Find(key);
  if (product == nullptr) {
    auto p = std::make_shared<Product>();
    LLMQ_RETURN_IF_ERROR(Explore(names, patterns, p.get()));
    product = p;
    recent.Put(key, product);
  }
  auto a = std::unique_ptr<KeyPatternAutomaton>(new KeyPatternAutomaton());
  a->product_ = product;
  const Product& p = *product;
  const size_t n = p.sig.size();
  const auto closes = [&](size_t q) { return p.sig[q] >= 0 && uint64_t(p.sig[q]) == subset; };
  // Live: a key of exactly `subset` closes from here (backwards from the closing states).
  std::vector<std::vector<int32_t>> from(n);  // by state: the states a byte leads from, a byte each
  for (size_t q = 0; q < n; ++q)
    for (size_t b = 0; b < 256; ++b)
      if (const int32_t t = p.next[q * 256 + b]; t != kDead)
        from[static_cast<size_t>(t)].push_back(static_cast<int32_t>(q));
  a->live_.assign(n, 0);
  std::vector<int32_t> work;
  for (size_t q = 0; q < n; ++q)
    if (closes(q)) {
      a->live_[q] = 1;
      work.push_back(static_cast<int32_t>(q));
    }
  while (!work.empty()) {
    const int32_t t = work.back();
    work.pop_back();
    for (const int32_t q : from[static_cast<size_t>(t)])
      if (!a->live_[static_cast<size_t>(q)]) {
        a->live_[static_cast<size_t>(q)] = 1;
        work.push_back(q);
      }
  }
  // Ways to close from each live state, capped past the names: from the states whose bytes lead
  // only to counted states (Kahn's order backwards); those that can loop are never counted (cap).
  const uint64_t cap = p.below[0] + 1;
  std::vector<uint32_t> left(n, 0);  // bytes to live states not counted yet
  for (size_t q = 0; q < n; ++q)
    if (a->live_[q])
      for (size_t b = 0; b < 256; ++b)
        if (const int32_t t = p.next[q * 256 + b]; t != kDead && a->live_[static_cast<size_t>(t)])
          ++left[q];
  a->ways_.assign(n, 0);
  std::vector<char> counted(n, 0);
  for (size_t q = 0; q < n; ++q)
    if (a->live_[q] && left[q] == 0) work.push_back(static_cast<int32_t>(q));
  while (!work.empty()) {
    const auto t = static_cast<size_t>(work.back());
    work.pop_back();
    counted[t] = 1;
    a->ways_[t] = std::min(cap, a->ways_[t] + (closes(t) ? 1 : 0));
    for (const int32_t q : from[t]) {
      const auto u = static_cast<size_t>(q);
      if (!a->live_[u]) continue;
      a->ways_[u] = std::min(cap, a->ways_[u] + a->ways_[t]);
      if (--left[u] == 0) work.push_back(q);
    }
  }
  for (size_t q = 0; q < n; ++q)
    if (a->live_[q] && !counted[q]) a->ways_[q] = cap;
  a->start_ = a->Intern(0, 0);
  *out = std::move(a);
  return Status::Ok();
}

KeyPatternAutomaton::~KeyPatternAutomaton() = default;

const std::vector<uint64_t>& KeyPatternAutomaton::subsets() const {
  return product_->subsets;
}

bool KeyPatternAutomaton::LiveOnTrie(int trie, int q) {
  const Product& p = *product_;
  if (ways_[static_cast<size_t>(q)] > p.below[static_cast<size_t>(trie)]) return true;
  // Few ways to close (no loop ahead): is one of them not a name? Each way walked on the trie.
  struct Frame {
    int q, trie;
  };
  std::vector<Frame> stack = {{q, trie}};
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    if (f.trie == kOff) return true;  // off the trie: not a name
    const auto fq = static_cast<size_t>(f.q);
    if (p.sig[fq] >= 0 && !p.end[static_cast<size_t>(f.trie)]) return true;  // closed, no name
    for (size_t b = 0; b < 256; ++b) {
      const int32_t t = p.next[fq * 256 + b];
      if (t == kDead || !live_[static_cast<size_t>(t)]) continue;
      const auto& kids = p.children[static_cast<size_t>(f.trie)];
      const auto it = kids.find(static_cast<uint8_t>(b));
      stack.push_back({t, it == kids.end() ? kOff : it->second});
    }
  }
  return false;
}

int KeyPatternAutomaton::Intern(int trie, int q) {
  if (q < 0 || !live_[static_cast<size_t>(q)]) return kDead;
  const auto [it, fresh] = index_.emplace(std::make_pair(trie, q), kDead);
  if (!fresh) return it->second;
  if (trie != kOff && (product_->end[static_cast<size_t>(trie)] || !LiveOnTrie(trie, q)))
    return kDead;  // a listed name closed, or only names close from here
  it->second = static_cast<int>(states_.size());
  states_.emplace_back(trie, q);
  return it->second;
}

int KeyPatternAutomaton::Next(int state, uint8_t byte) {
  if (state < 0) return kDead;
  const auto [trie, q] = states_[static_cast<size_t>(state)];
  const int32_t t = product_->next[static_cast<size_t>(q) * 256 + byte];
  if (t == kDead) return kDead;
  int trie2 = kOff;
  if (trie != kOff) {
    const auto& kids = product_->children[static_cast<size_t>(trie)];
    if (const auto it = kids.find(byte); it != kids.end()) trie2 = it->second;
  }
  return Intern(trie2, t);
}

bool KeyPatternAutomaton::Accepts(int state) const {
  if (state < 0) return false;
  const int64_t s = product_->sig[static_cast<size_t>(states_[static_cast<size_t>(state)].second)];
  return s >= 0;  // a live state where the key has closed: on a key of the subset
}

std::string KeyPatternAutomaton::StateKey(int state) const {
  if (state < 0) return "dead";
  return std::to_string(states_[static_cast<size_t>(state)].first) + "/" +
         std::to_string(states_[static_cast<size_t>(state)].second);
}

}  // namespace llmq

namespace llmq {

int StringLengthAutomaton::Next(int state, uint8_t b) {
  if (state < 0) return kDead;
  // Whether b is one of `set`: the one-letter escapes, a surrogate's second hex digit (high
  // D8-DB, low DC-DF).
  const auto in = [b](std::string_view set) {
    return set.find(static_cast<char>(b)) != std::string_view::npos;
  };
  const int64_t n = Count(state);
  const bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
  const bool cont = b >= 0x80 && b <= 0xBF;
  // A character starts only when the count allows one more; it is counted when it starts.
  const auto start = [&](int sub) { return max_ >= 0 && n + 1 > max_ ? kDead : Pack(n + 1, sub); };
  switch (Sub(state)) {
    case kBefore:
      return b == '"' ? Pack(0, kBetween) : kDead;
    case kBetween:
      if (b == '"') return n >= min_ ? Pack(n, kClosed) : kDead;
      if (b == '\\') return start(kEscape);
      if (b < 0x20) return kDead;
      if (b < 0x80) return start(kBetween);
      if (b >= 0xC2 && b <= 0xDF) return start(kCont1);
      if (b == 0xE0) return start(kCont2E0);
      if (b == 0xED) return start(kCont2ED);
      if (b >= 0xE1 && b <= 0xEF) return start(kCont2);
      if (b == 0xF0) return start(kCont3F0);
      if (b >= 0xF1 && b <= 0xF3) return start(kCont3);
      if (b == 0xF4) return start(kCont3F4);
      return kDead;
    case kEscape:
      if (b == 'u') return Pack(n, kHex0);
      return in("\"\\/bfnrt") ? Pack(n, kBetween) : kDead;
    case kHex0:
      if (b == 'd' || b == 'D') return Pack(n, kHexD1);
      return hex ? Pack(n, kHex1) : kDead;
    case kHexD1:  // D8-DB: a high surrogate; DC-DF: a low one, lone
      if (in("89abAB")) return Pack(n, kHighHex2);
      if (in("cdefCDEF")) return kDead;
      return hex ? Pack(n, kHex2) : kDead;
    case kHex1:
    case kHex2:
      return hex ? Pack(n, Sub(state) + 1) : kDead;
    case kHex3:
      return hex ? Pack(n, kBetween) : kDead;
    case kHighHex2:
      return hex ? Pack(n, kHighHex3) : kDead;
    case kHighHex3:
      return hex ? Pack(n, kAfterHigh) : kDead;
    // After a high surrogate: only its low surrogate, which adds nothing to the count.
    case kAfterHigh:
      return b == '\\' ? Pack(n, kEscapeAfterHigh) : kDead;
    case kEscapeAfterHigh:
      return b == 'u' ? Pack(n, kHexAfterHigh0) : kDead;
    case kHexAfterHigh0:
      return b == 'd' || b == 'D' ? Pack(n, kHexAfterHigh1) : kDead;
    case kHexAfterHigh1:
      return in("cdefCDEF") ? Pack(n, kHex2) : kDead;
    case kCont1:
      return cont ? Pack(n, kBetween) : kDead;
    case kCont2:
      return cont ? Pack(n, kCont1) : kDead;
    case kCont2E0:
      return b >= 0xA0 && b <= 0xBF ? Pack(n, kCont1) : kDead;
    case kCont2ED:
      return b >= 0x80 && b <= 0x9F ? Pack(n, kCont1) : kDead;
    case kCont3:
      return cont ? Pack(n, kCont2) : kDead;
    case kCont3F0:
      return b >= 0x90 && b <= 0xBF ? Pack(n, kCont2) : kDead;
    case kCont3F4:
      return b >= 0x80 && b <= 0x8F ? Pack(n, kCont2) : kDead;
    default:
      return kDead;  // closed: nothing follows
  }
}

int StringLengthAutomaton::MaskClass(int state, int horizon) const {
  if (state < 0 || Sub(state) == kBefore || Sub(state) == kClosed) return state;
  const int64_t n = Count(state);
  if (max_ >= 0 && max_ - n <= horizon) return state;  // near max: exact
  if (n >= min_) return Pack(min_, Sub(state));
  if (min_ - n > horizon) return Pack(min_ - horizon - 1, Sub(state));
  return state;
}

}  // namespace llmq

namespace llmq {

struct BoundedStringAutomaton::Table {
  std::vector<int32_t> next;    // [node * 256 + byte]: the next product state or kDead
  std::vector<uint8_t> inc;     // [node * 256 + byte]: characters that byte completes
  std::vector<char> closed;     // the regex matched and the string closed
  std::vector<uint64_t> reach;  // [node * words + w]: bit r, r characters more can close
  size_t words = 0;
  bool empty = false;  // the regex matches nothing
};

Status BoundedStringAutomaton::Build(Regex* re, int64_t min, int64_t max,
                                     std::unique_ptr<BoundedStringAutomaton>* out,
                                     const std::string& key) {
  auto a = std::unique_ptr<BoundedStringAutomaton>(new BoundedStringAutomaton());
  a->min_ = min;
  a->max_ = max;
  a->bound_ = max >= 0 ? max : min;
  static Recent<Table> recent;
  if (!key.empty())
    if (std::shared_ptr<const Table> t = recent.Find(key)) {
      a->t_ = std::move(t);
      a->start_ = a->t_->empty ? kDead : a->Intern(0, 0);
      *out = std::move(a);
      return Status::Ok();
    }
  auto t = std::make_shared<Table>();
  const auto keep = [&] {
    a->t_ = t;
    if (!key.empty()) recent.Put(key, t);
  };
  StringLengthAutomaton len(0, -1);  // the position in a character; counts, bounds none
  // Product states: (the regex's state, the string's position at count 0), breadth first.
  std::map<std::pair<int32_t, int32_t>, int32_t> index;
  std::vector<std::pair<int32_t, int32_t>> nodes;
  const auto intern = [&](std::pair<int32_t, int32_t> n) {
    const auto [it, fresh] = index.emplace(n, static_cast<int32_t>(nodes.size()));
    if (fresh) nodes.push_back(n);
    return it->second;
  };
  if (re->start() == Regex::kDead) {
    t->empty = true;
    keep();
    *out = std::move(a);
    return Status::Ok();
  }
  intern({re->start(), len.Start()});
  int max_inc = 1;
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (nodes.size() > static_cast<size_t>(kMaxStates))
      return Status::Unsupported("a pattern and a length: more than " + std::to_string(kMaxStates) +
                                 " states");
    const auto [r, l] = nodes[k];
    t->closed.push_back(re->IsAccepting(r) && len.Accepts(l));
    for (int b = 0; b < 256; ++b) {
      const int32_t r2 = re->Step(r, static_cast<uint8_t>(b));
      const int l2 = r2 == Regex::kDead ? kDead : len.Next(l, static_cast<uint8_t>(b));
      if (l2 == kDead) {
        t->next.push_back(kDead);
        t->inc.push_back(0);
        continue;
      }
      const int64_t inc = StringLengthAutomaton::CountOf(l2);
      max_inc = std::max(max_inc, static_cast<int>(inc));
      t->inc.push_back(static_cast<uint8_t>(inc));
      t->next.push_back(intern({r2, StringLengthAutomaton::AtCount(l2, 0)}));
    }
  }
  const size_t n = nodes.size();
  if (static_cast<double>(n) * static_cast<double>(a->bound_ + 1) > static_cast<double>(kMaxBits))
    return Status::Unsupported("a pattern and a length of " + std::to_string(a->bound_) +
                               ": more than " + std::to_string(kMaxBits) + " counts to keep");
  // Backwards: the states a byte leads from, with the characters it completes.
  std::vector<std::vector<std::pair<int32_t, uint8_t>>> from(n);
  for (size_t u = 0; u < n; ++u)
    for (size_t b = 0; b < 256; ++b)
      if (const int32_t v = t->next[u * 256 + b]; v != kDead) {
        auto& f = from[static_cast<size_t>(v)];
        const std::pair<int32_t, uint8_t> e{static_cast<int32_t>(u), t->inc[u * 256 + b]};
        if (std::find(f.begin(), f.end(), e) == f.end()) f.push_back(e);
      }
  const auto words = static_cast<size_t>((a->bound_ + 1 + 63) / 64);
  t->words = words;
  t->reach.assign(n * words, 0);
  const auto has = [&](size_t v, int64_t r) {
    return (t->reach[v * words + static_cast<size_t>(r / 64)] >> (r % 64) & 1) != 0;
  };
  const auto set = [&](size_t v, int64_t r) {
    t->reach[v * words + static_cast<size_t>(r / 64)] |= uint64_t{1} << (r % 64);
  };
  // Layer r: the states from which r more characters can close the string (the exact counts up
  // to the bound; without a max, those below min, then "min or more" in the last bit).
  const int64_t exact = max >= 0 ? a->bound_ : a->bound_ - 1;
  std::vector<std::vector<int32_t>> layer(static_cast<size_t>(max_inc) + 1);  // the last ones
  const auto at = [&](int64_t r) -> std::vector<int32_t>& {
    return layer[static_cast<size_t>(r % static_cast<int64_t>(layer.size()))];
  };
  for (int64_t r = 0; r <= exact; ++r) {
    std::vector<int32_t>& cur = at(r);
    cur.clear();
    const auto add = [&](int32_t u) {
      if (!has(static_cast<size_t>(u), r)) {
        set(static_cast<size_t>(u), r);
        cur.push_back(u);
      }
    };
    if (r == 0) {
      for (size_t v = 0; v < n; ++v)
        if (t->closed[v]) add(static_cast<int32_t>(v));
    } else {
      for (int d = 1; d <= max_inc && d <= r; ++d)
        for (const int32_t v : at(r - d))
          for (const auto& [u, inc] : from[static_cast<size_t>(v)])
            if (inc == d) add(u);
    }
    for (size_t i = 0; i < cur.size(); ++i)  // bytes that complete no character
      for (const auto& [u, inc] : from[static_cast<size_t>(cur[i])])
        if (inc == 0) add(u);
  }
  if (max < 0) {  // "min or more": from a layer past min - 1, then back along any byte
    const int64_t r = a->bound_;
    std::vector<int32_t> work;
    const auto add = [&](int32_t u) {
      if (!has(static_cast<size_t>(u), r)) {
        set(static_cast<size_t>(u), r);
        work.push_back(u);
      }
    };
    if (r == 0)
      for (size_t v = 0; v < n; ++v)
        if (t->closed[v]) add(static_cast<int32_t>(v));
    for (int64_t k = std::max<int64_t>(0, r - max_inc); k < r; ++k)
      for (const int32_t v : at(k))
        for (const auto& [u, inc] : from[static_cast<size_t>(v)])
          if (k + inc >= r) add(u);
    while (!work.empty()) {
      const int32_t v = work.back();
      work.pop_back();
      for (const auto& [u, inc] : from[static_cast<size_t>(v)]) add(u);
    }
  }
  keep();
  a->start_ = a->Intern(0, 0);
  *out = std::move(a);
  return Status::Ok();
}

bool BoundedStringAutomaton::AllAtLeast(Regex* re, int64_t min) {
  if (re->start() == Regex::kDead) return true;
  StringLengthAutomaton len(0, -1);
  // Breadth first by characters (a byte completes 0, 1 or 2 of them): the states at each count.
  std::map<std::pair<int32_t, int32_t>, int64_t> seen;  // (regex, position) -> fewest characters
  std::vector<std::vector<std::pair<int32_t, int32_t>>> at(static_cast<size_t>(min) + 1);
  at[0].push_back({re->start(), len.Start()});
  seen[at[0][0]] = 0;
  for (int64_t c = 0; c < min; ++c) {
    auto& cur = at[static_cast<size_t>(c)];
    for (size_t i = 0; i < cur.size(); ++i) {
      if (seen.size() > static_cast<size_t>(kMaxStates)) return false;
      const auto [r, l] = cur[i];
      if (seen[cur[i]] < c) continue;                          // reached with fewer since
      if (re->IsAccepting(r) && len.Accepts(l)) return false;  // a match of c < min characters
      for (int b = 0; b < 256; ++b) {
        const int32_t r2 = re->Step(r, static_cast<uint8_t>(b));
        const int l2 = r2 == Regex::kDead ? kDead : len.Next(l, static_cast<uint8_t>(b));
        if (l2 == kDead) continue;
        const int64_t c2 = c + StringLengthAutomaton::CountOf(l2);
        const std::pair<int32_t, int32_t> n{r2, StringLengthAutomaton::AtCount(l2, 0)};
        const auto it = seen.find(n);
        if (it != seen.end() && it->second <= c2) continue;
        seen[n] = c2;
        if (c2 < min) at[static_cast<size_t>(c2)].push_back(n);
      }
    }
    std::vector<std::pair<int32_t, int32_t>>().swap(cur);
  }
  return true;
}

bool BoundedStringAutomaton::Reaches(int32_t node, int64_t lo, int64_t hi) const {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min(hi, bound_);
  const uint64_t* w = t_->reach.data() + static_cast<size_t>(node) * t_->words;
  for (int64_t r = lo; r <= hi;) {
    const uint64_t bits = w[r / 64] >> (r % 64);
    if (bits == 0) {
      r = (r / 64 + 1) * 64;
      continue;
    }
    return r + std::countr_zero(bits) <= hi;
  }
  return false;
}

int BoundedStringAutomaton::Intern(int32_t node, int64_t count) {
  const auto [it, fresh] = index_.emplace(std::make_pair(node, count), kDead);
  if (!fresh) return it->second;
  // With a max: a closing count within [min, max]; without: min or more (counts past min are one).
  const bool live =
      max_ >= 0 ? Reaches(node, min_ - count, max_ - count) : Reaches(node, bound_ - count, bound_);
  if (!live) return kDead;
  it->second = static_cast<int>(states_.size());
  states_.emplace_back(node, count);
  return it->second;
}

int BoundedStringAutomaton::Next(int state, uint8_t byte) {
  if (state < 0) return kDead;
  const auto [node, count] = states_[static_cast<size_t>(state)];
  const size_t e = static_cast<size_t>(node) * 256 + byte;
  if (t_->next[e] == kDead) return kDead;
  int64_t c = count + t_->inc[e];
  if (max_ >= 0 && c > max_) return kDead;
  if (max_ < 0) c = std::min(c, bound_);
  return Intern(t_->next[e], c);
}

bool BoundedStringAutomaton::Accepts(int state) const {
  if (state < 0) return false;
  const auto [node, count] = states_[static_cast<size_t>(state)];
  return t_->closed[static_cast<size_t>(node)] && count >= min_ && (max_ < 0 || count <= max_);
}

std::string BoundedStringAutomaton::StateKey(int state) const {
  if (state < 0) return "dead";
  return std::to_string(states_[static_cast<size_t>(state)].first) + "/" +
         std::to_string(states_[static_cast<size_t>(state)].second);
}

}  // namespace llmq

namespace llmq {

namespace {

int ByteSlot(uint8_t byte) {  // '-' 0, the digits 1..10, else -1
  if (byte == '-') return 0;
  if (byte >= '0' && byte <= '9') return 1 + (byte - '0');
  return -1;
}

}  // namespace

Status MultipleAutomaton::Build(Regex* range, int64_t divisor, int64_t not_divisor,
                                std::unique_ptr<MultipleAutomaton>* out) {
  if (divisor < 1 || divisor > kMaxDivisor || not_divisor < 0 || not_divisor > kMaxDivisor ||
      std::lcm(divisor, std::max<int64_t>(not_divisor, 1)) > kMaxDivisor)
    return Status::Unsupported("multipleOf " + std::to_string(divisor) + " (not " +
                               std::to_string(not_divisor) + "): past " +
                               std::to_string(kMaxDivisor));
  const int64_t modulus = std::lcm(divisor, std::max<int64_t>(not_divisor, 1));
  const auto good = [&](int64_t r) {
    return r % divisor == 0 && (not_divisor == 0 || r % not_divisor != 0);
  };
  auto a = std::unique_ptr<MultipleAutomaton>(new MultipleAutomaton());
  std::map<std::pair<int32_t, int64_t>, int32_t> index;
  std::vector<std::array<int32_t, 11>> next;
  std::vector<std::pair<int32_t, int64_t>> states;
  const auto intern = [&](int32_t q, int64_t r) {
    const auto [it, fresh] = index.emplace(std::make_pair(q, r), int32_t(states.size()));
    if (fresh) states.emplace_back(q, r);
    return it->second;
  };
  if (range->start() == Regex::kDead) {
    *out = std::move(a);
    return Status::Ok();
  }
  intern(range->start(), 0);
  for (size_t k = 0; k < states.size(); ++k) {
    if (states.size() > static_cast<size_t>(kMaxStates))
      return Status::Unsupported("multipleOf " + std::to_string(divisor) + ": more than " +
                                 std::to_string(kMaxStates) + " states");
    std::array<int32_t, 11> row;
    const auto [q, r] = states[k];
    for (int slot = 0; slot < 11; ++slot) {
      const uint8_t byte = slot == 0 ? '-' : static_cast<uint8_t>('0' + slot - 1);
      const int32_t q2 = range->Step(q, byte);
      row[size_t(slot)] =
          q2 == Regex::kDead ? kDead : intern(q2, slot == 0 ? r : (r * 10 + slot - 1) % modulus);
    }
    next.push_back(row);
  }
  // Live: a multiple closes from there (backwards from the accepting states).
  const size_t n = states.size();
  std::vector<std::vector<int32_t>> from(n);
  std::vector<char> live(n, 0);
  std::vector<int32_t> work;
  for (size_t q = 0; q < n; ++q) {
    for (const int32_t t : next[q])
      if (t != kDead) from[size_t(t)].push_back(int32_t(q));
    if (good(states[q].second) && range->IsAccepting(states[q].first)) {
      live[q] = 1;
      work.push_back(int32_t(q));
    }
  }
  while (!work.empty()) {
    const int32_t t = work.back();
    work.pop_back();
    for (const int32_t q : from[size_t(t)])
      if (!live[size_t(q)]) {
        live[size_t(q)] = 1;
        work.push_back(q);
      }
  }
  // Renumbered: the live states only.
  std::vector<int32_t> renum(n, kDead);
  for (size_t q = 0; q < n; ++q)
    if (live[q]) {
      renum[q] = int32_t(a->states_.size());
      a->states_.push_back(states[q]);
    }
  for (size_t q = 0; q < n; ++q) {
    if (!live[q]) continue;
    std::array<int32_t, 11> row;
    for (size_t slot = 0; slot < 11; ++slot)
      row[slot] = next[q][slot] == kDead ? kDead : renum[size_t(next[q][slot])];
    a->next_.push_back(row);
    a->accepts_.push_back(good(states[q].second) && range->IsAccepting(states[q].first));
  }
  a->start_ = renum[0];
  *out = std::move(a);
  return Status::Ok();
}

int MultipleAutomaton::Next(int state, uint8_t byte) {
  const int slot = ByteSlot(byte);
  if (state < 0 || slot < 0) return kDead;
  return next_[size_t(state)][size_t(slot)];
}

std::string MultipleAutomaton::StateKey(int state) const {
  if (state < 0) return "dead";
  return std::to_string(states_[size_t(state)].first) + "%" +
         std::to_string(states_[size_t(state)].second);
}

}  // namespace llmq
