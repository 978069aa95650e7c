#include "engine/structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/json_regex.h"
#include "engine/structured/object_rules.h"
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

namespace {

// A JSON Pointer's reference token: '~' as ~0, '/' as ~1.
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

// Keywords that only annotate: no constraint to enforce.
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

// Every keyword the compiler enforces (the others JSON Schema defines are refused).
const std::set<std::string>& Enforced() {
  // clang-format off
  static const std::set<std::string> k = {
      "type", "properties", "required", "additionalProperties", "items", "prefixItems",
      "additionalItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf",
      "$ref", "minLength", "maxLength", "minProperties", "maxProperties", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "not",
      "patternProperties", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames",
      "if", "then", "else", "contains", "minContains", "maxContains",
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

// What JSON Schema defines and this compiler does not (yet) enforce: refused by name.
const std::set<std::string>& Refused() {
  // clang-format off
  static const std::set<std::string> k = {
      "uniqueItems", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
      "$recursiveRef", "$recursiveAnchor"};
  // clang-format on
  return k;
}

// One character of a JSON string's text: unescaped, or an escape; a surrogate escape only as a
// pair (StringLengthAutomaton's text, unbounded).
const std::string kChar =
    R"~((?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))~"
    R"~(|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}))~";

const char* const kTypes[] = {"null", "boolean", "object", "array", "number", "integer", "string"};

class Compiler {
 public:
  Compiler(const json& root, const JsonSchemaOptions& opt, Grammar* g)
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

  // The rule for the value `s` at `ptr` must match.
  Status Value(const json& s, const std::string& ptr, Sym* out) {
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

  Sym Any() {
    if (any_.has_value()) return *any_;
    const Sym any = g_.NewRule("any"), obj = g_.NewRule("any_object"),
              arr = g_.NewRule("any_array");
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
  Sym AnyObject() {
    Any();
    return g_.rules()[static_cast<size_t>(any_->id)].alternatives[0][0];
  }

 private:
  Sym Nothing() {  // a rule without alternatives: no document (Validate drops what needs it)
    return g_.NewRule("false");
  }

  // A JSON string lexeme of min..max characters (max < 0: unbounded).
  Sym String(int64_t min, int64_t max) {
    if (min == 0 && max < 0) return g_.Lexeme("\"" + kChar + "*\"");
    Grammar::LexemeSpec spec;
    spec.is_string_length = true;
    spec.min_length = min;
    spec.max_length = max;
    return g_.Lexeme(spec);
  }
  Sym Number(bool integer) {
    return g_.Lexeme(integer ? "-?(?:0|[1-9][0-9]*)"
                             : "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?");
  }

  Status ValueOf(const json& s0, const std::string& ptr, Sym* out) {
    json s;
    LLMQ_RETURN_IF_ERROR(Negate(s0, ptr, &s));
    if (s.is_boolean()) return Value(s, ptr, out);
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (Refused().count(k)) return Refuse(k, ptr + "/" + PointerToken(k), "not enforced yet");
    }
    if (s.contains("if") || s.contains("then") || s.contains("else"))
      return IfThenElse(s, ptr, out);
    if (s.contains("$ref")) return Ref(s, ptr, out);
    if (s.contains("allOf")) return AllOf(s, ptr, out);
    if (s.contains("anyOf") || s.contains("oneOf")) return AnyOf(s, ptr, out);
    if (s.contains("enum") && !s["enum"].is_array())
      return Invalid("enum", ptr + "/enum", "not an array");
    if (s.contains("const") || s.contains("enum")) {
      // Both: the values of enum equal to const.
      json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
      if (s.contains("const") && s.contains("enum") &&
          std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end())
        values = json::array();
      return Enum(values, s, ptr + (s.contains("const") ? "/const" : "/enum"), out);
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

  // The types a schema admits: `type` (a name or a list), else all of them; "number" covers
  // "integer".
  Status Types(const json& s, const std::string& ptr, std::vector<std::string>* out) {
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

  // The types a schema may admit, as Types names them, looking further than `type`: through
  // $ref and allOf, into enum/const (the kinds of the values) and anyOf/oneOf (the union of the
  // branches'). More than it admits where it cannot tell (past 8 levels, a reference that does
  // not resolve): what the complement of a keyword of another type needs (KeywordType).
  std::vector<std::string> Kinds(const json& s0, const std::string& ptr, int depth = 0) {
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

  Status NonNegative(const json& s, const char* k, const std::string& ptr, int64_t* v) {
    if (!s.contains(k)) return Status::Ok();
    const json& x = s[k];
    if (!x.is_number() || x.get<double>() < 0 || x.get<double>() != std::floor(x.get<double>()))
      return Invalid(k, ptr + "/" + k, "not a non-negative integer");
    // Past 2^62 every bound is as far as any count goes (and the cast stays defined).
    *v = x.get<double>() >= 0x1p62 ? int64_t{1} << 62 : static_cast<int64_t>(x.get<double>());
    return Status::Ok();
  }

  Status StringOf(const json& s, const std::string& ptr, Sym* out) {
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

  // A string none of $llmq_not_patterns matches and none of $llmq_not_strings is, that `pattern`,
  // each of $llmq_patterns and the format (its regex anchored: a pattern too) match and of
  // minLength..maxLength characters (a pattern too), as a key of patternProperties
  // is told apart (KeyPatternAutomaton: the set of patterns that match it is exactly the
  // positive ones).
  Status NotPatterns(const json& s, const std::string& ptr, Sym* out) {
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

  // A string `re` (the lexeme `spec`'s regex) matches, of min..max characters: nothing where no
  // such string exists.
  Status BoundedString(Grammar::LexemeSpec spec, Regex* re, int64_t min, int64_t max,
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

  // The texts of numbers with a fraction (not {type: integer}) whose double a validator does not
  // take for an integer either: written with the fraction (a nonzero digit in it), at most 15
  // significant digits to its last nonzero one (M < 2^53, so the value, at least 10^-F from an
  // integer, is farther than half a unit in the last place from one), an exponent only where it
  // cannot make an integer of it (negative, down to -280 past at most 15 leading zeros: no
  // underflow to 0; or zero), or an integer mantissa ending in a nonzero digit times a negative
  // power of ten (1e-07, Python's spelling). Not taken: 1.25e1, 125e-1, 10e-1 and fractions of
  // more digits (12345678901234567890.5 is an integer as a double). JSON Schema's kind is the
  // value's; a grammar's is the spelling, as for integers.
  static const std::string& FractionRegex() {
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

  // A number (or an integer) within minimum/maximum and their exclusive forms (draft 4's
  // booleans, 6's numbers).
  Status NumberOf(const json& s, bool integer, const std::string& ptr, Sym* out) {
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

  // Whether a scalar `v` of enum/const meets the keywords beside it (its type is checked apart):
  // lengths, pattern and format on strings, bounds on numbers.
  static bool Satisfies(const json& v, const json& s) {
    if (v.is_string()) {
      const std::string text = v.get<std::string>();
      if (s.contains("$llmq_not_patterns") && s["$llmq_not_patterns"].is_array())
        for (const json& p : s["$llmq_not_patterns"]) {
          std::unique_ptr<Regex> re;
          if (p.is_string() &&
              Regex::Compile(p.get<std::string>(), Regex::Mode::kSearch, &re).ok() &&
              re->Matches(text))
            return false;
        }
      if (s.contains("$llmq_patterns") && s["$llmq_patterns"].is_array())
        for (const json& p : s["$llmq_patterns"]) {
          std::unique_ptr<Regex> re;
          if (p.is_string() &&
              Regex::Compile(p.get<std::string>(), Regex::Mode::kSearch, &re).ok() &&
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

  // A schema whose only instance is the object or array `v` (as JSON compares them: members by
  // value, numbers by value).
  static json ConstSchema(const json& v) {
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

  Status Enum(const json& values, const json& s, const std::string& ptr, Sym* out) {
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

  Status Ref(const json& s, const std::string& ptr, Sym* out) {
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

  // `s` with its `not` written as keywords the compiler builds: the complement of the negated
  // schema as a union of schemas (Complement), each combined with `s`'s other keywords (Conjoin),
  // an anyOf of those. Refused by name where the complement is not one of those unions (not
  // {pattern}, not {format}, not {multipleOf}, not {uniqueItems}, not {items: S}, ...).
  Status Negate(const json& s, const std::string& ptr, json* out) {
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
      const bool ok =
          some.is_array() && std::all_of(some.begin(), some.end(), [&](const json& d) {
            if (!d.is_object()) return false;
            for (const auto& [k, v] : d.items())
              if (k == "value"
                      ? !(v.is_object() || v.is_boolean())
                      : !strings(v) || (k != "patterns" && k != "not_patterns" && k != "not_names"))
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

  // The names an object `rest` admits may have, where it admits no others (additionalProperties
  // false, no patternProperties, no propertyNames): its listed properties not false. nullopt: any.
  std::optional<std::vector<std::string>> ClosedNames(const json& rest, const std::string& ptr) {
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

  // not {additionalProperties, patternProperties, propertyNames} of `n`, where the object `rest`
  // admits has only names it lists (ClosedNames): one of those names present that a pattern of n
  // matches and whose value fails the pattern's schema, or that n's properties and patterns leave
  // additional and whose value fails additionalProperties, or that propertyNames rules out.
  Status ComplementOfNames(const json& n, const std::vector<std::string>& names,
                           const std::string& np, std::vector<json>* alts) {
    std::vector<std::pair<std::unique_ptr<Regex>, json>> patterns;
    if (n.contains("patternProperties")) {
      if (!n["patternProperties"].is_object())
        return Invalid("patternProperties", np + "/patternProperties", "not an object");
      for (const auto& [pattern, p] : n["patternProperties"].items()) {
        std::unique_ptr<Regex> re;
        if (const Status st = Regex::Compile(pattern, Regex::Mode::kSearch, &re); !st.ok())
          return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)(
              "patternProperties", np + "/patternProperties/" + PointerToken(pattern),
              st.message());
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
      if (!matched && !listed.contains(name) && HasConstraints(extra))
        present(json{{"not", extra}});
      if (!listed.contains(name))
        for (const KeyRule& r : rules)
          if (r.Applies(name) && HasConstraints(r.value)) present(json{{"not", r.value}});
    }
    return Status::Ok();
  }

  // The objects `n`'s additionalProperties, patternProperties and propertyNames reject, where the
  // object may have any name: each a member of some kind of key whose value fails the keyword
  // ($llmq_some, Object): a key n neither lists nor matches by a pattern with a value
  // additionalProperties rejects, a key a pattern matches with a value its schema rejects, a key
  // propertyNames rejects (its complement among strings, written as patterns and names).
  Status ComplementOfAnyNames(const json& n, const std::string& np, std::vector<json>* alts) {
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

  // A pattern the strings of min..max characters match (max < 0: no bound).
  static std::string LengthPattern(int64_t min, int64_t max) {
    return "^[\\s\\S]{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "}$";
  }

  // The pattern of a schema on property names' minLength..maxLength (refused past 1000 as
  // `keyword` at `at`: the key automaton counts them out).
  Status NamesLengthPattern(const json& s, const char* keyword, const std::string& at,
                            std::string* out) {
    int64_t min = 0, max = -1;
    LLMQ_RETURN_IF_ERROR(NonNegative(s, "minLength", at, &min));
    LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxLength", at, &max));
    if (std::max(min, max) > 1000)
      return Refuse(keyword, at, "a length bound above 1000 on the names");
    *out = LengthPattern(min, max);
    return Status::Ok();
  }

  // A pattern exactly the strings `names` match (none: no string).
  static std::string NamesPattern(const std::vector<std::string>& names) {
    std::string alts;
    for (const std::string& n : names) alts += (alts.empty() ? "" : "|") + RegexEscape(n);
    return names.empty() ? "[^\\s\\S]" : "^(?:" + alts + ")$";
  }

  // The six kinds of JSON value but `excluded` (a "type" list; "number" covers integers).
  static json OtherKinds(const std::set<std::string>& excluded) {
    json others = json::array();
    for (const char* t : {"null", "boolean", "object", "array", "number", "string"})
      if (!excluded.count(t)) others.push_back(t);
    return others;
  }

  // A JSON value's type ("number" for every number).
  static const char* KindOf(const json& v) {
    return v.is_null()      ? "null"
           : v.is_boolean() ? "boolean"
           : v.is_object()  ? "object"
           : v.is_array()   ? "array"
           : v.is_string()  ? "string"
                            : "number";
  }

  // The type whose values a keyword constrains (nullptr: all, or several).
  static const char* KeywordType(const std::string& k) {
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

  // The documents `n` rejects, as schemas whose union they are (*alts; none: every document
  // matches `n`), where `rest` (the keywords beside the `not`) tells which types matter.
  // Keyword by keyword, ¬(A ∧ B) = ¬A ∨ ¬B, and a keyword of one type holds for the others:
  // not {minLength: 3} is a string of at most 2 characters, not {required: [a, b]} an object
  // without a or without b, not {properties: {p: S}} an object with p and not S there.
  Status Complement(const json& n0, const json& rest, const std::string& np,
                    std::vector<json>* alts) {
    if (negate_depth_ > 16) return Refuse("not", np, "negations nested more than 16 deep");
    ++negate_depth_;
    const Status st = ComplementOnce(n0, rest, np, alts);
    --negate_depth_;
    return st;
  }

  Status ComplementOnce(const json& n0, const json& rest, const std::string& np,
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
        const auto has = [&](const char* t) {
          return std::count(types.begin(), types.end(), t) > 0;
        };
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
        alts->push_back(
            json{{"type", {"null", "boolean", "object", "array", "string", "integer"}}});
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
        alts->push_back(
            of(type, json{{(min ? "max" : "min") + what, min ? bound - 1 : bound + 1}}));
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
                alts->push_back(
                    of("object",
                       json{{"required", {key}}, {"properties", {{r.get<std::string>(), false}}}}));
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
      } else {
        return refuse("not {" + k + "} is not enforced");
      }
      if (alts->size() > kMaxAlternatives) return refuse("more than 64 alternatives");
    }
    return Status::Ok();
  }

  // Where `a` holds and `n` does not: each of n's complement merged with `a`, into *alts.
  Status ConjoinComplement(const json& a, const json& n, const json& rest, const std::string& np,
                           std::vector<json>* alts) {
    std::vector<json> not_n;
    LLMQ_RETURN_IF_ERROR(Complement(n, rest, np, &not_n));
    for (const json& b : not_n) LLMQ_RETURN_IF_ERROR(AddMerged(a, b, np, alts));
    return Status::Ok();
  }

  // The values other than `values`: the types none of them has, strings other than the strings
  // listed, the other boolean, numbers between the numbers listed (each an open interval).
  Status ComplementOfValues(const json& values, const std::vector<std::string>& rest_types,
                            const std::string& ptr, std::vector<json>* alts) {
    if (!values.is_array()) return Invalid("enum", ptr, "not an array");
    std::set<std::string> kinds;  // the kinds with a value listed
    json strings = json::array();
    std::vector<double> numbers;
    std::set<bool> booleans;
    for (const json& v : values) {
      const std::string kind = KindOf(v);
      if ((kind == "object" || kind == "array") &&
          std::count(rest_types.begin(), rest_types.end(), kind))
        return Refuse("not", ptr, "an " + kind + " among the values excluded");
      kinds.insert(kind);
      if (v.is_string()) strings.push_back(v);
      if (v.is_number()) numbers.push_back(v.get<double>());
      if (v.is_boolean()) booleans.insert(v.get<bool>());
    }
    if (const json others = OtherKinds(kinds); !others.empty())
      alts->push_back(json{{"type", others}});
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

  // allOf [a, b] into *alts, unless it plainly admits nothing.
  Status AddMerged(const json& a, const json& b, const std::string& ptr, std::vector<json>* alts) {
    json m;
    LLMQ_RETURN_IF_ERROR(Merge(a, b, ptr, &m));
    if (!Unsatisfiable(m)) alts->push_back(std::move(m));
    if (alts->size() > kMaxAlternatives) return Refuse("not", ptr, "more than 64 alternatives");
    return Status::Ok();
  }

  // `rest` and one of `alts`: an anyOf of each merged with `rest` (false: none).
  Status Conjoin(const json& rest, const std::vector<json>& alts, const std::string& ptr,
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

  // Whether `s` plainly admits no document: false, no type left, no value left, or each type it
  // admits ruled out by its own bounds (a required property that admits nothing, minimum above
  // maximum, ...). Not knowing is false.
  static bool Unsatisfiable(const json& s) {
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

  // if/then/else: (if and then) or (not if and else), each with the other keywords; then and
  // else without if constrain nothing.
  Status IfThenElse(const json& s, const std::string& ptr, Sym* out) {
    json written;
    LLMQ_RETURN_IF_ERROR(WithoutIf(s, ptr, &written));
    return Value(written, ptr, out);
  }

  // `s` with its if/then/else written as the anyOf of (if and then) and (not if and else) beside
  // s's other keywords (whose properties then come first, in the schema's order); where s has an
  // anyOf already, each case holds them all (false: neither admits a document).
  Status WithoutIf(const json& s, const std::string& ptr, json* out) {
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

  Status AnyOf(const json& s, const std::string& ptr, Sym* out) {
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
      for (size_t i = 0; i < branches.size(); ++i) {
        if (overlaps[i].empty()) continue;
        const std::string bp = ptr + "/oneOf/" + std::to_string(i);
        json cur;
        if (const Status st = Negate(resolved[i], bp, &cur); !st.ok())
          return Refuse("oneOf", ptr + "/oneOf", first + st.message());
        for (const size_t j : overlaps[i]) {
          if (cur == json(false)) break;
          if (cur.is_boolean()) cur = json::object();
          json other, next;
          LLMQ_RETURN_IF_ERROR(
              ResolveFlat(branches[j], ptr + "/oneOf/" + std::to_string(j), &other));
          cur["not"] = other;
          if (const Status st = Negate(cur, bp, &next); !st.ok())
            return Refuse("oneOf", ptr + "/oneOf", first + st.message());
          cur = std::move(next);
        }
        exclusive[i] = std::move(cur);
      }
    }
    const Sym rule = g_.NewRule(ptr + "/" + k);
    for (size_t i = 0; i < branches.size(); ++i) {
      const std::string bp = ptr + "/" + k + "/" + std::to_string(i);
      Sym b;
      if (exclusive[i].has_value()) {
        LLMQ_RETURN_IF_ERROR(Value(*exclusive[i], bp, &b));
      } else if (alone) {
        LLMQ_RETURN_IF_ERROR(Value(branches[i], bp, &b));
      } else {
        // The siblings apply to each branch: {type: object, properties, anyOf: [{required}]}.
        json merged;
        LLMQ_RETURN_IF_ERROR(Merge(rest, branches[i], bp, &merged));
        LLMQ_RETURN_IF_ERROR(Value(merged, bp, &b));
      }
      g_.AddAlternative(rule, {b});
    }
    *out = rule;
    return Status::Ok();
  }

  // The JSON types `s` admits (integer within number), its values when it lists them.
  Status Kinds(const json& s, const std::string& ptr, std::set<std::string>* types,
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
        (*values)->insert(v.dump());
      }
      return Status::Ok();
    }
    *types = allowed;
    if (types->count("integer") && !types->count("number")) types->insert("number");
    return Status::Ok();
  }

  // Whether no document matches both `a` and `b` (resolved schemas), where it can be told
  // simply: no type in common, no value in common, or for objects a property both require with
  // no value in common (a discriminator), or that one requires and the other forbids.
  Status Disjoint(const json& a, const json& b, const std::string& ptr, bool* out) {
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
      *out =
          std::none_of(va->begin(), va->end(), [&](const std::string& v) { return vb->count(v); });
      return Status::Ok();
    }
    if (both != std::set<std::string>{"object"} || !a.is_object() || !b.is_object())
      return Status::Ok();
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

  Status AllOf(const json& s, const std::string& ptr, Sym* out) {
    json merged;
    LLMQ_RETURN_IF_ERROR(Flatten(s, ptr, &merged));
    return Value(merged, ptr, out);
  }

  // Whether `s` flags its minimum or maximum exclusive as draft 4 does (a boolean), so that a
  // bound is not a number alone to compare.
  static bool DraftFourBounds(const json& s) {
    return (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean()) ||
           (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean());
  }

  static bool HasConstraints(const json& s) {
    if (!s.is_object()) return !s.is_boolean() || !s.get<bool>();
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (Enforced().count(k) || Refused().count(k)) return true;
    }
    return false;
  }

  // `b`'s $ref resolved, when it is one (a recursive one stays: Merge refuses it).
  Status Resolve(const json& b, const std::string& ptr, json* out, int hops = 0) {
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

  // The schema that both `a` and `b` describe (allOf), where keyword by keyword it can be told:
  // types intersect, properties merge (a property in both: its schemas merged), required unite,
  // bounds tighten; anything else present in both must be equal.
  Status Merge(const json& a0, const json& b0, const std::string& ptr, json* out) {
    // Recursive schemas (a $ref to itself under a merged property) would merge for ever.
    if (merge_depth_ > 32)
      return Refuse("allOf", ptr, "recursive schemas merged more than 32 deep");
    ++merge_depth_;
    const Status st = MergeOnce(a0, b0, ptr, out);
    --merge_depth_;
    return st;
  }

  Status MergeOnce(const json& a0, const json& b0, const std::string& ptr, json* out) {
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
        if (std::count(tb.begin(), tb.end(), "number") &&
            std::count(ta.begin(), ta.end(), "integer"))
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
      } else if (k == "minLength" || k == "minItems" || k == "minProperties") {
        w = std::max(w.get<double>(), v.get<double>());
      } else if (k == "maxLength" || k == "maxItems" || k == "maxProperties") {
        w = std::min(w.get<double>(), v.get<double>());
      } else if (Annotations().count(k) || !(Enforced().count(k) || Refused().count(k))) {
        continue;  // the first one's annotation stays
      } else {
        return Refuse("allOf", ptr, "\"" + k + "\" differs between the schemas it combines");
      }
    }
    *out = std::move(m);
    return Status::Ok();
  }

  // allOf [{anyOf: w}, {anyOf: v}] as one anyOf: each w[i] and v[j] (the pairs that plainly admit
  // nothing dropped, the same pair once). oneOf the same way, every pair kept: exactly one of w
  // and exactly one of v is exactly one pair, as the pairs that match number (w's that match) x
  // (v's that match). A pair that does not merge here stays an allOf, merged when compiled.
  Status Distribute(const json& w, const json& v, bool one, const std::string& ptr, json* out) {
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

  // Whether `s` lists items by position (prefixItems, or draft 7's `items` list).
  static bool Tuple(const json& s) {
    return s.contains("prefixItems") || (s.contains("items") && s["items"].is_array());
  }

  // `s`'s items: those it lists by position, and the schema of the rest (true: any).
  static void Items(const json& s, std::vector<json>* prefix, json* rest) {
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

  // The items of allOf [a, b] into *m, as prefixItems and items: each position both sides'
  // schemas for it (a side's rest past its own list), the rest both rests.
  Status MergeItems(const json& a, const json& b, const std::string& ptr, json* m) {
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

  // $llmq_key_rules (what allOf writes where one part's additionalProperties meets another
  // part's patterns, MergeProperties): every key the object does not list in `properties` that
  // none of `not_patterns` matches has a value that meets `value`.
  struct KeyRule {
    std::vector<std::string> not_patterns;
    json value = true;
    std::vector<std::unique_ptr<Regex>> not_re;  // each on the name's text
    bool Applies(const std::string& name) const {
      return std::none_of(not_re.begin(), not_re.end(),
                          [&](const auto& r) { return r->Matches(name); });
    }
  };

  Status KeyRulesOf(const json& s, const std::string& ptr, std::vector<KeyRule>* out) {
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
          return (st.code() == Status::Code::kUnsupported ? Refuse : Invalid)("patternProperties",
                                                                              at, st.message());
        rule.not_patterns.push_back(p.get<std::string>());
        rule.not_re.push_back(std::move(re));
      }
      out->push_back(std::move(rule));
    }
    return Status::Ok();
  }

  // An object schema's terms for the members it does not list in `properties`: its
  // patternProperties, additionalProperties and key rules, each pattern on a name's text.
  // Its fields point into the schema (which outlives it).
  struct ObjectKeys {
    const json* props = &EmptyObject();
    const json* patterns = &EmptyObject();  // patternProperties
    std::vector<std::unique_ptr<Regex>> re;
    const json* extra = &True();  // additionalProperties
    std::vector<KeyRule> rules;
    // What it asks of a member named `name` it does not list, beside the schemas of the patterns
    // that match it (those apply to listed names too): additionalProperties where none matches,
    // and each key rule that applies.
    std::vector<const json*> Other(const std::string& name) {
      std::vector<const json*> out;
      if (std::none_of(re.begin(), re.end(), [&](const auto& r) { return r->Matches(name); }))
        out.push_back(extra);
      for (const KeyRule& r : rules)
        if (r.Applies(name)) out.push_back(&r.value);
      return out;
    }
  };

  static const json& EmptyObject() {
    static const json kEmpty = json::object();
    return kEmpty;
  }
  static const json& True() {
    static const json kTrue = true;
    return kTrue;
  }

  Status KeysOf(const json& x, const std::string& ptr, ObjectKeys* out) {
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
              "patternProperties", ptr + "/patternProperties/" + PointerToken(pattern),
              st.message());
        out->re.push_back(std::move(re));
      }
    }
    return KeyRulesOf(x, ptr, &out->rules);
  }

  // The members of allOf [a, b] into *m. A name either lists: its schemas there, and what the
  // other asks of it unlisted (ObjectKeys::Other; false: not allowed), a's names first.
  // patternProperties: both sides' (a pattern in both: its schemas merged); they apply to the
  // listed names as they did. A side's additionalProperties: the object's, where its patterns
  // are all the object's; else a key rule (the keys the object does not list that none of its
  // patterns match). An object that admits no key it does not list is written closed: the
  // patterns put into the listed names they match, additionalProperties false.
  Status MergeProperties(const json& a, const json& b, const std::string& ptr, json* m) {
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

  Status Flatten(const json& s, const std::string& ptr, json* out) {
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

  // An object: the listed properties in order (the required ones present), then any others the
  // schema allows; what dependencies and min/maxProperties ask of the members (ObjectRules).
  Status Object(const json& s, const std::string& ptr, Sym* out) {
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
    const json& extra_schema =
        s.contains("additionalProperties") ? s["additionalProperties"] : kTrue;
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
      spec.patterns.insert(spec.patterns.end(), key_names.patterns.begin(),
                           key_names.patterns.end());
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
      if (Status st = KeyPatternAutomaton::Build(spec.key_except, spec.patterns, 0, &none);
          !st.ok())
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
        if (std::any_of(ruled.begin(), ruled.end(),
                        [](const json* v) { return *v == json(false); }))
          continue;
        if (subset != 0)
          if (Status st =
                  KeyPatternAutomaton::Build(spec.key_except, spec.patterns, subset, &built);
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
    const ObjectRules::OtherWitness witness = [&](uint32_t which,
                                                  std::optional<Sym>* out) -> Status {
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
      for (const char* k : {"dependentSchemas", "dependentRequired", "dependencies",
                            "minProperties", "maxProperties"})
        if (s.contains(k)) return Refuse(k, ptr + "/" + k, st.message());
      return Refuse("properties", ptr + "/properties", st.message());
    }
    return Status::Ok();
  }

  // What an object's dependencies ask (draft 4 to 7's `dependencies`: a list of names or a
  // schema; 2019-09's dependentRequired and dependentSchemas): clauses over the presence of names
  // (a name absent where no key may take it), and schemas a property's value must also match
  // where another is present.
  struct Dependencies {
    std::vector<std::vector<std::pair<std::string, bool>>> clauses;  // (name, present) literals
    // (key, name, schema): where `key` is present, `name`'s value also matches `schema`.
    std::vector<std::tuple<std::string, std::string, const json*>> values;
    std::vector<std::string> names;  // every name mentioned, in order
    std::deque<json> held;           // the schemas `values` points into that were written here
    void Mention(const std::string& name) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    void Add(std::vector<std::pair<std::string, bool>> clause) {
      for (const auto& [name, present] : clause) Mention(name);
      clauses.push_back(std::move(clause));
    }
  };

  Status DependenciesOf(const json& s, const std::string& ptr, Dependencies* out) {
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

  // `b` resolved (Resolve) and its allOf merged (Flatten): one schema object to read keywords of.
  Status ResolveFlat(const json& b, const std::string& ptr, json* out) {
    LLMQ_RETURN_IF_ERROR(Resolve(b, ptr, out));
    if (!out->is_object() || !out->contains("allOf")) return Status::Ok();
    json flat;
    LLMQ_RETURN_IF_ERROR(Flatten(*out, ptr, &flat));
    *out = std::move(flat);
    return Status::Ok();
  }

  // The schema an object must also match where `key` is present: `required`, properties' values
  // (false: absent), `type`, and anyOf/oneOf of branches that only require or forbid names.
  Status DependentSchema(const std::string& key, const json& dep, const char* k,
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
                disjoint = disjoint || std::count(other.begin(), other.end(),
                                                  std::make_pair(name, !present)) > 0;
                clause.emplace_back(name, !present);
              }
            if (!disjoint) out->Add(std::move(clause));
          }
    }
    return Status::Ok();
  }

  // The literals a schema object asks of an object's names where `key` is present (`required`:
  // present; a property false: absent; a `type` without object: `key` absent, which under `key`
  // is false: no object). With `values`, a property's schema is a value `key` asks (recorded in
  // `out`) and anyOf/oneOf are the caller's; without, anything beyond literals is refused.
  Status Presence(const std::string& key, const json& r, const char* k, const std::string& at,
                  bool values, std::vector<std::pair<std::string, bool>>* lits, Dependencies* out) {
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

  // An object's propertyNames: the names a key may have.
  struct KeyNames {
    std::optional<std::set<std::string>> only;  // enum/const (a type without string: none)
    std::vector<std::string> patterns;          // pattern, and the lengths as one
    std::vector<std::unique_ptr<Regex>> re;     // each on a quoted JSON string
    bool Allows(const std::string& name) {
      if (only.has_value() && !only->count(name)) return false;
      for (const auto& r : re)
        if (!r->Matches(JsonQuote(name))) return false;
      return true;
    }
  };

  // propertyNames: `type`, `enum`/`const` of strings, `pattern` and minLength/maxLength (as a
  // pattern; after $ref and allOf); anything else on the names is refused by name.
  Status PropertyNames(const json& s, const std::string& ptr, KeyNames* out) {
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

  // $llmq_some (what Complement writes for not {additionalProperties}, not {patternProperties}
  // and not {propertyNames} where an object may have any name): the object has a member whose
  // key every one of `patterns` matches, none of `not_patterns` does and that is none of
  // `not_names`, and whose value meets `value`.
  struct Some {
    std::vector<std::string> patterns, not_patterns, not_names;
    json value = true;
    std::vector<std::unique_ptr<Regex>> re, not_re;  // each on the name's text
    // Whether a key named `name` is of the kind (not_names are one of not_patterns).
    bool Names(const std::string& name) const {
      for (const auto& r : re)
        if (!r->Matches(name)) return false;
      for (const auto& r : not_re)
        if (r->Matches(name)) return false;
      return true;
    }
  };

  // Each of $llmq_some's members into *out (more than ObjectRules::kMaxWitnesses: refused).
  Status SomesOf(const json& s, const std::string& ptr, std::vector<Some>* out) {
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

  Status SomeOf(const json& d, const std::string& ptr, Some* out) {
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

  // An object's patternProperties: its patterns (in the schema's order) and their schemas.
  struct Patterns {
    std::vector<std::string> patterns;
    std::vector<json> schemas;
    std::vector<std::string> pointers;       // each schema's
    std::vector<std::unique_ptr<Regex>> re;  // each pattern on a quoted JSON string
    std::map<uint64_t, Sym> values;          // by the set of patterns a key matches
    // The patterns that match the name `name` (a bit each).
    uint64_t Matching(const std::string& name) {
      uint64_t bits = 0;
      const std::string quoted = JsonQuote(name);
      for (size_t i = 0; i < re.size(); ++i)
        if (re[i]->Matches(quoted)) bits |= uint64_t{1} << i;
      return bits;
    }
  };

  Status PatternProperties(const json& s, const std::string& ptr, Patterns* out) {
    if (!s.contains("patternProperties")) return Status::Ok();
    const std::string pp = ptr + "/patternProperties";
    if (!s["patternProperties"].is_object())
      return Invalid("patternProperties", pp, "not an object");
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

  // The value of a key that exactly the patterns `subset` match: all their schemas.
  Status PatternValue(Patterns* pat, uint64_t subset, const std::string& ptr, Sym* out) {
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

  // The value every schema of `parts` accepts: those without constraints and repeats left out
  // (a listed property and the pattern that matches it often name one $ref: its rule is shared),
  // then the one left, or their allOf.
  Status AllOfValue(const std::vector<const json*>& parts, const std::string& ptr, Sym* out) {
    json all = json::array();
    for (const json* p : parts)
      if (HasConstraints(*p) && std::find(all.begin(), all.end(), *p) == all.end())
        all.push_back(*p);
    if (all.empty()) {
      *out = Any();
      return Status::Ok();
    }
    if (all.size() == 1) return Value(all[0], ptr, out);
    return Value(json{{"allOf", all}}, ptr, out);
  }

  // A string lexeme for any name but `listed` (KeyExceptAutomaton): the JSON text of the name is
  // compared, and a name has one spelling there (only the escapes JSON requires), so no listed
  // name passes for another.
  Sym OtherKey(const std::set<std::string>& listed) {
    if (listed.empty()) return String(0, -1);
    Grammar::LexemeSpec spec;
    spec.is_key_except = true;
    for (const std::string& name : listed) spec.key_except.push_back(KeyText(name));
    return g_.Lexeme(spec);
  }

  // A name's JSON text between its quotes (JsonQuote's), as key lexemes compare names.
  static std::string KeyText(const std::string& name) {
    const std::string q = JsonQuote(name);
    return q.substr(1, q.size() - 2);
  }

  // An array: prefixItems (or a draft-7 `items` list), then `items` (or additionalItems), with
  // minItems..maxItems elements.
  // An array: its prefix items, then the items schema's (or none), counted where minItems,
  // maxItems or the prefix ask; under `contains`, also how many items so far match it (up to
  // minContains, or past maxContains: the items that do match it and those that do not are then
  // told apart, each item's schema with contains or with its complement).
  Status Array(const json& s, const std::string& ptr, Sym* out) {
    std::vector<Sym> prefix;
    std::optional<Sym> rest = Any();
    std::vector<json> prefix_schemas;  // under contains: each item's schema
    json rest_schema = true;
    const auto each = [&](const json& list, const std::string& p) -> Status {
      for (size_t i = 0; i < list.size(); ++i) {
        Sym v;
        LLMQ_RETURN_IF_ERROR(Value(list[i], p + "/" + std::to_string(i), &v));
        prefix.push_back(v);
        prefix_schemas.push_back(list[i]);
      }
      return Status::Ok();
    };
    const auto tail = [&](const char* k) -> Status {
      if (!s.contains(k)) return Status::Ok();
      rest_schema = s[k];
      if (s[k] == json(false)) {
        rest.reset();
        return Status::Ok();
      }
      Sym v;
      LLMQ_RETURN_IF_ERROR(Value(s[k], ptr + "/" + k, &v));
      rest = v;
      return Status::Ok();
    };
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array())
        return Invalid("prefixItems", ptr + "/prefixItems", "not an array");
      LLMQ_RETURN_IF_ERROR(each(s["prefixItems"], ptr + "/prefixItems"));
      LLMQ_RETURN_IF_ERROR(tail("items"));
    } else if (s.contains("items") && s["items"].is_array()) {
      LLMQ_RETURN_IF_ERROR(each(s["items"], ptr + "/items"));
      LLMQ_RETURN_IF_ERROR(tail("additionalItems"));
    } else {
      LLMQ_RETURN_IF_ERROR(tail("items"));
    }
    int64_t min = 0, max = -1;
    LLMQ_RETURN_IF_ERROR(NonNegative(s, "minItems", ptr, &min));
    LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxItems", ptr, &max));
    const auto k = static_cast<int64_t>(prefix.size());
    if (!rest.has_value()) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && max < min) {
      *out = Nothing();
      return Status::Ok();
    }
    constexpr int64_t kMaxCounted = 1000;
    if (std::max(min, max) > kMaxCounted + k)
      return Refuse(max > kMaxCounted + k ? "maxItems" : "minItems",
                    ptr + (max > kMaxCounted + k ? "/maxItems" : "/minItems"),
                    "a bound above " + std::to_string(kMaxCounted) + " items");
    if (s.contains("$llmq_contains") || (s.contains("contains") && !no_contains_)) {
      Counted c;
      LLMQ_RETURN_IF_ERROR(ContainsOf(s, ptr, &c));
      return Contains(c, ptr, prefix_schemas, rest_schema, min, max, out);
    }
    // after[n]: what follows the n-th element (n >= 1): the end, or a comma and element n+1.
    const auto elem = [&](int64_t n) {
      return n <= k ? prefix[static_cast<size_t>(n - 1)] : *rest;
    };
    const int64_t last = max >= 0 ? max : std::max(min, k) + 1;  // after[last] loops if unbounded
    std::vector<Sym> after(static_cast<size_t>(last + 1));
    for (int64_t n = 1; n <= last; ++n)
      after[static_cast<size_t>(n)] = g_.NewRule(ptr + "/after" + std::to_string(n));
    for (int64_t n = 1; n <= last; ++n) {
      const Sym a = after[static_cast<size_t>(n)];
      if (n >= min) g_.AddAlternative(a, {});
      if (max < 0 && n == last) {
        g_.AddAlternative(a, {comma_, *rest, a});  // beyond the prefix and minItems: a loop
      } else if (n < last && (n < k || rest.has_value())) {
        g_.AddAlternative(a, {comma_, elem(n + 1), after[static_cast<size_t>(n + 1)]});
      }
    }
    const Sym arr = g_.NewRule(ptr.empty() ? "/array" : ptr + "/array");
    if (min == 0) g_.AddAlternative(arr, {lbrack_, rbrack_});
    if (last >= 1 && (k >= 1 || rest.has_value()))
      g_.AddAlternative(arr, {lbrack_, elem(1), after[1], rbrack_});
    *out = arr;
    return Status::Ok();
  }

  // Array's with `contains`: rules after[n][c], n items written and c of them matching contains
  // (counted up to minContains, or with maxContains up to one past it), whose end needs
  // n >= minItems and minContains <= c (<= maxContains). Without maxContains an item may be read
  // as matching contains or as just an item; with it, as matching or as not matching.
  struct Counted {  // contains, minContains, maxContains (-1: none)
    json schema;
    int64_t min = 1, max = -1;
  };
  // An array schema's `contains` and its counts (2019-09 on), or what Negate wrote in their place.
  Status ContainsOf(const json& s, const std::string& ptr, Counted* out) {
    const bool own = s.contains("$llmq_contains");
    if (own && s.contains("contains") && !no_contains_)
      return Refuse("contains", ptr + "/contains", "beside not {items}");
    out->schema = own ? s["$llmq_contains"] : s["contains"];
    if (own || !legacy_ref_) {  // minContains and maxContains are keywords from 2019-09 on
      const char* lo = own ? "$llmq_min_contains" : "minContains";
      const char* hi = own ? "$llmq_max_contains" : "maxContains";
      LLMQ_RETURN_IF_ERROR(NonNegative(s, lo, ptr, &out->min));
      LLMQ_RETURN_IF_ERROR(NonNegative(s, hi, ptr, &out->max));
      if (!s.contains(lo)) out->min = 1;
    }
    return Status::Ok();
  }

  Status Contains(const Counted& counted, const std::string& ptr, const std::vector<json>& prefix,
                  const json& rest, int64_t min, int64_t max, Sym* out) {
    const json& c = counted.schema;
    const int64_t min_c = counted.min, max_c = counted.max;
    if (max_c >= 0 && max_c < min_c) return Value(json(false), ptr, out);
    const bool exact = max_c >= 0;
    const int64_t cap = exact ? max_c : min_c;
    const auto k = static_cast<int64_t>(prefix.size());
    const int64_t last = max >= 0 ? max : std::max({min, k, cap}) + 1;  // loops there if unbounded
    if ((last + 1) * (cap + 1) > 4096)
      return Refuse("contains", ptr + "/contains",
                    "more than 4096 counts of items and of those matching it");
    // The n-th item's symbols: matching contains, and not matching it (exact) or any.
    std::map<int64_t, std::pair<Sym, Sym>> items;  // by min(n, k + 1)
    const auto item = [&](int64_t n, std::pair<Sym, Sym>* pair) -> Status {
      const int64_t key = std::min(n, k + 1);
      if (const auto it = items.find(key); it != items.end()) {
        *pair = it->second;
        return Status::Ok();
      }
      const json& base = n <= k ? prefix[static_cast<size_t>(n - 1)] : rest;
      const std::string at =
          n <= k ? ptr + "/prefixItems/" + std::to_string(n - 1) : ptr + "/items";
      const json yes = json{{"allOf", json::array({base, c})}};
      const json no = exact ? json{{"allOf", json::array({base, json{{"not", c}}})}} : base;
      LLMQ_RETURN_IF_ERROR(Value(yes, at, &pair->first));
      LLMQ_RETURN_IF_ERROR(Value(no, at, &pair->second));
      items.emplace(key, *pair);
      return Status::Ok();
    };
    std::vector<std::vector<Sym>> after(static_cast<size_t>(last + 1));
    for (int64_t n = 0; n <= last; ++n)
      for (int64_t cnt = 0; cnt <= cap; ++cnt)
        after[static_cast<size_t>(n)].push_back(
            g_.NewRule(ptr + "/after" + std::to_string(n) + "/" + std::to_string(cnt)));
    const bool more = rest != json(false);  // items past the prefix
    for (int64_t n = 0; n <= last; ++n)
      for (int64_t cnt = 0; cnt <= cap; ++cnt) {
        const Sym a = after[static_cast<size_t>(n)][static_cast<size_t>(cnt)];
        if (n >= min && cnt >= min_c) g_.AddAlternative(a, {});
        const bool loop = max < 0 && n == last;
        if (!loop && (n == last || (n >= k && !more))) continue;
        std::pair<Sym, Sym> it;
        LLMQ_RETURN_IF_ERROR(item(n + 1, &it));
        const Sym next_matching = after[static_cast<size_t>(loop ? n : n + 1)]
                                       [static_cast<size_t>(std::min(cnt + 1, cap))];
        const Sym next_other =
            after[static_cast<size_t>(loop ? n : n + 1)][static_cast<size_t>(cnt)];
        std::vector<Sym> lead;
        if (n > 0) lead.push_back(comma_);
        if (!(exact && cnt == max_c)) {  // past maxContains: no way on
          std::vector<Sym> alt = lead;
          alt.insert(alt.end(), {it.first, next_matching});
          g_.AddAlternative(a, alt);
        }
        std::vector<Sym> alt = lead;
        alt.insert(alt.end(), {it.second, next_other});
        g_.AddAlternative(a, alt);
      }
    const Sym arr = g_.NewRule(ptr.empty() ? "/array" : ptr + "/array");
    g_.AddAlternative(arr, {lbrack_, after[0][0], rbrack_});
    *out = arr;
    return Status::Ok();
  }

  const json& root_;
  const JsonSchemaOptions& opt_;
  Grammar& g_;
  Sym lbrace_, rbrace_, lbrack_, rbrack_, comma_, colon_;
  std::optional<Sym> any_;
  std::map<std::string, Sym> refs_;  // by $ref: its rule (made before its body: recursion)
  int depth_ = 0;
  int merge_depth_ = 0;
  int negate_depth_ = 0;
  // MergeOnce calls: MaskBench's schemas take at most 2,156 (2026-12-05); a oneOf of eleven
  // overlapping objects took millions (and 24 GB) before its alternatives were bounded.
  int64_t merges_ = 0;
  static constexpr int64_t kMaxMerges = 20000;
  static constexpr size_t kMaxPairs = 1024;       // Distribute's pairs, each one merged
  static constexpr size_t kMaxWritten = 1 << 20;  // bytes of one conditional written out
  static constexpr size_t kMaxAlternatives = 64;  // of a negation written as anyOf
  bool legacy_ref_ = false;       // $schema is draft 4 to 7: $ref's siblings are ignored
  bool no_conditionals_ = false;  // $schema is before draft 7: if/then/else are not keywords
  bool no_contains_ = false;      // before draft 6: contains is not a keyword
};

}  // namespace

Status CompileJsonSchema(const json& schema, Grammar* out, const JsonSchemaOptions& opt) {
  Grammar g;
  Compiler c(schema, opt, &g);
  Sym start;
  LLMQ_RETURN_IF_ERROR(c.Value(schema, "", &start));
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
  Compiler c(root, opt, &g);
  g.set_start(c.AnyObject());
  if (!g.Validate().ok()) std::abort();  // a fixed grammar: valid by construction
  return g;
}

}  // namespace llmq
