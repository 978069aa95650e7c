#include "engine/structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/json_regex.h"
#include "engine/structured/json_schema_compiler.h"
#include "engine/structured/regex.h"

namespace llmq {

using json = nlohmann::ordered_json;
using Sym = Grammar::Symbol;

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string PythonJsonDumps(const json& v) {
  switch (v.type()) {
    case json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += (first ? "" : ", ") + JsonQuote(k) + ": " + PythonJsonDumps(x);
        first = false;
      }
      return out + "}";
    }
    case json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + PythonJsonDumps(v[i]);
      return out + "]";
    }
    case json::value_t::string:
      return JsonQuote(v.get<std::string>());
    default:
      return v.dump();
  }
}

namespace schema {

std::string PointerToken(const std::string& s) {
  std::string out;
  for (const char c : s) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

std::string Where(const std::string& keyword, const std::string& pointer) {
  return "keyword \"" + keyword + "\" at \"" + (pointer.empty() ? "/" : pointer) + "\"";
}

Status Refuse(const std::string& keyword, const std::string& pointer, const std::string& why) {
  return Status::Unsupported("json_schema: " + Where(keyword, pointer) + ": " + why);
}

Status Invalid(const std::string& keyword, const std::string& pointer, const std::string& why) {
  return Status::InvalidArgument("json_schema: " + Where(keyword, pointer) + ": " + why);
}

const std::set<std::string>& Annotations() {
  // clang-format off
  static const std::set<std::string> k = {
      "$schema", "$id", "id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "title",
      "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly",
      "contentEncoding", "contentMediaType", "contentSchema", "$defs", "definitions",
      "discriminator", "markdownDescription", "strict", "name"};
  // clang-format on
  return k;
}

const std::set<std::string>& Enforced() {
  // clang-format off
  static const std::set<std::string> k = {
      "type", "properties", "required", "additionalProperties", "items", "prefixItems",
      "additionalItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf",
      "$ref", "minLength", "maxLength", "minProperties", "maxProperties", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "not",
      "patternProperties", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames",
      "if", "then", "else", "contains", "minContains", "maxContains", "uniqueItems",
      // What Negate writes: not {enum: strings} (a string but those), not {pattern} (a string
      // none of those patterns matches), not {type: integer} (a number with a fraction), not
      // {items} (contains whatever the draft); allOf of patterns (the others beside `pattern`).
      "$llmq_not_strings", "$llmq_not_patterns", "$llmq_patterns", "$llmq_fraction", "$llmq_contains",
      "$llmq_min_contains", "$llmq_max_contains", "$llmq_some", "$llmq_not_multiple_of",
      // What allOf writes where one part's additionalProperties meets another part's patterns.
      "$llmq_key_rules"};
  // clang-format on
  return k;
}

const std::set<std::string>& Refused() {
  // clang-format off
  static const std::set<std::string> k = {
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
      "$recursiveRef", "$recursiveAnchor"};
  // clang-format on
  return k;
}

const std::string kChar =
    R"~((?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))~"
    R"~(|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}))~";

const char* const kTypes[] = {"null", "boolean", "object", "array", "number", "integer", "string"};

Compiler::Compiler(const json& root, const JsonSchemaOptions& opt, Grammar* g)
    : root_(root), opt_(opt), g_(*g) {
  if (root.is_object() && root.contains("$schema") && root["$schema"].is_string()) {
    const std::string d = root["$schema"].get<std::string>();
    for (const char* old : {"draft-03", "draft-04", "draft-06", "draft-07"})
      legacy_ref_ = legacy_ref_ || d.find(old) != std::string::npos;
    for (const char* old : {"draft-03", "draft-04", "draft-06"})
      no_conditionals_ = no_conditionals_ || d.find(old) != std::string::npos;
    for (const char* old : {"draft-03", "draft-04"})
      no_contains_ = no_contains_ || d.find(old) != std::string::npos;
  }
  const std::string ws = "[ \\t\\n\\r]{0," + std::to_string(opt.max_whitespace) + "}";
  lbrace_ = g_.Lexeme("\\{" + ws);
  rbrace_ = g_.Lexeme(ws + "\\}");
  lbrack_ = g_.Lexeme("\\[" + ws);
  rbrack_ = g_.Lexeme(ws + "\\]");
  comma_ = g_.Lexeme(ws + "," + ws);
  colon_ = g_.Lexeme(ws + ":" + ws);
}

Status Compiler::Value(const json& s, const std::string& ptr, Sym* out) {
  if (s.is_boolean()) {
    *out = s.get<bool>() ? Any() : Nothing();
    return Status::Ok();
  }
  if (!s.is_object()) return Invalid("", ptr, "a schema is an object or a boolean");
  if (++depth_ > 200) return Refuse("$ref", ptr, "schemas nested more than 200 deep");
  const Status st = ValueOf(s, ptr, out);
  --depth_;
  return st;
}

Sym Compiler::Any() {
  if (any_.has_value()) return *any_;
  const Sym any = g_.NewRule("any"), obj = g_.NewRule("any_object"), arr = g_.NewRule("any_array");
  any_ = any;
  const Sym members = g_.NewRule("any_members"), elements = g_.NewRule("any_elements");
  for (const Sym s : {obj, arr, String(0, -1), Number(false), g_.Literal("true"),
                      g_.Literal("false"), g_.Literal("null")})
    g_.AddAlternative(any, {s});
  g_.AddAlternative(obj, {lbrace_, rbrace_});
  g_.AddAlternative(obj, {lbrace_, members, rbrace_});
  g_.AddAlternative(members, {String(0, -1), colon_, any});
  g_.AddAlternative(members, {String(0, -1), colon_, any, comma_, members});
  g_.AddAlternative(arr, {lbrack_, rbrack_});
  g_.AddAlternative(arr, {lbrack_, elements, rbrack_});
  g_.AddAlternative(elements, {any});
  g_.AddAlternative(elements, {any, comma_, elements});
  return any;
}

Sym Compiler::AnyObject() {
  Any();
  return g_.rules()[static_cast<size_t>(any_->id)].alternatives[0][0];
}

Sym Compiler::Nothing() {  // a rule without alternatives: no document (Validate drops what needs
                           // it)
  return g_.NewRule("false");
}

Sym Compiler::String(int64_t min, int64_t max) {
  if (min == 0 && max < 0) return g_.Lexeme("\"" + kChar + "*\"");
  Grammar::LexemeSpec spec;
  spec.is_string_length = true;
  spec.min_length = min;
  spec.max_length = max;
  return g_.Lexeme(spec);
}

Sym Compiler::Number(bool integer) {
  return g_.Lexeme(integer ? "-?(?:0|[1-9][0-9]*)"
                           : "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?");
}

Status Compiler::ValueOf(const json& s0, const std::string& ptr, Sym* out) {
  json s;
  LLMQ_RETURN_IF_ERROR(Negate(s0, ptr, &s));
  if (s.is_boolean()) return Value(s, ptr, out);
  for (const auto& [k, v] : s.items()) {
    (void)v;
    if (Refused().count(k)) return Refuse(k, ptr + "/" + PointerToken(k), "not enforced yet");
  }
  if (s.contains("uniqueItems") && !s["uniqueItems"].is_boolean())
    return Invalid("uniqueItems", ptr + "/uniqueItems", "not a boolean");
  if (s.contains("if") || s.contains("then") || s.contains("else")) return IfThenElse(s, ptr, out);
  if (s.contains("$ref")) return Ref(s, ptr, out);
  if (s.contains("allOf")) return AllOf(s, ptr, out);
  if (s.contains("anyOf") || s.contains("oneOf")) return AnyOf(s, ptr, out);
  if (s.contains("enum") && !s["enum"].is_array())
    return Invalid("enum", ptr + "/enum", "not an array");
  if (s.contains("const") || s.contains("enum")) {
    return Enum(EnumValues(s), s, ptr + (s.contains("const") ? "/const" : "/enum"), out);
  }
  std::vector<std::string> types;
  LLMQ_RETURN_IF_ERROR(Types(s, ptr, &types));
  const Sym rule = g_.NewRule(ptr.empty() ? "/" : ptr);
  for (const std::string& t : types) {
    Sym v;
    if (t == "null") {
      v = g_.Literal("null");
    } else if (t == "boolean") {
      v = g_.NewRule("boolean");
      g_.AddAlternative(v, {g_.Literal("true")});
      g_.AddAlternative(v, {g_.Literal("false")});
    } else if (t == "integer" || t == "number") {
      LLMQ_RETURN_IF_ERROR(NumberOf(s, t == "integer", ptr, &v));
    } else if (t == "string") {
      LLMQ_RETURN_IF_ERROR(StringOf(s, ptr, &v));
    } else if (t == "object") {
      LLMQ_RETURN_IF_ERROR(Object(s, ptr, &v));
    } else {
      LLMQ_RETURN_IF_ERROR(Array(s, ptr, &v));
    }
    g_.AddAlternative(rule, {v});
  }
  *out = rule;
  return Status::Ok();
}

Status Compiler::Types(const json& s, const std::string& ptr, std::vector<std::string>* out) {
  if (!s.contains("type")) {
    out->assign({"null", "boolean", "object", "array", "number", "string"});
    return Status::Ok();
  }
  const json& t = s["type"];
  std::vector<std::string> names;
  if (t.is_string())
    names.push_back(t.get<std::string>());
  else if (t.is_array())
    for (const json& x : t) {
      if (!x.is_string()) return Invalid("type", ptr + "/type", "not a type name");
      names.push_back(x.get<std::string>());
    }
  else
    return Invalid("type", ptr + "/type", "not a type name or a list of them");
  for (const std::string& n : names)
    if (std::find(std::begin(kTypes), std::end(kTypes), n) == std::end(kTypes))
      return Invalid("type", ptr + "/type", "\"" + n + "\" is not a JSON Schema type");
  const bool number = std::count(names.begin(), names.end(), "number") > 0;
  for (const char* k : kTypes)
    if (std::count(names.begin(), names.end(), k) && !(number && std::string(k) == "integer"))
      out->push_back(k);
  return Status::Ok();
}

std::vector<std::string> Compiler::Kinds(const json& s0, const std::string& ptr, int depth) {
  const std::vector<std::string> all = {"null", "boolean", "object", "array", "number", "string"};
  json s;
  if (depth > 8 || !ResolveFlat(s0, ptr, &s).ok()) return all;
  if (s.is_boolean()) return s.get<bool>() ? all : std::vector<std::string>{};
  std::vector<std::string> types;
  if (!s.is_object() || !Types(s, ptr, &types).ok()) return all;
  // As sets of {null, boolean, object, array, integer, fraction, string}: "number" is both.
  const auto split = [](const std::vector<std::string>& names) {
    std::set<std::string> out;
    for (const std::string& t : names) {
      if (t == "number")
        out.insert({"integer", "fraction"});
      else
        out.insert(t);
    }
    return out;
  };
  std::set<std::string> have = split(types);
  const auto keep = [&have](const std::set<std::string>& only) {
    std::erase_if(have, [&only](const std::string& t) { return !only.count(t); });
  };
  if (s.contains("enum") || s.contains("const")) {
    const json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
    if (values.is_array()) {
      std::set<std::string> kinds;
      for (const json& v : values) {
        const std::string k = KindOf(v);
        kinds.insert(k != "number" ? k
                     : v.is_number_integer() || v.is_number_unsigned() ||
                             v.get<double>() == std::floor(v.get<double>())
                         ? "integer"
                         : "fraction");
      }
      keep(kinds);
    }
  }
  for (const char* any : {"anyOf", "oneOf"})
    if (s.contains(any) && s[any].is_array() && !s[any].empty()) {
      std::set<std::string> either;
      for (size_t i = 0; i < s[any].size(); ++i) {
        const std::set<std::string> k =
            split(Kinds(s[any][i], ptr + "/" + any + "/" + std::to_string(i), depth + 1));
        either.insert(k.begin(), k.end());
      }
      keep(either);
    }
  std::vector<std::string> out;
  for (const char* t : {"null", "boolean", "object", "array", "string"})
    if (have.count(t)) out.push_back(t);
  if (have.count("fraction"))
    out.push_back("number");
  else if (have.count("integer"))
    out.push_back("integer");
  return out;
}

Status Compiler::NonNegative(const json& s, const char* k, const std::string& ptr, int64_t* v) {
  if (!s.contains(k)) return Status::Ok();
  const json& x = s[k];
  if (!x.is_number() || x.get<double>() < 0 || x.get<double>() != std::floor(x.get<double>()))
    return Invalid(k, ptr + "/" + k, "not a non-negative integer");
  // Past 2^62 every bound is as far as any count goes (and the cast stays defined).
  *v = x.get<double>() >= 0x1p62 ? int64_t{1} << 62 : static_cast<int64_t>(x.get<double>());
  return Status::Ok();
}

Status Compiler::StringOf(const json& s, const std::string& ptr, Sym* out) {
  // Several patterns (a format among them), or patterns with names excluded: a product.
  if (s.contains("$llmq_not_patterns") || s.contains("$llmq_patterns") ||
      (s.contains("pattern") && s.contains("format")) ||
      (s.contains("$llmq_not_strings") && (s.contains("pattern") || s.contains("minLength") ||
                                           s.contains("maxLength") || s.contains("format"))))
    return NotPatterns(s, ptr, out);
  if (s.contains("$llmq_not_strings")) {  // not {enum: [...]}: a string other than those
    Grammar::LexemeSpec spec;
    spec.is_key_except = true;
    for (const json& v : s["$llmq_not_strings"])
      spec.key_except.push_back(KeyText(v.get<std::string>()));
    *out = g_.Lexeme(spec);
    return Status::Ok();
  }
  int64_t min = 0, max = -1;
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "minLength", ptr, &min));
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxLength", ptr, &max));
  if (max >= 0 && max < min) {
    *out = Nothing();
    return Status::Ok();
  }
  constexpr int64_t kMaxLength = int64_t{1} << 27;  // the automaton's count
  if (min > kMaxLength || max > kMaxLength)
    return Refuse(max > kMaxLength ? "maxLength" : "minLength",
                  ptr + (max > kMaxLength ? "/maxLength" : "/minLength"),
                  "a length bound above " + std::to_string(kMaxLength));
  const bool bounded = min > 0 || max >= 0;
  const char* length = min > 0 ? "minLength" : "maxLength";
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return Invalid("pattern", ptr + "/pattern", "not a string");
    Grammar::LexemeSpec spec;
    spec.regex = s["pattern"].get<std::string>();
    spec.options = {.mode = Regex::Mode::kSearch, .json_string = true, .quoted = true};
    std::unique_ptr<Regex> re;
    if (Status st = Regex::Compile(spec.regex, spec.options, &re); !st.ok())
      return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)(
          "pattern", ptr + "/pattern", st.message());
    if (bounded) return BoundedString(std::move(spec), re.get(), min, max, length, ptr, out);
    *out = g_.Lexeme(spec);
    return Status::Ok();
  }
  if (s.contains("format") && s["format"].is_string()) {
    std::string rx;
    const Status st = FormatRegex(s["format"].get<std::string>(), &rx);
    if (st.ok()) {
      Grammar::LexemeSpec spec;
      spec.regex = "\"(?:" + rx + ")\"";
      if (bounded) {
        std::unique_ptr<Regex> re;
        if (Status c = Regex::Compile(spec.regex, spec.options, &re); !c.ok())
          return Refuse("format", ptr + "/format", c.message());  // not reached: formats compile
        return BoundedString(std::move(spec), re.get(), min, max, length, ptr, out);
      }
      *out = g_.Lexeme(spec);
      return Status::Ok();
    }
    // An unknown format is an annotation (JSON Schema); one known but not enforced is refused.
    if (st.code() != Status::Code::kNotFound)
      return Refuse("format", ptr + "/format", st.message());
  }
  *out = String(min, max);
  return Status::Ok();
}

Status Compiler::NotPatterns(const json& s, const std::string& ptr, Sym* out) {
  std::set<std::string> positive, negative;
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return Invalid("pattern", ptr + "/pattern", "not a string");
    positive.insert(s["pattern"].get<std::string>());
  }
  if (s.contains("$llmq_patterns"))
    for (const json& p : s["$llmq_patterns"]) positive.insert(p.get<std::string>());
  if (s.contains("format") && s["format"].is_string()) {  // one more pattern, anchored
    std::string rx;
    const std::string f = s["format"].get<std::string>();
    const Status st = FormatRegex(f, &rx);
    if (st.code() != Status::Code::kNotFound) {  // unknown: an annotation
      if (!st.ok()) return Refuse("format", ptr + "/format", st.message());
      // Its regex reads the raw text; a pointer's escapes differ from the decoded value's.
      if (f == "json-pointer" || f == "relative-json-pointer")
        return Refuse("format", ptr + "/format",
                      "\"" + f + "\" beside a pattern or names excluded");
      positive.insert("^(?:" + rx + ")$");
    }
  }
  int64_t min = 0, max = -1;
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "minLength", ptr, &min));
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxLength", ptr, &max));
  if (max >= 0 && max < min) {
    *out = Nothing();
    return Status::Ok();
  }
  if (min > 0 || max >= 0) {
    if (std::max(min, max) > 1000)
      return Refuse("not", ptr + "/not", "beside a length bound above 1000");
    positive.insert(LengthPattern(min, max));
  }
  if (s.contains("$llmq_not_patterns"))
    for (const json& p : s["$llmq_not_patterns"]) negative.insert(p.get<std::string>());
  for (const std::string& p : positive)
    if (negative.count(p)) {  // matched and not: no string
      *out = Nothing();
      return Status::Ok();
    }
  // The patterns in one order whatever their side, so that the branches of a oneOf of patterns
  // share one product automaton (KeyPatternAutomaton keeps it between Builds).
  Grammar::LexemeSpec spec;
  spec.is_key_pattern = true;
  std::set<std::string> all = positive;
  all.insert(negative.begin(), negative.end());
  if (all.size() > static_cast<size_t>(KeyPatternAutomaton::kMaxPatterns))
    return Refuse("not", ptr + "/not", "more than 63 patterns");
  for (const std::string& p : all) {
    if (positive.count(p)) spec.pattern_subset |= uint64_t{1} << spec.patterns.size();
    spec.patterns.push_back(p);
  }
  if (s.contains("$llmq_not_strings")) {
    std::set<std::string> names;
    for (const json& v : s["$llmq_not_strings"]) names.insert(KeyText(v.get<std::string>()));
    spec.key_except.assign(names.begin(), names.end());
  }
  std::unique_ptr<KeyPatternAutomaton> keys;
  if (Status st =
          KeyPatternAutomaton::Build(spec.key_except, spec.patterns, spec.pattern_subset, &keys);
      !st.ok())
    return Refuse("not", ptr + "/not", st.message());
  *out = keys->Start() == LexemeAutomaton::kDead ? Nothing() : g_.Lexeme(spec);
  return Status::Ok();
}

Status Compiler::BoundedString(Grammar::LexemeSpec spec, Regex* re, int64_t min, int64_t max,
                               const char* length, const std::string& ptr, Sym* out) {
  if (max < 0 && BoundedStringAutomaton::AllAtLeast(re, min)) {  // the pattern says as much
    *out = g_.Lexeme(spec);
    return Status::Ok();
  }
  spec.is_string_length = true;
  spec.min_length = min;
  spec.max_length = max;
  std::unique_ptr<BoundedStringAutomaton> both;
  if (Status st = BoundedStringAutomaton::Build(re, min, max, &both, Grammar::SpecKey(spec));
      !st.ok())
    return Refuse(length, ptr + "/" + length, st.message());
  if (both->Start() == LexemeAutomaton::kDead) {
    *out = Nothing();
    return Status::Ok();
  }
  *out = g_.Lexeme(spec);
  return Status::Ok();
}

const std::string& Compiler::FractionRegex() {
  static const std::string re = [] {
    const std::string down = "(?:[1-9][0-9]?|1[0-9]{2}|2[0-7][0-9]|280)";  // 1..280
    std::string plain = "0\\.0{0,15}[1-9](?:[0-9]{0,13}[1-9])?0*";         // 0.x: x significant
    for (int i = 1; i <= 14; ++i)  // i digits before the point, up to 15 - i after
      plain += "|[1-9][0-9]{" + std::to_string(i - 1) + "}\\.[0-9]{0," + std::to_string(14 - i) +
               "}[1-9]0*";
    return "-?(?:(?:" + plain + ")(?:[eE](?:-0*" + down +
           "|[+-]?0+))?|(?:[1-9]|[1-9][0-9]{0,13}[1-9])[eE]-0*" + down + ")";
  }();
  return re;
}

Status Compiler::NumberOf(const json& s, bool integer, const std::string& ptr, Sym* out) {
  if (s.contains("$llmq_fraction")) {  // not {type: integer}: a number with a fraction
    for (const char* k :
         {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      if (s.contains(k)) return Refuse("not", ptr + "/not", std::string("beside ") + k);
    *out = integer ? Nothing() : g_.Lexeme(FractionRegex());
    return Status::Ok();
  }
  std::optional<double> lo, hi;
  bool lo_ex = false, hi_ex = false;
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(k)) continue;
    const json& v = s[k];
    const bool min =
        k[0] == 'm' ? std::string(k) == "minimum" : std::string(k) == "exclusiveMinimum";
    const bool exclusive = k[0] == 'e';
    if (v.is_boolean()) {  // draft 4: the flag of minimum/maximum
      if (exclusive && v.get<bool>()) (min ? lo_ex : hi_ex) = true;
      continue;
    }
    if (!v.is_number()) return Invalid(k, ptr + "/" + k, "not a number");
    const double x = v.get<double>();
    std::optional<double>& b = min ? lo : hi;
    bool& ex = min ? lo_ex : hi_ex;
    // The tighter of minimum and exclusiveMinimum (both may be given).
    if (!b.has_value() || (min ? x > *b : x < *b) || (x == *b && exclusive)) {
      b = x;
      ex = exclusive;
    }
  }
  // multipleOf with an integer divisor: integer texts whose value it divides (an integral
  // number is an integer; 10.0 is not written), within +-(2^53 - 1), where a validator's
  // float division is an integer exactly then. A divisor with a fraction (0.01) is refused:
  // validators divide in floating point (0.07 / 0.01 is 7.000000000000001).
  // not {multipleOf: k} (Complement, $llmq_not_multiple_of): the integers k does not divide
  // (the numbers with a fraction are the complement's other alternative); beside multipleOf,
  // the multiples of one the other does not divide.
  int64_t divisor = 0, not_divisor = 0;
  for (const char* k : {"multipleOf", "$llmq_not_multiple_of"}) {
    if (!s.contains(k)) continue;
    const json& m = s[k];
    if (!m.is_number() || !(m.get<double>() > 0))
      return Invalid(k, ptr + "/" + k, "not a number above 0");
    const double d = m.get<double>();
    if (d != std::floor(d))
      return Refuse("multipleOf", ptr + "/multipleOf",
                    "a divisor with a fraction is not enforced (validators divide in floating "
                    "point)");
    if (d > static_cast<double>(MultipleAutomaton::kMaxDivisor))
      return Refuse("multipleOf", ptr + "/multipleOf",
                    "a divisor past " + std::to_string(MultipleAutomaton::kMaxDivisor));
    integer = true;
    (k[0] == 'm' ? divisor : not_divisor) = static_cast<int64_t>(d);
  }
  if (not_divisor == 1 || (not_divisor > 0 && divisor > 0 && divisor % not_divisor == 0)) {
    *out = Nothing();  // every integer (every multiple of divisor) is one
    return Status::Ok();
  }
  if (divisor == 1 && not_divisor == 0) divisor = 0;  // every integer
  if (not_divisor > 0 && divisor == 0) divisor = 1;
  if (!lo.has_value() && !hi.has_value() && divisor == 0) {
    *out = Number(integer);
    return Status::Ok();
  }
  std::string rx;
  Status st;
  if (integer) {
    std::optional<int64_t> ilo, ihi;
    constexpr double kLimit = 9.2e18;
    // An exclusive bound as the next double past it, inclusive: past 2^53 doubles are apart
    // by more than 1, and a validator reads the text as a double first (2^60 + 1 is 2^60).
    if (lo.has_value()) {
      if (std::fabs(*lo) > kLimit) return Refuse("minimum", ptr + "/minimum", "beyond 64 bits");
      const double c = std::ceil(lo_ex ? std::nextafter(*lo, HUGE_VAL) : *lo);
      ilo = static_cast<int64_t>(c);
    }
    if (hi.has_value()) {
      if (std::fabs(*hi) > kLimit) return Refuse("maximum", ptr + "/maximum", "beyond 64 bits");
      const double c = std::floor(hi_ex ? std::nextafter(*hi, -HUGE_VAL) : *hi);
      ihi = static_cast<int64_t>(c);
    }
    if (divisor > 0) {  // within +-(2^53 - 1)
      constexpr int64_t kExact = (int64_t{1} << 53) - 1;
      ilo = std::max(ilo.value_or(-kExact), -kExact);
      ihi = std::min(ihi.value_or(kExact), kExact);
    }
    if (ilo.has_value() && ihi.has_value() && *ilo > *ihi) {
      *out = Nothing();
      return Status::Ok();
    }
    st = IntegerRangeRegex(ilo, ihi, &rx);
  } else {
    if (lo.has_value() && hi.has_value() && (*lo > *hi || (*lo == *hi && (lo_ex || hi_ex)))) {
      *out = Nothing();
      return Status::Ok();
    }
    st = NumberRangeRegex(lo, lo_ex, hi, hi_ex, &rx);
  }
  if (!st.ok()) {
    const char* k = lo.has_value() ? "minimum" : "maximum";
    return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)(k, ptr + "/" + k,
                                                                        st.message());
  }
  if (divisor == 0) {
    *out = g_.Lexeme(rx);
    return Status::Ok();
  }
  Grammar::LexemeSpec spec;
  spec.regex = rx;
  spec.multiple_of = divisor;
  spec.not_multiple_of = not_divisor;
  std::unique_ptr<Regex> re;
  std::unique_ptr<MultipleAutomaton> multiples;
  if (st = Regex::Compile(rx, Regex::Mode::kFull, &re); st.ok())
    st = MultipleAutomaton::Build(re.get(), divisor, not_divisor, &multiples);
  if (!st.ok()) return Refuse("multipleOf", ptr + "/multipleOf", st.message());
  *out = multiples->Start() == LexemeAutomaton::kDead ? Nothing() : g_.Lexeme(spec);
  return Status::Ok();
}

bool Compiler::Satisfies(const json& v, const json& s) {
  if (v.is_string()) {
    const std::string text = v.get<std::string>();
    if (s.contains("$llmq_not_patterns") && s["$llmq_not_patterns"].is_array())
      for (const json& p : s["$llmq_not_patterns"]) {
        std::unique_ptr<Regex> re;
        if (p.is_string() && Regex::Compile(p.get<std::string>(), Regex::Mode::kSearch, &re).ok() &&
            re->Matches(text))
          return false;
      }
    if (s.contains("$llmq_patterns") && s["$llmq_patterns"].is_array())
      for (const json& p : s["$llmq_patterns"]) {
        std::unique_ptr<Regex> re;
        if (p.is_string() && Regex::Compile(p.get<std::string>(), Regex::Mode::kSearch, &re).ok() &&
            !re->Matches(text))
          return false;
      }
    if (s.contains("$llmq_not_strings") && s["$llmq_not_strings"].is_array() &&
        std::find(s["$llmq_not_strings"].begin(), s["$llmq_not_strings"].end(), v) !=
            s["$llmq_not_strings"].end())
      return false;
    int64_t chars = 0;
    for (const char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (s.contains("minLength") && s["minLength"].is_number() &&
        chars < s["minLength"].get<double>())
      return false;
    if (s.contains("maxLength") && s["maxLength"].is_number() &&
        chars > s["maxLength"].get<double>())
      return false;
    std::unique_ptr<Regex> re;
    if (s.contains("pattern") && s["pattern"].is_string() &&
        Regex::Compile(s["pattern"].get<std::string>(), Regex::Mode::kSearch, &re).ok() &&
        !re->Matches(text))
      return false;
    std::string rx;
    if (s.contains("format") && s["format"].is_string() &&
        FormatRegex(s["format"].get<std::string>(), &rx).ok()) {
      const std::string q = JsonQuote(text);
      if (Regex::Compile(rx, Regex::Mode::kFull, &re).ok() &&
          !re->Matches(q.substr(1, q.size() - 2)))
        return false;
    }
    return true;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    const auto bound = [&](const char* k) -> std::optional<double> {
      if (s.contains(k) && s[k].is_number()) return s[k].get<double>();
      return std::nullopt;
    };
    const bool draft4_lo = s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == json(true);
    const bool draft4_hi = s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == json(true);
    if (const auto b = bound("minimum"); b && (x < *b || (draft4_lo && x == *b))) return false;
    if (const auto b = bound("maximum"); b && (x > *b || (draft4_hi && x == *b))) return false;
    if (const auto b = bound("exclusiveMinimum"); b && x <= *b) return false;
    if (const auto b = bound("exclusiveMaximum"); b && x >= *b) return false;
    if (const auto m = bound("multipleOf"); m && *m > 0 && std::fmod(x, *m) != 0) return false;
    if (const auto m = bound("$llmq_not_multiple_of"); m && *m > 0 && std::fmod(x, *m) == 0)
      return false;
    if (s.contains("$llmq_fraction") && x == std::floor(x)) return false;
  }
  return true;
}

json Compiler::ConstSchema(const json& v) {
  if (v.is_object()) {
    json props = json::object(), required = json::array();
    for (const auto& [k, x] : v.items()) {
      props[k] = {{"const", x}};
      required.push_back(k);
    }
    return {{"type", "object"},
            {"properties", props},
            {"required", required},
            {"additionalProperties", false}};
  }
  json items = json::array();
  for (const json& x : v) items.push_back({{"const", x}});
  return {{"type", "array"}, {"prefixItems", items}, {"items", false}, {"minItems", v.size()}};
}

bool Compiler::SameValue(const json& a, const json& b) {
  if (a.is_structured() || b.is_structured()) return Canonical(a) == Canonical(b);
  return a == b;
}

json Compiler::EnumValues(const json& s) {
  json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
  if (s.contains("const") && s.contains("enum") && s["enum"].is_array() &&
      std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end())
    values = json::array();  // both: the values of enum equal to const
  return values;
}

Status Compiler::Enum(const json& values, const json& s, const std::string& ptr, Sym* out) {
  std::vector<std::string> types;
  LLMQ_RETURN_IF_ERROR(Types(s, ptr, &types));
  const auto admitted = [&](const json& v) {
    const char* t = v.is_number_integer() || v.is_number_unsigned() ? "integer" : KindOf(v);
    return std::count(types.begin(), types.end(), t) > 0 ||
           (std::string(t) == "integer" && std::count(types.begin(), types.end(), "number"));
  };
  const Sym rule = g_.NewRule(ptr);
  for (const json& v : values)
    if (admitted(v) && Satisfies(v, s)) {
      if (v.is_object() || v.is_array()) {
        // The value's own shape, each member a const: its properties in the value's order
        // (the order generated, as everywhere), each required, no other; its items in order.
        // The keywords beside the enum hold too: merged in (a member that fails its property's
        // schema leaves nothing of this value).
        json shape = ConstSchema(v), beside = s;
        for (const char* k : {"enum", "const", "type"}) beside.erase(k);
        if (v.is_array() && beside.contains("uniqueItems")) {  // told of the value itself
          if (beside["uniqueItems"] == json(true))
            for (auto i = v.begin(); i != v.end(); ++i)
              for (auto j = std::next(i); j != v.end(); ++j)
                if (SameValue(*i, *j)) shape = false;
          beside.erase("uniqueItems");
        }
        if (shape == json(false)) continue;
        if (HasConstraints(beside)) {
          json merged;
          LLMQ_RETURN_IF_ERROR(Merge(shape, beside, ptr, &merged));
          shape = std::move(merged);
        }
        Sym c;
        LLMQ_RETURN_IF_ERROR(Value(shape, ptr, &c));
        g_.AddAlternative(rule, {c});
        continue;
      }
      // A number is its value, however written: 2 and 2.0 are one (as validators compare).
      std::string rx;
      if (v.is_number() &&
          NumberRangeRegex(v.get<double>(), false, v.get<double>(), false, &rx).ok())
        g_.AddAlternative(rule, {g_.Lexeme(rx)});
      else
        g_.AddAlternative(rule, {g_.Literal(PythonJsonDumps(v))});
    }
  *out = rule;
  return Status::Ok();
}

Status Compiler::Ref(const json& s, const std::string& ptr, Sym* out) {
  if (!s["$ref"].is_string()) return Invalid("$ref", ptr + "/$ref", "not a string");
  json rest = s;
  rest.erase("$ref");
  // Siblings of $ref apply too from 2019-09 on (allOf); drafts 4 to 7 ignore them.
  if (!legacy_ref_ && HasConstraints(rest))
    return AllOf(json{{"allOf", json::array({json{{"$ref", s["$ref"]}}, rest})}}, ptr, out);
  const std::string ref = s["$ref"].get<std::string>();
  if (ref.empty() || ref[0] != '#')
    return Refuse("$ref", ptr + "/$ref", "\"" + ref + "\" is not in this schema");
  if (const auto it = refs_.find(ref); it != refs_.end()) {
    *out = it->second;
    return Status::Ok();
  }
  const std::string pointer = ref.substr(1);
  json::json_pointer jp;
  try {
    jp = json::json_pointer(pointer);
  } catch (const json::exception&) {
    return Invalid("$ref", ptr + "/$ref", "\"" + ref + "\" is not a JSON pointer");
  }
  if (!root_.contains(jp))
    return Invalid("$ref", ptr + "/$ref", "\"" + ref + "\" resolves nowhere");
  // The rule exists before its body: a recursive reference finds it.
  const Sym rule = g_.NewRule(ref);
  refs_.emplace(ref, rule);
  Sym body;
  LLMQ_RETURN_IF_ERROR(Value(root_[jp], pointer, &body));
  g_.AddAlternative(rule, {body});
  *out = rule;
  return Status::Ok();
}

bool Compiler::DraftFourBounds(const json& s) {
  return (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean()) ||
         (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean());
}

bool Compiler::HasConstraints(const json& s) {
  if (!s.is_object()) return !s.is_boolean() || !s.get<bool>();
  for (const auto& [k, v] : s.items()) {
    (void)v;
    if (Enforced().count(k) || Refused().count(k)) return true;
  }
  return false;
}

Status Compiler::Resolve(const json& b, const std::string& ptr, json* out, int hops) {
  if (!b.is_object() || !b.contains("$ref") || !b["$ref"].is_string()) return Negate(b, ptr, out);
  const std::string ref = b["$ref"].get<std::string>();
  if (ref.empty() || ref[0] != '#' || hops > 16)
    return Refuse("$ref", ptr + "/$ref", "\"" + ref + "\" inside allOf");
  json::json_pointer jp;
  try {
    jp = json::json_pointer(ref.substr(1));
  } catch (const json::exception&) {
    return Invalid("$ref", ptr + "/$ref", "\"" + ref + "\" is not a JSON pointer");
  }
  if (!root_.contains(jp))
    return Invalid("$ref", ptr + "/$ref", "\"" + ref + "\" resolves nowhere");
  json target;
  LLMQ_RETURN_IF_ERROR(Resolve(root_[jp], ptr, &target, hops + 1));
  json rest = b;
  rest.erase("$ref");
  if (legacy_ref_ || !HasConstraints(rest)) {  // drafts 4 to 7 ignore $ref's siblings
    *out = std::move(target);
    return Status::Ok();
  }
  return Merge(target, rest, ptr, out);
}

Status Compiler::ResolveFlat(const json& b, const std::string& ptr, json* out) {
  LLMQ_RETURN_IF_ERROR(Resolve(b, ptr, out));
  if (!out->is_object() || !out->contains("allOf")) return Status::Ok();
  json flat;
  LLMQ_RETURN_IF_ERROR(Flatten(*out, ptr, &flat));
  *out = std::move(flat);
  return Status::Ok();
}

}  // namespace schema

Status CompileJsonSchema(const json& schema, Grammar* out, const JsonSchemaOptions& opt,
                         std::vector<std::string>* restrictions) {
  Grammar g;
  schema::Compiler c(schema, opt, &g);
  Sym start;
  LLMQ_RETURN_IF_ERROR(c.Value(schema, "", &start));
  if (restrictions != nullptr) *restrictions = c.restrictions();
  g.set_start(start);
  if (Status st = g.Validate(); !st.ok())
    return Status::InvalidArgument("json_schema: no document satisfies the schema (" +
                                   st.message() + ")");
  *out = std::move(g);
  return Status::Ok();
}

Grammar JsonObjectGrammar(const JsonSchemaOptions& opt) {
  Grammar g;
  const json root = json::object();
  schema::Compiler c(root, opt, &g);
  g.set_start(c.AnyObject());
  if (!g.Validate().ok()) std::abort();  // a fixed grammar: valid by construction
  return g;
}

}  // namespace llmq
