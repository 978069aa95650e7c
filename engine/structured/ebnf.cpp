#include "engine/structured/ebnf.h"

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/text.h"
#include "engine/structured/regex.h"

namespace llmq::ebnf {
namespace {

// Rounds of the overlap check that take apart only what overlapped; past them, a part taken apart
// takes apart everything it holds (its parts, the terminal rules it references) at once, so that
// chains of rules do not take a round each.
constexpr int kGentleRounds = 4;
constexpr size_t kMaxRegexBytes = size_t{1} << 16;  // a lexeme's expression, else taken apart
// The overlap check's bounds: transitions of pairs of automaton states tried in all rounds
// together (past them every pair left is assumed to overlap, which takes more apart: never less
// exact), and lexemes (past them every lexeme that can be is taken apart at once: characters never
// overlap, so nothing is walked). A transition costs 13 ns where the lexemes' DFAs are built and
// up to 130 ns where each builds a state: llama.cpp's extreme.gbnf walks 2.3 million (30 ms); a
// grammar found by fuzzing (json.gbnf with one class changed) walked 2,000,000 pairs of states, 256
// bytes each, for 53 s when the bound counted pairs per round, and stops at this bound in 0.6 s.
constexpr int64_t kMaxSteps = int64_t{1} << 22;
constexpr size_t kMaxCheckedLexemes = 512;

// ---- What each part derives ----------------------------------------------------------------

struct TooBig {};

// An expression of the Regex syntax; nullopt: the empty language, "": the empty string.
using Rx = std::optional<std::string>;

// Runs update(i) for every node, and again for a node's `users` whenever it returns true (its
// value grew): a monotone fixed point in time linear in the updates, whatever the order.
template <class Update>
void Fixpoint(size_t n, const std::vector<std::vector<int>>& users, Update update) {
  std::vector<char> queued(n, 1);
  std::deque<size_t> todo;
  for (size_t i = 0; i < n; ++i) todo.push_back(i);
  while (!todo.empty()) {
    const size_t i = todo.front();
    todo.pop_front();
    queued[i] = 0;
    if (!update(i)) continue;
    for (const int u : users[i])
      if (!queued[static_cast<size_t>(u)]) {
        queued[static_cast<size_t>(u)] = 1;
        todo.push_back(static_cast<size_t>(u));
      }
  }
}

class Lang {
 public:
  explicit Lang(const std::vector<RuleDef>& rules) : rules_(rules) {
    const size_t n = rules.size();
    std::vector<std::vector<int>> users(n), uses(n);  // by rule: who names it, whom it names
    for (size_t r = 0; r < n; ++r) {
      References(rules[r].body, &uses[r]);
      for (const int u : uses[r]) users[static_cast<size_t>(u)].push_back(static_cast<int>(r));
    }
    nullable_.assign(n, false);
    terminal_.assign(n, false);
    Fixpoint(n, users, [&](size_t r) {
      bool changed = false;
      if (!nullable_[r] && Nullable(rules[r].body)) changed = (nullable_[r] = true);
      if (!terminal_[r] && Terminal(rules[r].body)) changed |= (terminal_[r] = true);
      return changed;
    });
    // How deep terminal rules inline each other (they form a DAG: leaves first, Kahn's order);
    // a rule past kMaxNesting is a rule of the parser instead, and so is every rule naming it.
    std::vector<int> depth(n, 1), pending(n, 0);
    std::deque<size_t> ready;
    for (size_t r = 0; r < n; ++r) {
      if (!terminal_[r]) continue;
      pending[r] = static_cast<int>(uses[r].size());
      if (pending[r] == 0) ready.push_back(r);
    }
    while (!ready.empty()) {
      const size_t t = ready.front();
      ready.pop_front();
      if (depth[t] > kMaxNesting) terminal_[t] = false;
      for (const int p : users[t]) {
        const size_t u = static_cast<size_t>(p);
        if (!terminal_[u] || pending[u] == 0) continue;
        depth[u] = std::max(depth[u], depth[t] + 1);
        if (--pending[u] == 0) ready.push_back(u);
      }
    }
  }
  bool Nullable(const Node& n) const {
    switch (n.kind) {
      case Node::kLiteral:
        return n.text.empty();
      case Node::kClass:
        return false;
      case Node::kRef:
        return nullable_[n.rule];
      case Node::kSeq:
        return std::all_of(n.kids.begin(), n.kids.end(),
                           [&](const Node& k) { return Nullable(k); });
      case Node::kAlt:
        return std::any_of(n.kids.begin(), n.kids.end(),
                           [&](const Node& k) { return Nullable(k); });
      case Node::kRepeat:
        return n.min == 0 || n.max == 0 || Nullable(n.kids[0]);
    }
    return false;
  }
  // Whether `n` references only terminal rules: it can be one regular expression.
  bool Terminal(const Node& n) const {
    if (n.kind == Node::kRef) return terminal_[n.rule];
    return std::all_of(n.kids.begin(), n.kids.end(), [&](const Node& k) { return Terminal(k); });
  }
  bool TerminalRule(int r) const { return terminal_[r]; }
  // The rules `n` names (a rule once per naming).
  static void References(const Node& n, std::vector<int>* out) {
    if (n.kind == Node::kRef) out->push_back(n.rule);
    for (const Node& k : n.kids) References(k, out);
  }

  // The strings of a Terminal node (throws TooBig past kMaxRegexBytes).
  Rx Regex(const Node& n) const {
    switch (n.kind) {
      case Node::kLiteral: {
        std::string s;
        for (char32_t c : n.text) AppendUtf8(c, &s);
        return Check(RegexEscape(s));
      }
      case Node::kClass: {
        if (n.ranges.empty()) return std::nullopt;
        std::string s = "[";
        for (auto [lo, hi] : n.ranges) {
          s += CodePoint(lo);
          if (hi != lo) s += "-" + CodePoint(hi);
        }
        return s + "]";
      }
      case Node::kRef:  // a terminal rule: at most kMaxNesting deep
        return Group(Regex(rules_[n.rule].body));
      case Node::kSeq: {
        std::string s;
        for (const Node& k : n.kids) {
          const Rx x = Regex(k);
          if (!x) return std::nullopt;
          s += *x;
        }
        return Check(std::move(s));
      }
      case Node::kAlt: {
        std::vector<Rx> xs;
        for (const Node& k : n.kids) xs.push_back(Regex(k));
        return Union(xs);
      }
      case Node::kRepeat:
        return Repeat(Regex(n.kids[0]), n.min, n.max);
    }
    return std::nullopt;
  }
  // The non-empty strings of a Terminal node.
  Rx NonEmpty(const Node& n) const {
    switch (n.kind) {
      case Node::kLiteral:
        return n.text.empty() ? std::nullopt : Regex(n);
      case Node::kClass:
        return Regex(n);
      case Node::kRef:
        return NonEmpty(rules_[n.rule].body);
      case Node::kSeq: {  // the first non-empty part, after parts that derived the empty string
        std::vector<Rx> xs;
        for (size_t i = 0; i < n.kids.size(); ++i) {
          const Rx head = NonEmpty(n.kids[i]);
          if (head) {
            std::string s = *head;
            bool ok = true;
            for (size_t j = i + 1; j < n.kids.size() && ok; ++j) {
              const Rx x = Regex(n.kids[j]);
              ok = x.has_value();
              if (ok) s += *x;
            }
            if (ok) xs.push_back(Check(std::move(s)));
          }
          if (!Nullable(n.kids[i])) break;
        }
        return Union(xs);
      }
      case Node::kAlt: {
        std::vector<Rx> xs;
        for (const Node& k : n.kids) xs.push_back(NonEmpty(k));
        return Union(xs);
      }
      case Node::kRepeat: {  // a non-empty copy first (the empty copies before it add nothing)
        if (n.max == 0) return std::nullopt;
        const Rx head = NonEmpty(n.kids[0]);
        if (!head) return std::nullopt;
        const int lo = Nullable(n.kids[0]) ? 0 : std::max(n.min, 1) - 1;
        const Rx rest = Repeat(Regex(n.kids[0]), lo, n.max < 0 ? -1 : n.max - 1);
        if (!rest) return std::nullopt;
        return Check(*head + *rest);
      }
    }
    return std::nullopt;
  }

 private:
  static std::string CodePoint(char32_t c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u{%X}", static_cast<unsigned>(c));
    return buf;
  }
  static Rx Check(std::string s) {
    if (s.size() > kMaxRegexBytes) throw TooBig{};  // caught in Emitter::EmitWhole
    return s;
  }
  static Rx Group(const Rx& x) {
    if (!x || x->empty()) return x;
    return Check("(?:" + *x + ")");
  }
  static Rx Union(const std::vector<Rx>& xs) {
    std::string s;
    bool any = false, empty = false;
    for (const Rx& x : xs) {
      if (!x) continue;
      if (x->empty()) {
        empty = true;
        continue;
      }
      s += (any ? "|" : "") + *x;
      any = true;
    }
    if (!any) return empty ? Rx("") : std::nullopt;
    return Check("(?:" + s + ")" + (empty ? "?" : ""));
  }
  static Rx Repeat(const Rx& x, int min, int max) {
    if (max == 0 || (x && x->empty())) return "";
    if (!x) return min == 0 ? Rx("") : std::nullopt;
    std::string q;
    if (min == 0 && max < 0)
      q = "*";
    else if (min == 1 && max < 0)
      q = "+";
    else if (min == 0 && max == 1)
      q = "?";
    else if (max < 0)
      q = "{" + std::to_string(min) + ",}";
    else if (min == max)
      q = "{" + std::to_string(min) + "}";
    else
      q = "{" + std::to_string(min) + "," + std::to_string(max) + "}";
    return Check("(?:" + *x + ")" + q);
  }

  const std::vector<RuleDef>& rules_;
  std::vector<char> nullable_, terminal_;
};

// ---- The grammar, for a choice of the parts taken apart -------------------------------------

class Emitter {
 public:
  Emitter(const std::vector<RuleDef>& rules, const Lang& lang, std::set<const Node*>* apart,
          Grammar* g)
      : rules_(rules), lang_(lang), apart_(apart), g_(g), rule_sym_(rules.size(), -1) {}

  void Run(int root) {
    g_->set_start(RuleSym(root));
    while (!pending_.empty()) {
      const int r = pending_.back();
      pending_.pop_back();
      const Grammar::Symbol sym{rule_sym_[r], false};
      const Node& body = rules_[r].body;
      if (body.kind == Node::kAlt && !Whole(body)) {
        for (const Node& k : body.kids) g_->AddAlternative(sym, Emit(k));
      } else {
        g_->AddAlternative(sym, Emit(body));
      }
    }
  }
  // The parts each lexeme stands for (those that can be taken apart), by lexeme.
  const std::map<int32_t, std::vector<const Node*>>& origins() const { return origins_; }

 private:
  bool Whole(const Node& n) const {
    return n.kind != Node::kRef && lang_.Terminal(n) && !apart_->count(&n);
  }
  Grammar::Symbol RuleSym(int r) {
    if (rule_sym_[r] < 0) {
      rule_sym_[r] = g_->NewRule(rules_[r].name).id;
      pending_.push_back(r);
    }
    return {rule_sym_[r], false};
  }
  Grammar::Symbol Never() {
    if (never_ < 0) never_ = g_->NewRule("(nothing)").id;
    return {never_, false};
  }
  std::vector<Grammar::Symbol> Emit(const Node& n) {
    std::vector<Grammar::Symbol> out;
    Emit(n, &out);
    return out;
  }
  void Emit(const Node& n, std::vector<Grammar::Symbol>* out) {
    if (n.kind == Node::kLiteral && (n.text.size() <= 1 || apart_->count(&n))) {
      for (char32_t c : n.text) {  // characters: never a lexeme that goes on
        std::string s;
        AppendUtf8(c, &s);
        out->push_back(g_->Literal(s));
      }
      return;
    }
    if (n.kind == Node::kRef && lang_.TerminalRule(n.rule) && !apart_->count(&rules_[n.rule].body))
      return EmitWhole(rules_[n.rule].body, out);
    if (n.kind == Node::kClass || Whole(n)) return EmitWhole(n, out);
    switch (n.kind) {
      case Node::kRef:
        out->push_back(RuleSym(n.rule));
        return;
      case Node::kSeq:
        for (const Node& k : n.kids) Emit(k, out);
        return;
      case Node::kAlt: {
        const Grammar::Symbol h = g_->NewRule("(group)");
        for (const Node& k : n.kids) g_->AddAlternative(h, Emit(k));
        out->push_back(h);
        return;
      }
      case Node::kRepeat:
        return EmitRepeat(n, out);
      default:
        return;
    }
  }
  // One symbol for the strings of `n` (a lexeme, or a rule when it derives the empty string).
  void EmitWhole(const Node& n, std::vector<Grammar::Symbol>* out) {
    Rx x;
    try {
      x = lang_.Nullable(n) ? lang_.NonEmpty(n) : lang_.Regex(n);
    } catch (const TooBig&) {  // (a class is one short expression: never too big)
      apart_->insert(&n);
      return Emit(n, out);
    }
    if (!x) {
      if (!lang_.Nullable(n)) out->push_back(Never());
      return;
    }
    const Grammar::Symbol lex = g_->Lexeme(*x);
    if (n.kind != Node::kClass) origins_[lex.id].push_back(&n);
    if (!lang_.Nullable(n)) {
      out->push_back(lex);
      return;
    }
    auto [it, fresh] = optional_.try_emplace(lex.id, -1);
    if (fresh) {
      const Grammar::Symbol opt = g_->NewRule("(optional)");
      g_->AddAlternative(opt, {});
      g_->AddAlternative(opt, {lex});
      it->second = opt.id;
    }
    out->push_back({it->second, false});
  }
  void EmitRepeat(const Node& n, std::vector<Grammar::Symbol>* out) {
    std::vector<Grammar::Symbol> body = Emit(n.kids[0]);
    if (body.empty() || n.max == 0) return;  // the empty string, however often
    Grammar::Symbol x = body[0];
    if (body.size() > 1) {
      x = g_->NewRule("(repeated)");
      g_->AddAlternative(x, body);
    }
    for (int k = 0; k < n.min; ++k) out->push_back(x);
    if (n.max < 0) {  // x*: left-recursive, one Earley item a copy
      const Grammar::Symbol star = g_->NewRule("(star)");
      g_->AddAlternative(star, {});
      g_->AddAlternative(star, {star, x});
      out->push_back(star);
      return;
    }
    Grammar::Symbol inner{-1, false};  // up to max - min more copies: ε | x inner
    for (int k = n.min; k < n.max; ++k) {
      const Grammar::Symbol opt = g_->NewRule("(up to)");
      g_->AddAlternative(opt, {});
      if (inner.id < 0)
        g_->AddAlternative(opt, {x});
      else
        g_->AddAlternative(opt, {x, inner});
      inner = opt;
    }
    if (inner.id >= 0) out->push_back(inner);
  }

  const std::vector<RuleDef>& rules_;
  const Lang& lang_;
  std::set<const Node*>* apart_;
  Grammar* g_;
  std::vector<int32_t> rule_sym_;
  std::vector<int> pending_;
  int32_t never_ = -1;
  std::map<int32_t, int32_t> optional_;  // lexeme -> (ε | lexeme)
  std::map<int32_t, std::vector<const Node*>> origins_;
};

// ---- Where greedy lexing could lose a string -----------------------------------------------

using Bytes = std::bitset<256>;

using LexemeSets = std::vector<std::vector<char>>;  // by lexeme: a set of lexemes

// Over lexemes: LL(1)'s FOLLOW (by lexeme: those that may follow it), and FIRST of the start.
struct Neighbours {
  LexemeSets follow;
  std::vector<char> first;
};
Neighbours NeighboursOf(const Grammar& g) {
  const auto& rules = g.rules();
  const size_t nr = rules.size(), nl = g.lexemes().size();
  std::vector<std::vector<int>> users(nr);  // by rule: the rules whose alternatives name it
  for (size_t r = 0; r < nr; ++r)
    for (const auto& alt : rules[r].alternatives)
      for (const Grammar::Symbol s : alt)
        if (!s.lexeme) users[s.id].push_back(static_cast<int>(r));
  std::vector<char> nullable(nr, 0);
  Fixpoint(nr, users, [&](size_t r) {
    for (const auto& alt : rules[r].alternatives)
      if (!nullable[r] && std::all_of(alt.begin(), alt.end(), [&](Grammar::Symbol s) {
            return !s.lexeme && nullable[s.id];
          }))
        return (nullable[r] = 1) != 0;
    return false;
  });
  auto add = [](std::vector<char>* to, const std::vector<char>& from) {
    bool changed = false;
    for (size_t i = 0; i < from.size(); ++i)
      if (from[i] && !(*to)[i]) changed = ((*to)[i] = 1);
    return changed;
  };
  LexemeSets first(nr, std::vector<char>(nl, 0));
  Fixpoint(nr, users, [&](size_t r) {
    bool changed = false;
    for (const auto& alt : rules[r].alternatives)
      for (const Grammar::Symbol s : alt) {
        if (s.lexeme) {
          if (!first[r][s.id]) changed = (first[r][s.id] = 1);
          break;
        }
        changed |= add(&first[r], first[s.id]);
        if (!nullable[s.id]) break;
      }
    return changed;
  });
  // FOLLOW: a rule's alternatives are gone through again when what may follow the rule grows.
  LexemeSets follow_rule(nr, std::vector<char>(nl, 0)), follow_lex(nl, std::vector<char>(nl, 0));
  std::vector<char> queued(nr, 1);
  std::deque<size_t> todo;
  for (size_t r = 0; r < nr; ++r) todo.push_back(r);
  std::vector<char> after(nl);
  while (!todo.empty()) {
    const size_t r = todo.front();
    todo.pop_front();
    queued[r] = 0;
    for (const auto& alt : rules[r].alternatives) {
      after = follow_rule[r];  // what may follow alt[i..]: from the end backwards
      for (size_t i = alt.size(); i-- > 0;) {
        const Grammar::Symbol s = alt[i];
        if (s.lexeme) {
          add(&follow_lex[s.id], after);
          std::fill(after.begin(), after.end(), 0);
          after[s.id] = 1;
          continue;
        }
        if (add(&follow_rule[s.id], after) && !queued[s.id]) {
          queued[s.id] = 1;
          todo.push_back(s.id);
        }
        if (!nullable[s.id]) std::fill(after.begin(), after.end(), 0);
        add(&after, first[s.id]);
      }
    }
  }
  return {std::move(follow_lex), std::move(first[g.start()])};
}

// Whether the two automata match some string in common (true when the walk is too long).
bool Overlap(LexemeAutomaton* a, LexemeAutomaton* b, int64_t* budget) {
  if (a->Start() == LexemeAutomaton::kDead || b->Start() == LexemeAutomaton::kDead) return false;
  std::set<std::pair<int, int>> seen = {{a->Start(), b->Start()}};
  std::deque<std::pair<int, int>> todo(seen.begin(), seen.end());
  while (!todo.empty()) {
    const auto [qa, qb] = todo.front();
    todo.pop_front();
    if (a->Accepts(qa) && b->Accepts(qb)) return true;
    if ((*budget -= 256) < 0) return true;
    for (int c = 0; c < 256; ++c) {
      const int na = a->Next(qa, static_cast<uint8_t>(c));
      const int nb = na == LexemeAutomaton::kDead ? na : b->Next(qb, static_cast<uint8_t>(c));
      if (nb == LexemeAutomaton::kDead || !seen.insert({na, nb}).second) continue;
      todo.push_back({na, nb});
    }
  }
  return false;
}

// By lexeme: the lexemes that may be allowed beside it (live side by side in the lexer, from one
// position). What a position allows is FIRST of the start, or what may follow the lexemes just
// scanned: FOLLOW(X) for one lexeme X, the union of their FOLLOW sets when several allowed
// together matched the same text (scanned as one list). Grown to a fixed point: lexemes allowed
// together that can match one string share their FOLLOW sets.
LexemeSets Together(const Neighbours& near,
                    const std::vector<std::unique_ptr<LexemeAutomaton>>& autos, int64_t* budget) {
  const size_t nl = autos.size();
  std::vector<std::vector<char>> overlap(nl, std::vector<char>(nl, 2));  // 2: not known yet
  LexemeSets together(nl, std::vector<char>(nl, 0));
  auto add_context = [&](const std::vector<char>& c, bool* changed) {
    std::vector<size_t> in;
    for (size_t l = 0; l < nl; ++l)
      if (c[l]) in.push_back(l);
    for (size_t a : in) {  // together[a] |= c
      if (std::equal(together[a].begin(), together[a].end(), c.begin(),
                     [](char t, char x) { return t || !x; }))
        continue;  // (already all there: the common case once grown)
      for (size_t b : in) together[a][b] = 1;
      *changed = true;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    add_context(near.first, &changed);
    // The scanned lists' FOLLOW unions, by groups of lexemes that may be scanned together.
    std::vector<size_t> group(nl);
    for (size_t l = 0; l < nl; ++l) group[l] = l;
    const std::function<size_t(size_t)> root = [&](size_t l) {
      return group[l] == l ? l : group[l] = root(group[l]);
    };
    for (size_t a = 0; a < nl; ++a)
      for (size_t b = a + 1; b < nl; ++b) {
        if (!together[a][b]) continue;
        if (overlap[a][b] == 2) overlap[a][b] = Overlap(autos[a].get(), autos[b].get(), budget);
        if (overlap[a][b]) group[root(a)] = root(b);
      }
    LexemeSets contexts(nl, std::vector<char>(nl, 0));
    for (size_t l = 0; l < nl; ++l)
      for (size_t f = 0; f < nl; ++f) contexts[root(l)][f] |= near.follow[l][f];
    for (const auto& c : contexts) add_context(c, &changed);
  }
  return together;
}

// Whether some string of `a` can be followed by a byte of `next` that takes it further into a
// string of `b` (the lexer would then go on with b where a could have ended). True when the walk
// is too long to finish (taking b apart is always safe).
bool CanGoOn(LexemeAutomaton* a, LexemeAutomaton* b, const Bytes& next, int64_t* budget) {
  std::set<std::pair<int, int>> seen;
  std::deque<std::pair<int, int>> todo;
  if (a->Start() == LexemeAutomaton::kDead || b->Start() == LexemeAutomaton::kDead) return false;
  todo.push_back({a->Start(), b->Start()});
  seen.insert(todo.back());
  while (!todo.empty()) {
    const auto [qa, qb] = todo.front();
    todo.pop_front();
    if ((*budget -= 256) < 0) return true;
    for (int c = 0; c < 256; ++c) {
      const int nb = b->Next(qb, static_cast<uint8_t>(c));
      if (nb == LexemeAutomaton::kDead) continue;
      if (a->Accepts(qa) && next[c]) return true;
      const int na = a->Next(qa, static_cast<uint8_t>(c));
      if (na == LexemeAutomaton::kDead || !seen.insert({na, nb}).second) continue;
      todo.push_back({na, nb});
    }
  }
  return false;
}

// The parts to take apart so that greedy lexing loses nothing (none: `g` is exact), walking at
// most what is left of `budget`. Not OK when a lexeme that cannot be taken apart does not compile.
Status PartsToTakeApart(const Grammar& g,
                        const std::map<int32_t, std::vector<const Node*>>& origins,
                        std::set<const Node*>* apart, bool* changed, int64_t* budget) {
  *changed = false;
  const size_t nl = g.lexemes().size();
  std::vector<std::unique_ptr<LexemeAutomaton>> autos(nl);
  for (size_t l = 0; l < nl; ++l) {
    std::unique_ptr<Regex> re;
    const Status st = Regex::Compile(g.lexemes()[l].regex, g.lexemes()[l].options, &re);
    if (st.ok()) {
      autos[l] = std::move(re);
      continue;
    }
    const auto it = origins.find(static_cast<int32_t>(l));
    if (it == origins.end()) return st;
    for (const Node* n : it->second) *changed |= apart->insert(n).second;
  }
  if (*changed || origins.empty()) return Status::Ok();  // (characters never go on)
  if (nl > kMaxCheckedLexemes) {
    for (const auto& [l, nodes] : origins)
      for (const Node* n : nodes) *changed |= apart->insert(n).second;
    return Status::Ok();
  }
  std::vector<Bytes> first(nl);
  for (size_t l = 0; l < nl; ++l) {
    const int s = autos[l]->Start();
    if (s == LexemeAutomaton::kDead) continue;
    for (int c = 0; c < 256; ++c)
      first[l][c] = autos[l]->Next(s, static_cast<uint8_t>(c)) != LexemeAutomaton::kDead;
  }
  const Neighbours near = NeighboursOf(g);
  const LexemeSets together = Together(near, autos, budget);
  for (size_t a = 0; a < nl; ++a) {
    Bytes next;
    for (size_t f = 0; f < nl; ++f)
      if (near.follow[a][f]) next |= first[f];
    if (next.none()) continue;
    for (const auto& [b, nodes] : origins) {
      if (!together[a][b] || (first[a] & first[b]).none()) continue;
      if (std::all_of(nodes.begin(), nodes.end(), [&](const Node* n) { return apart->count(n); }))
        continue;
      if (!CanGoOn(autos[a].get(), autos[b].get(), next, budget)) continue;
      for (const Node* n : nodes) *changed |= apart->insert(n).second;
    }
  }
  return Status::Ok();
}

// ---- Recursion through itself, as repetition ------------------------------------------------

// A rule whose every alternative names it at most once, at its end or at its start, derives what
// repetitions do: A ::= P1 A | ... | A S1 | ... | Q1 | ... (the P, S and Q not naming A) is
// (P1 | ...)* (Q1 | ...) (S1 | ...)*: each derivation is a chain, the P gathering before the Q and
// the S after it (Arden's lemma on each side; the P, S and Q may name other rules, even ones that
// name A: Bekic's lemma solves A first). llama.cpp's `ws ::= ([ \t\n] ws)?` is [ \t\n]*, and
// `ws ::= | [ \t\n] ws | ws [ \t\n]` too. Rewritten so before lexemes are chosen, such a rule may
// be one lexeme rather than a parser rule per character (json_arr.gbnf's masks p99 472 ms ->
// 0.5 ms). A rule naming itself inside (`x ::= "(" x ")"`) is left as it is.
class Linear {
 public:
  // The body of rules[r] rewritten, or nullopt when it is not of that form.
  static std::optional<Node> Rewrite(const std::vector<RuleDef>& rules, int r) {
    const Node& body = rules[static_cast<size_t>(r)].body;
    if (!Contains(body, r)) return std::nullopt;
    Linear l(r);
    std::vector<Branch> branches;
    if (!l.Split(body, &branches, 0)) return std::nullopt;
    Node before, rest, after;  // the P, the Q, the S
    before.kind = rest.kind = after.kind = Node::kAlt;
    for (Branch& b : branches) {
      if (b.side != kNone && IsEmpty(b.part)) continue;  // A ::= A adds nothing
      (b.side == kBefore  ? before
       : b.side == kAfter ? after
                          : rest)
          .kids.push_back(std::move(b.part));
    }
    if (rest.kids.empty()) {  // no way out of the recursion: the empty language
      Node none;
      none.kind = Node::kClass;  // no ranges: no character
      return none;
    }
    Node out;
    out.kind = Node::kSeq;
    for (Node* part : {&before, &rest, &after}) {
      if (part->kids.empty()) continue;
      if (part == &rest) {
        out.kids.push_back(std::move(*part));
        continue;
      }
      Node loop;
      loop.kind = Node::kRepeat;
      loop.kids.push_back(std::move(*part));
      out.kids.push_back(std::move(loop));
    }
    return out;
  }

 private:
  enum Side { kNone, kBefore, kAfter };  // of the reference: the part comes before it, or after
  struct Branch {
    Node part;  // what comes beside the reference, or the whole branch (kNone)
    Side side;
  };
  static constexpr int kMaxBranches = 256, kMaxDepth = 64;
  static constexpr size_t kMaxCopied = 10000;  // nodes copied into the branches

  explicit Linear(int r) : r_(r) {}

  static bool Contains(const Node& n, int r) {
    if (n.kind == Node::kRef) return n.rule == r;
    for (const Node& k : n.kids)
      if (Contains(k, r)) return true;
    return false;
  }
  static Node Empty() { return Node{}; }  // kSeq of nothing
  size_t Count(const Node& n) const {
    size_t c = 1;
    for (const Node& k : n.kids) c += Count(k);
    return c;
  }

  // `n` as alternatives: each the part before or after a reference to the rule at its end or its
  // start, or a branch without one. False when a reference is anywhere else.
  bool Split(const Node& n, std::vector<Branch>* out, int depth) {
    if (++depth > kMaxDepth || out->size() > kMaxBranches) return false;
    if (!Contains(n, r_)) {
      copied_ += Count(n);
      out->push_back({n, kNone});
      return copied_ <= kMaxCopied;
    }
    switch (n.kind) {
      case Node::kRef:  // the rule alone: a part of nothing, on either side
        out->push_back({Empty(), kBefore});
        return true;
      case Node::kAlt:
        for (const Node& k : n.kids)
          if (!Split(k, out, depth)) return false;
        return true;
      case Node::kRepeat:  // x? with the reference inside: x | nothing
        if (n.min != 0 || n.max != 1) return false;
        out->push_back({Empty(), kNone});
        return Split(n.kids[0], out, depth);
      case Node::kSeq: {
        size_t edge = n.kids.size();  // the one part naming the rule: the first or the last
        for (size_t k = 0; k < n.kids.size(); ++k)
          if (Contains(n.kids[k], r_)) {
            if (edge != n.kids.size()) return false;
            edge = k;
          }
        const bool last = edge + 1 == n.kids.size(), first = edge == 0;
        if (!last && !first) return false;
        std::vector<Branch> at_edge;
        if (!Split(n.kids[edge], &at_edge, depth)) return false;
        for (Branch& b : at_edge) {
          Side side = b.side;
          if (n.kids.size() > 1 && side != kNone) {
            // The reference stays at an edge of the whole: at the end when the others come before.
            const Side whole = last ? kBefore : kAfter;
            if (side != whole && !IsEmpty(b.part)) return false;
            side = whole;
          }
          Node seq;
          seq.kind = Node::kSeq;
          for (size_t k = 0; k < n.kids.size(); ++k) {
            if (k != edge) {
              copied_ += Count(n.kids[k]);
              seq.kids.push_back(n.kids[k]);
            } else {
              seq.kids.push_back(std::move(b.part));
            }
          }
          out->push_back({std::move(seq), side});
        }
        return copied_ <= kMaxCopied && out->size() <= kMaxBranches;
      }
      default:
        return false;
    }
  }
  static bool IsEmpty(const Node& n) { return n.kind == Node::kSeq && n.kids.empty(); }

  int r_;
  size_t copied_ = 0;
};

}  // namespace

std::vector<std::pair<char32_t, char32_t>> Normalized(std::vector<std::pair<char32_t, char32_t>> r,
                                                      bool negated) {
  std::vector<std::pair<char32_t, char32_t>> cut;
  for (auto [lo, hi] : r) {  // without the surrogates
    if (lo < 0xD800) cut.push_back({lo, std::min<char32_t>(hi, 0xD7FF)});
    if (hi > 0xDFFF) cut.push_back({std::max<char32_t>(lo, 0xE000), hi});
  }
  std::sort(cut.begin(), cut.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (auto [lo, hi] : cut) {
    if (!merged.empty() && lo <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, hi);
    else
      merged.push_back({lo, hi});
  }
  if (!negated) return merged;
  std::vector<std::pair<char32_t, char32_t>> out;
  char32_t next = 0;
  auto add_upto = [&](char32_t end) {  // [next, end) without the surrogates
    if (next < end)
      for (auto piece : Normalized({{next, end - 1}}, false)) out.push_back(piece);
  };
  for (auto [lo, hi] : merged) {
    add_upto(lo);
    next = hi + 1;
  }
  add_upto(0x110000);
  return out;
}

std::string LineColumn(std::string_view text, size_t at) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<uint8_t>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

Status SyntaxStatus(std::string_view text, const SyntaxError& e) {
  const std::string m = LineColumn(text, std::min(e.at, text.size())) + ": " + e.message;
  return e.unsupported ? Status::Unsupported(m) : Status::InvalidArgument(m);
}

bool NextUtf8(std::string_view t, size_t* i, char32_t* out) {
  const size_t n = Utf8SequenceLength(t.data(), t.size(), *i);
  if (n == 0) return false;
  char32_t cp = static_cast<uint8_t>(t[*i]);
  if (n > 1) {
    cp &= 0x3F >> (n - 1);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(t[*i + k]) & 0x3F);
  }
  *i += n;
  *out = cp;
  return true;
}

int64_t HexScalar(std::string_view t, size_t* i, int digits) {
  int64_t v = 0;
  for (int k = 0; k < digits; ++k, ++*i) {
    const char c = *i < t.size() ? t[*i] : '\0';
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) ? -2 : v;
}

Status Lower(const std::vector<RuleDef>& given, int root, Grammar* out) {
  std::vector<RuleDef> rules = given;
  for (size_t r = 0; r < rules.size(); ++r)
    if (std::optional<Node> body = Linear::Rewrite(rules, static_cast<int>(r)))
      rules[r].body = std::move(*body);
  const Lang lang(rules);
  std::set<const Node*> apart;
  // Everything below the parts taken apart (kGentleRounds).
  const std::function<void(const Node&)> all_of = [&](const Node& n) {
    const Node* below = n.kind == Node::kRef ? &rules[n.rule].body : nullptr;
    if (below != nullptr && lang.TerminalRule(n.rule) && apart.insert(below).second) all_of(*below);
    for (const Node& k : n.kids)
      if (apart.insert(&k).second || k.kind == Node::kRef) all_of(k);
  };
  int64_t budget = kMaxSteps;  // shared by the rounds: the whole check is bounded
  for (int round = 1;; ++round) {
    Grammar g;
    Emitter emitter(rules, lang, &apart, &g);
    emitter.Run(root);
    bool changed = false;
    LLMQ_RETURN_IF_ERROR(PartsToTakeApart(g, emitter.origins(), &apart, &changed, &budget));
    if (!changed) {
      *out = std::move(g);
      return Status::Ok();
    }
    if (round >= kGentleRounds)
      for (const Node* n : std::vector<const Node*>(apart.begin(), apart.end())) all_of(*n);
  }
}

}  // namespace llmq::ebnf
