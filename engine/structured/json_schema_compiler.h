// The JSON Schema compiler's inside; its contract is engine/structured/json_schema.h. One
// Compiler per schema writes Grammar rules as it walks the schema, its members in five rooms:
//   json_schema.cpp         the walk (Value, ValueOf), $ref, strings, numbers, enum/const
//   json_schema_not.cpp     not: the complement of a schema as a union of schemas (Negate)
//   json_schema_allof.cpp   allOf, anyOf/oneOf, if/then/else: schemas merged (Merge), disjointness
//   json_schema_object.cpp  objects: properties, patternProperties, dependencies, propertyNames
//   json_schema_array.cpp   arrays: items, prefixItems, contains
// Only those files include it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/regex.h"

namespace llmq::schema {

using json = nlohmann::ordered_json;
using Sym = Grammar::Symbol;

// A JSON Pointer's reference token: '~' as ~0, '/' as ~1.
std::string PointerToken(const std::string& s);
// `keyword "K" at "/pointer"`.
std::string Where(const std::string& keyword, const std::string& pointer);
// Unsupported (a keyword not enforced) and InvalidArgument (not a schema), naming both.
Status Refuse(const std::string& keyword, const std::string& pointer, const std::string& why);
Status Invalid(const std::string& keyword, const std::string& pointer, const std::string& why);
// Keywords that only annotate: no constraint to enforce.
const std::set<std::string>& Annotations();
// Every keyword the compiler enforces (the others JSON Schema defines are refused).
const std::set<std::string>& Enforced();
// What JSON Schema defines and this compiler does not (yet) enforce: refused by name.
const std::set<std::string>& Refused();
// One character of a JSON string's text: unescaped, or an escape; a surrogate escape only as a
// pair (StringLengthAutomaton's text, unbounded).
extern const std::string kChar;
extern const char* const kTypes[7];  // JSON Schema's type names

class Compiler {
 public:
  Compiler(const json& root, const JsonSchemaOptions& opt, Grammar* g);
  // The rule for the value `s` at `ptr` must match.
  Status Value(const json& s, const std::string& ptr, Sym* out);
  Sym Any();
  Sym AnyObject();
  // Where the documents are fewer than the schema's (CompileJsonSchema's `restrictions`).
  const std::vector<std::string>& restrictions() const { return restrictions_; }

 private:
  Sym Nothing();
  // A JSON string lexeme of min..max characters (max < 0: unbounded).
  Sym String(int64_t min, int64_t max);
  Sym Number(bool integer);
  Status ValueOf(const json& s0, const std::string& ptr, Sym* out);
  // The types a schema admits: `type` (a name or a list), else all of them; "number" covers
  // "integer".
  Status Types(const json& s, const std::string& ptr, std::vector<std::string>* out);
  // The types a schema may admit, as Types names them, looking further than `type`: through
  // $ref and allOf, into enum/const (the kinds of the values) and anyOf/oneOf (the union of the
  // branches'). More than it admits where it cannot tell (past 8 levels, a reference that does
  // not resolve): what the complement of a keyword of another type needs (KeywordType).
  std::vector<std::string> Kinds(const json& s0, const std::string& ptr, int depth = 0);
  Status NonNegative(const json& s, const char* k, const std::string& ptr, int64_t* v);
  Status StringOf(const json& s, const std::string& ptr, Sym* out);
  // A string none of $llmq_not_patterns matches and none of $llmq_not_strings is, that `pattern`,
  // each of $llmq_patterns and the format (its regex anchored: a pattern too) match and of
  // minLength..maxLength characters (a pattern too), as a key of patternProperties
  // is told apart (KeyPatternAutomaton: the set of patterns that match it is exactly the
  // positive ones).
  Status NotPatterns(const json& s, const std::string& ptr, Sym* out);
  // A string `re` (the lexeme `spec`'s regex) matches, of min..max characters: nothing where no
  // such string exists.
  Status BoundedString(Grammar::LexemeSpec spec, Regex* re, int64_t min, int64_t max,
                       const char* length, const std::string& ptr, Sym* out);
  // The texts of numbers with a fraction (not {type: integer}) whose double a validator does not
  // take for an integer either: written with the fraction (a nonzero digit in it), at most 15
  // significant digits to its last nonzero one (M < 2^53, so the value, at least 10^-F from an
  // integer, is farther than half a unit in the last place from one), an exponent only where it
  // cannot make an integer of it (negative, down to -280 past at most 15 leading zeros: no
  // underflow to 0; or zero), or an integer mantissa ending in a nonzero digit times a negative
  // power of ten (1e-07, Python's spelling). Not taken: 1.25e1, 125e-1, 10e-1 and fractions of
  // more digits (12345678901234567890.5 is an integer as a double). JSON Schema's kind is the
  // value's; a grammar's is the spelling, as for integers.
  static const std::string& FractionRegex();
  // A number (or an integer) within minimum/maximum and their exclusive forms (draft 4's
  // booleans, 6's numbers).
  Status NumberOf(const json& s, bool integer, const std::string& ptr, Sym* out);
  // Whether a scalar `v` of enum/const meets the keywords beside it (its type is checked apart):
  // lengths, pattern and format on strings, bounds on numbers.
  static bool Satisfies(const json& v, const json& s);
  // A schema whose only instance is the object or array `v` (as JSON compares them: members by
  // value, numbers by value).
  static json ConstSchema(const json& v);
  // Whether `a` and `b` are one value as JSON Schema compares them (enum, const, uniqueItems):
  // numbers by value (1 and 1.0), objects' members in any order.
  static bool SameValue(const json& a, const json& b);
  // The values an object with enum and/or const admits (both: those of enum equal to const);
  // the enum as written where it is no array (the caller says so).
  static json EnumValues(const json& s);
  Status Enum(const json& values, const json& s, const std::string& ptr, Sym* out);
  Status Ref(const json& s, const std::string& ptr, Sym* out);

  // ---- json_schema_not.cpp: not
  // `s` with its `not` written as keywords the compiler builds: the complement of the negated
  // schema as a union of schemas (Complement), each combined with `s`'s other keywords (Conjoin),
  // an anyOf of those. Refused by name where the complement is not one of those unions (not
  // {pattern}, not {format}, not {multipleOf}, not {uniqueItems}, not {items: S}, ...).
  Status Negate(const json& s, const std::string& ptr, json* out);
  // The names an object `rest` admits may have, where it admits no others (additionalProperties
  // false, no patternProperties, no propertyNames): its listed properties not false. nullopt: any.
  std::optional<std::vector<std::string>> ClosedNames(const json& rest, const std::string& ptr);
  // not {additionalProperties, patternProperties, propertyNames} of `n`, where the object `rest`
  // admits has only names it lists (ClosedNames): one of those names present that a pattern of n
  // matches and whose value fails the pattern's schema, or that n's properties and patterns leave
  // additional and whose value fails additionalProperties, or that propertyNames rules out.
  Status ComplementOfNames(const json& n, const std::vector<std::string>& names,
                           const std::string& np, std::vector<json>* alts);
  // The objects `n`'s additionalProperties, patternProperties and propertyNames reject, where the
  // object may have any name: each a member of some kind of key whose value fails the keyword
  // ($llmq_some, Object): a key n neither lists nor matches by a pattern with a value
  // additionalProperties rejects, a key a pattern matches with a value its schema rejects, a key
  // propertyNames rejects (its complement among strings, written as patterns and names).
  Status ComplementOfAnyNames(const json& n, const std::string& np, std::vector<json>* alts);
  // A pattern the strings of min..max characters match (max < 0: no bound).
  static std::string LengthPattern(int64_t min, int64_t max);
  // The pattern of a schema on property names' minLength..maxLength (refused past 1000 as
  // `keyword` at `at`: the key automaton counts them out).
  Status NamesLengthPattern(const json& s, const char* keyword, const std::string& at,
                            std::string* out);
  // A pattern exactly the strings `names` match (none: no string).
  static std::string NamesPattern(const std::vector<std::string>& names);
  // The six kinds of JSON value but `excluded` (a "type" list; "number" covers integers).
  static json OtherKinds(const std::set<std::string>& excluded);
  // A JSON value's type ("number" for every number).
  static const char* KindOf(const json& v);
  // The type whose values a keyword constrains (nullptr: all, or several).
  static const char* KeywordType(const std::string& k);
  // The documents `n` rejects, as schemas whose union they are (*alts; none: every document
  // matches `n`), where `rest` (the keywords beside the `not`) tells which types matter.
  // Keyword by keyword, ¬(A ∧ B) = ¬A ∨ ¬B, and a keyword of one type holds for the others:
  // not {minLength: 3} is a string of at most 2 characters, not {required: [a, b]} an object
  // without a or without b, not {properties: {p: S}} an object with p and not S there.
  Status Complement(const json& n0, const json& rest, const std::string& np,
                    std::vector<json>* alts);
  Status ComplementOnce(const json& n0, const json& rest, const std::string& np,
                        std::vector<json>* alts);
  // Where `a` holds and `n` does not: each of n's complement merged with `a`, into *alts.
  Status ConjoinComplement(const json& a, const json& n, const json& rest, const std::string& np,
                           std::vector<json>* alts);
  // The values other than `values`: the types none of them has, strings other than the strings
  // listed, the other boolean, numbers between the numbers listed (each an open interval).
  Status ComplementOfValues(const json& values, const std::vector<std::string>& rest_types,
                            const std::string& ptr, std::vector<json>* alts);
  // The ways an object or array differs from the value `v` (JSON Schema's equality: numbers by
  // value, members in any order), whose union is every other value of its kind: a member more,
  // one of v's missing, or one of another value; fewer items, more, or one of another value.
  static std::vector<json> WaysToDiffer(const json& v);
  // allOf [a, b] into *alts, unless it plainly admits nothing.
  Status AddMerged(const json& a, const json& b, const std::string& ptr, std::vector<json>* alts);
  // `rest` and one of `alts`: an anyOf of each merged with `rest` (false: none).
  Status Conjoin(const json& rest, const std::vector<json>& alts, const std::string& ptr,
                 json* out);

  // ---- json_schema_allof.cpp: allOf, anyOf/oneOf, if/then/else: merging schemas
  // Whether `s` plainly admits no document: false, no type left, no value left, or each type it
  // admits ruled out by its own bounds (a required property that admits nothing, minimum above
  // maximum, ...). Not knowing is false.
  static bool Unsatisfiable(const json& s);
  // if/then/else: (if and then) or (not if and else), each with the other keywords; then and
  // else without if constrain nothing.
  Status IfThenElse(const json& s, const std::string& ptr, Sym* out);
  // `s` with its if/then/else written as the anyOf of (if and then) and (not if and else) beside
  // s's other keywords (whose properties then come first, in the schema's order); where s has an
  // anyOf already, each case holds them all (false: neither admits a document).
  Status WithoutIf(const json& s, const std::string& ptr, json* out);
  Status AnyOf(const json& s, const std::string& ptr, Sym* out);
  // A property every one of the resolved oneOf `branches` lists with values (enum, const) no
  // other branch's has, and not all of them require: oneOf's objects with it are told apart by
  // it alone. Where telling the branches apart exactly is refused (more than 64 alternatives),
  // oneOf is enforced on those objects: each branch with the discriminator required (a
  // restriction, documented in json_schema.h: an object without it is not generated).
  bool Discriminator(const std::vector<json>& branches, std::string* out);
  // `v` written so that values JSON Schema takes for one are one text (1 and 1.0, members in any
  // order): what Kinds collects.
  static std::string Canonical(const json& v);
  // The kinds of value (null, boolean, object, array, number, string) the resolved schema `s`
  // admits whole: of its types, with no keyword on that kind (an integer type is not every
  // number; enum, anyOf, not, ... constrain every kind).
  std::set<std::string> FreeKinds(const json& s);
  // A local $ref's target in the document (null: none, or not local).
  const json* Target(const json& s) const;
  // The schemas every document `s` admits meets: itself, its $ref's target, its allOf's parts,
  // theirs (8 deep; under drafts 4 to 7 a $ref's siblings, allOf among them, are ignored).
  void Within(const json& s, int depth, std::vector<const json*>* out) const;
  // `other` (resolved, flat) without the parts every document of `mine` meets (a part of its
  // allOf among mine's Within, or itself, through $ref): where `mine` holds, not `other` is the
  // complement of the rest alone. oneOf branches that share a base ({allOf: [{$ref: base},
  // {required: [a]}]} and the same with b) are then told apart without the base's complement
  // written out (each of its cases merged with `mine` to nothing).
  Status Unshared(const std::vector<const json*>& mine, const json& other, const std::string& ptr,
                  json* out);
  // The JSON types `s` admits (integer within number), its values when it lists them.
  Status Kinds(const json& s, const std::string& ptr, std::set<std::string>* types,
               std::optional<std::set<std::string>>* values);
  // Whether no document matches both `a` and `b` (resolved schemas), where it can be told
  // simply: no type in common, no value in common, or for objects a property both require with
  // no value in common (a discriminator), or that one requires and the other forbids.
  Status Disjoint(const json& a, const json& b, const std::string& ptr, bool* out);
  // The rule of a schema allOf, anyOf or oneOf merged: one met again (a recursive one: a
  // property's allOf of the $ref around it) is the rule made for it the first time, which
  // exists before its body as a $ref's does.
  Status MergedValue(const json& merged, const std::string& ptr, Sym* out);
  Status AllOf(const json& s, const std::string& ptr, Sym* out);

  // ---- json_schema.cpp: the walk, $ref, strings, numbers, enum/const
  // Whether `s` flags its minimum or maximum exclusive as draft 4 does (a boolean), so that a
  // bound is not a number alone to compare.
  static bool DraftFourBounds(const json& s);
  static bool HasConstraints(const json& s);
  // `b`'s $ref resolved, when it is one (a recursive one stays: Merge refuses it).
  Status Resolve(const json& b, const std::string& ptr, json* out, int hops = 0);

  // ---- json_schema_allof.cpp: allOf, anyOf/oneOf, if/then/else: merging schemas
  // The schema that both `a` and `b` describe (allOf), where keyword by keyword it can be told:
  // types intersect, properties merge (a property in both: its schemas merged), required unite,
  // bounds tighten; anything else present in both must be equal.
  Status Merge(const json& a0, const json& b0, const std::string& ptr, json* out);
  Status MergeOnce(const json& a0, const json& b0, const std::string& ptr, json* out);
  // allOf [{anyOf: w}, {anyOf: v}] as one anyOf: each w[i] and v[j] (the pairs that plainly admit
  // nothing dropped, the same pair once). oneOf the same way, every pair kept: exactly one of w
  // and exactly one of v is exactly one pair, as the pairs that match number (w's that match) x
  // (v's that match). A pair that does not merge here stays an allOf, merged when compiled.
  // allOf of arrays whose contains differ (a's in *m, b's in `more`), into *out: where the items
  // are values of an enum or a const, a contains every one of them meets is an item at least
  // (minItems 1), one none meets leaves no document; refused where two contains are left, or
  // where their counts are asked (minContains, maxContains).
  Status MergeContains(const json& a, const json& b, const std::vector<json>& more,
                       const std::string& ptr, json* m, json* out);
  // Whether the scalar `v` meets `x` as a validator tells (type, enum, const, not, anyOf, allOf,
  // oneOf, local $ref, lengths, pattern, bounds, an integer multipleOf, keywords of other
  // types); nullopt where it cannot tell (a format, an object or array value, ...).
  std::optional<bool> Holds(const json& v, const json& x, int depth = 0);
  Status Distribute(const json& w, const json& v, bool one, const std::string& ptr, json* out);
  // Whether `s` lists items by position (prefixItems, or draft 7's `items` list).
  static bool Tuple(const json& s);
  // `s`'s items: those it lists by position, and the schema of the rest (true: any).
  static void Items(const json& s, std::vector<json>* prefix, json* rest);
  // The items of allOf [a, b] into *m, as prefixItems and items: each position both sides'
  // schemas for it (a side's rest past its own list), the rest both rests.
  Status MergeItems(const json& a, const json& b, const std::string& ptr, json* m);
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
  Status KeyRulesOf(const json& s, const std::string& ptr, std::vector<KeyRule>* out);
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
  static const json& EmptyObject();
  static const json& True();
  Status KeysOf(const json& x, const std::string& ptr, ObjectKeys* out);
  // The members of allOf [a, b] into *m. A name either lists: its schemas there, and what the
  // other asks of it unlisted (ObjectKeys::Other; false: not allowed), a's names first.
  // patternProperties: both sides' (a pattern in both: its schemas merged); they apply to the
  // listed names as they did. A side's additionalProperties: the object's, where its patterns
  // are all the object's; else a key rule (the keys the object does not list that none of its
  // patterns match). An object that admits no key it does not list is written closed: the
  // patterns put into the listed names they match, additionalProperties false.
  Status MergeProperties(const json& a, const json& b, const std::string& ptr, json* m);
  Status Flatten(const json& s, const std::string& ptr, json* out);

  // ---- json_schema_object.cpp: objects
  // An object: the listed properties in order (the required ones present), then any others the
  // schema allows; what dependencies and min/maxProperties ask of the members (ObjectRules).
  Status Object(const json& s, const std::string& ptr, Sym* out);
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
  Status DependenciesOf(const json& s, const std::string& ptr, Dependencies* out);

  // ---- json_schema.cpp: the walk, $ref, strings, numbers, enum/const
  // `b` resolved (Resolve) and its allOf merged (Flatten): one schema object to read keywords of.
  Status ResolveFlat(const json& b, const std::string& ptr, json* out);

  // ---- json_schema_object.cpp: objects
  // The schema an object must also match where `key` is present: `required`, properties' values
  // (false: absent), `type`, and anyOf/oneOf of branches that only require or forbid names.
  Status DependentSchema(const std::string& key, const json& dep, const char* k,
                         const std::string& at, Dependencies* out);
  // The literals a schema object asks of an object's names where `key` is present (`required`:
  // present; a property false: absent; a `type` without object: `key` absent, which under `key`
  // is false: no object). With `values`, a property's schema is a value `key` asks (recorded in
  // `out`) and anyOf/oneOf are the caller's; without, anything beyond literals is refused.
  Status Presence(const std::string& key, const json& r, const char* k, const std::string& at,
                  bool values, std::vector<std::pair<std::string, bool>>* lits, Dependencies* out);
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
  Status PropertyNames(const json& s, const std::string& ptr, KeyNames* out);
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
  Status SomesOf(const json& s, const std::string& ptr, std::vector<Some>* out);
  Status SomeOf(const json& d, const std::string& ptr, Some* out);
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
  Status PatternProperties(const json& s, const std::string& ptr, Patterns* out);
  // The value of a key that exactly the patterns `subset` match: all their schemas.
  Status PatternValue(Patterns* pat, uint64_t subset, const std::string& ptr, Sym* out);
  // The value every schema of `parts` accepts: those without constraints and repeats left out
  // (a listed property and the pattern that matches it often name one $ref: its rule is shared),
  // then the one left, or their allOf.
  Status AllOfValue(const std::vector<const json*>& parts, const std::string& ptr, Sym* out);
  // A string lexeme for any name but `listed` (KeyExceptAutomaton): the JSON text of the name is
  // compared, and a name has one spelling there (only the escapes JSON requires), so no listed
  // name passes for another.
  Sym OtherKey(const std::set<std::string>& listed);
  // A name's JSON text between its quotes (JsonQuote's), as key lexemes compare names.
  static std::string KeyText(const std::string& name);

  // ---- json_schema_array.cpp: arrays
  // An array: prefixItems (or a draft-7 `items` list), then `items` (or additionalItems), with
  // minItems..maxItems elements, counted where minItems, maxItems or the prefix ask; under
  // `contains`, also how many items so far match it (Contains); under uniqueItems, which items
  // were written (UniqueArray).
  Status Array(const json& s, const std::string& ptr, Sym* out);
  struct Counted {  // contains, minContains, maxContains (-1: none)
    json schema;
    int64_t min = 1, max = -1;
  };
  // An array schema's `contains` and its counts (2019-09 on), or what Negate wrote in their place.
  Status ContainsOf(const json& s, const std::string& ptr, Counted* out);
  // Array's with `contains`: rules after[n][c], n items written and c of them matching contains
  // (counted up to minContains, or with maxContains up to one past it), whose end needs
  // n >= minItems and minContains <= c (<= maxContains). Without maxContains an item may be read
  // as matching contains or as just an item; with it, as matching or as not matching. Up to
  // minContains, the items that do match and those that do not are told apart, each item's
  // schema with contains or with its complement.
  Status Contains(const Counted& counted, const std::string& ptr, const std::vector<json>& prefix,
                  const json& rest, int64_t min, int64_t max, Sym* out);
  // Array's with uniqueItems where the items are a few values (`items` an enum or a const, or of
  // type boolean or null, with keywords those values are checked against): rules after[set], the
  // values written so far, each next item one of the others (two values equal as JSON compares
  // them are one: 1 and 1.0), minItems..maxItems of them; under `counted` (contains), those of
  // the set that match it between minContains and maxContains (Holds tells which values do).
  // Refused past kMaxUniqueSets sets of values (an enum of 12 values without maxItems: 4,096),
  // beside prefix items, and where the items are not such values (any string: a grammar cannot
  // remember them).
  Status UniqueArray(const json& items, const std::optional<Counted>& counted,
                     const std::string& ptr, int64_t min, int64_t max, Sym* out);
  static constexpr int64_t kMaxUniqueSets = 4096;

  // ---- state
  const json& root_;
  const JsonSchemaOptions& opt_;
  Grammar& g_;
  Sym lbrace_, rbrace_, lbrack_, rbrack_, comma_, colon_;
  std::optional<Sym> any_;
  std::map<std::string, Sym> refs_;    // by $ref: its rule (made before its body: recursion)
  std::map<std::string, Sym> merged_;  // by an allOf's merged schema (its JSON): its rule
  int depth_ = 0;
  std::vector<std::string> restrictions_;
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

}  // namespace llmq::schema
