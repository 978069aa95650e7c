// ObjectRules (engine/structured/object_rules.h): random layouts (up to 4 listed properties,
// random presence clauses, required ones, min/max members, other keys or not, values that depend
// on which others are present) against a brute force over every object of the layout's
// alphabet. Each member is one literal lexeme naming the property and the set of its dependencies
// the value was written for (`"p2":5`), so a document says exactly what is present and what each
// value assumed. An object is valid when the clauses hold, the required are present, the count is
// within the bounds, and every value was written for exactly the dependencies present; the
// Matcher must accept exactly the valid ones, and reject a document exactly at the first byte
// where no valid one goes on (no prefix is accepted that cannot be completed). Where the layout
// needs a witness, a listed property that may be one is also written as `"p2":5!` and an other
// member as `"w":1`; an object is then valid only with one of those.
#include "engine/structured/object_rules.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"

namespace llmq {
namespace {

using Sym = Grammar::Symbol;

struct Doc {
  std::string text;
  bool valid = false;
};

std::string Member(size_t j, uint64_t bits, bool witness = false) {
  return "\"p" + std::to_string(j) + "\":" + std::to_string(bits) + (witness ? "!" : "");
}

// Every object of the layout: each property absent or present with any value variant (and as
// the witness where it may be one), then 0 to `most` other members (5: past the largest bound, a
// prefix a valid object extends, a shorter one extends too), each of them plain or, with
// `witness`, a witness.
std::vector<Doc> AllDocs(const ObjectLayout& l, bool others, bool witness, int most = 5) {
  const size_t n = l.props.size();
  std::vector<Doc> docs;
  std::vector<int> choice(n, -1);  // -1 absent, else the value's bits
  std::vector<char> as_witness(n, 0);
  const auto holds = [&](const std::vector<int>& lits) {
    for (const int lit : lits) {
      const size_t j = static_cast<size_t>(std::abs(lit) - 1);
      if ((choice[j] >= 0) == (lit > 0)) return true;
    }
    return false;
  };
  for (;;) {
    bool ok = true, seen = false;
    int64_t count = 0;
    std::string members;
    for (size_t j = 0; j < n; ++j) {
      if (choice[j] < 0) {
        ok = ok && !l.props[j].required;
        continue;
      }
      ++count;
      if (!members.empty()) members += ",";
      members += Member(j, static_cast<uint64_t>(choice[j]), as_witness[j]);
      seen = seen || as_witness[j];
      uint64_t want = 0;  // the dependencies present
      for (size_t k = 0; k < l.props[j].depends_on.size(); ++k)
        if (choice[l.props[j].depends_on[k]] >= 0) want |= uint64_t{1} << k;
      ok = ok && static_cast<uint64_t>(choice[j]) == want;
    }
    for (const auto& c : l.clauses) ok = ok && holds(c);
    for (int extra = 0; extra <= (others ? most : 0); ++extra)
      for (uint32_t w = 0; w < (witness ? 1u << extra : 1u); ++w) {  // bit e: a witness
        std::string m = members;
        for (int e = 0; e < extra; ++e)
          m += std::string(m.empty() ? "" : ",") + (w >> e & 1 ? "\"w\":1" : "\"o\":0");
        const int64_t total = count + extra;
        const bool in_bounds =
            total >= l.min_members && (l.max_members < 0 || total <= l.max_members);
        docs.push_back({"{" + m + "}", ok && in_bounds && (!l.need_witness || seen || w != 0)});
      }
    // The next choice (odometer): absent, each value variant, then each as the witness.
    size_t j = 0;
    for (; j < n; ++j) {
      const int variants = 1 << l.props[j].depends_on.size();
      if (++choice[j] < variants) break;
      if (l.props[j].witness && !as_witness[j]) {
        as_witness[j] = 1;
        choice[j] = 0;
        break;
      }
      as_witness[j] = 0;
      choice[j] = -1;
    }
    if (j == n) break;
  }
  return docs;
}

ObjectLayout RandomLayout(std::mt19937* rng) {
  const auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  ObjectLayout l;
  const size_t n = static_cast<size_t>(pick(0, 4));
  l.props.resize(n);
  for (size_t j = 0; j < n; ++j) {
    l.props[j].required = pick(0, 5) == 0;
    if (n > 1 && pick(0, 2) == 0)
      for (int d = pick(1, 2); d > 0; --d) {
        const auto k = static_cast<size_t>(pick(0, static_cast<int>(n) - 1));
        auto& on = l.props[j].depends_on;
        if (k != j && std::find(on.begin(), on.end(), k) == on.end()) on.push_back(k);
      }
  }
  if (n > 0)
    for (int c = pick(0, 3); c > 0; --c) {
      std::vector<int> clause;
      for (int k = pick(1, 3); k > 0; --k) {
        const int lit = pick(1, static_cast<int>(n));
        clause.push_back(pick(0, 1) ? lit : -lit);
      }
      l.clauses.push_back(clause);
    }
  if (pick(0, 2) == 0) l.min_members = pick(0, 4);
  if (pick(0, 2) == 0) l.max_members = pick(0, 4);
  if (pick(0, 2) == 0) {
    l.need_witness = true;
    for (auto& p : l.props) p.witness = pick(0, 1) == 1;
  }
  return l;
}

TEST(ObjectRulesTest, AcceptsExactlyTheValidObjectsAndNoDeadPrefix) {
  std::mt19937 rng(20261205);
  int layouts = 0, valid_docs = 0, docs_seen = 0;
  for (int round = 0; round < 400; ++round) {
    const ObjectLayout l = RandomLayout(&rng);
    const bool others = rng() % 2 == 0;
    const bool witness = others && l.need_witness && rng() % 4 != 0;  // other keys may be one
    Grammar g;
    const ObjectRules::Delimiters d{g.Literal("{"), g.Literal("}"), g.Literal(",")};
    // As in a schema's grammar, a witness is also a member of its kind: the plain member of a
    // property that may be the witness takes its witness form too, `other` takes `witness`'s.
    const auto either = [&](const std::string& a, const std::string& b) {
      const Sym r = g.NewRule("either");
      g.AddAlternative(r, {g.Literal(a)});
      g.AddAlternative(r, {g.Literal(b)});
      return r;
    };
    const ObjectRules::Member member = [&](size_t j, uint64_t bits, bool w, Sym* out) {
      *out = w || !l.need_witness || !l.props[j].witness
                 ? g.Literal(Member(j, bits, w))
                 : either(Member(j, bits), Member(j, bits, true));
      return Status::Ok();
    };
    std::optional<Sym> other, witness_member;
    if (others) other = witness ? either("\"o\":0", "\"w\":1") : g.Literal("\"o\":0");
    if (witness) witness_member = g.Literal("\"w\":1");
    Sym obj;
    ASSERT_TRUE(ObjectRules::Build(&g, l, d, member, other, witness_member, "obj", &obj).ok());
    g.set_start(obj);
    const std::vector<Doc> docs = AllDocs(l, others, witness);
    std::set<std::string> prefixes;  // of the valid documents (one more member: a witness last)
    for (const Doc& doc : AllDocs(l, others, witness, 6))
      if (doc.valid)
        for (size_t k = 0; k <= doc.text.size(); ++k) prefixes.insert(doc.text.substr(0, k));
    if (!g.Validate().ok()) {  // no object at all
      EXPECT_TRUE(prefixes.empty()) << "round " << round;
      continue;
    }
    std::shared_ptr<CompiledGrammar> c;
    ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
    ++layouts;
    for (const Doc& doc : docs) {
      ++docs_seen;
      valid_docs += doc.valid;
      Matcher m(c);
      size_t k = 0;
      while (k < doc.text.size() && m.Consume(doc.text.substr(k, 1))) ++k;
      size_t want = 0;  // the longest prefix a valid document has
      while (want < doc.text.size() && prefixes.count(doc.text.substr(0, want + 1))) ++want;
      ASSERT_EQ(k, want) << "round " << round << ": " << doc.text;
      if (k == doc.text.size())
        EXPECT_EQ(m.CanEnd(), doc.valid) << "round " << round << ": " << doc.text;
    }
  }
  std::printf("%d layouts with objects, %d documents, %d valid\n", layouts, docs_seen, valid_docs);
  // The layouts must exercise both verdicts.
  EXPECT_GT(layouts, 200);
  EXPECT_GT(valid_docs, docs_seen / 20);
  EXPECT_LT(valid_docs, docs_seen / 2);
}

// Without clauses, bounds and dependent values: one state a listed property, as before.
TEST(ObjectRulesTest, PlainObjectsTakeOneStatePerProperty) {
  ObjectLayout l;
  l.props.resize(30);
  Grammar g;
  const ObjectRules::Delimiters d{g.Literal("{"), g.Literal("}"), g.Literal(",")};
  const size_t before = g.rules().size();
  Sym obj;
  ASSERT_TRUE(ObjectRules::Build(
                  &g, l, d,
                  [&](size_t j, uint64_t bits, bool, Sym* out) {
                    *out = g.Literal(Member(j, bits));
                    return Status::Ok();
                  },
                  g.Literal("\"o\":0"), std::nullopt, "obj", &obj)
                  .ok());
  // first0, rest1..rest30, the others' loop, the object.
  EXPECT_EQ(g.rules().size() - before, 33u);
}

TEST(ObjectRulesTest, TooManyStatesIsUnsupported) {
  ObjectLayout l;
  l.props.resize(100);
  for (size_t j = 0; j + 1 < 100; ++j) l.props[j + 1].depends_on = {j};  // each on the one before
  l.min_members = 200;                                                   // counts to 200 beside
  l.max_members = 400;
  Grammar g;
  const ObjectRules::Delimiters d{g.Literal("{"), g.Literal("}"), g.Literal(",")};
  Sym obj;
  const Status st = ObjectRules::Build(
      &g, l, d,
      [&](size_t j, uint64_t bits, bool, Sym* out) {
        *out = g.Literal(Member(j, bits));
        return Status::Ok();
      },
      g.Literal("\"o\":0"), std::nullopt, "obj", &obj);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
}

}  // namespace
}  // namespace llmq
