#include "engine/structured/json_schema_compiler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/object_rules.h"
#include "engine/structured/regex.h"

namespace llmq::schema {

Status Compiler::Object(const json& s, const std::string& ptr, Sym* out) {
  struct Prop {
    std::string name;
    bool required;
    Sym value;
    std::vector<const json*> schemas;  // all of them its value (for a dependent one's variants)
    std::string where;                 // their pointer
    // What the properties it depends on (ObjectLayout::Prop::depends_on) add to its value.
    std::vector<std::vector<const json*>> dependent;
  };
  std::vector<Prop> props;
  std::vector<std::string> required;  // in the order listed (the unlisted ones go so)
  if (s.contains("required")) {
    if (!s["required"].is_array()) return Invalid("required", ptr + "/required", "not an array");
    for (const json& r : s["required"]) {
      if (!r.is_string()) return Invalid("required", ptr + "/required", "not a property name");
      if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
        required.push_back(r.get<std::string>());
    }
  }
  Patterns pat;
  LLMQ_RETURN_IF_ERROR(PatternProperties(s, ptr, &pat));
  KeyNames key_names;  // propertyNames
  LLMQ_RETURN_IF_ERROR(PropertyNames(s, ptr, &key_names));
  std::vector<Some> somes;  // $llmq_some: members the object must have
  LLMQ_RETURN_IF_ERROR(SomesOf(s, ptr, &somes));
  std::vector<KeyRule> rules;  // $llmq_key_rules: what the keys not listed also meet
  LLMQ_RETURN_IF_ERROR(KeyRulesOf(s, ptr, &rules));
  const auto pattern_schemas = [&](uint64_t matched, std::vector<const json*>* out_schemas) {
    for (size_t i = 0; i < pat.schemas.size(); ++i)
      if (matched >> i & 1) out_schemas->push_back(&pat.schemas[i]);
  };
  if (s.contains("properties")) {
    if (!s["properties"].is_object())
      return Invalid("properties", ptr + "/properties", "not an object");
    for (const auto& [name, ps] : s["properties"].items()) {
      if (!key_names.Allows(name)) {  // a name propertyNames rules out: never present
        if (std::count(required.begin(), required.end(), name) == 0) continue;
        *out = Nothing();
        return Status::Ok();
      }
      Prop p{name,
             std::count(required.begin(), required.end(), name) > 0,
             {},
             {&ps},
             ptr + "/properties/" + PointerToken(name),
             {}};
      const uint64_t matched = pat.Matching(name);
      if (matched == 0) {
        LLMQ_RETURN_IF_ERROR(Value(ps, p.where, &p.value));
      } else {  // a listed name a pattern matches: both schemas apply
        pattern_schemas(matched, &p.schemas);
        LLMQ_RETURN_IF_ERROR(AllOfValue(p.schemas, p.where, &p.value));
      }
      props.push_back(std::move(p));
    }
  }
  std::set<std::string> listed;
  for (const Prop& p : props) listed.insert(p.name);
  // A required property not listed: any value under that name, after the listed ones.
  std::optional<Sym> extra;  // the value of a property not listed (none: not allowed)
  static const json kTrue = true;
  const json& extra_schema = s.contains("additionalProperties") ? s["additionalProperties"] : kTrue;
  if (extra_schema == json(true)) {
    extra = Any();
  } else if (extra_schema != json(false)) {
    Sym v;
    LLMQ_RETURN_IF_ERROR(Value(extra_schema, ptr + "/additionalProperties", &v));
    extra = v;
  }
  // A name not listed, as a listed property (none where no key may be that name).
  const auto unlisted = [&](const std::string& name, bool req) -> Status {
    if (!key_names.Allows(name)) return Status::Ok();
    Prop p{name, req, {}, {}, {}, {}};
    if (const uint64_t matched = pat.Matching(name); matched != 0) {
      pattern_schemas(matched, &p.schemas);
      p.where = ptr + "/patternProperties";
      LLMQ_RETURN_IF_ERROR(PatternValue(&pat, matched, ptr, &p.value));
    } else if (!extra.has_value()) {
      return Status::Ok();
    } else {
      p.schemas.push_back(&extra_schema);
      p.where = ptr + "/additionalProperties";
      p.value = *extra;
    }
    bool ruled = false;  // a key rule adds to its value
    for (const KeyRule& r : rules)
      if (r.Applies(name) && HasConstraints(r.value)) {
        if (r.value == json(false)) return Status::Ok();
        p.schemas.push_back(&r.value);
        ruled = true;
      }
    if (ruled) LLMQ_RETURN_IF_ERROR(AllOfValue(p.schemas, p.where, &p.value));
    props.push_back(std::move(p));
    listed.insert(name);
    return Status::Ok();
  };
  for (const std::string& r : required)
    if (!listed.count(r)) {
      if (!key_names.Allows(r)) {  // required, and ruled out by propertyNames
        *out = Nothing();
        return Status::Ok();
      }
      LLMQ_RETURN_IF_ERROR(unlisted(r, true));
      if (!listed.count(r))
        return Refuse("required", ptr + "/required",
                      "\"" + r + "\" is required but additionalProperties is false");
    }
  // dependencies: the names they mention that are not listed come next (where allowed).
  Dependencies deps;
  LLMQ_RETURN_IF_ERROR(DependenciesOf(s, ptr, &deps));
  for (const std::string& name : deps.names)
    if (!listed.count(name)) LLMQ_RETURN_IF_ERROR(unlisted(name, false));
  // propertyNames' enum: its names not listed are the only other keys, listed after the rest.
  if (key_names.only.has_value())
    for (const std::string& name : *key_names.only)
      if (!listed.count(name)) LLMQ_RETURN_IF_ERROR(unlisted(name, false));
  // The keys not listed, and their values: one kind of key where there are no patterns (any
  // name but the listed ones), else one for each set of patterns a key can match exactly (the
  // empty set: additionalProperties).
  // propertyNames' pattern is one more pattern every other key must match.
  // $llmq_some's patterns come after those: a key is a witness where it matches the positive
  // ones and none of the others.
  std::vector<std::pair<Sym, Sym>> other_keys;
  // The keys of each set of patterns matched, by the witnesses they may be: (key, its schemas).
  std::vector<std::tuple<Sym, uint32_t, std::vector<const json*>>> witness_keys;
  // propertyNames' patterns: each one more pattern every other key must match.
  const uint64_t need = ((uint64_t{1} << key_names.patterns.size()) - 1) << pat.patterns.size();
  const uint64_t own_mask = (uint64_t{1} << pat.patterns.size()) - 1;
  std::vector<uint64_t> some_pos(somes.size(), 0), some_neg(somes.size(), 0);
  std::vector<uint64_t> rule_neg(rules.size(), 0);            // the key rules' patterns
  std::map<std::pair<uint64_t, uint64_t>, Sym> ruled_values;  // by (own, rules that apply)
  if (key_names.only.has_value()) {
    // no other keys
  } else if (pat.patterns.empty() && need == 0 && somes.empty() && rules.empty()) {
    if (extra.has_value()) other_keys.emplace_back(OtherKey(listed), *extra);
  } else {
    Grammar::LexemeSpec spec;
    spec.is_key_pattern = true;
    spec.patterns = pat.patterns;
    spec.patterns.insert(spec.patterns.end(), key_names.patterns.begin(), key_names.patterns.end());
    for (size_t w = 0; w < somes.size(); ++w)
      for (const auto* list : {&somes[w].patterns, &somes[w].not_patterns})
        for (const std::string& p : *list) {
          (list == &somes[w].patterns ? some_pos : some_neg)[w] |= uint64_t{1}
                                                                   << spec.patterns.size();
          spec.patterns.push_back(p);
        }
    for (size_t r = 0; r < rules.size(); ++r)
      for (const std::string& p : rules[r].not_patterns) {
        rule_neg[r] |= uint64_t{1} << spec.patterns.size();
        spec.patterns.push_back(p);
      }
    if (spec.patterns.size() > static_cast<size_t>(KeyPatternAutomaton::kMaxPatterns))
      return Refuse("patternProperties", ptr + "/patternProperties",
                    "more than " + std::to_string(KeyPatternAutomaton::kMaxPatterns) +
                        " patterns with those a negation adds");
    for (const std::string& name : listed) spec.key_except.push_back(KeyText(name));
    // subset 0's automaton also lists every set of patterns some key matches exactly; the
    // product is built once (kept between Builds), another subset's costs its names' walk.
    std::unique_ptr<KeyPatternAutomaton> none, built;
    if (Status st = KeyPatternAutomaton::Build(spec.key_except, spec.patterns, 0, &none); !st.ok())
      return Refuse("patternProperties", ptr + "/patternProperties", st.message());
    for (const uint64_t subset : none->subsets()) {
      const uint64_t own = subset & own_mask;  // patternProperties' patterns it matches
      if ((subset & need) != need || (own == 0 && !extra.has_value())) continue;
      std::vector<const json*> ruled;  // the key rules' values for its keys
      uint64_t applies = 0;
      for (size_t r = 0; r < rules.size(); ++r)
        if ((subset & rule_neg[r]) == 0 && HasConstraints(rules[r].value)) {
          ruled.push_back(&rules[r].value);
          applies |= uint64_t{1} << r;
        }
      if (std::any_of(ruled.begin(), ruled.end(), [](const json* v) { return *v == json(false); }))
        continue;
      if (subset != 0)
        if (Status st = KeyPatternAutomaton::Build(spec.key_except, spec.patterns, subset, &built);
            !st.ok())
          return Refuse("patternProperties", ptr + "/patternProperties", st.message());
      KeyPatternAutomaton* keys = subset == 0 ? none.get() : built.get();
      if (keys->Start() == LexemeAutomaton::kDead) continue;  // its keys are all listed names
      std::vector<const json*> parts;                         // the key's own schemas
      if (own == 0)
        parts.push_back(&extra_schema);
      else
        pattern_schemas(own, &parts);
      Sym v;
      if (own == 0)
        v = *extra;
      else
        LLMQ_RETURN_IF_ERROR(PatternValue(&pat, own, ptr, &v));
      if (applies != 0) {
        parts.insert(parts.end(), ruled.begin(), ruled.end());
        const auto at = ruled_values.find({own, applies});
        if (at != ruled_values.end())
          v = at->second;
        else
          LLMQ_RETURN_IF_ERROR(AllOfValue(parts, ptr + "/$llmq_key_rules", &v));
        ruled_values.emplace(std::pair{own, applies}, v);
      }
      spec.pattern_subset = subset;
      const Sym key = g_.Lexeme(spec);
      other_keys.emplace_back(key, v);
      uint32_t may = 0;  // the witnesses its keys may be
      for (size_t w = 0; w < somes.size(); ++w)
        if ((subset & some_pos[w]) == some_pos[w] && (subset & some_neg[w]) == 0)
          may |= uint32_t{1} << w;
      if (may != 0) witness_keys.emplace_back(key, may, std::move(parts));
    }
  }

  // The layout: the presence formula and the dependent values over the listed properties (a
  // name no key may take is absent: a clause it would meet goes, its literal goes from others).
  const size_t n = props.size();
  std::map<std::string, size_t> index;
  for (size_t j = 0; j < n; ++j) index.emplace(props[j].name, j);
  ObjectLayout layout;
  layout.props.resize(n);
  for (size_t j = 0; j < n; ++j) layout.props[j].required = props[j].required;
  layout.witnesses = static_cast<int>(somes.size());
  for (size_t j = 0; j < n; ++j)
    for (size_t w = 0; w < somes.size(); ++w)
      if (somes[w].Names(props[j].name)) layout.props[j].witness |= uint32_t{1} << w;
  for (const auto& clause : deps.clauses) {
    std::vector<int> lits;
    bool met = false;
    for (const auto& [name, present] : clause) {
      const auto it = index.find(name);
      if (it == index.end()) {
        met = met || !present;
        continue;
      }
      const int lit = static_cast<int>(it->second) + 1;
      lits.push_back(present ? lit : -lit);
    }
    if (!met) layout.clauses.push_back(std::move(lits));
  }
  for (const auto& [key, name, schema] : deps.values) {
    const auto k = index.find(key), x = index.find(name);
    if (k == index.end() || x == index.end()) continue;  // never present: nothing asked
    Prop& p = props[x->second];
    if (k->second == x->second) {  // present whenever it is: always its value
      p.schemas.push_back(schema);
      LLMQ_RETURN_IF_ERROR(AllOfValue(p.schemas, p.where, &p.value));
      continue;
    }
    std::vector<size_t>& on = layout.props[x->second].depends_on;
    const auto at = std::find(on.begin(), on.end(), k->second);
    if (at == on.end()) {
      on.push_back(k->second);
      p.dependent.push_back({schema});
    } else {
      p.dependent[static_cast<size_t>(at - on.begin())].push_back(schema);
    }
  }
  int64_t min_props = 0, max_props = -1;
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "minProperties", ptr, &min_props));
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxProperties", ptr, &max_props));
  const auto nreq = static_cast<int64_t>(
      std::count_if(props.begin(), props.end(), [](const Prop& p) { return p.required; }));
  if (min_props <= nreq) min_props = 0;  // the required ones are enough
  if (max_props >= static_cast<int64_t>(n) && other_keys.empty()) max_props = -1;
  constexpr int64_t kMaxCounted = 1000;
  if (min_props > kMaxCounted || max_props > kMaxCounted)
    return Refuse(max_props > kMaxCounted ? "maxProperties" : "minProperties",
                  ptr + (max_props > kMaxCounted ? "/maxProperties" : "/minProperties"),
                  "a bound above " + std::to_string(kMaxCounted) + " properties");
  layout.min_members = min_props;
  layout.max_members = max_props;

  // One member for a property not listed (any number of them after the listed ones).
  std::optional<Sym> other;
  if (!other_keys.empty()) {
    other = g_.NewRule(ptr + "/additionalProperties:");
    for (const auto& [key, value] : other_keys) g_.AddAlternative(*other, {key, colon_, value});
  }
  const auto add_somes = [&](uint32_t which, std::vector<const json*>* parts) {
    for (size_t w = 0; w < somes.size(); ++w)
      if (which >> w & 1) parts->push_back(&somes[w].value);
  };
  // A member of a key not listed that is each witness of `which`: each key that may be, its
  // value their values too.
  const ObjectRules::OtherWitness witness = [&](uint32_t which, std::optional<Sym>* out) -> Status {
    out->reset();
    for (const auto& [key, may, schemas] : witness_keys) {
      if ((may & which) != which) continue;
      std::vector<const json*> parts = schemas;
      add_somes(which, &parts);
      Sym v;
      LLMQ_RETURN_IF_ERROR(AllOfValue(parts, ptr + "/$llmq_some", &v));
      if (!out->has_value()) *out = g_.NewRule(ptr + "/$llmq_some:" + std::to_string(which));
      g_.AddAlternative(**out, {key, colon_, v});
    }
    return Status::Ok();
  };
  std::map<std::tuple<size_t, uint64_t, uint32_t>, Sym> members;
  const ObjectRules::Member member = [&](size_t j, uint64_t present, uint32_t as_witness,
                                         Sym* kv) -> Status {
    if (const auto it = members.find({j, present, as_witness}); it != members.end()) {
      *kv = it->second;
      return Status::Ok();
    }
    const Prop& p = props[j];
    Sym v = p.value;
    if (present != 0 || as_witness) {
      std::vector<const json*> all = p.schemas;
      for (size_t k = 0; k < p.dependent.size(); ++k)
        if (present >> k & 1) all.insert(all.end(), p.dependent[k].begin(), p.dependent[k].end());
      add_somes(as_witness, &all);
      LLMQ_RETURN_IF_ERROR(AllOfValue(all, p.where, &v));
    }
    *kv = g_.NewRule(ptr + "/properties/" + PointerToken(p.name) + ":" +
                     (as_witness != 0 ? "!" + std::to_string(as_witness) : std::string()));
    g_.AddAlternative(*kv, {g_.Literal(JsonQuote(p.name)), colon_, v});
    members.emplace(std::make_tuple(j, present, as_witness), *kv);
    return Status::Ok();
  };
  if (Status st = ObjectRules::Build(&g_, layout, {lbrace_, rbrace_, comma_}, member, other,
                                     witness, ptr, out);
      !st.ok()) {
    if (st.code() != Status::Code::kUnsupported) return st;
    for (const char* k : {"dependentSchemas", "dependentRequired", "dependencies", "minProperties",
                          "maxProperties"})
      if (s.contains(k)) return Refuse(k, ptr + "/" + k, st.message());
    return Refuse("properties", ptr + "/properties", st.message());
  }
  return Status::Ok();
}

Status Compiler::DependenciesOf(const json& s, const std::string& ptr, Dependencies* out) {
  for (const char* k : {"dependencies", "dependentRequired", "dependentSchemas"}) {
    if (!s.contains(k)) continue;
    const std::string kp = ptr + "/" + k;
    if (!s[k].is_object()) return Invalid(k, kp, "not an object");
    for (const auto& [key, dep] : s[k].items()) {
      const std::string at = kp + "/" + PointerToken(key);
      out->Mention(key);
      const bool names = std::string(k) == "dependentRequired" ||
                         (std::string(k) == "dependencies" && dep.is_array());
      if (!names) {
        LLMQ_RETURN_IF_ERROR(DependentSchema(key, dep, k, at, out));
        continue;
      }
      if (!dep.is_array()) return Invalid(k, at, "not an array of property names");
      for (const json& r : dep) {
        if (!r.is_string()) return Invalid(k, at, "not an array of property names");
        out->Add({{key, false}, {r.get<std::string>(), true}});
      }
    }
  }
  return Status::Ok();
}

Status Compiler::DependentSchema(const std::string& key, const json& dep, const char* k,
                                 const std::string& at, Dependencies* out) {
  json r;
  LLMQ_RETURN_IF_ERROR(ResolveFlat(dep, at, &r));
  if (r.is_boolean()) {
    if (!r.get<bool>()) out->Add({{key, false}});
    return Status::Ok();
  }
  if (!r.is_object()) return Invalid(k, at, "not a schema");
  std::vector<std::pair<std::string, bool>> presence;  // of `r` itself, beside anyOf/oneOf
  LLMQ_RETURN_IF_ERROR(Presence(key, r, k, at, true, &presence, out));
  for (const auto& lit : presence) out->Add({{key, false}, lit});
  for (const char* any : {"anyOf", "oneOf"}) {
    if (!r.contains(any)) continue;
    if (!r[any].is_array() || r[any].empty())
      return Invalid(any, at + "/" + any, "not a non-empty array");
    // key -> branch 1 or branch 2 or ...; each branch a conjunction of literals.
    std::vector<std::vector<std::pair<std::string, bool>>> branches;
    for (size_t b = 0; b < r[any].size(); ++b) {
      const std::string bp = at + "/" + any + "/" + std::to_string(b);
      json rb;
      LLMQ_RETURN_IF_ERROR(Resolve(r[any][b], bp, &rb));
      std::vector<std::pair<std::string, bool>> lits;
      if (rb.is_boolean()) {
        if (!rb.get<bool>()) continue;  // no object: not a way
      } else if (!rb.is_object()) {
        return Invalid(k, bp, "not a schema");
      } else {
        LLMQ_RETURN_IF_ERROR(Presence(key, rb, k, bp, false, &lits, out));
      }
      branches.push_back(std::move(lits));
    }
    // "at least one": one literal of each branch, in every combination (a branch without
    // literals is every object: nothing asked).
    const bool some_empty =
        std::any_of(branches.begin(), branches.end(), [](const auto& b) { return b.empty(); });
    if (!some_empty) {
      size_t combos = 1;
      for (const auto& b : branches) {
        combos *= b.size();
        if (combos > 256)
          return Refuse(k, at + "/" + any, "more than 256 clauses for its branches");
      }
      for (size_t c = 0; c < combos; ++c) {
        std::vector<std::pair<std::string, bool>> clause = {{key, false}};
        size_t rest = c;
        for (const auto& b : branches) {
          clause.push_back(b[rest % b.size()]);
          rest /= b.size();
        }
        out->Add(std::move(clause));
      }
    }
    if (std::string(any) == "oneOf")  // and no two: not both conjunctions
      for (size_t b = 0; b < branches.size(); ++b)
        for (size_t c = b + 1; c < branches.size(); ++c) {
          std::vector<std::pair<std::string, bool>> clause = {{key, false}};
          bool disjoint = false;
          for (const auto* side : {&branches[b], &branches[c]})
            for (const auto& [name, present] : *side) {
              const auto& other = side == &branches[b] ? branches[c] : branches[b];
              disjoint = disjoint ||
                         std::count(other.begin(), other.end(), std::make_pair(name, !present)) > 0;
              clause.emplace_back(name, !present);
            }
          if (!disjoint) out->Add(std::move(clause));
        }
  }
  return Status::Ok();
}

Status Compiler::Presence(const std::string& key, const json& r, const char* k,
                          const std::string& at, bool values,
                          std::vector<std::pair<std::string, bool>>* lits, Dependencies* out) {
  for (const auto& [kw, v] : r.items()) {
    if (!(Enforced().count(kw) || Refused().count(kw))) continue;  // annotations, unknown
    if (kw == "type") {
      std::vector<std::string> types;
      LLMQ_RETURN_IF_ERROR(Types(r, at, &types));
      if (!std::count(types.begin(), types.end(), "object")) {
        lits->clear();
        lits->emplace_back(key, false);
        return Status::Ok();
      }
    } else if (kw == "required") {
      if (!v.is_array()) return Invalid("required", at + "/required", "not an array");
      for (const json& n : v) {
        if (!n.is_string()) return Invalid("required", at + "/required", "not a property name");
        lits->emplace_back(n.get<std::string>(), true);
      }
    } else if (kw == "properties" && v.is_object()) {
      for (const auto& [name, ps] : v.items()) {
        json rp;
        LLMQ_RETURN_IF_ERROR(Resolve(ps, at + "/properties/" + PointerToken(name), &rp));
        if (rp == json(false)) {
          lits->emplace_back(name, false);
        } else if (HasConstraints(rp)) {
          if (!values)
            return Refuse(k, at + "/properties/" + PointerToken(name),
                          "a value asked inside anyOf or oneOf");
          out->held.push_back(ps);
          out->values.emplace_back(key, name, &out->held.back());
          out->Mention(name);
        }
      }
    } else if (values && (kw == "anyOf" || kw == "oneOf")) {
      continue;  // the caller's
    } else {
      return Refuse(k, at + "/" + kw, "\"" + kw + "\" in a dependent schema is not enforced yet");
    }
  }
  return Status::Ok();
}

Status Compiler::PropertyNames(const json& s, const std::string& ptr, KeyNames* out) {
  if (!s.contains("propertyNames")) return Status::Ok();
  const std::string at = ptr + "/propertyNames";
  json r;
  LLMQ_RETURN_IF_ERROR(ResolveFlat(s["propertyNames"], at, &r));
  if (r.is_boolean()) {
    if (!r.get<bool>()) out->only.emplace();  // no key at all
    return Status::Ok();
  }
  if (!r.is_object()) return Invalid("propertyNames", at, "not a schema");
  const auto keep = [&](const std::set<std::string>& names) {
    if (!out->only.has_value()) {
      out->only = names;
      return;
    }
    std::set<std::string> both;
    for (const std::string& n : names)
      if (out->only->count(n)) both.insert(n);
    out->only = std::move(both);
  };
  for (const auto& [k, v] : r.items()) {
    if (!(Enforced().count(k) || Refused().count(k))) continue;  // annotations, unknown
    if (k == "type") {
      std::vector<std::string> types;
      LLMQ_RETURN_IF_ERROR(Types(r, at, &types));
      if (!std::count(types.begin(), types.end(), "string")) keep({});
    } else if ((k == "enum" && v.is_array()) || k == "const") {
      std::set<std::string> names;
      for (const json& x : k == "const" ? json::array({v}) : v)
        if (x.is_string()) names.insert(x.get<std::string>());
      keep(names);
    } else if ((k == "pattern" && v.is_string()) || k == "minLength" || k == "maxLength") {
      std::string pattern = k == "pattern" ? v.get<std::string>() : "";
      if (k != "pattern") {
        if (k == "maxLength" && r.contains("minLength")) continue;  // with minLength's
        LLMQ_RETURN_IF_ERROR(NamesLengthPattern(r, "propertyNames", at + "/" + k, &pattern));
      }
      std::unique_ptr<Regex> re;
      if (Status st = Regex::Compile(pattern, {Regex::Mode::kSearch, true, true}, &re); !st.ok())
        return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)(
            "propertyNames", at + "/" + k, st.message());
      out->patterns.push_back(pattern);
      out->re.push_back(std::move(re));
    } else {
      return Refuse("propertyNames", at + "/" + k,
                    "\"" + k + "\" on property names is not enforced yet");
    }
  }
  return Status::Ok();
}

Status Compiler::SomesOf(const json& s, const std::string& ptr, std::vector<Some>* out) {
  if (!s.contains("$llmq_some")) return Status::Ok();
  if (s["$llmq_some"].size() > static_cast<size_t>(ObjectRules::kMaxWitnesses))
    return Refuse("not", ptr,
                  "more than " + std::to_string(ObjectRules::kMaxWitnesses) +
                      " members of some kind asked of one object");
  out->resize(s["$llmq_some"].size());
  for (size_t i = 0; i < out->size(); ++i)
    LLMQ_RETURN_IF_ERROR(SomeOf(s["$llmq_some"][i], ptr, &(*out)[i]));
  return Status::Ok();
}

Status Compiler::SomeOf(const json& d, const std::string& ptr, Some* out) {
  const std::string at = ptr + "/$llmq_some";
  out->value = d.value("value", json(true));
  for (const char* k : {"patterns", "not_patterns", "not_names"})
    if (d.contains(k))
      for (const json& p : d[k]) {
        auto& list = std::string(k) == "patterns"       ? out->patterns
                     : std::string(k) == "not_patterns" ? out->not_patterns
                                                        : out->not_names;
        list.push_back(p.get<std::string>());
      }
  // The names as one more pattern the key must not match (the key automaton's terms).
  if (!out->not_names.empty()) out->not_patterns.push_back(NamesPattern(out->not_names));
  for (const auto* list : {&out->patterns, &out->not_patterns})
    for (const std::string& p : *list) {
      std::unique_ptr<Regex> re;
      if (Status st = Regex::Compile(p, Regex::Mode::kSearch, &re); !st.ok())
        return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)("not", at,
                                                                            st.message());
      (list == &out->patterns ? out->re : out->not_re).push_back(std::move(re));
    }
  return Status::Ok();
}

Status Compiler::PatternProperties(const json& s, const std::string& ptr, Patterns* out) {
  if (!s.contains("patternProperties")) return Status::Ok();
  const std::string pp = ptr + "/patternProperties";
  if (!s["patternProperties"].is_object()) return Invalid("patternProperties", pp, "not an object");
  if (s["patternProperties"].size() > static_cast<size_t>(KeyPatternAutomaton::kMaxPatterns))
    return Refuse("patternProperties", pp,
                  "more than " + std::to_string(KeyPatternAutomaton::kMaxPatterns) + " patterns");
  for (const auto& [pattern, schema] : s["patternProperties"].items()) {
    const std::string at = pp + "/" + PointerToken(pattern);
    std::unique_ptr<Regex> re;
    if (Status st = Regex::Compile(pattern, {Regex::Mode::kSearch, true, true}, &re); !st.ok())
      return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)("patternProperties", at,
                                                                          st.message());
    out->patterns.push_back(pattern);
    out->schemas.push_back(schema);
    out->pointers.push_back(at);
    out->re.push_back(std::move(re));
  }
  return Status::Ok();
}

Status Compiler::PatternValue(Patterns* pat, uint64_t subset, const std::string& ptr, Sym* out) {
  if (const auto it = pat->values.find(subset); it != pat->values.end()) {
    *out = it->second;
    return Status::Ok();
  }
  std::vector<const json*> all;
  std::string where = ptr + "/patternProperties";
  for (size_t i = 0; i < pat->schemas.size(); ++i)
    if (subset >> i & 1) {
      all.push_back(&pat->schemas[i]);
      if (all.size() == 1) where = pat->pointers[i];
    }
  LLMQ_RETURN_IF_ERROR(AllOfValue(all, where, out));
  pat->values.emplace(subset, *out);
  return Status::Ok();
}

Status Compiler::AllOfValue(const std::vector<const json*>& parts, const std::string& ptr,
                            Sym* out) {
  json all = json::array();
  for (const json* p : parts)
    if (HasConstraints(*p) && std::find(all.begin(), all.end(), *p) == all.end()) all.push_back(*p);
  if (all.empty()) {
    *out = Any();
    return Status::Ok();
  }
  if (all.size() == 1) return Value(all[0], ptr, out);
  return Value(json{{"allOf", all}}, ptr, out);
}

Sym Compiler::OtherKey(const std::set<std::string>& listed) {
  if (listed.empty()) return String(0, -1);
  Grammar::LexemeSpec spec;
  spec.is_key_except = true;
  for (const std::string& name : listed) spec.key_except.push_back(KeyText(name));
  return g_.Lexeme(spec);
}

std::string Compiler::KeyText(const std::string& name) {
  const std::string q = JsonQuote(name);
  return q.substr(1, q.size() - 2);
}

}  // namespace llmq::schema
