// The JSON Schema compiler (issue 24): a schema (parsed keeping its key order: ordered_json), as
// OpenAI's `response_format` carries it, to a Grammar (engine/structured/grammar.h) whose documents
// are exactly the JSON texts the schema accepts, in the shape they are written:
//   - properties in the order the schema lists them, the properties it does not list (where
//     additionalProperties allows them) after those; under patternProperties, a key a pattern
//     matches takes that pattern's schema (a key several match: all of theirs, a listed name: its
//     own too) and only the others meet additionalProperties;
//   - between tokens, JSON's whitespace (space, \t, \n, \r), at most kMaxWhitespace bytes on each
//     side of a delimiter (`{` `}` `[` `]` `,` `:`), none before or after the document;
//   - strings with JSON's escapes; `pattern` and `format` on strings, and the names of properties
//     a schema does not list (so that no listed name passes for another), without escapes other
//     than those Python's json.dumps writes; lengths in characters as validators count them (a
//     surrogate pair of \u escapes is one), alone or beside patterns and a format; several
//     patterns (allOf) and a format beside a pattern all hold (one product automaton; the format's
//     expression anchored: json-pointer formats are refused there);
//   - numbers as JSON writes them, within their bounds as validators read them (the text rounded
//     to a double first); a text of 16+ significant digits just inside a bound may be refused;
//     multipleOf with an integer divisor as the integer texts it divides within +-(2^53 - 1)
//     (10.0 is not written; there a validator's float division is exact), not {multipleOf} as
//     the numbers with a fraction and the integers it does not divide; a divisor with a fraction
//     (0.01) is refused: validators divide in floating point;
//   - an object or array among `enum`/`const` values as its own shape: exactly its members, each
//     by value (numbers by value: 2 is 2.0), an object's properties in the value's order, merged
//     with the keywords beside the enum (a value they reject is not generated);
//   - uniqueItems where the items are a few values (an enum or a const, booleans, null): which
//     of them came so far, up to 4,096 sets of them (an enum of 12 values, or of more under a
//     maxItems); over any string or object it is refused (a grammar cannot remember them).
// What it cannot enforce it refuses, naming the keyword and its JSON pointer in the schema
// (`uniqueItems` at "/properties/tags"): a schema is never relaxed, and nothing is generated
// unenforced. Keywords that only annotate (title, description, examples, default, $comment, ...)
// and keywords JSON Schema does not define are ignored, as validators do.
//
// Objects: minProperties/maxProperties count every member, listed or not; dependencies (draft 4
// to 7's list of names or schema), dependentRequired and dependentSchemas are enforced where a
// dependent schema asks for names (`required`), forbids them (`not {required}`, a property
// false), chooses among such (anyOf/oneOf of those), asks more of a property's value
// (`properties`: that value is written for whether the key is present, before or after it), or
// rules objects out (`type`); names they mention that `properties` does not list come after the
// listed and the required ones, in the order mentioned (engine/structured/object_rules.h).
// propertyNames limits every key, listed or not: an enum of names (those not listed come after
// the others, the only other keys), a pattern and lengths (each one more pattern each other key
// must match); other constraints on names are refused.
//
// not: the complement of the negated schema, written as the union (anyOf) of schemas it is,
// keyword by keyword (not (A and B) is not A or not B; a keyword of one type holds for the
// others): not {type} (the other types; not integer: the numbers written with a nonzero fraction,
// an exponent only where it cannot make an integer of one; only the types the context may admit,
// through $ref, enum and anyOf/oneOf, are asked), {enum/const} (the other types, the
// strings but those, the other boolean, the numbers between those listed, the objects and arrays
// that differ from each listed: a member more, one missing or of another value; fewer items,
// more, or one of another value), {pattern} (a string no
// such pattern matches: the key automaton of patternProperties), lengths, bounds, counts of items
// and members, {required} (an object without one of them), {properties} (one of them present and
// not its schema), dependencies, {items: S} (contains not S), {contains} (fewer than minContains,
// more than maxContains), {not}, {anyOf}/{allOf}/{oneOf}/{if} of those, and {additionalProperties},
// {patternProperties} and {propertyNames}: where the object may have only the names it lists
// (additionalProperties false), one of those names present and failing them; where it may have
// any name, a member of that kind of key whose value fails them (a key not listed, one the
// pattern matches, one propertyNames rejects), a listed property or another key, up to 4 such
// members asked of one object (object_rules.h's witnesses). Each
// alternative is merged with the schema's other keywords (beside an anyOf, in each branch); one
// that plainly admits nothing is dropped. not {format} (a known one), {multipleOf} of a
// fraction, {uniqueItems}, a prefix of items and more than 64 alternatives are refused.
// if/then/else (draft 7 on; before, they are not keywords): (if and then) or (not if and else), an
// anyOf beside the other keywords; several (allOf of if/then parts) are written out one after
// another, each case holding those before it, refused past 1 MB written. contains (draft 6 on) with
// minContains/maxContains (2019-09 on): the items counted as they come, up to minContains (an item
// may count or not) or one past maxContains (an item matches contains or its complement); allOf of
// several contains only where the items are an enum's values and all but one contains are told by
// them (every value matches it: an item at least; none: no document).
//
// oneOf: a kind of value two branches admit with no keyword on it is no document (a string,
// where both only ask of objects); branches no document can match together (their types,
// values, required names a branch forbids, string lengths or number ranges apart) are enforced
// as anyOf; a branch that may overlap others is enforced as itself and not them ({required: [a]}
// and {required: [b]} become "a, not b" and "b, not a"; {type: number} and {type: integer}, a
// number with a fraction), not asking the complement of what the branch itself holds to (allOf
// parts and $ref targets both share: branches on one base). Where one of those `not` is refused
// and the branches list a discriminator (a property each gives values of its own, not required by
// all), oneOf is enforced on the objects that have it, each branch with it required: an object
// without it is not generated (a restriction, as the order of properties is; MaskBench's meters
// and alarms of eleven types on one base). Otherwise oneOf is refused, naming the two branches
// and why. A format not known is an annotation, in `not` too.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/structured/grammar.h"

namespace llmq {

struct JsonSchemaOptions {
  static constexpr int kMaxWhitespace = 32;
  int max_whitespace = kMaxWhitespace;  // bytes of whitespace each side of a delimiter
};

// The grammar of `schema` (a JSON Schema, draft 4 to 2020-12 spellings) into *out. Unsupported:
// a keyword the compiler cannot enforce; InvalidArgument: a schema that is not one (a `type`
// that is not a type name, a $ref that resolves nowhere). Both say `keyword "K" at "/pointer"`.
// `restrictions` (when not null): where the documents are fewer than the schema's beyond the
// shape they are written in (a oneOf's discriminator required), one line each, saying so.
[[nodiscard]] Status CompileJsonSchema(const nlohmann::ordered_json& schema, Grammar* out,
                                       const JsonSchemaOptions& opt = JsonSchemaOptions(),
                                       std::vector<std::string>* restrictions = nullptr);

// Any JSON object (`response_format: {"type": "json_object"}`).
Grammar JsonObjectGrammar(const JsonSchemaOptions& opt = JsonSchemaOptions());

// `s` as Python's json.dumps(s, ensure_ascii=False) writes it, with the quotes.
std::string JsonQuote(const std::string& s);
// `v` as json.dumps(v, ensure_ascii=False) writes it (separators ", " and ": ").
std::string PythonJsonDumps(const nlohmann::ordered_json& v);

}  // namespace llmq
