#include "engine/structured/object_rules.h"

#include <algorithm>
#include <compare>
#include <deque>
#include <map>
#include <utility>

namespace llmq {

namespace {

using Sym = Grammar::Symbol;
using Clauses = std::vector<std::vector<int>>;

struct State {
  size_t next = 0;              // the first listed property that may still come
  int64_t count = 0;            // members so far, up to the cap
  bool first = true;            // no member yet (the next one has no comma before it)
  Clauses clauses;              // what is left to meet of the formula, sorted
  std::vector<size_t> present;  // decided present properties a later value depends on, sorted
  uint32_t seen = 0;            // the witnesses written
  auto operator<=>(const State&) const = default;
};

// Puts "props[j] is (not) present" into `c`: a clause it meets goes, its literal the other way
// goes from the others. False where a clause is left empty (the formula fails).
bool Assign(Clauses* c, size_t j, bool present) {
  const int lit = present ? static_cast<int>(j) + 1 : -(static_cast<int>(j) + 1);
  Clauses out;
  out.reserve(c->size());
  for (std::vector<int>& clause : *c) {
    if (std::find(clause.begin(), clause.end(), lit) != clause.end()) continue;
    clause.erase(std::remove(clause.begin(), clause.end(), -lit), clause.end());
    if (clause.empty()) return false;
    out.push_back(std::move(clause));
  }
  *c = std::move(out);
  return true;
}

void Sort(Clauses* c) {
  for (std::vector<int>& clause : *c) {
    std::sort(clause.begin(), clause.end());
    clause.erase(std::unique(clause.begin(), clause.end()), clause.end());
  }
  std::sort(c->begin(), c->end());
  c->erase(std::unique(c->begin(), c->end()), c->end());
}

class Builder {
 public:
  Builder(Grammar* g, const ObjectLayout& layout, const ObjectRules::Delimiters& d,
          const ObjectRules::Member& member, std::optional<Sym> other,
          const ObjectRules::OtherWitness& witness, std::string name)
      : g_(*g),
        l_(layout),
        d_(d),
        member_(member),
        other_(other),
        witness_(witness),
        name_(std::move(name)) {
    const size_t n = l_.props.size();
    last_dependent_.assign(n, -1);
    for (size_t j = 0; j < n; ++j)
      for (const size_t k : l_.props[j].depends_on)
        last_dependent_[k] = std::max(last_dependent_[k], static_cast<int64_t>(j));
    cap_ = l_.max_members >= 0 ? l_.max_members : l_.min_members;
    all_ = (uint32_t{1} << l_.witnesses) - 1;
  }

  Status Run(Sym* out) {
    if (l_.witnesses > ObjectRules::kMaxWitnesses)
      return Status::Unsupported("more than " + std::to_string(ObjectRules::kMaxWitnesses) +
                                 " members of some kind asked of one object");
    State start;
    start.clauses = l_.clauses;
    for (size_t j = 0; j < l_.props.size(); ++j)
      if (l_.props[j].required) start.clauses.push_back({static_cast<int>(j) + 1});
    Sort(&start.clauses);
    for (const std::vector<int>& c : start.clauses)
      if (c.empty()) {  // a formula that fails whatever is present: no object
        *out = g_.NewRule(name_ + "/object");
        return Status::Ok();
      }
    Sym members;
    LLMQ_RETURN_IF_ERROR(Get(std::move(start), &members));
    while (!pending_.empty()) {
      const auto it = pending_.front();
      pending_.pop_front();
      LLMQ_RETURN_IF_ERROR(Fill(it->first, it->second));
    }
    *out = g_.NewRule(name_ + "/object");
    g_.AddAlternative(*out, {d_.lbrace, members, d_.rbrace});
    return Status::Ok();
  }

 private:
  using Map = std::map<State, Sym>;

  // The rule of state `s` (made, its alternatives filled later, where new).
  Status Get(State s, Sym* out) {
    if (const auto it = states_.find(s); it != states_.end()) {
      *out = it->second;
      return Status::Ok();
    }
    if (states_.size() >= ObjectRules::kMaxStates)
      return Status::Unsupported("more than " + std::to_string(ObjectRules::kMaxStates) +
                                 " combinations of the properties present");
    std::string rule = name_ + (s.first ? "/first" : "/rest") + std::to_string(s.next);
    if (cap_ > 0) rule += "." + std::to_string(s.count);
    if (!s.clauses.empty() || !s.present.empty()) rule += "#" + std::to_string(states_.size());
    if (l_.witnesses > 0) rule += "!" + std::to_string(s.seen);
    const Sym sym = g_.NewRule(std::move(rule));
    const auto it = states_.emplace(std::move(s), sym).first;
    pending_.push_back(it);
    *out = sym;
    return Status::Ok();
  }

  // The alternatives of state `s`: each listed property that may come next (those before it
  // absent), or the end of the listed ones (all the rest absent) and the other keys.
  Status Fill(const State& s, Sym rule) {
    const size_t n = l_.props.size();
    const bool can_add = l_.max_members < 0 || s.count + 1 <= l_.max_members;
    const int64_t counted = std::min(s.count + 1, cap_);
    Clauses skipped = s.clauses;  // with props[s.next..j) absent
    for (size_t j = s.next;; ++j) {
      if (j > s.next && (l_.props[j - 1].required || !Assign(&skipped, j - 1, false)))
        return Status::Ok();  // props[j-1] cannot be absent: nothing after it, and no end
      if (j == n) break;
      if (!can_add) continue;
      Clauses with = skipped;
      if (!Assign(&with, j, true)) continue;
      const ObjectLayout::Prop& p = l_.props[j];
      uint64_t known = 0;         // of p.depends_on, the bits of those decided present
      std::vector<size_t> later;  // bits of those not decided yet
      for (size_t k = 0; k < p.depends_on.size(); ++k) {
        const size_t d = p.depends_on[k];
        if (d > j)
          later.push_back(k);
        else if (std::binary_search(s.present.begin(), s.present.end(), d))
          known |= uint64_t{1} << k;
      }
      if (later.size() > ObjectRules::kMaxLaterDependencies)
        return Status::Unsupported("a value depending on more than " +
                                   std::to_string(ObjectRules::kMaxLaterDependencies) +
                                   " properties written after it");
      // Each choice of which later ones are present: the value for it, and the choice as
      // clauses (the alternatives exclude each other).
      for (uint64_t choice = 0; choice < (uint64_t{1} << later.size()); ++choice) {
        State next;
        next.next = j + 1;
        next.count = counted;
        next.first = false;
        next.clauses = with;
        uint64_t bits = known;
        for (size_t b = 0; b < later.size(); ++b) {
          const int lit = static_cast<int>(p.depends_on[later[b]]) + 1;
          const bool on = choice >> b & 1;
          next.clauses.push_back({on ? lit : -lit});
          if (on) bits |= uint64_t{1} << later[b];
        }
        Sort(&next.clauses);
        for (const size_t d : s.present)
          if (last_dependent_[d] >= static_cast<int64_t>(j + 1)) next.present.push_back(d);
        if (last_dependent_[j] > static_cast<int64_t>(j)) next.present.push_back(j);
        // Written plainly, and as each set of the witnesses not written yet it may be.
        const uint32_t open = p.witness & all_ & ~s.seen;
        for (uint32_t as = 0;; as = (as - open) & open) {  // each subset of `open`, 0 first
          State to_state = next;
          to_state.seen = s.seen | as;
          Sym kv, to;
          LLMQ_RETURN_IF_ERROR(member_(j, bits, as, &kv));
          LLMQ_RETURN_IF_ERROR(Get(std::move(to_state), &to));
          if (s.first)
            g_.AddAlternative(rule, {kv, to});
          else
            g_.AddAlternative(rule, {d_.comma, kv, to});
          if (as == open) break;
        }
      }
    }
    // The end of the listed ones (`skipped` is empty: every clause was met).
    if (s.count >= l_.min_members && s.seen == all_) g_.AddAlternative(rule, {});
    if (other_.has_value() && can_add) {
      std::vector<std::pair<Sym, uint32_t>> members;
      LLMQ_RETURN_IF_ERROR(OtherMembers(s.seen, &members));
      for (const auto& [member, seen] : members) {
        Sym more;
        LLMQ_RETURN_IF_ERROR(Others(counted, seen, &more));
        if (s.first)
          g_.AddAlternative(rule, {member, more});
        else
          g_.AddAlternative(rule, {d_.comma, member, more});
      }
    }
    return Status::Ok();
  }

  // The members of keys not listed that may come with witnesses `seen` written: plain, and each
  // as a set of those not written yet, with the witnesses written after it.
  Status OtherMembers(uint32_t seen, std::vector<std::pair<Sym, uint32_t>>* out) {
    out->emplace_back(*other_, seen);
    const uint32_t open = all_ & ~seen;
    for (uint32_t as = open; as != 0; as = (as - 1) & open) {
      auto it = witness_members_.find(as);
      if (it == witness_members_.end()) {
        std::optional<Sym> w;
        LLMQ_RETURN_IF_ERROR(witness_(as, &w));
        it = witness_members_.emplace(as, w).first;
      }
      if (it->second.has_value()) out->emplace_back(*it->second, seen | as);
    }
    return Status::Ok();
  }

  // Any number of other members after `count` members (each after a comma), within the bounds,
  // with the witnesses not in `seen` among them.
  Status Others(int64_t count, uint32_t seen, Sym* out) {
    if (const auto it = others_.find({count, seen}); it != others_.end()) {
      *out = it->second;
      return Status::Ok();
    }
    const Sym rule = g_.NewRule(name_ + "/additionalProperties*" +
                                (cap_ > 0 ? std::to_string(count) : std::string()) +
                                (l_.witnesses > 0 ? "!" + std::to_string(seen) : std::string()));
    others_.emplace(std::make_pair(count, seen), rule);
    if (count >= l_.min_members && seen == all_) g_.AddAlternative(rule, {});
    if (l_.max_members < 0 || count + 1 <= l_.max_members) {
      const int64_t next = std::min(count + 1, cap_);
      std::vector<std::pair<Sym, uint32_t>> members;
      LLMQ_RETURN_IF_ERROR(OtherMembers(seen, &members));
      for (const auto& [member, after] : members) {
        Sym more;
        LLMQ_RETURN_IF_ERROR(Others(next, after, &more));
        g_.AddAlternative(rule, {d_.comma, member, more});
      }
    }
    *out = rule;
    return Status::Ok();
  }

  Grammar& g_;
  const ObjectLayout& l_;
  const ObjectRules::Delimiters& d_;
  const ObjectRules::Member& member_;
  const std::optional<Sym> other_;
  const ObjectRules::OtherWitness& witness_;
  uint32_t all_ = 0;  // every witness
  std::map<uint32_t, std::optional<Sym>> witness_members_;
  const std::string name_;
  std::vector<int64_t> last_dependent_;  // by property: the last one whose value depends on it
  int64_t cap_ = 0;                      // counts past it are one
  Map states_;
  std::deque<Map::iterator> pending_;  // states made, not filled yet
  std::map<std::pair<int64_t, uint32_t>, Sym> others_;
};

}  // namespace

Status ObjectRules::Build(Grammar* g, const ObjectLayout& layout, const Delimiters& d,
                          const Member& member, std::optional<Grammar::Symbol> other,
                          const OtherWitness& witness, const std::string& name,
                          Grammar::Symbol* out) {
  Builder b(g, layout, d, member, other, witness, name);
  return b.Run(out);
}

}  // namespace llmq
