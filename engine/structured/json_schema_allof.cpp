#include "engine/structured/json_schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/regex.h"

namespace llmq::schema {

bool Compiler::Unsatisfiable(const json& s) {
  if (s.is_boolean()) return !s.get<bool>();
  if (!s.is_object()) return false;
  if (s.contains("enum") && s["enum"].is_array() && s["enum"].empty()) return true;
  std::set<std::string> types = {"null", "boolean", "object", "array", "number", "string"};
  if (s.contains("type")) {
    const json list = s["type"].is_array() ? s["type"] : json::array({s["type"]});
    types.clear();
    for (const json& t : list)
      if (t.is_string()) types.insert(t == "integer" ? "number" : t.get<std::string>());
  }
  const auto above = [&](const char* lo, const char* hi) {
    return s.contains(lo) && s.contains(hi) && s[lo].is_number() && s[hi].is_number() &&
           s[lo].get<double>() > s[hi].get<double>();
  };
  if (above("minLength", "maxLength")) types.erase("string");
  if (s.contains("$llmq_fraction") && s.contains("type") && !s["type"].is_null() &&
      !(s["type"] == "number" ||
        (s["type"].is_array() && std::count(s["type"].begin(), s["type"].end(), "number"))))
    types.erase("number");  // an integer with a fraction
  if (above("minItems", "maxItems")) types.erase("array");
  if (above("minProperties", "maxProperties")) types.erase("object");
  if (!DraftFourBounds(s)) {
    std::optional<std::pair<double, bool>> lo, hi;  // the tightest bounds, and exclusive
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k) || !s[k].is_number()) continue;
      const bool lower = std::string_view(k).ends_with("inimum"), exclusive = k[0] == 'e';
      const double x = s[k].get<double>();
      auto& b = lower ? lo : hi;
      if (!b || (lower ? x > b->first : x < b->first) || (x == b->first && exclusive))
        b = std::pair{x, exclusive};
    }
    if (lo && hi &&
        (lo->first > hi->first || (lo->first == hi->first && (lo->second || hi->second))))
      types.erase("number");
  }
  if (s.contains("required") && s["required"].is_array() && s.contains("properties") &&
      s["properties"].is_object())
    for (const json& r : s["required"])
      if (r.is_string() && s["properties"].contains(r.get<std::string>()) &&
          Unsatisfiable(s["properties"][r.get<std::string>()]))
        types.erase("object");
  return types.empty();
}

Status Compiler::IfThenElse(const json& s, const std::string& ptr, Sym* out) {
  json written;
  LLMQ_RETURN_IF_ERROR(WithoutIf(s, ptr, &written));
  return Value(written, ptr, out);
}

Status Compiler::WithoutIf(const json& s, const std::string& ptr, json* out) {
  json rest = s;
  for (const char* k : {"if", "then", "else"}) rest.erase(k);
  if (!s.contains("if") || no_conditionals_) {
    *out = std::move(rest);
    return Status::Ok();
  }
  const json yes = s.contains("then") ? s["then"] : json(true);
  const json no = s.contains("else") ? s["else"] : json(true);
  const bool beside = !rest.contains("anyOf") && !rest.contains("oneOf");
  const json base = beside ? json::object() : rest;
  std::vector<json> alts, not_if;
  json with_if, with_else;  // (the names `if` asks for come before then's)
  LLMQ_RETURN_IF_ERROR(Merge(base, s["if"], ptr + "/if", &with_if));
  LLMQ_RETURN_IF_ERROR(AddMerged(with_if, yes, ptr + "/then", &alts));
  LLMQ_RETURN_IF_ERROR(Merge(base, no, ptr + "/else", &with_else));
  json context;  // what not-if is taken within (which types matter, which names an object has)
  LLMQ_RETURN_IF_ERROR(Merge(rest, no, ptr + "/else", &context));
  LLMQ_RETURN_IF_ERROR(Complement(s["if"], context, ptr + "/if", &not_if));
  for (const json& a : not_if) LLMQ_RETURN_IF_ERROR(AddMerged(with_else, a, ptr + "/if", &alts));
  if (alts.empty()) {
    *out = json(false);
  } else if (beside) {
    *out = std::move(rest);
    (*out)["anyOf"] = alts;
  } else {
    *out = alts.size() == 1 ? alts[0] : json{{"anyOf", alts}};
  }
  // Conditionals merged one after another (allOf of if/then parts) each copy the cases so far:
  // past a bound on what is written, refused rather than doubled again.
  if (out->dump().size() > kMaxWritten)
    return Refuse("if", ptr + "/if",
                  "its cases with those before them take more than " +
                      std::to_string(kMaxWritten / 1000) + " kB written out");
  return Status::Ok();
}

Status Compiler::AnyOf(const json& s, const std::string& ptr, Sym* out) {
  // Both: the first one's branches, each with the other beside it (AnyOf again, with
  // siblings), so that the names they ask for come in the schema's order.
  const char* k = "anyOf";
  for (const auto& [key, v] : s.items())
    if (key == "anyOf" || key == "oneOf") {
      k = key == "anyOf" ? "anyOf" : "oneOf";
      break;
    }
  const json& branches = s[k];
  if (!branches.is_array() || branches.empty())
    return Invalid(k, ptr + "/" + k, "not a non-empty array");
  json rest = s;
  rest.erase(k);
  const bool alone = !HasConstraints(rest);
  // oneOf: branch i that may overlap branch j is enforced as "i and not j" (exactly one
  // matches), where `not j` is a form Negate writes; then as anyOf.
  std::vector<std::optional<json>> exclusive(branches.size());
  if (std::string(k) == "oneOf") {
    std::vector<json> resolved(branches.size());
    for (size_t i = 0; i < branches.size(); ++i) {
      const std::string bp = ptr + "/oneOf/" + std::to_string(i);
      if (alone)
        LLMQ_RETURN_IF_ERROR(ResolveFlat(branches[i], bp, &resolved[i]));
      else
        LLMQ_RETURN_IF_ERROR(Merge(rest, branches[i], bp, &resolved[i]));
    }
    // A kind of value two branches admit without a keyword on it (objects, where branches only
    // ask for properties) matches both: none of that kind is one of oneOf's. Those kinds are
    // ruled out beside the branches (and then the branches may be apart).
    std::map<std::string, int> free;
    for (const json& r : resolved)
      for (const std::string& t : FreeKinds(r)) ++free[t];
    std::set<std::string> excluded;
    for (const auto& [t, n] : free)
      if (n >= 2) excluded.insert(t);
    if (!excluded.empty()) {
      json kinds;
      LLMQ_RETURN_IF_ERROR(Merge(rest, json{{"type", OtherKinds(excluded)}}, ptr, &kinds));
      if (kinds == json(false) || kinds["type"].empty()) return Value(json(false), ptr, out);
      kinds[k] = branches;
      return AnyOf(kinds, ptr, out);
    }
    std::vector<std::vector<size_t>> overlaps(branches.size());
    std::string first;  // the first pair that may overlap
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = i + 1; j < branches.size(); ++j) {
        bool disjoint = false;
        LLMQ_RETURN_IF_ERROR(Disjoint(resolved[i], resolved[j], ptr, &disjoint));
        if (disjoint) continue;
        overlaps[i].push_back(j);
        overlaps[j].push_back(i);
        if (first.empty())
          first = "branches " + std::to_string(i) + " and " + std::to_string(j) +
                  " may both match, and not one of them is not enforced: ";
      }
    const int64_t merges = merges_;
    Status failed = Status::Ok();
    for (size_t i = 0; failed.ok() && i < branches.size(); ++i) {
      if (overlaps[i].empty()) continue;
      const std::string bp = ptr + "/oneOf/" + std::to_string(i);
      json cur;
      if (const Status st = Negate(resolved[i], bp, &cur); !st.ok()) {
        failed = st;
        break;
      }
      for (const size_t j : overlaps[i]) {
        if (cur == json(false)) break;
        if (cur.is_boolean()) cur = json::object();
        json other, next;
        LLMQ_RETURN_IF_ERROR(Unshared({&rest, &branches[i]}, branches[j],
                                      ptr + "/oneOf/" + std::to_string(j), &other));
        cur["not"] = other;
        if (const Status st = Negate(cur, bp, &next); !st.ok()) {
          failed = st;
          break;
        }
        cur = std::move(next);
      }
      exclusive[i] = std::move(cur);
    }
    if (!failed.ok()) {
      // Told apart by a discriminator the branches do not all require: the objects with it.
      std::string d;
      if (failed.code() != Status::Code::kUnsupported || !Discriminator(resolved, &d))
        return Refuse("oneOf", ptr + "/oneOf", first + failed.message());
      merges_ = merges;  // what the refused exclusions merged is dropped
      restrictions_.push_back(Where("oneOf", ptr + "/oneOf") + ": only objects with \"" + d +
                              "\" (the branches' discriminator) are generated; telling them "
                              "apart without it is refused (" +
                              failed.message() + ")");
      json split = s;
      for (json& b : split[k])
        b = json{{"allOf", json::array({b, json{{"required", json::array({d})}}})}};
      return AnyOf(split, ptr, out);
    }
  }
  const Sym rule = g_.NewRule(ptr + "/" + k);
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string bp = ptr + "/" + k + "/" + std::to_string(i);
    Sym b;
    if (exclusive[i].has_value()) {
      LLMQ_RETURN_IF_ERROR(MergedValue(*exclusive[i], bp, &b));
    } else if (alone) {
      LLMQ_RETURN_IF_ERROR(Value(branches[i], bp, &b));
    } else {
      // The siblings apply to each branch: {type: object, properties, anyOf: [{required}]}.
      json merged;
      LLMQ_RETURN_IF_ERROR(Merge(rest, branches[i], bp, &merged));
      LLMQ_RETURN_IF_ERROR(MergedValue(merged, bp, &b));
    }
    g_.AddAlternative(rule, {b});
  }
  *out = rule;
  return Status::Ok();
}

bool Compiler::Discriminator(const std::vector<json>& branches, std::string* out) {
  if (branches.size() < 2 || !branches[0].is_object() || !branches[0].contains("properties") ||
      !branches[0]["properties"].is_object())
    return false;
  for (const auto& [name, unused] : branches[0]["properties"].items()) {
    std::set<std::string> seen;  // the values of the branches before
    bool apart = true, required = true;
    for (const json& b : branches) {
      const json* p = b.is_object() && b.contains("properties") && b["properties"].is_object() &&
                              b["properties"].contains(name)
                          ? &b["properties"][name]
                          : nullptr;
      json r;
      std::set<std::string> types;
      std::optional<std::set<std::string>> values;
      if (p == nullptr || !Resolve(*p, "", &r).ok() || !Kinds(r, "", &types, &values).ok() ||
          !values.has_value() || values->empty()) {
        apart = false;
        break;
      }
      for (const std::string& v : *values) apart = seen.insert(v).second && apart;
      if (!apart) break;
      const json req = b.value("required", json::array());
      required = required && req.is_array() && std::find(req.begin(), req.end(), name) != req.end();
    }
    if (apart && !required) {
      *out = name;
      return true;
    }
  }
  return false;
}

std::string Compiler::Canonical(const json& v) {
  if (v.is_number()) {
    const double x = v.get<double>();
    if (x == std::floor(x) && std::fabs(x) < 9007199254740992.0)
      return std::to_string(static_cast<int64_t>(x));
    return json(x).dump();
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const json& x : v) out += Canonical(x) + ",";
    return out + "]";
  }
  if (v.is_object()) {
    std::map<std::string, std::string> members;
    for (const auto& [k, x] : v.items()) members[k] = Canonical(x);
    std::string out = "{";
    for (const auto& [k, x] : members) out += json(k).dump() + ":" + x + ",";
    return out + "}";
  }
  return v.dump();
}

std::set<std::string> Compiler::FreeKinds(const json& s) {
  std::set<std::string> free;
  if (s.is_boolean()) {
    if (s.get<bool>()) free = {"null", "boolean", "object", "array", "number", "string"};
    return free;
  }
  std::vector<std::string> types;
  if (!s.is_object() || !Types(s, "", &types).ok()) return free;
  for (const std::string& t : types) {
    if (t == "integer") continue;  // not every number
    bool constrained = false;
    for (const auto& [k, v] : s.items()) {
      if (k == "type" || Annotations().count(k) || !(Enforced().count(k) || Refused().count(k)))
        continue;
      const char* of = KeywordType(k);
      constrained = constrained || of == nullptr || of == t;
    }
    if (!constrained) free.insert(t);
  }
  return free;
}

const json* Compiler::Target(const json& s) const {
  if (!s.is_object() || !s.contains("$ref") || !s["$ref"].is_string()) return nullptr;
  const std::string ref = s["$ref"].get<std::string>();
  if (ref.empty() || ref[0] != '#') return nullptr;
  try {
    const json::json_pointer jp(ref.substr(1));
    return root_.contains(jp) ? &root_[jp] : nullptr;
  } catch (const json::exception&) {
    return nullptr;
  }
}

void Compiler::Within(const json& s, int depth, std::vector<const json*>* out) const {
  out->push_back(&s);
  if (depth >= 8 || !s.is_object()) return;
  if (const json* t = Target(s)) {
    Within(*t, depth + 1, out);
    if (legacy_ref_) return;  // the $ref's siblings are ignored, allOf among them
  }
  if (s.contains("allOf") && s["allOf"].is_array())
    for (const json& part : s["allOf"]) Within(part, depth + 1, out);
}

Status Compiler::Unshared(const std::vector<const json*>& mine, const json& other,
                          const std::string& ptr, json* out) {
  std::vector<const json*> within;
  for (const json* m : mine) Within(*m, 0, &within);
  const auto pure = [&](const json& x) {  // a $ref whose siblings ask nothing: its target
    const json* t = Target(x);
    if (t == nullptr || legacy_ref_) return t;
    json siblings = x;
    siblings.erase("$ref");
    return HasConstraints(siblings) ? nullptr : t;
  };
  // Whether every document of `mine` meets `x` (itself or the target of its $ref is within).
  const auto shared = [&](const json& x) {
    const json* y = &x;
    for (int hops = 0; y != nullptr && hops <= 16; ++hops, y = pure(*y))
      if (std::any_of(within.begin(), within.end(), [&](const json* w) { return *w == *y; }))
        return true;
    return false;
  };
  if (shared(other)) {
    *out = true;
    return Status::Ok();
  }
  const json* x = &other;
  for (int hops = 0; hops <= 16 && pure(*x) != nullptr; ++hops) x = pure(*x);
  json o = *x;
  if (const json* t = Target(o); t != nullptr && !legacy_ref_ && shared(*t))
    o.erase("$ref");  // beside its siblings: a part like allOf's
  if (o.is_object() && o.contains("allOf") && o["allOf"].is_array() &&
      !(legacy_ref_ && o.contains("$ref"))) {
    json parts = json::array();
    for (const json& part : o["allOf"])
      if (!shared(part)) parts.push_back(part);
    if (parts.empty())
      o.erase("allOf");
    else
      o["allOf"] = std::move(parts);
  }
  return ResolveFlat(o, ptr, out);
}

Status Compiler::Kinds(const json& s, const std::string& ptr, std::set<std::string>* types,
                       std::optional<std::set<std::string>>* values) {
  if (s.is_boolean()) {
    if (s.get<bool>()) types->insert(std::begin(kTypes), std::end(kTypes));
    return Status::Ok();
  }
  std::vector<std::string> t;
  LLMQ_RETURN_IF_ERROR(Types(s, ptr, &t));
  std::set<std::string> allowed(t.begin(), t.end());
  if (allowed.count("number")) allowed.insert("integer");
  if (s.contains("const") || (s.contains("enum") && s["enum"].is_array())) {
    const json list = s.contains("const") ? json::array({s["const"]}) : s["enum"];
    values->emplace();
    for (const json& v : list) {
      const std::string kind = KindOf(v);
      if (!allowed.count(kind) && !(kind == "number" && allowed.count("integer"))) continue;
      types->insert(kind);
      (*values)->insert(Canonical(v));
    }
    return Status::Ok();
  }
  *types = allowed;
  if (types->count("integer") && !types->count("number")) types->insert("number");
  return Status::Ok();
}

Status Compiler::Disjoint(const json& a, const json& b, const std::string& ptr, bool* out) {
  *out = false;
  std::set<std::string> ta, tb;
  std::optional<std::set<std::string>> va, vb;
  LLMQ_RETURN_IF_ERROR(Kinds(a, ptr, &ta, &va));
  LLMQ_RETURN_IF_ERROR(Kinds(b, ptr, &tb, &vb));
  std::set<std::string> both;
  for (const std::string& t : ta)
    if (tb.count(t)) both.insert(t);
  if (both.empty()) {
    *out = true;
    return Status::Ok();
  }
  if (va.has_value() && vb.has_value()) {
    *out = std::none_of(va->begin(), va->end(), [&](const std::string& v) { return vb->count(v); });
    return Status::Ok();
  }
  if (!a.is_object() || !b.is_object()) return Status::Ok();
  // Strings only in common: lengths apart (maxLength 0 and minLength 1).
  if (both == std::set<std::string>{"string"}) {
    const auto length = [](const json& x, const char* k, double none) {
      return x.contains(k) && x[k].is_number() ? x[k].get<double>() : none;
    };
    const double inf = std::numeric_limits<double>::infinity();
    *out = length(a, "maxLength", inf) < length(b, "minLength", 0) ||
           length(b, "maxLength", inf) < length(a, "minLength", 0);
    return Status::Ok();
  }
  // Numbers only in common: ranges apart ({maximum: 0} and {exclusiveMinimum: 0}).
  if (std::all_of(both.begin(), both.end(),
                  [](const std::string& t) { return t == "number" || t == "integer"; })) {
    struct Range {
      double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
      bool lo_open = false, hi_open = false;
    };
    const auto range = [](const json& x) {
      Range r;
      const auto flag = [&](const char* k) {  // draft 4: a boolean beside minimum/maximum
        return x.contains(k) && x[k].is_boolean() && x[k].get<bool>();
      };
      if (x.contains("minimum") && x["minimum"].is_number()) {
        r.lo = x["minimum"].get<double>();
        r.lo_open = flag("exclusiveMinimum");
      }
      if (x.contains("maximum") && x["maximum"].is_number()) {
        r.hi = x["maximum"].get<double>();
        r.hi_open = flag("exclusiveMaximum");
      }
      if (x.contains("exclusiveMinimum") && x["exclusiveMinimum"].is_number() &&
          x["exclusiveMinimum"].get<double>() >= r.lo) {
        r.lo = x["exclusiveMinimum"].get<double>();
        r.lo_open = true;
      }
      if (x.contains("exclusiveMaximum") && x["exclusiveMaximum"].is_number() &&
          x["exclusiveMaximum"].get<double>() <= r.hi) {
        r.hi = x["exclusiveMaximum"].get<double>();
        r.hi_open = true;
      }
      return r;
    };
    const auto below = [](const Range& x, const Range& y) {  // every x below every y
      return x.hi < y.lo || (x.hi == y.lo && (x.hi_open || y.lo_open));
    };
    const Range ra = range(a), rb = range(b);
    *out = below(ra, rb) || below(rb, ra);
    return Status::Ok();
  }
  if (both != std::set<std::string>{"object"}) return Status::Ok();
  const auto required = [](const json& x) {
    std::set<std::string> r;
    if (x.contains("required") && x["required"].is_array())
      for (const json& n : x["required"])
        if (n.is_string()) r.insert(n.get<std::string>());
    return r;
  };
  const auto forbids = [](const json& x, const std::string& name) {
    const bool listed = x.contains("properties") && x["properties"].contains(name);
    if (listed) return x["properties"][name] == json(false);
    if (x.contains("patternProperties")) return false;  // a pattern may allow it
    return x.contains("additionalProperties") && x["additionalProperties"] == json(false);
  };
  const std::set<std::string> ra = required(a), rb = required(b);
  for (const std::string& name : ra) {
    if (forbids(b, name)) return *out = true, Status::Ok();
    if (!rb.count(name) || !a.contains("properties") || !b.contains("properties") ||
        !a["properties"].contains(name) || !b["properties"].contains(name))
      continue;
    json pa, pb;
    LLMQ_RETURN_IF_ERROR(Resolve(a["properties"][name], ptr, &pa));
    LLMQ_RETURN_IF_ERROR(Resolve(b["properties"][name], ptr, &pb));
    bool d = false;
    LLMQ_RETURN_IF_ERROR(Disjoint(pa, pb, ptr, &d));
    if (d) return *out = true, Status::Ok();
  }
  for (const std::string& name : rb)
    if (forbids(a, name)) return *out = true, Status::Ok();
  return Status::Ok();
}

Status Compiler::AllOf(const json& s, const std::string& ptr, Sym* out) {
  json merged;
  LLMQ_RETURN_IF_ERROR(Flatten(s, ptr, &merged));
  return MergedValue(merged, ptr, out);
}

Status Compiler::MergedValue(const json& merged, const std::string& ptr, Sym* out) {
  std::string key = merged.dump();
  if (const auto it = merged_.find(key); it != merged_.end()) {
    *out = it->second;
    return Status::Ok();
  }
  const Sym rule = g_.NewRule(ptr.empty() ? "/allOf" : ptr);
  merged_.emplace(std::move(key), rule);
  Sym body;
  LLMQ_RETURN_IF_ERROR(Value(merged, ptr, &body));
  g_.AddAlternative(rule, {body});
  *out = rule;
  return Status::Ok();
}

Status Compiler::Merge(const json& a0, const json& b0, const std::string& ptr, json* out) {
  // Recursive schemas (a $ref to itself under a merged property) would merge for ever.
  if (merge_depth_ > 32) return Refuse("allOf", ptr, "recursive schemas merged more than 32 deep");
  ++merge_depth_;
  const Status st = MergeOnce(a0, b0, ptr, out);
  --merge_depth_;
  return st;
}

Status Compiler::MergeOnce(const json& a0, const json& b0, const std::string& ptr, json* out) {
  // Negations and oneOf multiply schemas: each merged copy is counted, and past the bound the
  // schema is refused rather than written out (a few levels of 64 alternatives each would be
  // billions).
  if (++merges_ > kMaxMerges)
    return Refuse("allOf", ptr,
                  "more than " + std::to_string(kMaxMerges) +
                      " schemas merged (not, oneOf, if and allOf combined)");
  json a, b;
  LLMQ_RETURN_IF_ERROR(Resolve(a0, ptr, &a));
  LLMQ_RETURN_IF_ERROR(Resolve(b0, ptr, &b));
  if (a.is_boolean() || b.is_boolean()) {
    const json& other = a.is_boolean() ? b : a;
    *out = (a.is_boolean() && !a.get<bool>()) || (b.is_boolean() && !b.get<bool>()) ? json(false)
                                                                                    : other;
    return Status::Ok();
  }
  if (!a.is_object() || !b.is_object()) return Invalid("allOf", ptr, "a schema is not an object");
  if (a.contains("allOf") || b.contains("allOf")) {
    json flat_a, flat_b;
    LLMQ_RETURN_IF_ERROR(Flatten(a, ptr, &flat_a));
    LLMQ_RETURN_IF_ERROR(Flatten(b, ptr, &flat_b));
    // A part that admits nothing (or everything) flattens to a boolean.
    if (flat_a.is_boolean() || flat_b.is_boolean()) return MergeOnce(flat_a, flat_b, ptr, out);
    a = std::move(flat_a);
    b = std::move(flat_b);
  }
  // Both conditional (allOf of several if/then): the first one's written out as an anyOf.
  if (a.contains("if") && b.contains("if") && !no_conditionals_) {
    json written;
    LLMQ_RETURN_IF_ERROR(WithoutIf(a, ptr, &written));
    return MergeOnce(written, b, ptr, out);
  }
  json m = a;
  std::vector<json> contains;  // b's contains where a has another
  LLMQ_RETURN_IF_ERROR(MergeProperties(a, b, ptr, &m));
  const bool tuples = Tuple(a) || Tuple(b);
  if (tuples) LLMQ_RETURN_IF_ERROR(MergeItems(a, b, ptr, &m));
  for (const auto& [k, v] : b.items()) {
    if (k == "properties" || k == "additionalProperties" || k == "patternProperties" ||
        k == "$llmq_key_rules")
      continue;  // MergeProperties
    if (tuples && (k == "prefixItems" || k == "items" || k == "additionalItems"))
      continue;  // MergeItems
    if (!m.contains(k)) {
      m[k] = v;
      continue;
    }
    json& w = m[k];
    if (w == v) continue;
    if (k == "type") {
      std::vector<std::string> ta, tb, both;
      LLMQ_RETURN_IF_ERROR(Types(a, ptr, &ta));
      LLMQ_RETURN_IF_ERROR(Types(b, ptr, &tb));
      for (const std::string& t : ta) {
        if (std::count(tb.begin(), tb.end(), t))
          both.push_back(t);
        else if (t == "number" && std::count(tb.begin(), tb.end(), "integer"))
          both.push_back("integer");
      }
      if (std::count(tb.begin(), tb.end(), "number") && std::count(ta.begin(), ta.end(), "integer"))
        both.push_back("integer");
      w = both;
    } else if (k == "enum" && w.is_array() && v.is_array()) {
      json both = json::array();  // the values in both
      for (const json& x : w)
        if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
      w = std::move(both);
    } else if (k == "pattern") {  // both: the other one among the patterns also asked
      if (!m.contains("$llmq_patterns")) m["$llmq_patterns"] = json::array();
      if (std::find(m["$llmq_patterns"].begin(), m["$llmq_patterns"].end(), v) ==
          m["$llmq_patterns"].end())
        m["$llmq_patterns"].push_back(v);
    } else if (k == "$llmq_not_strings" || k == "$llmq_not_patterns" || k == "$llmq_patterns" ||
               k == "$llmq_some") {  // either side's
      for (const json& x : v)
        if (std::find(w.begin(), w.end(), x) == w.end()) w.push_back(x);
    } else if (k == "const") {
      m["enum"] = json::array();  // two different values: none can be both
    } else if (k == "required" && w.is_array() && v.is_array()) {
      for (const json& r : v)
        if (std::find(w.begin(), w.end(), r) == w.end()) w.push_back(r);
    } else if ((k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies") &&
               w.is_object() && v.is_object()) {
      // Both sides' (a key in both: names united; schemas, or a list beside a schema, as allOf).
      for (const auto& [key, d] : v.items()) {
        if (!w.contains(key)) {
          w[key] = d;
          continue;
        }
        json& mine = w[key];
        if (mine.is_array() && d.is_array()) {
          for (const json& r : d)
            if (std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
        } else if (mine != d) {
          const auto schema = [](const json& x) {
            return x.is_array() ? json{{"required", x}} : x;
          };
          mine = json{{"allOf", json::array({schema(mine), schema(d)})}};
        }
      }
    } else if ((k == "items" || k == "additionalItems") && !w.is_array() && !v.is_array()) {
      json both;  // each item both schemas'
      LLMQ_RETURN_IF_ERROR(Merge(w, v, ptr + "/" + k, &both));
      w = std::move(both);
    } else if ((k == "anyOf" || k == "oneOf") && w.is_array() && v.is_array() && !w.empty() &&
               !v.empty()) {
      json both;
      LLMQ_RETURN_IF_ERROR(Distribute(w, v, k == "oneOf", ptr + "/" + k, &both));
      w = std::move(both);
    } else if ((k == "minimum" || k == "maximum" || k == "exclusiveMinimum" ||
                k == "exclusiveMaximum") &&
               w.is_number() && v.is_number() && !DraftFourBounds(a) && !DraftFourBounds(b)) {
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      if (lower == (v.get<double>() > w.get<double>())) w = v;  // the tighter one
    } else if (k == "multipleOf" && w.is_number() && v.is_number() &&
               w.get<double>() == std::floor(w.get<double>()) &&
               v.get<double>() == std::floor(v.get<double>()) && w.get<double>() >= 1 &&
               v.get<double>() >= 1 && w.get<double>() <= MultipleAutomaton::kMaxDivisor &&
               v.get<double>() <= MultipleAutomaton::kMaxDivisor) {
      // Integer divisors: their least common multiple (past the bound: refused when compiled).
      w = std::lcm(static_cast<int64_t>(w.get<double>()), static_cast<int64_t>(v.get<double>()));
    } else if (k == "uniqueItems" && w.is_boolean() && v.is_boolean()) {
      w = w.get<bool>() || v.get<bool>();  // either asks it: both do
    } else if (k == "minLength" || k == "minItems" || k == "minProperties" || k == "maxLength" ||
               k == "maxItems" || k == "maxProperties") {
      if (!w.is_number() || !v.is_number())  // found merging bounds of strings: it threw
        return Invalid(k, ptr + "/" + k, "not a non-negative integer");
      w = k.starts_with("min") ? std::max(w.get<double>(), v.get<double>())
                               : std::min(w.get<double>(), v.get<double>());
    } else if (Annotations().count(k) || !(Enforced().count(k) || Refused().count(k))) {
      continue;  // the first one's annotation stays
    } else if (k == "$llmq_contains" || (k == "contains" && !no_contains_)) {
      contains.push_back(v);  // told apart below, by the items
    } else {
      return Refuse("allOf", ptr, "\"" + k + "\" differs between the schemas it combines");
    }
  }
  if (!contains.empty()) return MergeContains(a, b, contains, ptr, &m, out);
  *out = std::move(m);
  return Status::Ok();
}

Status Compiler::MergeContains(const json& a, const json& b, const std::vector<json>& more,
                               const std::string& ptr, json* m, json* out) {
  const char* k = m->contains("$llmq_contains") ? "$llmq_contains" : "contains";
  const auto differs = [&] {
    return Refuse("allOf", ptr,
                  std::string("\"") + k + "\" differs between the schemas it combines");
  };
  for (const json* side : {&a, &b})
    for (const char* count :
         {"minContains", "maxContains", "$llmq_min_contains", "$llmq_max_contains"})
      if (side->contains(count)) return differs();
  if (m->contains("prefixItems") || (m->contains("items") && (*m)["items"].is_array()))
    return differs();
  json items;
  LLMQ_RETURN_IF_ERROR(ResolveFlat(m->value("items", json(true)), ptr + "/items", &items));
  if (items == json(false)) {  // no item: nothing to contain
    *out = false;
    return Status::Ok();
  }
  if (!items.is_object() || !(items.contains("enum") || items.contains("const"))) return differs();
  const json values = EnumValues(items);
  if (!values.is_array()) return differs();
  std::vector<json> left;
  std::vector<json> all = {(*m)[k]};
  all.insert(all.end(), more.begin(), more.end());
  for (const json& c : all) {
    bool every = true, none = true;  // of the values the items may be
    for (const json& v : values) {
      const std::optional<bool> h = Holds(v, c);
      if (!h.has_value()) {
        every = none = false;
        break;
      }
      (*h ? none : every) = false;
    }
    if (none) {  // no item can be one
      *out = false;
      return Status::Ok();
    }
    if (every) {  // any item is one: an item at least
      const json min = m->value("minItems", json(0));
      if (!min.is_number())
        return Invalid("minItems", ptr + "/minItems", "not a non-negative integer");
      (*m)["minItems"] = std::max(min.get<double>(), 1.0);
      continue;
    }
    if (std::find(left.begin(), left.end(), c) == left.end()) left.push_back(c);
  }
  if (left.size() > 1) return differs();
  if (left.empty())
    m->erase(k);
  else
    (*m)[k] = left[0];
  *out = std::move(*m);
  return Status::Ok();
}

std::optional<bool> Compiler::Holds(const json& v, const json& x, int depth) {
  if (x.is_boolean()) return x.get<bool>();
  if (!x.is_object() || depth > 16 || v.is_object() || v.is_array()) return std::nullopt;
  if (const json* t = Target(x)) {
    json siblings = x;
    siblings.erase("$ref");
    const std::optional<bool> there = Holds(v, *t, depth + 1);
    if (legacy_ref_) return there;  // the siblings are ignored
    const std::optional<bool> beside = Holds(v, siblings, depth + 1);
    if (there == false || beside == false) return false;
    if (there.has_value() && beside.has_value()) return true;
    return std::nullopt;
  }
  const bool integral = v.is_number_integer() || v.is_number_unsigned() ||
                        (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  const std::string kind = KindOf(v);
  bool known = true;
  for (const auto& [k, w] : x.items()) {
    if (Annotations().count(k) || !(Enforced().count(k) || Refused().count(k))) continue;
    std::optional<bool> r;
    if (k == "$ref") {
      r = std::nullopt;  // not local
    } else if (k == "not") {
      r = Holds(v, w, depth + 1);
      if (r.has_value()) r = !*r;
    } else if (k == "enum") {
      if (w.is_array())
        r = std::any_of(w.begin(), w.end(), [&](const json& e) { return SameValue(v, e); });
    } else if (k == "const") {
      r = SameValue(v, w);
    } else if (k == "type") {
      std::vector<std::string> types;
      if (Types(x, "", &types).ok())
        r = std::count(types.begin(), types.end(), kind) > 0 ||
            (kind == "number" && integral && std::count(types.begin(), types.end(), "integer") > 0);
    } else if (k == "anyOf" || k == "allOf" || k == "oneOf") {
      if (w.is_array() && !w.empty()) {
        int yes = 0, unknown = 0;
        for (const json& part : w) {
          const std::optional<bool> p = Holds(v, part, depth + 1);
          if (!p.has_value())
            ++unknown;
          else
            yes += *p;
        }
        const int n = static_cast<int>(w.size());
        if (k == "anyOf" && (yes > 0 || unknown == 0)) r = yes > 0;
        if (k == "allOf" && (yes + unknown < n || unknown == 0)) r = yes == n;
        if (k == "oneOf" && (yes > 1 || unknown == 0)) r = yes == 1;
      }
    } else if (const char* t = KeywordType(k); t != nullptr && t != kind) {
      r = true;  // a keyword of another type
    } else if (k == "minLength" || k == "maxLength" || k == "pattern" || k == "minimum" ||
               k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum" ||
               (k == "multipleOf" && w.is_number() && w.get<double>() >= 1 &&
                w.get<double>() == std::floor(w.get<double>()))) {
      r = Satisfies(v, x);  // format is left out: its regex is not every validator's
    }
    if (r == false) return false;
    known = known && r.has_value();
  }
  if (!known) return std::nullopt;
  return true;
}

Status Compiler::Distribute(const json& w, const json& v, bool one, const std::string& ptr,
                            json* out) {
  const char* k = one ? "oneOf" : "anyOf";
  if (w.size() * v.size() > kMaxPairs)
    return Refuse("allOf", ptr,
                  std::string("\"") + k + "\" of " + std::to_string(w.size()) + " and of " +
                      std::to_string(v.size()) + " branches: more than " +
                      std::to_string(kMaxPairs) + " pairs");
  json both = json::array();
  for (const json& x : w)
    for (const json& y : v) {
      json pair;
      if (!Merge(x, y, ptr, &pair).ok()) pair = json{{"allOf", json::array({x, y})}};
      if (Unsatisfiable(pair)) continue;
      if (!one && std::find(both.begin(), both.end(), pair) != both.end()) continue;
      both.push_back(std::move(pair));
      if (both.size() > kMaxAlternatives)
        return Refuse("allOf", ptr,
                      std::string("\"") + k + "\" of both schemas: more than " +
                          std::to_string(kMaxAlternatives) + " alternatives");
    }
  // None: the allOf admits nothing (an anyOf or oneOf must not be empty).
  *out = both.empty() ? json::array({false}) : std::move(both);
  return Status::Ok();
}

bool Compiler::Tuple(const json& s) {
  return s.contains("prefixItems") || (s.contains("items") && s["items"].is_array());
}

void Compiler::Items(const json& s, std::vector<json>* prefix, json* rest) {
  const auto list = [&](const char* k) {
    if (s[k].is_array()) prefix->assign(s[k].begin(), s[k].end());
  };
  *rest = true;
  if (s.contains("prefixItems")) {
    list("prefixItems");
    if (s.contains("items")) *rest = s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    list("items");
    if (s.contains("additionalItems")) *rest = s["additionalItems"];
  } else if (s.contains("items")) {
    *rest = s["items"];
  }
}

Status Compiler::MergeItems(const json& a, const json& b, const std::string& ptr, json* m) {
  std::vector<json> pa, pb;
  json ra, rb;
  Items(a, &pa, &ra);
  Items(b, &pb, &rb);
  json prefix = json::array();
  for (size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
    json both;
    LLMQ_RETURN_IF_ERROR(Merge(i < pa.size() ? pa[i] : ra, i < pb.size() ? pb[i] : rb,
                               ptr + "/prefixItems/" + std::to_string(i), &both));
    prefix.push_back(std::move(both));
  }
  json rest;
  LLMQ_RETURN_IF_ERROR(Merge(ra, rb, ptr + "/items", &rest));
  for (const char* k : {"prefixItems", "items", "additionalItems"}) m->erase(k);
  (*m)["prefixItems"] = std::move(prefix);
  if (rest != json(true)) (*m)["items"] = std::move(rest);
  return Status::Ok();
}

Status Compiler::KeyRulesOf(const json& s, const std::string& ptr, std::vector<KeyRule>* out) {
  if (!s.contains("$llmq_key_rules")) return Status::Ok();
  const std::string at = ptr + "/$llmq_key_rules";
  const json& rules = s["$llmq_key_rules"];
  if (!rules.is_array()) return Invalid("$llmq_key_rules", at, "not the form allOf writes");
  for (const json& r : rules) {
    if (!r.is_object() || !r.contains("not_patterns") || !r["not_patterns"].is_array())
      return Invalid("$llmq_key_rules", at, "not the form allOf writes");
    KeyRule rule;
    rule.value = r.value("value", json(true));
    for (const json& p : r["not_patterns"]) {
      if (!p.is_string()) return Invalid("$llmq_key_rules", at, "not the form allOf writes");
      std::unique_ptr<Regex> re;
      if (Status st = Regex::Compile(p.get<std::string>(), Regex::Mode::kSearch, &re); !st.ok())
        return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)("patternProperties", at,
                                                                            st.message());
      rule.not_patterns.push_back(p.get<std::string>());
      rule.not_re.push_back(std::move(re));
    }
    out->push_back(std::move(rule));
  }
  return Status::Ok();
}

const json& Compiler::EmptyObject() {
  static const json kEmpty = json::object();
  return kEmpty;
}

const json& Compiler::True() {
  static const json kTrue = true;
  return kTrue;
}

Status Compiler::KeysOf(const json& x, const std::string& ptr, ObjectKeys* out) {
  if (x.contains("properties") && x["properties"].is_object()) out->props = &x["properties"];
  if (x.contains("additionalProperties")) out->extra = &x["additionalProperties"];
  if (x.contains("patternProperties")) {
    if (!x["patternProperties"].is_object())
      return Invalid("patternProperties", ptr + "/patternProperties", "not an object");
    out->patterns = &x["patternProperties"];
    for (const auto& [pattern, p] : out->patterns->items()) {
      std::unique_ptr<Regex> re;
      if (const Status st = Regex::Compile(pattern, Regex::Mode::kSearch, &re); !st.ok())
        return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)(
            "patternProperties", ptr + "/patternProperties/" + PointerToken(pattern), st.message());
      out->re.push_back(std::move(re));
    }
  }
  return KeyRulesOf(x, ptr, &out->rules);
}

Status Compiler::MergeProperties(const json& a, const json& b, const std::string& ptr, json* m) {
  const auto keyed = [](const json& x) {
    return x.contains("properties") || x.contains("patternProperties") ||
           x.contains("additionalProperties") || x.contains("$llmq_key_rules");
  };
  if (!keyed(a) && !keyed(b)) return Status::Ok();
  ObjectKeys ka, kb;
  LLMQ_RETURN_IF_ERROR(KeysOf(a, ptr, &ka));
  LLMQ_RETURN_IF_ERROR(KeysOf(b, ptr, &kb));
  // A schema merged with nothing stays as written (a $ref stays one: a recursive schema's rule
  // is made once, not inlined again at each level).
  const auto merged = [&](const json& x, const std::vector<const json*>& others,
                          const std::string& at, json* mp) {
    *mp = x;
    for (const json* y : others) {
      if (!HasConstraints(*y)) continue;  // true, {}, annotations only
      json next;
      LLMQ_RETURN_IF_ERROR(Merge(*mp, *y, at, &next));
      *mp = std::move(next);
    }
    return Status::Ok();
  };
  json props = json::object();
  for (const auto& [name, ps] : ka.props->items()) {
    const auto listed = kb.props->find(name);
    const std::vector<const json*> other =
        listed != kb.props->end() ? std::vector<const json*>{&*listed} : kb.Other(name);
    LLMQ_RETURN_IF_ERROR(
        merged(ps, other, ptr + "/properties/" + PointerToken(name), &props[name]));
  }
  for (const auto& [name, ps] : kb.props->items())
    if (!ka.props->contains(name))
      LLMQ_RETURN_IF_ERROR(
          merged(ps, ka.Other(name), ptr + "/properties/" + PointerToken(name), &props[name]));
  json patterns = *ka.patterns;
  for (const auto& [pattern, p] : kb.patterns->items())
    if (!patterns.contains(pattern))
      patterns[pattern] = p;
    else if (patterns[pattern] != p)
      LLMQ_RETURN_IF_ERROR(merged(patterns[pattern], {&p},
                                  ptr + "/patternProperties/" + PointerToken(pattern),
                                  &patterns[pattern]));
  std::vector<const json*> extras;  // the object's additionalProperties, all of them
  json rules = json::array();
  for (ObjectKeys* k : {&ka, &kb}) {
    for (const KeyRule& r : k->rules)
      rules.push_back({{"not_patterns", r.not_patterns}, {"value", r.value}});
    if (!HasConstraints(*k->extra)) continue;
    json own = json::array();
    for (const auto& [pattern, p] : k->patterns->items()) own.push_back(pattern);
    if (own.size() == patterns.size())
      extras.push_back(k->extra);
    else
      rules.push_back({{"not_patterns", std::move(own)}, {"value", *k->extra}});
  }
  for (const char* k :
       {"properties", "patternProperties", "additionalProperties", "$llmq_key_rules"})
    m->erase(k);
  const bool closed =
      (patterns.empty() &&
       std::any_of(extras.begin(), extras.end(), [](const json* x) { return *x == false; })) ||
      std::any_of(rules.begin(), rules.end(), [](const json& r) {
        return r["not_patterns"].empty() && r["value"] == json(false);
      });
  if (closed) {
    const json only = {{"patternProperties", std::move(patterns)}};
    ObjectKeys all;  // the patterns' schemas into the names they match
    LLMQ_RETURN_IF_ERROR(KeysOf(only, ptr, &all));
    size_t i = 0;
    for (const auto& [pattern, p] : all.patterns->items()) {
      for (auto& [name, ps] : props.items())
        if (all.re[i]->Matches(name))
          LLMQ_RETURN_IF_ERROR(merged(ps, {&p}, ptr + "/properties/" + PointerToken(name), &ps));
      ++i;
    }
    (*m)["properties"] = std::move(props);
    (*m)["additionalProperties"] = false;
    return Status::Ok();
  }
  if (!props.empty() || a.contains("properties") || b.contains("properties"))
    (*m)["properties"] = std::move(props);
  if (!patterns.empty()) (*m)["patternProperties"] = std::move(patterns);
  if (!extras.empty()) {
    json add;
    LLMQ_RETURN_IF_ERROR(merged(*extras[0], {extras.begin() + 1, extras.end()},
                                ptr + "/additionalProperties", &add));
    (*m)["additionalProperties"] = std::move(add);
  }
  if (!rules.empty()) (*m)["$llmq_key_rules"] = std::move(rules);
  return Status::Ok();
}

Status Compiler::Flatten(const json& s, const std::string& ptr, json* out) {
  if (!s.contains("allOf")) {
    *out = s;
    return Status::Ok();
  }
  if (!s["allOf"].is_array() || s["allOf"].empty())
    return Invalid("allOf", ptr + "/allOf", "not a non-empty array");
  json m = s;
  m.erase("allOf");
  for (size_t i = 0; i < s["allOf"].size(); ++i) {
    json next;
    LLMQ_RETURN_IF_ERROR(Merge(m, s["allOf"][i], ptr + "/allOf/" + std::to_string(i), &next));
    m = std::move(next);
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace llmq::schema
