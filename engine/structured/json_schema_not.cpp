#include "engine/structured/json_schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/json_regex.h"
#include "engine/structured/regex.h"

namespace llmq::schema {

Status Compiler::Negate(const json& s, const std::string& ptr, json* out) {
  // The keyword Negate writes, where a schema brings its own: only the shape written is read.
  const auto strings = [](const json& list) {
    return list.is_array() &&
           std::all_of(list.begin(), list.end(), [](const json& v) { return v.is_string(); });
  };
  for (const char* own : {"$llmq_not_strings", "$llmq_not_patterns", "$llmq_patterns"})
    if (s.is_object() && s.contains(own) && !strings(s[own]))
      return Invalid(own, ptr + "/" + own, "not an array of strings");
  if (s.is_object() && s.contains("$llmq_some")) {
    const json& some = s["$llmq_some"];
    const bool ok = some.is_array() && std::all_of(some.begin(), some.end(), [&](const json& d) {
                      if (!d.is_object()) return false;
                      for (const auto& [k, v] : d.items())
                        if (k == "value" ? !(v.is_object() || v.is_boolean())
                                         : !strings(v) || (k != "patterns" && k != "not_patterns" &&
                                                           k != "not_names"))
                          return false;
                      return true;
                    });
    if (!ok) return Invalid("$llmq_some", ptr + "/$llmq_some", "not the form Negate writes");
  }
  // Drafts 4 to 7 ignore a $ref's siblings, `not` among them (Ref).
  if (!s.is_object() || !s.contains("not") || (legacy_ref_ && s.contains("$ref"))) {
    *out = s;
    return Status::Ok();
  }
  json rest = s;
  rest.erase("not");
  // (A or B) and not n: (A and not n) or (B and not n), each branch the context of its
  // complement (which names an object may have, ...). Where a branch refuses, as one.
  if (rest.contains("anyOf") && rest["anyOf"].is_array() && !rest.contains("oneOf") &&
      !rest.contains("allOf") && !rest.contains("$ref")) {
    json base = rest;
    base.erase("anyOf");
    std::vector<json> any;
    bool ok = true;
    for (size_t i = 0; ok && i < rest["anyOf"].size(); ++i) {
      json branch, one;
      ok = Merge(base, rest["anyOf"][i], ptr + "/anyOf/" + std::to_string(i), &branch).ok();
      if (!ok || Unsatisfiable(branch)) continue;
      if (branch.is_boolean()) branch = json::object();
      branch["not"] = s["not"];
      ok = Negate(branch, ptr, &one).ok();
      if (!ok || Unsatisfiable(one)) continue;
      if (one.is_object() && one.size() == 1 && one.contains("anyOf"))
        any.insert(any.end(), one["anyOf"].begin(), one["anyOf"].end());
      else
        any.push_back(std::move(one));
      ok = any.size() <= kMaxAlternatives;
    }
    if (ok) {
      *out = any.empty() ? json(false) : any.size() == 1 ? any[0] : json{{"anyOf", any}};
      return Status::Ok();
    }
  }
  std::vector<json> alts;
  LLMQ_RETURN_IF_ERROR(Complement(s["not"], rest, ptr + "/not", &alts));
  // Beside an anyOf that could not be distributed, several alternatives would each hold it
  // whole: nested, their number multiplies with each negation (oneOf of many branches).
  if (alts.size() > 1 && rest.contains("anyOf"))
    return Refuse(
        "not", ptr + "/not",
        "beside an anyOf, more than " + std::to_string(kMaxAlternatives) + " alternatives");
  return Conjoin(rest, alts, ptr, out);
}

std::optional<std::vector<std::string>> Compiler::ClosedNames(const json& rest,
                                                              const std::string& ptr) {
  json r;
  if (!ResolveFlat(rest, ptr, &r).ok() || !r.is_object() || !r.contains("additionalProperties") ||
      r["additionalProperties"] != json(false) || r.contains("patternProperties"))
    return std::nullopt;
  std::vector<std::string> names;
  if (r.contains("properties") && r["properties"].is_object())
    for (const auto& [name, p] : r["properties"].items())
      if (p != json(false)) names.push_back(name);
  return names;
}

Status Compiler::ComplementOfNames(const json& n, const std::vector<std::string>& names,
                                   const std::string& np, std::vector<json>* alts) {
  std::vector<std::pair<std::unique_ptr<Regex>, json>> patterns;
  if (n.contains("patternProperties")) {
    if (!n["patternProperties"].is_object())
      return Invalid("patternProperties", np + "/patternProperties", "not an object");
    for (const auto& [pattern, p] : n["patternProperties"].items()) {
      std::unique_ptr<Regex> re;
      if (const Status st = Regex::Compile(pattern, Regex::Mode::kSearch, &re); !st.ok())
        return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)(
            "patternProperties", np + "/patternProperties/" + PointerToken(pattern), st.message());
      patterns.emplace_back(std::move(re), p);
    }
  }
  KeyNames key_names;
  LLMQ_RETURN_IF_ERROR(PropertyNames(n, np, &key_names));
  std::vector<KeyRule> rules;
  LLMQ_RETURN_IF_ERROR(KeyRulesOf(n, np, &rules));
  const json listed =
      n.contains("properties") && n["properties"].is_object() ? n["properties"] : json::object();
  const json extra = n.contains("additionalProperties") ? n["additionalProperties"] : json(true);
  for (const std::string& name : names) {
    const auto present = [&](const json& value_fails) {
      json alt = {{"type", "object"}, {"required", {name}}};
      if (!value_fails.is_null()) alt["properties"][name] = value_fails;
      alts->push_back(std::move(alt));
    };
    if (!key_names.Allows(name)) {
      present(json());
      continue;
    }
    bool matched = false;
    for (auto& [re, p] : patterns)
      if (re->Matches(name)) {
        matched = true;
        if (HasConstraints(p)) present(json{{"not", p}});
      }
    if (!matched && !listed.contains(name) && HasConstraints(extra)) present(json{{"not", extra}});
    if (!listed.contains(name))
      for (const KeyRule& r : rules)
        if (r.Applies(name) && HasConstraints(r.value)) present(json{{"not", r.value}});
  }
  return Status::Ok();
}

Status Compiler::ComplementOfAnyNames(const json& n, const std::string& np,
                                      std::vector<json>* alts) {
  const auto some = [&](json d) {
    alts->push_back(json{{"type", "object"}, {"$llmq_some", json::array({std::move(d)})}});
  };
  if (n.contains("additionalProperties") && HasConstraints(n["additionalProperties"])) {
    json names = json::array(), patterns = json::array();
    if (n.contains("properties") && n["properties"].is_object())
      for (const auto& [name, p] : n["properties"].items()) names.push_back(name);
    if (n.contains("patternProperties") && n["patternProperties"].is_object())
      for (const auto& [pattern, p] : n["patternProperties"].items()) patterns.push_back(pattern);
    some({{"not_names", names},
          {"not_patterns", patterns},
          {"value", {{"not", n["additionalProperties"]}}}});
  }
  if (n.contains("patternProperties") && n["patternProperties"].is_object())
    for (const auto& [pattern, p] : n["patternProperties"].items())
      if (HasConstraints(p)) some({{"patterns", {pattern}}, {"value", {{"not", p}}}});
  std::vector<KeyRule> rules;  // a key not listed that a rule applies to, its value failing it
  LLMQ_RETURN_IF_ERROR(KeyRulesOf(n, np, &rules));
  for (const KeyRule& r : rules) {
    if (!HasConstraints(r.value)) continue;
    json names = json::array();
    if (n.contains("properties") && n["properties"].is_object())
      for (const auto& [name, p] : n["properties"].items()) names.push_back(name);
    some({{"not_names", names}, {"not_patterns", r.not_patterns}, {"value", {{"not", r.value}}}});
  }
  if (n.contains("propertyNames") && HasConstraints(n["propertyNames"])) {
    const std::string at = np + "/propertyNames";
    std::vector<json> keys;
    LLMQ_RETURN_IF_ERROR(Complement(n["propertyNames"], json{{"type", "string"}}, at, &keys));
    for (const json& key : keys) {
      json d = json::object();
      if (key.is_boolean() || !key.is_object()) {
        if (key == json(false)) continue;
        some(d);  // any key
        continue;
      }
      std::vector<std::string> types;
      LLMQ_RETURN_IF_ERROR(Types(key, at, &types));
      if (std::count(types.begin(), types.end(), "string") == 0) continue;  // keys are strings
      json patterns = json::array();
      for (const auto& [k, v] : key.items()) {
        if (k == "type" || Annotations().count(k) || !(Enforced().count(k) || Refused().count(k)))
          continue;
        if (k == "pattern") {
          patterns.push_back(v);
        } else if (k == "$llmq_patterns") {
          for (const json& p : v) patterns.push_back(p);
        } else if (k == "$llmq_not_patterns") {
          d["not_patterns"] = v;
        } else if (k == "$llmq_not_strings") {
          d["not_names"] = v;
        } else if ((k == "enum" || k == "const") && !key.contains("minLength") &&
                   !key.contains("maxLength")) {
          std::vector<std::string> names;
          for (const json& x : k == "const" ? json::array({v}) : v)
            if (x.is_string()) names.push_back(x.get<std::string>());
          patterns.push_back(NamesPattern(names));
        } else if (k == "minLength" || k == "maxLength") {
          if (k == "maxLength" && key.contains("minLength")) continue;  // with minLength's
          std::string lengths;
          LLMQ_RETURN_IF_ERROR(NamesLengthPattern(key, "not", at, &lengths));
          patterns.push_back(lengths);
        } else {
          return Refuse("not", at,
                        "not {propertyNames} with \"" + k +
                            "\" is not enforced (where the object may have any name)");
        }
      }
      if (!patterns.empty()) d["patterns"] = patterns;
      some(d);
    }
  }
  return Status::Ok();
}

std::string Compiler::LengthPattern(int64_t min, int64_t max) {
  return "^[\\s\\S]{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "}$";
}

Status Compiler::NamesLengthPattern(const json& s, const char* keyword, const std::string& at,
                                    std::string* out) {
  int64_t min = 0, max = -1;
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "minLength", at, &min));
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxLength", at, &max));
  if (std::max(min, max) > 1000)
    return Refuse(keyword, at, "a length bound above 1000 on the names");
  *out = LengthPattern(min, max);
  return Status::Ok();
}

std::string Compiler::NamesPattern(const std::vector<std::string>& names) {
  std::string alts;
  for (const std::string& n : names) alts += (alts.empty() ? "" : "|") + RegexEscape(n);
  return names.empty() ? "[^\\s\\S]" : "^(?:" + alts + ")$";
}

json Compiler::OtherKinds(const std::set<std::string>& excluded) {
  json others = json::array();
  for (const char* t : {"null", "boolean", "object", "array", "number", "string"})
    if (!excluded.count(t)) others.push_back(t);
  return others;
}

const char* Compiler::KindOf(const json& v) {
  return v.is_null()      ? "null"
         : v.is_boolean() ? "boolean"
         : v.is_object()  ? "object"
         : v.is_array()   ? "array"
         : v.is_string()  ? "string"
                          : "number";
}

const char* Compiler::KeywordType(const std::string& k) {
  static const std::map<std::string, const char*> types = {{"properties", "object"},
                                                           {"required", "object"},
                                                           {"patternProperties", "object"},
                                                           {"additionalProperties", "object"},
                                                           {"propertyNames", "object"},
                                                           {"minProperties", "object"},
                                                           {"maxProperties", "object"},
                                                           {"dependencies", "object"},
                                                           {"dependentRequired", "object"},
                                                           {"dependentSchemas", "object"},
                                                           {"minLength", "string"},
                                                           {"maxLength", "string"},
                                                           {"pattern", "string"},
                                                           {"format", "string"},
                                                           {"$llmq_not_strings", "string"},
                                                           {"$llmq_not_patterns", "string"},
                                                           {"minimum", "number"},
                                                           {"maximum", "number"},
                                                           {"exclusiveMinimum", "number"},
                                                           {"exclusiveMaximum", "number"},
                                                           {"multipleOf", "number"},
                                                           {"$llmq_fraction", "number"},
                                                           {"$llmq_patterns", "string"},
                                                           {"$llmq_some", "object"},
                                                           {"$llmq_key_rules", "object"},
                                                           {"$llmq_not_multiple_of", "number"},
                                                           {"items", "array"},
                                                           {"prefixItems", "array"},
                                                           {"additionalItems", "array"},
                                                           {"minItems", "array"},
                                                           {"maxItems", "array"},
                                                           {"contains", "array"},
                                                           {"uniqueItems", "array"},
                                                           {"$llmq_contains", "array"}};
  const auto it = types.find(k);
  return it == types.end() ? nullptr : it->second;
}

Status Compiler::Complement(const json& n0, const json& rest, const std::string& np,
                            std::vector<json>* alts) {
  if (negate_depth_ > 16) return Refuse("not", np, "negations nested more than 16 deep");
  ++negate_depth_;
  const Status st = ComplementOnce(n0, rest, np, alts);
  --negate_depth_;
  return st;
}

Status Compiler::ComplementOnce(const json& n0, const json& rest, const std::string& np,
                                std::vector<json>* alts) {
  if (n0.is_object() && !HasConstraints(n0)) return Status::Ok();  // not {}: nothing
  json n = n0;  // its own `not` stays one (the keyword's case below)
  if (n0.is_object() && (n0.contains("$ref") || n0.contains("allOf")))
    LLMQ_RETURN_IF_ERROR(ResolveFlat(n0, np, &n));
  if (n.is_boolean()) {
    if (!n.get<bool>()) alts->push_back(json::object());  // not false: anything
    return Status::Ok();
  }
  if (!n.is_object()) return Invalid("not", np, "not a schema");
  const auto refuse = [&](const std::string& why) { return Refuse("not", np, why); };
  std::vector<std::string> rest_type;  // `type` well formed
  LLMQ_RETURN_IF_ERROR(Types(rest, np, &rest_type));
  const std::vector<std::string> rest_types = Kinds(rest, np);
  const auto admits = [&](const char* t) {
    return std::count(rest_types.begin(), rest_types.end(), t) > 0;
  };
  const auto of = [](const char* type, json more) {
    more["type"] = type;
    return more;
  };
  bool names_done = false;  // patternProperties, additionalProperties, propertyNames: at once
  std::string format_rx;
  for (const auto& [k, v] : n.items()) {
    if (Annotations().count(k) || !(Enforced().count(k) || Refused().count(k))) continue;
    // A keyword of one type holds for values of the others: none of those fails it.
    if (const char* t = KeywordType(k);
        t != nullptr && !admits(t) && !(std::string(t) == "number" && admits("integer")))
      continue;
    const std::string kp = np + "/" + PointerToken(k);
    if (k == "type") {
      std::vector<std::string> types;
      LLMQ_RETURN_IF_ERROR(Types(n, np, &types));
      const auto has = [&](const char* t) { return std::count(types.begin(), types.end(), t) > 0; };
      std::set<std::string> listed(types.begin(), types.end());
      if (has("integer")) listed.insert("number");  // its complement among numbers: below
      if (const json others = OtherKinds(listed); !others.empty())
        alts->push_back(json{{"type", others}});
      if (has("integer") && !has("number") && admits("number"))
        alts->push_back(json{{"type", "number"}, {"$llmq_fraction", true}});
    } else if (k == "enum" || k == "const") {
      LLMQ_RETURN_IF_ERROR(
          ComplementOfValues(k == "const" ? json::array({v}) : v, rest_types, kp, alts));
    } else if (k == "$llmq_fraction") {  // an integer, or not a number
      alts->push_back(json{{"type", {"null", "boolean", "object", "array", "string", "integer"}}});
    } else if (k == "pattern") {
      if (!v.is_string()) return Invalid("pattern", kp, "not a string");
      alts->push_back(json{{"type", "string"}, {"$llmq_not_patterns", {v}}});
    } else if (k == "$llmq_patterns") {  // a string one of them does not match, or not a string
      for (const json& p : v)
        alts->push_back(json{{"type", "string"}, {"$llmq_not_patterns", {p}}});
    } else if (k == "$llmq_not_patterns") {  // a string one of them matches, or not a string
      alts->push_back(json{{"type", OtherKinds({"string"})}});
      for (const json& p : v) alts->push_back(json{{"type", "string"}, {"pattern", p}});
    } else if (k == "$llmq_not_strings") {  // a string among those, or not a string
      alts->push_back(json{{"type", OtherKinds({"string"})}});
      alts->push_back(json{{"type", "string"}, {"enum", v}});
    } else if (k == "required") {
      if (!v.is_array()) return Invalid("required", kp, "not an array");
      for (const json& r : v) {
        if (!r.is_string()) return Invalid("required", kp, "not a property name");
        alts->push_back(of("object", json{{"properties", {{r.get<std::string>(), false}}}}));
      }
    } else if (k == "properties") {
      if (!v.is_object()) return Invalid("properties", kp, "not an object");
      for (const auto& [name, p] : v.items())
        if (HasConstraints(p))
          alts->push_back(
              of("object", json{{"required", {name}}, {"properties", {{name, {{"not", p}}}}}}));
    } else if (k == "patternProperties" || k == "additionalProperties" || k == "propertyNames" ||
               k == "$llmq_key_rules") {
      bool constrains = HasConstraints(v);  // patternProperties: any of its schemas
      if (k == "patternProperties") {
        if (!v.is_object()) return Invalid(k, kp, "not an object");
        constrains =
            std::any_of(v.begin(), v.end(), [](const json& p) { return HasConstraints(p); });
      } else if (k == "$llmq_key_rules") {  // read (and its patterns compiled) below
        constrains = v.is_array() && std::any_of(v.begin(), v.end(), [](const json& r) {
                       return r.is_object() && HasConstraints(r.value("value", json(true)));
                     });
      }
      if (!constrains || names_done) continue;
      if (const auto names = ClosedNames(rest, np); names.has_value())
        LLMQ_RETURN_IF_ERROR(ComplementOfNames(n, *names, np, alts));
      else
        LLMQ_RETURN_IF_ERROR(ComplementOfAnyNames(n, np, alts));
      names_done = true;
    } else if (k == "$llmq_some") {  // one asked for missing: every member of its kind fails
      for (const json& d : v) {
        const json fails = {{"not", d.value("value", json(true))}};
        const bool names = d.contains("not_names") || d.contains("not_patterns");
        const json patterns = d.value("patterns", json::array());
        if (!names && patterns.size() == 1) {
          alts->push_back(of("object", json{{"patternProperties", {{patterns[0], fails}}}}));
        } else if (patterns.empty()) {
          json listed = json::object(), pp = json::object();
          for (const json& x : d.value("not_names", json::array()))
            listed[x.get<std::string>()] = true;
          for (const json& x : d.value("not_patterns", json::array()))
            pp[x.get<std::string>()] = true;
          json alt = of("object", json{{"additionalProperties", fails}});
          if (!listed.empty()) alt["properties"] = listed;
          if (!pp.empty()) alt["patternProperties"] = pp;
          alts->push_back(std::move(alt));
        } else {
          return refuse("not of a member of keys of several patterns");
        }
      }
    } else if (k == "minLength" || k == "minItems" || k == "minProperties" || k == "maxLength" ||
               k == "maxItems" || k == "maxProperties") {
      int64_t bound = 0;
      LLMQ_RETURN_IF_ERROR(NonNegative(n, k.c_str(), np, &bound));
      const bool min = k[1] == 'i';
      const std::string what = k.substr(3);  // Length, Items, Properties
      const char* type = what == "Length" ? "string" : what == "Items" ? "array" : "object";
      if (min && bound == 0) continue;  // every value has at least none
      alts->push_back(of(type, json{{(min ? "max" : "min") + what, min ? bound - 1 : bound + 1}}));
    } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" ||
               k == "exclusiveMaximum") {
      if (v.is_boolean()) continue;  // draft 4's flag: read with its bound
      if (!v.is_number()) return Invalid(k, kp, "not a number");
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      const char* flag = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      // Draft 4: minimum with exclusiveMinimum: true excludes the bound itself.
      const bool exclusive =
          k[0] == 'e' || (n.contains(flag) && n[flag].is_boolean() && n[flag].get<bool>());
      const char* other = lower ? (exclusive ? "maximum" : "exclusiveMaximum")
                                : (exclusive ? "minimum" : "exclusiveMinimum");
      alts->push_back(of("number", json{{other, v}}));
    } else if ((k == "multipleOf" || k == "$llmq_not_multiple_of") && v.is_number() &&
               v.get<double>() >= 1 && v.get<double>() == std::floor(v.get<double>())) {
      if (k == "$llmq_not_multiple_of") {  // a multiple (an integer), or not a number
        alts->push_back(json{{"type", OtherKinds({"number"})}});
        alts->push_back(json{{"type", "integer"}, {"multipleOf", v}});
      } else {  // a number with a fraction, or an integer it does not divide
        alts->push_back(json{{"type", "number"}, {"$llmq_fraction", true}});
        if (v.get<double>() > 1)
          alts->push_back(json{{"type", "integer"}, {"$llmq_not_multiple_of", v}});
      }
    } else if (k == "not") {
      alts->push_back(v);
    } else if (k == "allOf") {
      if (!v.is_array()) return Invalid(k, kp, "not an array");
      for (size_t i = 0; i < v.size(); ++i)
        LLMQ_RETURN_IF_ERROR(Complement(v[i], rest, kp + "/" + std::to_string(i), alts));
    } else if (k == "anyOf" || k == "oneOf") {
      if (!v.is_array() || v.empty()) return Invalid(k, kp, "not a non-empty array");
      // None of them: each branch's complement, conjoined.
      std::vector<json> none = {json::object()};
      for (size_t i = 0; i < v.size(); ++i) {
        std::vector<json> not_i, next;
        LLMQ_RETURN_IF_ERROR(Complement(v[i], rest, kp + "/" + std::to_string(i), &not_i));
        for (const json& a : none)
          for (const json& b : not_i) LLMQ_RETURN_IF_ERROR(AddMerged(a, b, kp, &next));
        none = std::move(next);
      }
      alts->insert(alts->end(), none.begin(), none.end());
      // oneOf: also two of them at once.
      if (k == "oneOf") {
        if (v.size() > 6) return refuse("not {oneOf} of more than 6 branches");
        for (size_t i = 0; i < v.size(); ++i)
          for (size_t j = i + 1; j < v.size(); ++j)
            LLMQ_RETURN_IF_ERROR(AddMerged(v[i], v[j], kp, alts));
      }
    } else if (k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies") {
      if (!v.is_object()) return Invalid(k, kp, "not an object");
      for (const auto& [key, d] : v.items()) {
        if (d.is_array()) {  // key present and one of the names absent
          for (const json& r : d)
            if (r.is_string())
              alts->push_back(of("object", json{{"required", {key}},
                                                {"properties", {{r.get<std::string>(), false}}}}));
        } else if (HasConstraints(d)) {  // key present and the schema not met
          alts->push_back(of("object", json{{"required", {key}}, {"not", d}}));
        }
      }
    } else if (k == "items" && (v == json(false) || !HasConstraints(v))) {
      if (v == json(false)) alts->push_back(of("array", json{{"minItems", 1}}));
    } else if (k == "items" && v.is_object() && !n.contains("prefixItems")) {
      alts->push_back(of("array", json{{"$llmq_contains", {{"not", v}}}}));  // one item not v
    } else if (k == "contains" || k == "$llmq_contains") {
      if (k == "contains" && no_contains_) continue;
      Counted c;
      LLMQ_RETURN_IF_ERROR(ContainsOf(n, np, &c));
      if (c.max >= 0)  // more than maxContains
        alts->push_back(
            of("array", json{{"$llmq_contains", c.schema}, {"$llmq_min_contains", c.max + 1}}));
      if (c.min >= 1)  // fewer than minContains
        alts->push_back(of("array", json{{"$llmq_contains", c.schema},
                                         {"$llmq_min_contains", 0},
                                         {"$llmq_max_contains", c.min - 1}}));
    } else if (k == "minContains" || k == "maxContains" || k == "$llmq_min_contains" ||
               k == "$llmq_max_contains") {
      continue;  // with contains
    } else if (no_conditionals_ && (k == "if" || k == "then" || k == "else")) {
      continue;              // keywords from draft 7 on
    } else if (k == "if") {  // (if and not then) or (not if and not else)
      if (n.contains("then"))
        LLMQ_RETURN_IF_ERROR(ConjoinComplement(v, n["then"], rest, np + "/then", alts));
      if (n.contains("else")) {
        std::vector<json> not_if;
        LLMQ_RETURN_IF_ERROR(Complement(v, rest, kp, &not_if));
        for (const json& a : not_if)
          LLMQ_RETURN_IF_ERROR(ConjoinComplement(a, n["else"], rest, np + "/else", alts));
      }
    } else if (k == "then" || k == "else") {
      continue;  // with `if` (alone they constrain nothing)
    } else if (k == "uniqueItems" && v == json(false)) {
      continue;  // asks nothing
    } else if (k == "format" &&
               (!v.is_string() ||
                FormatRegex(v.get<std::string>(), &format_rx).code() == Status::Code::kNotFound)) {
      continue;  // a format not known is an annotation (as where it is asked: StringOf)
    } else {
      return refuse("not {" + k + "} is not enforced");
    }
    if (alts->size() > kMaxAlternatives) return refuse("more than 64 alternatives");
  }
  return Status::Ok();
}

Status Compiler::ConjoinComplement(const json& a, const json& n, const json& rest,
                                   const std::string& np, std::vector<json>* alts) {
  std::vector<json> not_n;
  LLMQ_RETURN_IF_ERROR(Complement(n, rest, np, &not_n));
  for (const json& b : not_n) LLMQ_RETURN_IF_ERROR(AddMerged(a, b, np, alts));
  return Status::Ok();
}

Status Compiler::ComplementOfValues(const json& values, const std::vector<std::string>& rest_types,
                                    const std::string& ptr, std::vector<json>* alts) {
  if (!values.is_array()) return Invalid("enum", ptr, "not an array");
  std::set<std::string> kinds;  // the kinds with a value listed
  json strings = json::array();
  std::vector<double> numbers;
  std::set<bool> booleans;
  std::vector<json> objects, arrays;  // listed where the context admits their kind
  for (const json& v : values) {
    const std::string kind = KindOf(v);
    kinds.insert(kind);
    if ((kind == "object" || kind == "array") &&
        std::count(rest_types.begin(), rest_types.end(), kind)) {
      (kind == "object" ? objects : arrays).push_back(v);
      continue;
    }
    if (v.is_string()) strings.push_back(v);
    if (v.is_number()) numbers.push_back(v.get<double>());
    if (v.is_boolean()) booleans.insert(v.get<bool>());
  }
  if (const json others = OtherKinds(kinds); !others.empty())
    alts->push_back(json{{"type", others}});
  // The objects (arrays) other than those listed: for each listed, one way of differing from it
  // (a member more, or one missing, or one of another value; items more or fewer, or one of
  // another value), the ways merged across the values listed.
  for (const std::vector<json>* listed : {&objects, &arrays}) {
    if (listed->empty()) continue;
    std::vector<json> none = {json::object()};
    for (const json& v : *listed) {
      std::vector<json> next;
      for (const json& a : none)
        for (const json& b : WaysToDiffer(v)) LLMQ_RETURN_IF_ERROR(AddMerged(a, b, ptr, &next));
      none = std::move(next);
    }
    alts->insert(alts->end(), none.begin(), none.end());
  }
  if (!strings.empty()) alts->push_back(json{{"type", "string"}, {"$llmq_not_strings", strings}});
  if (booleans.size() == 1) alts->push_back(json{{"enum", {!*booleans.begin()}}});
  if (!numbers.empty()) {
    std::sort(numbers.begin(), numbers.end());
    numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
    if (numbers.size() > 16) return Refuse("not", ptr, "more than 16 numbers excluded");
    for (size_t i = 0; i <= numbers.size(); ++i) {
      json between = {{"type", "number"}};
      if (i > 0) between["exclusiveMinimum"] = numbers[i - 1];
      if (i < numbers.size()) between["exclusiveMaximum"] = numbers[i];
      alts->push_back(std::move(between));
    }
  }
  return Status::Ok();
}

std::vector<json> Compiler::WaysToDiffer(const json& v) {
  std::vector<json> ways;
  const auto other = [](const json& x) { return json{{"not", {{"const", x}}}}; };
  if (v.is_object()) {
    ways.push_back(json{{"type", "object"}, {"minProperties", v.size() + 1}});
    for (const auto& [k, x] : v.items()) {
      json absent = json::object(), differs = json::object();
      absent[k] = false;
      differs[k] = other(x);
      ways.push_back(json{{"type", "object"}, {"properties", absent}});
      ways.push_back(
          json{{"type", "object"}, {"required", json::array({k})}, {"properties", differs}});
    }
  } else if (v.is_array()) {
    if (!v.empty()) ways.push_back(json{{"type", "array"}, {"maxItems", v.size() - 1}});
    ways.push_back(json{{"type", "array"}, {"minItems", v.size() + 1}});
    for (size_t i = 0; i < v.size(); ++i) {
      json prefix = json::array();
      for (size_t j = 0; j < i; ++j) prefix.push_back(true);
      prefix.push_back(other(v[i]));
      ways.push_back(json{{"type", "array"}, {"minItems", i + 1}, {"prefixItems", prefix}});
    }
  }
  return ways;
}

Status Compiler::AddMerged(const json& a, const json& b, const std::string& ptr,
                           std::vector<json>* alts) {
  json m;
  LLMQ_RETURN_IF_ERROR(Merge(a, b, ptr, &m));
  if (!Unsatisfiable(m)) alts->push_back(std::move(m));
  if (alts->size() > kMaxAlternatives) return Refuse("not", ptr, "more than 64 alternatives");
  return Status::Ok();
}

Status Compiler::Conjoin(const json& rest, const std::vector<json>& alts, const std::string& ptr,
                         json* out) {
  std::vector<json> any;
  for (const json& a : alts) LLMQ_RETURN_IF_ERROR(AddMerged(rest, a, ptr, &any));
  if (any.size() == 1) {
    *out = std::move(any[0]);
  } else {
    *out = any.empty() ? json(false) : json{{"anyOf", std::move(any)}};
  }
  return Status::Ok();
}

}  // namespace llmq::schema
