// JSON lexemes as regex sources for the structured-output grammar (issue 24): the integer and
// number texts within a JSON Schema range, and the contents of a string of a `format`. Each
// result is a pattern in Regex's syntax (regex.h), without anchors, meant for Mode::kFull.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace llmq {

// The JSON integer texts -?(0|[1-9][0-9]*) whose value lies in [min, max] (inclusive; an absent
// bound is unbounded). "-0" is accepted exactly when 0 is in the range: JSON allows it and its
// value is 0. Built digit range by digit range: the size grows with the bounds' digits, never
// with the range's width. InvalidArgument when min > max.
[[nodiscard]] Status IntegerRangeRegex(std::optional<int64_t> min, std::optional<int64_t> max,
                                       std::string* out);

// The JSON number texts -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? whose value lies in the
// range (each bound inclusive unless its exclusive flag; an absent bound is unbounded) as a
// validator reads them: the text rounded to the nearest double, then compared (Ajv, Python's
// jsonschema). Every text accepted is in the range so read; every text in it of 15 significant
// digits or fewer and at most 40 after the point is accepted. A longer text is accepted when its
// exact decimal value lies within the bounds' own decimals: the shortest decimal that reads back as
// an inclusive bound (0.1 is 1/10, as the schema wrote it), the next double past an exclusive one
// (1e-40 past an exclusive 0). Texts with an exponent are accepted only on a side of zero the range
// holds whole: with minimum 0 and no maximum "1e5" is accepted, with maximum 100 "1e1" is not
// (fewer texts).
// "-0" forms are accepted exactly when 0 is in the range.
// InvalidArgument: a bound not finite, or the range empty (min > max, or equal bounds with one
// exclusive, or no double strictly between two exclusive ones). Unsupported: a bound with more
// than 15 significant digits, or past 40 digits before or after the point (1e41, 1e-41), naming it.
[[nodiscard]] Status NumberRangeRegex(std::optional<double> min, bool exclusive_min,
                                      std::optional<double> max, bool exclusive_max,
                                      std::string* out);

// A regex for the contents of a JSON string (the raw text between the quotes) of a JSON Schema
// `format`: date-time, date, time (RFC 3339: 'T'/'t', 'Z'/'z', fractional seconds, an offset
// required; month 01-12 with its days, February 29 in leap years only; second 00-60 whatever the
// time), duration
// (the RFC 3339 appendix grammar JSON Schema names, upper case), email (a dot-atom local part @
// a hostname; no quoted local part, no address literal), hostname (RFC 1123 labels of 1-63
// letters, digits and inner hyphens; the 253-character total is not enforced), ipv4 (dotted
// quad, 0-255, no leading zeros), ipv6 (every RFC 4291 text form: :: compression, an embedded
// ipv4; no zone), uuid (8-4-4-4-12 hex, either case), uri (a scheme, ':' and RFC 3986's
// characters or %XX), uri-reference (the same characters, the scheme optional), iri and
// iri-reference (as uri, non-ASCII characters allowed), json-pointer and relative-json-pointer
// (a character that JSON must escape written as its escape, '/' as / only).
// Unsupported for "regex" (a pattern's syntax is not regular); NotFound for a format not known
// here (JSON Schema makes unknown formats annotations: the caller decides).
[[nodiscard]] Status FormatRegex(std::string_view format, std::string* out);

}  // namespace llmq
