// ObjectRules (engine/structured/object_rules.h): random layouts (up to 4 listed properties,
// random presence clauses, required ones, min/max members, other keys or not, values that depend
// on which others are present) against a brute force over every object of the layout's
// alphabet. Each member is one literal lexeme naming the property and the set of its dependencies
// the value was written for (`"p2":5`), so a document says exactly what is present and what each
// value assumed. An object is valid when the clauses hold, the required are present, the count is
// within the bounds, and every value was written for exactly the dependencies present; the
// Matcher must accept exactly the valid ones, and reject a document exactly at the first byte
// where no valid one goes on (no prefix is accepted that cannot be completed). Where the layout
// asks for witnesses, a listed property that may be some is also written as `"p2":5!3` (as
// witnesses 0 and 1) and an other member as `"w3":1`; an object is then valid only with every
// witness written.
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

std::string Member(size_t j, uint64_t bits, uint32_t witness = 0) {
  return "\"p" + std::to_string(j) + "\":" + std::to_string(bits) +
         (witness != 0 ? "!" + std::to_string(witness) : "");
}

std::string OtherMember(uint32_t witness) {
  return witness == 0 ? "\"o\":0" : "\"w" + std::to_string(witness) + "\":1";
}

// Every object of the layout: each property absent or present with any value variant (and as
// each set of the witnesses it may be), then 0 to `most` other members (past the largest bound:
// a prefix a valid object extends, a shorter one extends too), each of them plain or a witness of
// a set in `forms` (the other keys' witness members there are).
std::vector<Doc> AllDocs(const ObjectLayout& l, bool others, const std::vector<uint32_t>& forms,
                         int most) {
  const size_t n = l.props.size();
  const uint32_t all = (uint32_t{1} << l.witnesses) - 1;
  std::vector<Doc> docs;
  std::vector<int> choice(n, -1);  // -1 absent, else the value's bits
  std::vector<uint32_t> as(n, 0);  // the witnesses it is written as
  const auto holds = [&](const std::vector<int>& lits) {
    for (const int lit : lits) {
      const size_t j = static_cast<size_t>(std::abs(lit) - 1);
      if ((choice[j] >= 0) == (lit > 0)) return true;
    }
    return false;
  };
  std::vector<uint32_t> other_forms = {0};
  other_forms.insert(other_forms.end(), forms.begin(), forms.end());
  for (;;) {
    bool ok = true;
    uint32_t seen = 0;
    int64_t count = 0;
    std::string members;
    for (size_t j = 0; j < n; ++j) {
      if (choice[j] < 0) {
        ok = ok && !l.props[j].required;
        continue;
      }
      ++count;
      if (!members.empty()) members += ",";
      members += Member(j, static_cast<uint64_t>(choice[j]), as[j]);
      seen |= as[j];
      uint64_t want = 0;  // the dependencies present
      for (size_t k = 0; k < l.props[j].depends_on.size(); ++k)
        if (choice[l.props[j].depends_on[k]] >= 0) want |= uint64_t{1} << k;
      ok = ok && static_cast<uint64_t>(choice[j]) == want;
    }
    for (const auto& c : l.clauses) ok = ok && holds(c);
    for (int extra = 0; extra <= (others ? most : 0); ++extra) {
      std::vector<size_t> pick(static_cast<size_t>(extra), 0);  // each one's form
      for (;;) {
        std::string m = members;
        uint32_t also = seen;
        for (const size_t f : pick) {
          m += std::string(m.empty() ? "" : ",") + OtherMember(other_forms[f]);
          also |= other_forms[f];
        }
        const int64_t total = count + extra;
        const bool in_bounds =
            total >= l.min_members && (l.max_members < 0 || total <= l.max_members);
        docs.push_back({"{" + m + "}", ok && in_bounds && also == all});
        size_t e = 0;
        for (; e < pick.size(); ++e) {
          if (++pick[e] < other_forms.size()) break;
          pick[e] = 0;
        }
        if (e == pick.size()) break;
      }
    }
    // The next choice (odometer): absent, then each value variant as each set of witnesses.
    size_t j = 0;
    for (; j < n; ++j) {
      const int variants = 1 << l.props[j].depends_on.size();
      if (++choice[j] < variants) break;
      const uint32_t may = l.props[j].witness & all;
      if (as[j] != may) {
        as[j] = (as[j] - may) & may;  // the next subset
        choice[j] = 0;
        break;
      }
      as[j] = 0;
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
  const bool witnesses = pick(0, 2) == 0;  // then fewer properties: more documents each
  const size_t n = static_cast<size_t>(pick(0, witnesses ? 2 : 4));
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
  if (witnesses) {
    l.witnesses = pick(1, 2);
    for (auto& p : l.props) p.witness = static_cast<uint32_t>(pick(0, (1 << l.witnesses) - 1));
  }
  return l;
}

TEST(ObjectRulesTest, AcceptsExactlyTheValidObjectsAndNoDeadPrefix) {
  std::mt19937 rng(20261205);
  int layouts = 0, valid_docs = 0, docs_seen = 0, witness_layouts = 0, witness_valid = 0;
  for (int round = 0; round < 600; ++round) {
    const ObjectLayout l = RandomLayout(&rng);
    const bool others = rng() % 2 == 0;
    // The sets of witnesses some other key may be (as if keys of several kinds).
    std::vector<uint32_t> forms;
    if (others)
      for (uint32_t w = 1; w < (uint32_t{1} << l.witnesses); ++w)
        if (rng() % 2 == 0) forms.push_back(w);
    Grammar g;
    const ObjectRules::Delimiters d{g.Literal("{"), g.Literal("}"), g.Literal(",")};
    // As in a schema's grammar, a witness member is also a member of its kind: a property's plain
    // member takes its witness forms too, `other` the other keys' witness members.
    const auto any_of = [&](const std::vector<std::string>& texts) {
      const Sym r = g.NewRule("any");
      for (const std::string& t : texts) g.AddAlternative(r, {g.Literal(t)});
      return r;
    };
    const ObjectRules::Member member = [&](size_t j, uint64_t bits, uint32_t w, Sym* out) {
      std::vector<std::string> texts = {Member(j, bits, w)};
      const uint32_t may = l.props[j].witness & ((uint32_t{1} << l.witnesses) - 1);
      if (w == 0)
        for (uint32_t as = may; as != 0; as = (as - 1) & may) texts.push_back(Member(j, bits, as));
      *out = any_of(texts);
      return Status::Ok();
    };
    std::optional<Sym> other;
    if (others) {
      std::vector<std::string> texts = {OtherMember(0)};
      for (const uint32_t f : forms) texts.push_back(OtherMember(f));
      other = any_of(texts);
    }
    // Another key written as the witnesses `w`: the forms naming exactly those.
    const ObjectRules::OtherWitness witness = [&](uint32_t w, std::optional<Sym>* out) {
      out->reset();
      if (std::find(forms.begin(), forms.end(), w) != forms.end()) *out = any_of({OtherMember(w)});
      return Status::Ok();
    };
    Sym obj;
    ASSERT_TRUE(ObjectRules::Build(&g, l, d, member, other, witness, "obj", &obj).ok());
    g.set_start(obj);
    // Up to 5 other members (3 with witnesses), and for the prefixes two more (one for each
    // witness a prefix may still need).
    const int most = l.witnesses > 0 ? 3 : 5;
    const std::vector<Doc> docs = AllDocs(l, others, forms, most);
    std::set<std::string> prefixes;  // of the valid documents
    for (const Doc& doc : AllDocs(l, others, forms, most + l.witnesses))
      if (doc.valid)
        for (size_t k = 0; k <= doc.text.size(); ++k) prefixes.insert(doc.text.substr(0, k));
    if (!g.Validate().ok()) {  // no object at all
      EXPECT_TRUE(prefixes.empty()) << "round " << round;
      continue;
    }
    std::shared_ptr<CompiledGrammar> c;
    ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
    ++layouts;
    witness_layouts += l.witnesses > 0;
    for (const Doc& doc : docs) {
      ++docs_seen;
      valid_docs += doc.valid;
      witness_valid += doc.valid && l.witnesses > 0;
      Matcher m(c);
      size_t k = 0;
      while (k < doc.text.size() && m.Consume(doc.text.substr(k, 1))) ++k;
      size_t want = 0;  // the longest prefix a valid document has
      while (want < doc.text.size() && prefixes.count(doc.text.substr(0, want + 1))) ++want;
      ASSERT_EQ(k, want) << "round " << round << ": " << doc.text;
      if (k == doc.text.size()) {
        EXPECT_EQ(m.CanEnd(), doc.valid) << "round " << round << ": " << doc.text;
      }
    }
  }
  std::printf(
      "%d layouts with objects (%d asking for witnesses), %d documents, %d valid (%d of "
      "those)\n",
      layouts, witness_layouts, docs_seen, valid_docs, witness_valid);
  EXPECT_GT(witness_layouts, 40);
  EXPECT_GT(witness_valid, 500);
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
                  [&](size_t j, uint64_t bits, uint32_t, Sym* out) {
                    *out = g.Literal(Member(j, bits));
                    return Status::Ok();
                  },
                  g.Literal("\"o\":0"), nullptr, "obj", &obj)
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
      [&](size_t j, uint64_t bits, uint32_t, Sym* out) {
        *out = g.Literal(Member(j, bits));
        return Status::Ok();
      },
      g.Literal("\"o\":0"), nullptr, "obj", &obj);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
}

}  // namespace
}  // namespace llmq
