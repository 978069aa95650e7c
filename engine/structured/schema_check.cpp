#include "engine/structured/schema_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"

namespace llmq {

using ojson = nlohmann::ordered_json;

namespace {

double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

bool Reorder(const ojson& v, Matcher* m, ojson* out, int* budget);

// The members `left` of object `v` (`first`: none written yet) into `m` in an order it accepts,
// then "}"; into *result in that order. reorder.py's choice first: a key after which every other
// possible one can still come next. Where that leads nowhere (a key that must come before the
// others: dependencies), the other keys, backtracking, within `budget` ways back.
bool Members(const ojson& v, Matcher* m, const std::vector<std::string>& left, bool first,
             ojson* result, int* budget) {
  if (left.empty()) return m->Consume("}");
  const std::string sep = first ? "" : ", ";
  const auto key = [&](const std::string& k) { return PythonJsonDumps(ojson(k)) + ": "; };
  // The properties that may come next (reorder.py's possible_keys).
  std::vector<size_t> possible;
  for (size_t i = 0; i < left.size(); ++i) {
    Matcher probe = *m;
    if (probe.Consume(sep + key(left[i]))) possible.push_back(i);
  }
  struct Try {
    size_t i;
    Matcher next;
    ojson value;
  };
  // The members after `t`: true where they fit (then *m and *result advanced; else *result as
  // it was: the member added is taken out again, not the object copied per try).
  const auto after = [&](Try& t) {
    std::vector<std::string> rest = left;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(t.i));
    (*result)[left[t.i]] = std::move(t.value);
    if (!Members(v, &t.next, rest, false, result, budget)) {
      result->erase(left[t.i]);
      return false;
    }
    *m = std::move(t.next);
    return true;
  };
  std::vector<Try> other;  // keys that are not reorder.py's choice, to try after
  for (const size_t i : possible) {
    if (*budget < 0) return false;
    Try t{i, *m, ojson()};
    if (!t.next.Consume(sep + key(left[i])) || !Reorder(v[left[i]], &t.next, &t.value, budget))
      continue;
    bool others = true;  // every other possible property can still follow
    for (const size_t j : possible) {
      if (j == i) continue;
      Matcher probe = t.next;
      if (!(others = probe.Consume(", " + key(left[j])))) break;
    }
    if (!others)
      other.push_back(std::move(t));
    else if (after(t))
      return true;
    else
      --*budget;  // a way back
  }
  for (Try& t : other) {
    if (--*budget < 0) return false;
    if (after(t)) return true;
  }
  return false;
}

// Writes `v` into `m` as PythonJsonDumps would, each object's properties in an order `m` accepts;
// `out`: `v` so reordered. False when no order fits within `budget` (`m` then partly advanced).
bool Reorder(const ojson& v, Matcher* m, ojson* out, int* budget) {
  if (v.is_array()) {
    if (!m->Consume("[")) return false;
    ojson items = ojson::array();
    for (size_t i = 0; i < v.size(); ++i) {
      ojson item;
      if ((i > 0 && !m->Consume(", ")) || !Reorder(v[i], m, &item, budget)) return false;
      items.push_back(std::move(item));
    }
    if (!m->Consume("]")) return false;
    *out = std::move(items);
    return true;
  }
  if (!v.is_object()) {
    *out = v;
    return m->Consume(PythonJsonDumps(v));
  }
  if (!m->Consume("{")) return false;
  std::vector<std::string> left;
  for (const auto& [k, unused] : v.items()) left.push_back(k);
  ojson result = ojson::object();
  if (!Members(v, m, left, true, &result, budget)) return false;
  *out = std::move(result);
  return true;
}

}  // namespace

void WalkText(const std::shared_ptr<CompiledGrammar>& g, const Tokenizer& tok,
              const std::string& text, TokenMask* mask, SchemaTestResult* tr) {
  const std::vector<int> ids = tok.EncodeNoBos(text);
  tr->tokens = static_cast<int>(ids.size());
  tr->mask_us.clear();
  tr->rejected_at = -1;
  tr->text_at.clear();
  tr->mask_work_max = 0;
  tr->exhausted = false;
  Matcher m(g);
  std::string so_far;
  tr->accepted = true;
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t computed = m.masks_computed();
    m.Mask(mask);
    if (m.masks_computed() != computed)
      tr->mask_work_max = std::max(tr->mask_work_max, m.mask_work());
    tr->exhausted = m.exhausted();
    const bool in = ids[k] < mask->size() && mask->Test(ids[k]);
    const std::string bytes = tok.TokenBytes(ids[k]);
    const bool consumed = in && m.Consume(bytes);
    tr->mask_us.push_back(MicrosSince(t1));
    if (!consumed) {  // (exhausted: the mask was given up there)
      tr->accepted = false;
      tr->rejected_at = static_cast<int>(k);
      tr->text_at = so_far.substr(so_far.size() > 40 ? so_far.size() - 40 : 0) + " | " + bytes;
      break;
    }
    so_far += bytes;
  }
  tr->exhausted = tr->exhausted && !tr->accepted;
  tr->complete = tr->accepted && m.CanEnd();
}

bool ReorderProperties(const std::shared_ptr<CompiledGrammar>& grammar, const ojson& data,
                       ojson* out, int budget) {
  Matcher m(grammar);
  ojson r;
  if (!Reorder(data, &m, &r, &budget)) return false;
  *out = std::move(r);
  return true;
}

ojson WithoutValueConstraints(const ojson& schema) {
  ojson s = schema;
  if (s.is_object()) {
    if (s.contains("properties") && s["properties"].is_object()) {
      for (auto& [k, v] : s["properties"].items()) v = WithoutValueConstraints(v);
      return s;
    }
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                          "multipleOf", "pattern", "minLength", "maxLength", "format", "minItems",
                          "maxItems", "minProperties", "maxProperties"})
      s.erase(k);
    for (auto& [k, v] : s.items()) v = WithoutValueConstraints(v);
  } else if (s.is_array()) {
    for (ojson& v : s) v = WithoutValueConstraints(v);
  }
  return s;
}

double Percentile(std::vector<double>* v, double p) {
  if (v->empty()) return 0;
  std::sort(v->begin(), v->end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v->size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return (*v)[std::min(i, v->size() - 1)];
}

bool SchemaCheckResult::passing() const {
  return compiled && std::all_of(tests.begin(), tests.end(),
                                 [](const SchemaTestResult& t) { return t.agrees(); });
}

SchemaChecker::SchemaChecker(const Tokenizer* tok)
    : tok_(tok), trie_(std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok))) {}

SchemaCheckResult SchemaChecker::Check(const ojson& file, const SchemaCheckOptions& opt) const {
  SchemaCheckResult r;
  const bool tests = file.is_object() && file.contains("schema") && file.contains("tests") &&
                     file["tests"].is_array();
  const ojson& schema = tests ? file["schema"] : file;
  const auto t0 = std::chrono::steady_clock::now();
  Grammar g;
  std::shared_ptr<CompiledGrammar> compiled;
  Status st = CompileJsonSchema(schema, &g, JsonSchemaOptions(), &r.restrictions);
  if (st.ok()) st = CompiledGrammar::Compile(std::move(g), trie_, &compiled);
  r.compile_us = MicrosSince(t0);
  if (!st.ok()) {
    r.error = st.message();
    return r;
  }
  r.compiled = true;
  if (!tests) return r;
  TokenMask mask(trie_->vocab_size());
  std::shared_ptr<CompiledGrammar> loose;  // without value constraints, built once when needed
  bool loose_tried = false;
  for (const ojson& t : file["tests"]) {
    SchemaTestResult tr;
    tr.valid = t.value("valid", false);
    const ojson data = t.contains("data") ? t["data"] : ojson();
    WalkText(compiled, *tok_, PythonJsonDumps(data), &mask, &tr);
    if (opt.reorder && !tr.accepted) {  // as reorder.py: valid or not
      ojson reordered = data;
      if (!tr.valid) {
        if (!loose_tried) {
          loose_tried = true;
          Grammar lg;
          if (!CompileJsonSchema(WithoutValueConstraints(schema), &lg).ok() ||
              !CompiledGrammar::Compile(std::move(lg), trie_, &loose).ok())
            loose.reset();
        }
        ojson r;
        if (loose != nullptr && ReorderProperties(loose, reordered, &r)) reordered = std::move(r);
      }
      ojson r;
      if (ReorderProperties(compiled, reordered, &r)) reordered = std::move(r);
      if (const std::string text = PythonJsonDumps(reordered); text != PythonJsonDumps(data)) {
        tr.reordered = true;
        WalkText(compiled, *tok_, text, &mask, &tr);
      }
    }
    r.tests.push_back(std::move(tr));
  }
  return r;
}

ojson SchemaChecker::ToJson(const std::string& name, const SchemaCheckResult& r) {
  ojson o{{"file", name},
          {"compiled", r.compiled},
          {"error", r.compiled ? ojson() : ojson(r.error)},
          {"compile_us", std::round(r.compile_us)},
          {"restrictions", r.restrictions}};
  ojson tests = ojson::array();
  for (const SchemaTestResult& t : r.tests) {
    std::vector<double> us = t.mask_us;
    ojson x{{"valid", t.valid},
            {"accepted", t.accepted},
            {"complete", t.complete},
            {"rejected_at", t.rejected_at < 0 ? ojson() : ojson(t.rejected_at)},
            {"tokens", t.tokens},
            {"reordered", t.reordered},
            {"mask_us_p50", std::round(Percentile(&us, 50) * 10) / 10},
            {"mask_us_max", std::round(Percentile(&us, 100) * 10) / 10}};
    if (t.rejected_at >= 0) x["text_at"] = t.text_at;
    tests.push_back(std::move(x));
  }
  o["tests"] = std::move(tests);
  return o;
}

}  // namespace llmq
