// The random JSON Schema generator of the differential tests (tests/json_schema_diff_test.cpp:
// the compiler against Ajv; tests/structured_outputs_diff_test.cpp: the engine's constrained
// outputs against Ajv). Seeded random schemas built from the keywords the compiler
// (engine/structured/json_schema.h) enforces (type and type lists, properties, required (listed or
// not), additionalProperties false/true/a schema, items, prefixItems, a draft-07 `items` list with
// additionalItems, minItems/maxItems, uniqueItems over an enum or booleans, enum/const of scalars,
// objects and arrays (with and without type), anyOf (alone or with object siblings), oneOf of
// branches of distinct types, allOf of object schemas, $ref into $defs (draft-07: definitions)
// including recursive ones and $ref with siblings, minLength/maxLength, boolean schemas; in the
// bounded mode also minimum/maximum and their exclusive forms), and for each, instances generated
// to satisfy it and mutations of those (a value of another type, a property dropped or added, an
// item more or less, a string a character longer or shorter, an integer off by one or made
// fractional).
//
// What the generator keeps out, as documented differences (json_schema.h): properties out of the
// schema's order (instances list them in the order the compiler merges them: a schema's own
// properties, then allOf's / anyOf's branches' and $ref's targets' in order; names not listed
// after those, the required ones among them first in the order `required` lists them), property
// names written with escapes Python would not write, whitespace beyond 32 bytes, oneOf branches
// that overlap (but with set_negations); and numbers spelled otherwise than their kind (an integral
// 2.0 where an integer is expected; with set_negations, a number with an exponent, which a bound
// may refuse: json_regex.h). Without `known`, also the shapes of the compiler's known deviations
// from JSON Schema (A, B, C in json_schema_diff_test.cpp): the documents the compiler accepts then
// satisfy the schema.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"

namespace llmq::testing {

// Names schemas list, names they never do (some a listed one's prefix or extension), and names
// they require without listing them: the compiler wants those right after the listed ones, in
// `required`'s order, before the other unlisted ones, so mutations and random objects use only
// kOtherNames.
inline const char* const kNames[] = {"a",    "b", "c",   "id", "name", "kids",
                                     "tags", "v", "x y", "é",  "q\"k"};
inline const char* const kOtherNames[] = {"", "ab", "i", "names", "zz", "x", "A"};
inline const char* const kRequiredOthers[] = {"extra", "ids", "nam"};
// Characters of generated strings: ASCII, 2-, 3- and 4-byte UTF-8, and what JSON escapes.
inline const char* const kChars[] = {"a", "b", "z", "0", " ",  "/",  "é",  "中", "😀",
                                     "k", "Q", "_", "-", "\"", "\\", "\n", "\t", "\x01"};
// patternProperties (Gen::set_patterns): patterns, and unlisted names some of them match.
inline const char* const kPatterns[] = {"^x", "a",          "^[a-z]+$", "^[0-9]+$",
                                        "s$", "^[a-z]{2}$", "\u00e9",   "^$"};
inline const char* const kPatternNames[] = {"x1", "xyz", "12", "0", "abs", "zs", "\u00e91", "zz9"};
inline const char* const kScalarTypes[] = {"null", "boolean", "integer", "number", "string"};

class Gen {
 public:
  using json = nlohmann::ordered_json;

  // known: also the shapes of the compiler's known deviations from JSON Schema (see the tests).
  // bounded: only schemas whose documents are short, for a random walk through their grammar to
  // finish one: every string has a maxLength, every array a maxItems and an items schema, every
  // object is closed (additionalProperties false; allOf: one closed object and parts that require
  // its properties), every schema has a type or an enum, and none is `true`; numbers get
  // minimum/maximum (or exclusive) bounds half the time. The generator's choices without it are
  // those it made before it had this mode (the diff test's seeds).
  Gen(uint32_t seed, bool known, bool bounded = false)
      : rng_(seed), known_(known), bounded_(bounded) {}
  // Also patternProperties on objects (not on those allOf and anyOf's siblings combine: the
  // compiler refuses patterns beside another schema's properties), and instances with keys they
  // match. Off, the generator's choices are those it made before it had them.
  void set_patterns(bool on) { patterns_ = on; }
  // Also oneOf of branches that require sets of an object's names (which may overlap: exactly
  // one must match). Off, as set_patterns.
  void set_one_of_required(bool on) { one_of_required_ = on; }
  // Also minProperties/maxProperties and dependencies between listed names (2020-12's
  // dependentRequired and dependentSchemas of required, not required, anyOf/oneOf of required,
  // a property's value, a type; draft-07's `dependencies`), and instances mostly made to meet
  // them. Off, as set_patterns.
  void set_dependencies(bool on) { dependencies_ = on; }
  // Also `not` (of types, values, lengths, patterns, bounds, counts, required names, a property's
  // value, names a closed object may have, an items schema, contains, and anyOf/allOf/oneOf/not/if
  // of those), contains with minContains/maxContains, oneOf of branches that overlap (values,
  // ranges, lengths, discriminators not required, closed objects of overlapping names), and
  // if/then/else. Off, as set_patterns.
  void set_negations(bool on) { negations_ = on; }

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T, size_t N>
  const T& Pick(const T (&a)[N]) {
    return a[static_cast<size_t>(Int(0, static_cast<int>(N) - 1))];
  }
  template <class T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }

  // ---- Schemas ----

  json Schema() {
    draft07_ = Chance(0.12);
    defs_ = json::object();
    json s;
    if (!bounded_ && Chance(0.01)) return json(Chance(0.5));
    if (Chance(0.15)) {
      s = json{{"$ref", Recursive()}};
    } else {
      s = Sub(0);
      if (s.is_boolean()) s = json{{"anyOf", json::array({s})}};
    }
    if (draft07_) {
      json d07 = json{{"$schema", "http://json-schema.org/draft-07/schema#"}};
      d07.update(s);
      s = std::move(d07);
    }
    if (!defs_.empty()) s[DefsKey()] = defs_;
    return s;
  }

  // ---- Instances ----

  // A value meant to satisfy `s` (`root` resolves $refs); Ajv decides whether it does.
  json Instance(const json& root, const json& s, int depth) {
    const json e = Effective(root, s, 0);
    if (e.is_boolean()) return RandomValue(depth);
    if (e.contains("const")) return e["const"];
    if (e.contains("enum") && e["enum"].is_array() && !e["enum"].empty())
      return Pick(std::vector<json>(e["enum"].begin(), e["enum"].end()));
    std::vector<std::string> types;
    if (e.contains("type")) {
      const json list = e["type"].is_array() ? e["type"] : json::array({e["type"]});
      for (const json& t : list) types.push_back(t.get<std::string>());
    } else if (e.contains("properties") || e.contains("required") ||
               e.contains("additionalProperties")) {
      types = {"object", "object", "object", "integer"};
    } else if (e.contains("items") || e.contains("prefixItems")) {
      types = {"array", "array", "array", "null"};
    } else if (e.contains("minLength") || e.contains("maxLength")) {
      types = {"string", "string", "string", "boolean"};
    } else {
      return RandomValue(depth);
    }
    if (types.empty()) return RandomValue(depth);
    const std::string t = Pick(types);
    if (t == "null") return nullptr;
    if (t == "boolean") return Chance(0.5);
    if (t == "integer") return RandomInteger();
    if (t == "number") return Chance(0.5) ? RandomInteger() : RandomFraction();
    if (t == "string") {
      const int min = e.value("minLength", 0);
      const int max = e.contains("maxLength") ? e["maxLength"].get<int>() : min + 6;
      return RandomString(Int(min, std::max(min, max)));
    }
    if (t == "object") return ObjectInstance(root, e, depth);
    return ArrayInstance(root, e, depth);
  }

  // `v` changed in one place, whatever the schema says there.
  json Mutate(json v, int depth = 0) {
    const bool container = (v.is_object() || v.is_array()) && !v.empty();
    if (container && depth < 8 && Chance(0.55)) {
      const size_t i = static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1));
      if (v.is_array()) {
        v[i] = Mutate(v[i], depth + 1);
      } else {
        auto it = v.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(i));
        *it = Mutate(*it, depth + 1);
      }
      return v;
    }
    switch (Int(0, 3)) {
      case 0:
        return OtherKind(v);
      case 1:
        if (v.is_object()) {
          if (!v.empty() && Chance(0.6)) {
            auto it = v.begin();
            std::advance(it, Int(0, static_cast<int>(v.size()) - 1));
            v.erase(it.key());
          } else {
            const std::string name = Pick(kOtherNames);
            if (!v.contains(name)) v[name] = RandomValue(depth + 1);
          }
          return v;
        }
        if (v.is_array()) {
          if (!v.empty() && Chance(0.5)) {
            v.erase(v.begin() + Int(0, static_cast<int>(v.size()) - 1));
          } else {
            v.push_back(!v.empty() && Chance(0.6) ? json(v.back()) : RandomValue(depth + 1));
          }
          return v;
        }
        if (v.is_string()) {
          const std::string s = v.get<std::string>();
          if (!s.empty() && Chance(0.5)) {  // the first character (1 to 4 bytes) dropped
            size_t i = 1;
            while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
            return s.substr(i);
          }
          return s + Pick(kChars);
        }
        if (v.is_number_integer()) return Chance(0.5) ? json(v.get<int64_t>() + 1) : json(0.5);
        return OtherKind(v);
      case 2:
        if (v.is_number_integer() || v.is_number_unsigned()) return v.get<double>() + 0.25;
        if (v.is_string()) return RandomString(Int(0, 8));
        return OtherKind(v);
      default:
        return RandomValue(depth);
    }
  }

 private:
  const char* DefsKey() const { return draft07_ ? "definitions" : "$defs"; }
  std::string DefRef(const std::string& name) const {
    return std::string("#/") + DefsKey() + "/" + name;
  }

  // A recursive definition (a tree, a list, or nested arrays); its $ref.
  std::string Recursive() {
    const int kind = Int(0, 2);
    const std::string name = kind == 0 ? "node" : kind == 1 ? "list" : "nest";
    const std::string ref = DefRef(name);
    if (defs_.contains(name)) return ref;
    defs_[name] = true;  // taken, while its body is made
    json body;
    if (kind == 0) {
      json kids = {{"type", "array"}, {"items", {{"$ref", ref}}}};
      if (bounded_ || Chance(0.5)) kids["maxItems"] = Int(1, 3);
      body = {{"type", "object"},
              {"properties", {{"v", Scalar()}, {"kids", kids}}},
              {"required", json::array({"v"})}};
      if (bounded_ || Chance(0.6)) body["additionalProperties"] = false;
    } else if (kind == 1) {
      body = {{"anyOf",
               json::array({json{{"type", "null"}},
                            json{{"type", "object"},
                                 {"properties", {{"head", Scalar()}, {"tail", {{"$ref", ref}}}}},
                                 {"required", json::array({"head", "tail"})},
                                 {"additionalProperties", false}}})}};
    } else {
      body = {{"type", json::array({"array", "integer"})},
              {"items", {{"$ref", ref}}},
              {"maxItems", Int(1, 3)}};
    }
    defs_[name] = body;
    return ref;
  }

  json Sub(int depth) {
    if (depth >= 1 && Chance(0.05)) {
      const bool any = Chance(0.7);
      if (!(bounded_ && any)) return json(any);
    }
    if (negations_ && depth < 3 && Chance(0.35)) return Negation(depth);
    const int kind = depth >= 3 ? Int(0, 2) : Int(0, 11);
    switch (kind) {
      case 0:
      case 1:
        return Scalar();
      case 2:
        return EnumOrConst();
      case 3:
      case 4:
        return Object(depth);
      case 5:
      case 6:
        return Array(depth);
      case 7:
        return AnyOf(depth);
      case 8:
        return OneOf(depth);
      case 9:
        return AllOf(depth);
      default:
        return Ref(depth);
    }
  }

  json Scalar() {
    json s = json::object();
    std::vector<std::string> types;
    const int n = Chance(0.7) ? 1 : Int(2, 3);
    while (static_cast<int>(types.size()) < n) {
      const std::string t = Pick(kScalarTypes);
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
    const bool string = std::find(types.begin(), types.end(), "string") != types.end();
    if (!(string && !bounded_ && Chance(0.1))) s["type"] = n == 1 ? json(types[0]) : json(types);
    if (string) Lengths(&s);
    const bool number = std::find(types.begin(), types.end(), "number") != types.end() ||
                        std::find(types.begin(), types.end(), "integer") != types.end();
    if (bounded_ && number && Chance(0.5)) Bounds(&s);
    if (number && Chance(0.15)) s["multipleOf"] = Int(2, 7);  // an integer divisor
    return s;
  }

  // minimum/maximum or their exclusive forms, small and exact in decimal (bounded mode only).
  void Bounds(json* s) {
    const auto bound = [&] {
      return Chance(0.7) ? json(Int(-20, 200)) : json(Int(-40, 400) / 2.0);
    };
    if (Chance(0.7)) (*s)[Chance(0.7) ? "minimum" : "exclusiveMinimum"] = bound();
    if (Chance(0.7)) (*s)[Chance(0.7) ? "maximum" : "exclusiveMaximum"] = bound();
  }

  void Lengths(json* s) {
    if (Chance(0.4)) (*s)["minLength"] = Int(0, 3);
    if (bounded_ || Chance(0.4)) (*s)["maxLength"] = Int(0, 5);
  }

  json ScalarValue() {
    static const json values = json::parse(
        R"([null, true, false, 0, 1, -3, 2.5, "", "a", "abc", "é", "x y", "1", "a\"b", "😀"])");
    return values[static_cast<size_t>(Int(0, static_cast<int>(values.size()) - 1))];
  }

  // A scalar, or now and then an object or array of scalars (enum/const of composite values).
  json EnumValue() {
    if (!Chance(0.15)) return ScalarValue();
    if (Chance(0.5)) {
      json a = json::array();
      for (int i = Int(0, 2); i > 0; --i) a.push_back(ScalarValue());
      return a;
    }
    json o = json::object();
    for (int i = Int(0, 2); i > 0; --i) o[Pick(kNames)] = ScalarValue();
    return o;
  }

  json EnumOrConst() {
    json s = json::object();
    if (Chance(0.3)) {
      s["const"] = EnumValue();
    } else {
      json values = json::array();
      for (int i = Int(1, 4); i > 0; --i) {
        const json v = EnumValue();
        if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
      }
      s["enum"] = values;
    }
    if (Chance(0.3)) s["type"] = Chance(0.5) ? json("string") : json::array({"integer", "null"});
    if (Chance(0.1)) Lengths(&s);  // on the string values (deviation B, mended)
    return s;
  }

  json Object(int depth) {
    json s = json::object();
    if (bounded_ || Chance(0.85)) s["type"] = "object";
    std::vector<std::string> names(std::begin(kNames), std::end(kNames));
    std::shuffle(names.begin(), names.end(), rng_);
    names.resize(static_cast<size_t>(Int(0, 4)));
    json props = json::object(), required = json::array();
    for (const std::string& n : names) {
      props[n] = Sub(depth + 1);
      if (Chance(0.5)) required.push_back(n);
    }
    if (!names.empty() || Chance(0.5)) s["properties"] = props;
    int ap = Int(0, 19);
    if (bounded_) ap = 3;  // additionalProperties false
    if (ap < 3)
      s["additionalProperties"] = true;
    else if (ap < 9)
      s["additionalProperties"] = false;
    else if (ap < 12)
      s["additionalProperties"] = Sub(depth + 1);
    if (ap < 3 || ap >= 9) {
      // Not "": Ajv 8.17.1 ignores `required: [""]` ({} passes), an oracle bug.
      if (Chance(0.15)) required.push_back(Pick(kRequiredOthers));
    }
    if (patterns_ && Chance(0.6)) {
      json pp = json::object();
      for (int i = Int(1, 3); i > 0; --i)
        pp[Pick(kPatterns)] = Chance(0.2) ? json::object() : Sub(depth + 1);
      s["patternProperties"] = pp;
    }
    if (!required.empty() || Chance(0.2)) s["required"] = required;
    if (dependencies_ && Chance(0.7)) Dependencies(&s, names);
    return s;
  }

  // Counts and dependencies between the names an object lists (set_dependencies).
  void Dependencies(json* s, const std::vector<std::string>& names) {
    if (Chance(0.4)) (*s)["minProperties"] = Int(0, 3);
    if (Chance(0.3)) (*s)["maxProperties"] = Int(0, 4);
    if (names.size() < 2) return;
    json req = json::object(), sch = json::object();
    for (int i = Int(1, 2); i > 0; --i) {
      const std::string key = Pick(names);
      std::vector<std::string> others;
      for (const std::string& n : names)
        if (n != key) others.push_back(n);
      const std::string n1 = Pick(others), n2 = Pick(others);
      const json both = n1 == n2 ? json::array({n1}) : json::array({n1, n2});
      switch (Int(0, 6)) {
        case 0:
        case 1:
          req[key] = both;
          break;
        case 2:
          sch[key] = json{{"required", json::array({n1})}};
          break;
        case 3:
          sch[key] = json{{"not", json{{"required", json::array({n1})}}}};
          break;
        case 4: {
          json branches = json::array();
          for (const json& n : both) branches.push_back(json{{"required", json::array({n})}});
          sch[key] = json{{Chance(0.5) ? "anyOf" : "oneOf", branches}};
          break;
        }
        case 5:
          sch[key] = json{{"properties", json{{n1, Scalar()}}}};
          break;
        default:
          sch[key] = json{{"type", Chance(0.7) ? "object" : "string"}};
      }
    }
    if (draft07_) {
      json deps = sch;
      for (const auto& [k, v] : req.items()) deps[k] = v;
      if (!deps.empty()) (*s)["dependencies"] = deps;
    } else {
      if (!req.empty()) (*s)["dependentRequired"] = req;
      if (!sch.empty()) (*s)["dependentSchemas"] = sch;
    }
  }

  // `o` (an instance of object schema `e`) changed to meet e's dependencies and counts, most of
  // the time: names added or dropped as they ask (one branch of anyOf/oneOf), values they
  // constrain made again, then members added or dropped for the counts; listed names in e's
  // order, the others after them.
  json MeetDependencies(const json& root, const json& e, const json& o, int depth) {
    if (!Chance(0.8)) return o;
    const json props = e.value("properties", json::object());
    std::set<std::string> present, required;
    for (const auto& [k, v] : o.items()) present.insert(k);
    for (const json& r : e.value("required", json::array())) required.insert(r.get<std::string>());
    std::map<std::string, json> value;  // names whose value another's presence constrains
    for (const char* k : {"dependencies", "dependentRequired", "dependentSchemas"}) {
      const json deps = e.value(k, json::object());
      for (const auto& [key, d] : deps.items()) {
        if (!present.count(key)) continue;
        if (d.is_array()) {
          for (const json& r : d) present.insert(r.get<std::string>());
        } else if (d.contains("required")) {
          for (const json& r : d["required"]) present.insert(r.get<std::string>());
        } else if (d.contains("not")) {
          for (const json& r : d["not"]["required"])
            if (!required.count(r.get<std::string>())) present.erase(r.get<std::string>());
        } else if (d.contains("anyOf") || d.contains("oneOf")) {
          const json& branches = d.contains("anyOf") ? d["anyOf"] : d["oneOf"];
          const size_t pick = static_cast<size_t>(Int(0, static_cast<int>(branches.size()) - 1));
          for (size_t b = 0; b < branches.size(); ++b)
            for (const json& r : branches[b]["required"]) {
              if (b == pick)
                present.insert(r.get<std::string>());
              else if (d.contains("oneOf") && !required.count(r.get<std::string>()))
                present.erase(r.get<std::string>());
            }
        } else if (d.contains("properties")) {
          for (const auto& [n, ps] : d["properties"].items()) value[n] = ps;
        }
      }
    }
    const int64_t min = e.value("minProperties", 0), max = e.value("maxProperties", -1);
    for (const auto& [name, ps] : props.items())
      if (static_cast<int64_t>(present.size()) < min) present.insert(name);
    if (max >= 0)
      for (const auto& [name, ps] : props.items())
        if (static_cast<int64_t>(present.size()) > max && !required.count(name))
          present.erase(name);
    json out = json::object();
    for (const auto& [name, ps] : props.items()) {
      if (!present.count(name)) continue;
      if (value.count(name))
        out[name] = Instance(root, Merge(ps, value[name]), depth + 1);
      else
        out[name] = o.contains(name) ? o[name] : Instance(root, ps, depth + 1);
    }
    for (const auto& [k, v] : o.items())
      if (!props.contains(k) && present.count(k)) out[k] = v;
    return out;
  }

  // ---- Negations (set_negations) ----

  json Negation(int depth) {
    switch (Int(0, 5)) {
      case 0: {  // a scalar (or anything) that is not one of the scalar shapes
        json s = Chance(0.6) ? Scalar() : json::object();
        s["not"] = NotScalar(depth);
        return s;
      }
      case 1: {  // an object that is not one of the object shapes over its names
        json s = ObjectWithoutPatterns(depth);
        s["type"] = "object";
        s["not"] = NotObject(s, 0);
        return s;
      }
      case 2:
        return OverlappingOneOf(depth);
      case 5: {  // none of some objects and arrays: among them and values one change away
        json excluded = json::array(), near = json::array();
        const auto add = [](json* list, const json& v) {
          if (std::find(list->begin(), list->end(), v) == list->end()) list->push_back(v);
        };
        for (int i = Int(1, 2); i > 0; --i) {
          json v;
          do v = RandomValue(2);
          while (!v.is_structured());
          add(&excluded, v);
          add(&near, v);
          for (int j = Int(1, 3); j > 0; --j) add(&near, Mutate(v));
        }
        json s = Chance(0.7) ? json{{"enum", near}} : json{{"type", {"object", "array"}}};
        s["not"] = Chance(0.3) && excluded.size() == 1 ? json{{"const", excluded[0]}}
                                                       : json{{"enum", excluded}};
        return s;
      }
      case 3: {  // a value whose shape depends on its type or on a property
        json s = ObjectWithoutPatterns(depth);
        const std::vector<std::string> names = Listed(s);
        if (names.empty() || Chance(0.3))
          return json{{"if", NotScalar(1)}, {"then", NotScalar(1)}, {"else", NotScalar(1)}};
        s["type"] = "object";
        const auto conditional = [&] {
          json c = {{"if", {{"properties", {{Pick(names), Discriminator()}}}}}};
          if (Chance(0.8)) c["then"] = NotObject(s, 1);
          if (Chance(0.8)) c["else"] = NotObject(s, 1);
          return c;
        };
        if (Chance(0.3)) {  // several, as allOf parts
          s["allOf"] = json::array({conditional(), conditional()});
          return s;
        }
        s.update(conditional());
        return s;
      }
      default: {  // an array: not of some counts, not of an items schema, contains (counted)
        json s = Array(depth);
        // Ajv 8.17.1 reads `contains` beside a prefix, or on an empty array, as the last
        // verdict it computed (an oracle bug: {"prefixItems": [{"const": "x"}], "contains":
        // {"type": "number"}} passes [] and [3.14] where items past it may be numbers,
        // {"items": {"contains": {"const": 1}}} passes [[1], []]): arrays under contains have no
        // prefix and an item.
        const auto contains = [&](json* a) {
          s.erase("prefixItems");
          if (s.contains("items") && s["items"].is_array()) s.erase("items");
          s.erase("additionalItems");
          s["minItems"] = std::max(1, s.value("minItems", 0));
          (*a)["contains"] = NotScalar(1);
          if (!draft07_ && Chance(0.4)) (*a)["minContains"] = Int(0, 2);
          if (!draft07_ && Chance(0.4)) (*a)["maxContains"] = Int(0, 2);
        };
        switch (Int(0, 3)) {
          case 0:
            s["not"] = Chance(0.5) ? json{{"minItems", Int(1, 2)}} : json{{"maxItems", Int(0, 2)}};
            break;
          case 1:
            s["not"] = json{{"items", NotScalar(1)}};
            break;
          case 2:
            contains(&s);
            break;
          default: {
            json n = json::object();
            contains(&n);
            s["not"] = n;
          }
        }
        return s;
      }
    }
  }

  static std::vector<std::string> Listed(const json& s) {
    std::vector<std::string> names;
    if (s.contains("properties"))
      for (const auto& [n, unused] : s["properties"].items()) names.push_back(n);
    return names;
  }

  json Discriminator() {
    return Chance(0.5) ? json{{"const", ScalarValue()}} : json{{"enum", ScalarValues(2)}};
  }

  json ScalarValues(int n) {  // distinct ones (Ajv refuses an enum with duplicates)
    json values = json::array();
    for (int i = n; i > 0; --i) {
      const json v = ScalarValue();
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    return values;
  }

  // Shapes of scalars a `not` may have (the compiler writes their complement).
  json NotScalar(int depth) {
    switch (depth >= 2 ? Int(0, 3) : Int(0, 8)) {
      case 0:
        return Chance(0.8) ? Scalar() : json{{"pattern", Pick(kPatterns)}};
      case 1: {
        const json values = ScalarValues(Int(1, 3));
        return Chance(0.3) ? json{{"const", values[0]}} : json{{"enum", values}};
      }
      case 2: {
        json s = json::object();
        Lengths(&s);
        if (s.empty()) s["maxLength"] = Int(0, 3);
        return s;
      }
      case 3: {
        json s = json::object();
        Bounds(&s);
        if (s.empty()) s["minimum"] = Int(-2, 3);
        return s;
      }
      case 4:
        return json{{"not", NotScalar(depth + 1)}};
      case 5:
        return json{{"anyOf", {NotScalar(depth + 1), NotScalar(depth + 1)}}};
      case 6:
        return json{{"allOf", {NotScalar(depth + 1), NotScalar(depth + 1)}}};
      case 7:
        return json{{"oneOf", {NotScalar(depth + 1), NotScalar(depth + 1)}}};
      default:
        return json{{"type", "string"}, {"pattern", Pick(kPatterns)}};
    }
  }

  // Shapes of objects a `not` may have, over the names `s` lists (its order stays the grammar's).
  json NotObject(const json& s, int depth) {
    const std::vector<std::string> names = Listed(s);
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
    const auto some = [&] {
      json list = json::array();
      for (const std::string& n : names)
        if (Chance(0.5)) list.push_back(n);
      return list;
    };
    const bool of_names = depth <= 1 && Chance(0.25);  // more of case 6
    switch (of_names ? 6 : names.empty() ? Int(3, 4) : depth >= 1 ? Int(0, 5) : Int(0, 8)) {
      case 0:
        return json{{"required", some()}};
      case 1:
        return json{{"properties", {{Pick(names), NotScalar(1)}}}};
      case 2:
        return json{{"properties", {{Pick(names), Discriminator()}}}, {"required", some()}};
      case 3:
        return json{{"minProperties", Int(0, 2)}};
      case 4:
        return json{{"maxProperties", Int(0, 2)}};
      case 5:
        if (names.size() >= 2)
          return json{{draft07_ ? "dependencies" : "dependentRequired",
                       {{names[0], json::array({names[1]})}}}};
        return json{{"required", some()}};
      case 6:
        // The names an object may have: on an open one, not of them asks for a member of some
        // kind of key (one not listed, one a pattern matches, one propertyNames rejects).
        switch (Int(0, 2)) {
          case 0: {
            json n = {{"additionalProperties", closed || Chance(0.5) ? json(false) : NotScalar(1)}};
            if (!names.empty()) n["properties"] = {{names[0], true}};
            return n;
          }
          case 1: {
            if (!closed && Chance(0.5))
              return json{{"propertyNames", Chance(0.5) ? json{{"pattern", Pick(kPatterns)}}
                                                        : json{{"maxLength", Int(1, 3)}}}};
            json list = some();  // Ajv refuses an empty enum
            if (list.empty()) list.push_back(names.empty() ? "a" : names[0]);
            return json{{"propertyNames", {{"enum", list}}}};
          }
          default:
            return json{{"patternProperties", {{Pick(kPatterns), NotScalar(1)}}}};
        }
      case 7:
        return json{{"anyOf", {NotObject(s, depth + 1), NotObject(s, depth + 1)}}};
      default:
        return json{
            {Chance(0.5) ? "allOf" : "oneOf", {NotObject(s, depth + 1), NotObject(s, depth + 1)}}};
    }
  }

  // oneOf whose branches a value may match more than one of (exactly one must).
  json OverlappingOneOf(int depth) {
    switch (Int(0, 3)) {
      case 0: {  // values, ranges, lengths, integer or number
        json branches = json::array();
        for (int i = Int(2, 3); i > 0; --i) branches.push_back(NotScalar(1));
        return json{{"oneOf", branches}};
      }
      case 1:
        return json{{"oneOf", {{{"type", "integer"}}, {{"type", "number"}}}}};
      default: {  // objects told apart by a property not required, or by the names they allow
        json s = ObjectWithoutPatterns(depth);
        s["type"] = "object";
        const std::vector<std::string> names = Listed(s);
        if (names.empty()) return json{{"oneOf", {NotScalar(1), NotScalar(1)}}};
        json branches = json::array();
        const std::string d = Pick(names);
        for (int i = Int(2, 3); i > 0; --i) {
          json b = json{{"properties", {{d, Discriminator()}}}};
          if (Chance(0.3)) b["required"] = json::array({Pick(names)});
          if (Chance(0.3) && s.value("additionalProperties", json(true)) == json(false)) {
            b = json{{"properties", json::object()}, {"additionalProperties", false}};
            for (const std::string& n : names)
              if (Chance(0.6)) b["properties"][n] = true;
          }
          branches.push_back(b);
        }
        s["oneOf"] = branches;
        return s;
      }
    }
  }

  json ObjectWithoutPatterns(int depth) {
    const bool was = patterns_;
    patterns_ = false;
    json s = Object(depth);
    patterns_ = was;
    return s;
  }

  json Array(int depth) {
    json s = json::object();
    if (bounded_ || Chance(0.9)) s["type"] = "array";
    size_t prefix = 0;
    if (Chance(0.35)) {
      json list = json::array();
      for (int i = Int(1, 3); i > 0; --i) list.push_back(Sub(depth + 1));
      prefix = list.size();
      s[draft07_ ? "items" : "prefixItems"] = list;
    }
    const char* tail = prefix > 0 && draft07_ ? "additionalItems" : "items";
    int t = Int(0, 9);
    if (bounded_ && t >= 5 && (t >= 7 || prefix == 0)) t = 0;  // not any value after the prefix
    if (t < 5)
      s[tail] = Sub(depth + 1);
    else if (t < 7 && prefix > 0)
      s[tail] = false;
    if (prefix == 0 && Chance(0.15)) {  // uniqueItems over a few values
      // Distinct (Ajv's meta-schema asks it of enum; 2 and 2.0 are one value there and here).
      static const json pool = json::parse(R"(["a", "b", "", 1, 2, 2.0, 2.5, true, null, [1]])");
      json values = json::array();
      for (int i = Int(1, 5); i > 0; --i) {
        const json& v = pool[static_cast<size_t>(Int(0, static_cast<int>(pool.size()) - 1))];
        if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
      }
      s["items"] = Chance(0.2) ? json{{"type", "boolean"}} : json{{"enum", values}};
      s["uniqueItems"] = true;
    }
    if (Chance(0.4)) s["minItems"] = Int(0, 3);
    if (bounded_ || Chance(0.4)) s["maxItems"] = Int(0, 4);
    return s;
  }

  json AnyOf(int depth) {
    json branches = json::array();
    if (Chance(0.5)) {
      for (int i = Int(1, 3); i > 0; --i) branches.push_back(Sub(depth + 1));
      return json{{"anyOf", branches}};
    }
    // Object siblings, branches that require or add properties.
    json s = ObjectWithoutPatterns(depth);
    s["type"] = "object";
    if (s.contains("required")) {  // an unlisted required name: order (see kNames)
      json own = json::array();
      for (const json& r : s["required"])
        if (s.value("properties", json::object()).contains(r.get<std::string>())) own.push_back(r);
      s["required"] = own;
    }
    std::vector<std::string> listed;
    const json props = s.value("properties", json::object());
    for (const auto& [k, v] : props.items()) listed.push_back(k);
    for (int i = Int(1, 3); i > 0; --i) {
      json b = json::object();
      // A branch adding properties beside additionalProperties: deviation A.
      const bool closed = s.contains("additionalProperties") && s["additionalProperties"] != true;
      if (!listed.empty() && (Chance(0.7) || (closed && !known_))) {
        b["required"] = json::array({Pick(listed)});
      } else if (closed && !known_) {
        // {}: every object
      } else {
        const std::string n = Pick(kNames);
        if (!props.contains(n)) {
          b["properties"] = json{{n, Scalar()}};
          if (Chance(0.5)) b["required"] = json::array({n});
        }
      }
      branches.push_back(b);
    }
    s["anyOf"] = branches;
    return s;
  }

  // Branches of distinct types: a document matches at most one (oneOf is enforced as anyOf).
  json OneOf(int depth) {
    if (one_of_required_ && Chance(0.6)) {  // an object that requires one set of names or another
      json s = ObjectWithoutPatterns(depth);
      s["type"] = "object";
      std::vector<std::string> names;
      const json props = s.value("properties", json::object());
      for (const auto& [n, unused] : props.items()) names.push_back(n);
      if (names.size() >= 2) {
        json branches = json::array();
        for (int i = Int(2, 3); i > 0; --i) {
          std::shuffle(names.begin(), names.end(), rng_);
          json required = json::array();
          for (int k = Int(1, 2); k > 0; --k) required.push_back(names[static_cast<size_t>(k - 1)]);
          branches.push_back(json{{"required", required}});
        }
        s["oneOf"] = branches;
        return s;
      }
    }
    std::vector<std::string> kinds = {"null", "boolean", "number", "string", "array", "object"};
    std::shuffle(kinds.begin(), kinds.end(), rng_);
    json branches = json::array();
    for (int i = 0; i < Int(2, 3); ++i) {
      const std::string& k = kinds[static_cast<size_t>(i)];
      json b;
      if (k == "array") {
        b = Array(depth + 1);
      } else if (k == "object") {
        b = Object(depth + 1);
      } else {
        b = json::object();
        if (k == "string") Lengths(&b);
      }
      b["type"] = k == "number" ? json(Chance(0.5) ? "number" : "integer") : json(k);
      branches.push_back(b);
    }
    return json{{"oneOf", branches}};
  }

  // Object schemas combined; the parent sometimes adds a type or additionalProperties.
  json AllOf(int depth) {
    if (bounded_) {  // closed: one object, parts that require some of its properties
      const json closed = ObjectWithoutPatterns(depth + 1);
      json parts = json::array({closed});
      const json props = closed.value("properties", json::object());
      for (int i = Int(1, 2); i > 0; --i) {
        json required = json::array();
        for (const auto& [n, ps] : props.items())
          if (Chance(0.4)) required.push_back(n);
        parts.insert(parts.begin() + Int(0, static_cast<int>(parts.size())),
                     json{{"required", required}});
      }
      return json{{"allOf", parts}};
    }
    json s = json::object();
    if (Chance(0.5)) s["type"] = "object";
    json parts = json::array();
    // A property in two parts: its schemas merged (deviation B, mended: enums with siblings).
    for (int i = Int(2, 3); i > 0; --i) {
      // With patterns: a part's additionalProperties meets the other parts' patterns (key rules).
      const bool keyed = patterns_ && Chance(0.5);
      json p = keyed ? Object(depth + 1) : ObjectWithoutPatterns(depth + 1);
      if (!keyed && p.contains("additionalProperties") && (Chance(0.7) || !known_))  // deviation A
        p.erase("additionalProperties");
      // Alternatives in several parts: their pairs (anyOf), or exactly one of each (oneOf). Not
      // beside patternProperties: Ajv 8.17.1 throws ("Cannot set properties of undefined") on
      // {"patternProperties": {"^x": {}}, "anyOf": [{"properties": {"c": {"type": "integer"}}},
      // {}]} inside allOf with {"c": false, "x y": 1}, an oracle bug.
      if (!p.contains("patternProperties") && Chance(0.2)) {
        json branches = json::array();
        // oneOf's branches only require: of values, {type: number} beside {type: integer} asks
        // for a number with a fraction, which the grammar takes written with it (1e-07 is not).
        const bool one = (one_of_required_ || negations_) && Chance(0.5);
        std::vector<std::string> listed;  // its names first (the order the compiler writes)
        const json props = p.value("properties", json::object());
        for (const auto& [n, unused] : props.items()) listed.push_back(n);
        for (int b = Int(2, 3); b > 0; --b) {
          const std::string n = !listed.empty() && Chance(0.8) ? Pick(listed) : Pick(kNames);
          if (one || Chance(0.5) || p.contains("additionalProperties"))  // deviation A
            branches.push_back(json{{"required", json::array({n})}});
          else
            branches.push_back(json{{"properties", json{{n, Scalar()}}}});
        }
        p[one ? "oneOf" : "anyOf"] = branches;
      }
      parts.push_back(p);
    }
    s["allOf"] = parts;
    if (Chance(0.2)) s["additionalProperties"] = Chance(0.5) || !known_;  // deviation A
    return s;
  }

  json Ref(int depth) {
    if (Chance(0.25)) return json{{"$ref", Recursive()}};
    std::string name;
    std::vector<std::string> done;  // not those whose body is being made ({"$ref": itself})
    for (const auto& [k, v] : defs_.items())
      if (!v.is_boolean()) done.push_back(k);
    if (defs_.size() >= 3 || (!done.empty() && Chance(0.3))) {
      if (done.empty()) return Scalar();
      name = Pick(done);
    } else {
      name = "d" + std::to_string(defs_.size());
      defs_[name] = true;
      json body = Sub(depth + 1);
      if (!known_ && body.is_object() && body.contains("$ref"))  // a chain: deviation C
        body = json{{"$ref", body["$ref"]}};
      defs_[name] = body;
    }
    json s = {{"$ref", DefRef(name)}};
    if (!draft07_ && Chance(0.15)) {  // siblings of $ref apply too (2019-09 and later)
      const int k = Int(0, 2);
      if (k == 0 || (k == 1 && !known_))
        s["type"] = json::array({"object", "string", "null"});
      else if (k == 1)
        s["type"] = Pick(kScalarTypes);  // deviation C where a chain of $refs or allOf merges it
      else
        Lengths(&s);  // deviation B where the target is an enum (mended)
    }
    return s;
  }

  // ---- Instances: helpers ----

  // The schema `s` as one object schema: $ref resolved (its siblings merged), allOf merged, one
  // anyOf/oneOf branch picked (the siblings merged into it), in the compiler's property order.
  json Effective(const json& root, const json& s, int hops) {
    if (!s.is_object() || hops > 20) return s;
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"].get<std::string>();
      json rest = s;
      rest.erase("$ref");
      const json target = Effective(root, root[json::json_pointer(ref.substr(1))], hops + 1);
      return Effective(root, Merge(target, rest), hops + 1);
    }
    if (s.contains("allOf")) {
      json m = s;
      m.erase("allOf");
      for (const json& p : s["allOf"]) m = Merge(m, Effective(root, p, hops + 1));
      return Effective(root, m, hops + 1);
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k)) {
        json rest = s;
        rest.erase(k);
        const json& b = s[k];
        return Effective(root, Merge(rest, b[static_cast<size_t>(Int(0, int(b.size()) - 1))]),
                         hops + 1);
      }
    return s;
  }

  // Roughly what both describe (enough to aim instances at it).
  static json Merge(const json& a, const json& b) {
    if (a.is_boolean() || b.is_boolean()) {
      if (a == json(false) || b == json(false)) return false;
      return a.is_boolean() ? b : a;
    }
    json m = a;
    for (const auto& [k, v] : b.items()) {
      if (!m.contains(k)) {
        m[k] = v;
      } else if (k == "properties") {
        for (const auto& [n, ps] : v.items())
          m[k][n] = m[k].contains(n) ? json{{"allOf", json::array({m[k][n], ps})}} : ps;
      } else if (k == "required") {
        for (const json& r : v)
          if (std::find(m[k].begin(), m[k].end(), r) == m[k].end()) m[k].push_back(r);
      } else if (k == "type") {
        std::set<std::string> ta, tb;
        for (const json& t : m[k].is_array() ? m[k] : json::array({m[k]}))
          ta.insert(t.get<std::string>());
        for (const json& t : v.is_array() ? v : json::array({v})) tb.insert(t.get<std::string>());
        json both = json::array();
        for (const std::string& t : ta)
          if (tb.count(t) || (t == "integer" && tb.count("number")))
            both.push_back(t);
          else if (t == "number" && tb.count("integer"))
            both.push_back("integer");
        m[k] = both;
      } else if (k == "minLength" || k == "minItems") {
        m[k] = std::max(m[k].get<int>(), v.get<int>());
      } else if (k == "maxLength" || k == "maxItems") {
        m[k] = std::min(m[k].get<int>(), v.get<int>());
      } else if (k == "additionalProperties") {
        m[k] = Merge(m[k], v);
      }
    }
    return m;
  }

  json ObjectInstance(const json& root, const json& e, int depth) {
    json o = json::object();
    std::set<std::string> required;
    for (const json& r : e.value("required", json::array())) required.insert(r.get<std::string>());
    const json props = e.value("properties", json::object());
    for (const auto& [name, ps] : props.items())
      if (required.count(name) || Chance(depth > 3 ? 0.15 : 0.6))
        o[name] = Instance(root, ps, depth + 1);
    const json extra = e.contains("additionalProperties") ? e["additionalProperties"] : json(true);
    const json pats = e.value("patternProperties", json::object());
    // What a name's value must satisfy: the patterns that match it (a listed one's own schema
    // too), else `otherwise`.
    const auto value_for = [&](const std::string& name, const json& otherwise) {
      json v;
      bool matched = false;
      for (const auto& [p, ps] : pats.items())
        if (std::regex_search(name, std::regex(p))) {
          v = matched ? Merge(v, ps) : ps;
          matched = true;
        }
      return matched ? v : otherwise;
    };
    if (!pats.empty())
      for (const auto& [name, ps] : props.items())
        if (o.contains(name)) o[name] = Instance(root, Merge(ps, value_for(name, true)), depth + 1);
    // Required names not listed: after the listed ones, in the order `required` lists them.
    for (const json& r : e.value("required", json::array()))
      if (!props.contains(r.get<std::string>()) && !o.contains(r.get<std::string>()))
        o[r.get<std::string>()] = Instance(root, value_for(r.get<std::string>(), extra), depth + 1);
    if (!pats.empty()) {
      if (Chance(0.7))
        for (int i = Int(1, 3); i > 0; --i) {
          const std::string n = Chance(0.6) ? Pick(kPatternNames) : Pick(kOtherNames);
          const json v = value_for(n, extra);
          if (!o.contains(n) && !props.contains(n) && !required.count(n) && v != json(false))
            o[n] = Instance(root, v, depth + 1);
        }
    } else if (extra != json(false) && Chance(0.3))
      for (int i = Int(1, 2); i > 0; --i) {
        const std::string n = Chance(0.7) ? Pick(kOtherNames) : Pick(kRequiredOthers);
        if (!o.contains(n) && !props.contains(n) && !required.count(n))
          o[n] = Instance(root, extra, depth + 1);
      }
    if (dependencies_) return MeetDependencies(root, e, o, depth);
    return o;
  }

  json ArrayInstance(const json& root, const json& e, int depth) {
    json prefix = json::array(), tail = true;
    if (e.contains("prefixItems")) {
      prefix = e["prefixItems"];
      tail = e.value("items", json(true));
    } else if (e.contains("items") && e["items"].is_array()) {
      prefix = e["items"];
      tail = e.value("additionalItems", json(true));
    } else {
      tail = e.value("items", json(true));
    }
    const int min = e.value("minItems", 0);
    int max = e.contains("maxItems") ? e["maxItems"].get<int>() : min + (depth > 3 ? 0 : 3);
    if (tail == json(false)) max = std::min(max, static_cast<int>(prefix.size()));
    json a = json::array();
    for (int i = 0, n = Int(min, std::max(min, max)); i < n; ++i)
      a.push_back(Instance(
          root, i < static_cast<int>(prefix.size()) ? prefix[static_cast<size_t>(i)] : tail,
          depth + 1));
    return a;
  }

  json RandomInteger() {
    static const int64_t v[] = {0, 1, -1, 7, 42, -100, 123456789, 4294967296};
    return v[static_cast<size_t>(Int(0, 7))];
  }
  json RandomFraction() {
    static const double v[] = {2.5, -0.125, 3.14, 1e-07, 6.02e-23, -1.5e-10};
    // Negations write bounds on any number: a text with an exponent is kept out there, as
    // documented (NumberRangeRegex accepts fewer texts).
    return v[static_cast<size_t>(Int(0, negations_ ? 2 : 5))];
  }
  std::string RandomString(int n) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s += Chance(0.6) ? std::string(1, char('a' + Int(0, 25))) : Pick(kChars);
    return s;
  }

  json RandomValue(int depth) {
    switch (Int(0, depth > 3 ? 5 : 7)) {
      case 0:
        return nullptr;
      case 1:
        return Chance(0.5);
      case 2:
        return RandomInteger();
      case 3:
        return RandomFraction();
      case 4:
      case 5:
        return RandomString(Int(0, 5));
      case 6: {
        json a = json::array();
        for (int i = Int(0, 2); i > 0; --i) a.push_back(RandomValue(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int i = Int(0, 2); i > 0; --i) o[Pick(kOtherNames)] = RandomValue(depth + 1);
        return o;
      }
    }
  }

  // A value of another JSON type than `v`'s.
  json OtherKind(const json& v) {
    for (;;) {
      json w = RandomValue(2);
      const bool same = w.type() == v.type() || (w.is_number() && v.is_number());
      if (!same) return w;
    }
  }

  std::mt19937 rng_;
  const bool known_;
  const bool bounded_;
  bool patterns_ = false;
  bool one_of_required_ = false;
  bool dependencies_ = false;
  bool negations_ = false;
  bool draft07_ = false;
  json defs_;
};

// A generated schema through the compiler, against `trie`: its grammar in *out, or why there is
// none. Only these two refusals are expected; any other error fails the test (and counts as
// unsatisfiable).
enum class Compiled { kGrammar, kRefused, kUnsatisfiable };
inline Compiled CompileGenerated(const nlohmann::ordered_json& schema,
                                 std::shared_ptr<const TokenTrie> trie,
                                 std::shared_ptr<CompiledGrammar>* out) {
  Grammar g;
  const Status st = CompileJsonSchema(schema, &g);
  if (st.code() == Status::Code::kUnsupported)
    return Compiled::kRefused;  // a keyword it cannot enforce
  if (!st.ok()) {
    EXPECT_NE(st.message().find("no document satisfies"), std::string::npos) << st.message() << "\n"
                                                                             << schema.dump();
    return Compiled::kUnsatisfiable;
  }
  const Status c = CompiledGrammar::Compile(std::move(g), std::move(trie), out);
  EXPECT_TRUE(c.ok()) << c.message() << "\n" << schema.dump();
  return c.ok() ? Compiled::kGrammar : Compiled::kUnsatisfiable;
}

}  // namespace llmq::testing
