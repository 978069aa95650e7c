#include "engine/structured/json_regex.h"

#include <charconv>
#include <cmath>
#include <map>
#include <vector>

namespace llmq {

namespace {

// A language as its alternatives, each a concatenation (no top-level '|'); none: no text.
using Alts = std::vector<std::string>;

std::string Join(const Alts& alts) {
  std::string body;
  bool empty = false;
  int n = 0;
  for (const std::string& a : alts) {
    if (a.empty()) {
      empty = true;
      continue;
    }
    body += (n++ ? "|" : "") + a;
  }
  if (n == 0) return "";
  if (n == 1 && !empty) return body;
  return "(?:" + body + ")" + (empty ? "?" : "");
}

std::string Digit(int lo, int hi) {
  if (lo == hi) return std::string(1, static_cast<char>('0' + lo));
  return std::string("[") + static_cast<char>('0' + lo) + "-" + static_cast<char>('0' + hi) + "]";
}

std::string AnyDigits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

bool All(std::string_view s, char c) {
  return s.find_first_not_of(c) == std::string_view::npos;
}

// Digit strings of a's length between a and b (a <= b), leading zeros as they come.
Alts SameLength(std::string_view a, std::string_view b) {
  if (a.empty()) return {""};
  const std::string_view at = a.substr(1), bt = b.substr(1);
  if (a[0] == b[0]) return {a[0] + Join(SameLength(at, bt))};
  Alts out;
  int lo = a[0] - '0', hi = b[0] - '0';
  if (!All(at, '0')) {
    out.push_back(a[0] + Join(SameLength(at, std::string(at.size(), '9'))));
    ++lo;
  }
  const bool upper_apart = !All(bt, '9');
  if (upper_apart) --hi;
  if (lo <= hi) out.push_back(Digit(lo, hi) + AnyDigits(at.size()));
  if (upper_apart) out.push_back(b[0] + Join(SameLength(std::string(bt.size(), '0'), bt)));
  return out;
}

// Canonical non-negative integer texts from lo to hi (unbounded when absent), lo <= hi.
Alts UnsignedRange(const std::string& lo, const std::optional<std::string>& hi) {
  Alts out;
  const size_t last = hi ? hi->size() : lo.size();
  for (size_t len = lo.size(); len <= last; ++len) {
    const std::string a = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
    const std::string b = hi && len == hi->size() ? *hi : std::string(len, '9');
    out.push_back(Join(SameLength(a, b)));
  }
  if (!hi) out.push_back("[1-9][0-9]{" + std::to_string(lo.size()) + ",}");
  return out;
}

// Digit-string arithmetic on canonical non-negative integers.
int CompareInt(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a == b ? 0 : 1;
}
std::string Increment(std::string s) {
  size_t i = s.size();
  while (i > 0 && s[i - 1] == '9') s[--i] = '0';
  if (i == 0) return "1" + s;
  ++s[i - 1];
  return s;
}
std::string Decrement(std::string s) {  // s > 0
  size_t i = s.size();
  while (s[i - 1] == '0') s[--i] = '9';
  --s[i - 1];
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

// A non-negative decimal: canonical integer digits, fraction digits without trailing zeros.
struct Decimal {
  std::string int_part = "0";
  std::string frac;
};
int Compare(const Decimal& a, const Decimal& b) {
  if (const int c = CompareInt(a.int_part, b.int_part); c != 0) return c;
  const size_t n = std::max(a.frac.size(), b.frac.size());
  const int c = (a.frac + std::string(n - a.frac.size(), '0'))
                    .compare(b.frac + std::string(n - b.frac.size(), '0'));
  return (c > 0) - (c < 0);
}

// The fraction digit strings F (0.F its value) with l <= 0.F <= u (u absent: unbounded), other
// than the empty F (value 0: in the range exactly when l is empty, as u cannot be below it).
Alts NonEmptyFrac(std::string_view l, const std::optional<std::string_view>& u) {
  if (l.empty() && !u) return {"[0-9]+"};
  if (u && u->empty()) return l.empty() ? Alts{"0+"} : Alts{};
  // A first digit d bounds the rest by what is left of l (d == l's first) and of u.
  auto rest = [](char d, std::string_view rl, std::optional<std::string_view> ru) {
    Alts sub = NonEmptyFrac(rl, ru);
    if (rl.empty()) sub.push_back("");
    return sub.empty() ? Alts{} : Alts{d + Join(sub)};
  };
  const int lo = l.empty() ? 0 : l[0] - '0', hi = u ? (*u)[0] - '0' : 9;
  const std::string_view lt = l.empty() ? l : l.substr(1);
  if (u && lo == hi) return rest(static_cast<char>('0' + lo), lt, u->substr(1));
  Alts out = rest(static_cast<char>('0' + lo), lt, std::nullopt);
  const int free_hi = u ? hi - 1 : 9;
  if (lo + 1 <= free_hi) out.push_back(Digit(lo + 1, free_hi) + "[0-9]*");
  if (u) {
    const Alts top = rest(static_cast<char>('0' + hi), "", u->substr(1));
    out.insert(out.end(), top.begin(), top.end());
  }
  return out;
}
// The same as the optional "\.F" of a number text.
Alts Fraction(std::string_view l, const std::optional<std::string_view>& u) {
  Alts out;
  if (l.empty()) out.push_back("");
  if (const Alts f = NonEmptyFrac(l, u); !f.empty()) out.push_back("\\." + Join(f));
  return out;
}

constexpr const char* kAnyFraction = "(?:\\.[0-9]+)?";
constexpr const char* kUnsignedNumber = "(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?";
constexpr const char* kExponent = "(?:[eE][+-]?[0-9]+)?";

// Unsigned number texts (no exponent) with lo <= value <= hi (hi absent: unbounded).
Alts Side(const Decimal& lo, const std::optional<Decimal>& hi) {
  if (hi && Compare(lo, *hi) > 0) return {};
  Alts out;
  auto add = [&out](const std::string& int_re, const Alts& frac) {
    if (!frac.empty()) out.push_back(int_re + Join(frac));
  };
  if (hi && lo.int_part == hi->int_part) {
    add(lo.int_part, Fraction(lo.frac, std::string_view(hi->frac)));
    return out;
  }
  add(lo.int_part, Fraction(lo.frac, std::nullopt));
  const std::string next = Increment(lo.int_part);
  if (!hi) {
    out.push_back(Join(UnsignedRange(next, std::nullopt)) + kAnyFraction);
    return out;
  }
  if (CompareInt(next, hi->int_part) < 0)
    out.push_back(Join(UnsignedRange(next, Decrement(hi->int_part))) + kAnyFraction);
  add(hi->int_part, Fraction("", std::string_view(hi->frac)));
  return out;
}

constexpr size_t kMaxBoundDigits = 40;
constexpr size_t kMaxSignificantDigits = 15;
constexpr size_t kMaxNextDigits = 17;  // a double's shortest decimal never needs more

// `v` as a sign and a Decimal: the shortest decimal that reads back as v, of at most
// `max_significant` significant digits (Unsupported beyond, naming `name` and v).
Status ToDecimal(double v, const std::string& name, size_t max_significant, bool* negative,
                 Decimal* out) {
  if (!std::isfinite(v)) return Status::InvalidArgument(name + " is not finite");
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string text(buf, res.ptr);
  *negative = v < 0;
  *out = Decimal();
  if (v == 0) return Status::Ok();
  const size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e))
    if (c >= '0' && c <= '9') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp = std::stoi(text.substr(e + 1));
  if (digits.size() > max_significant)
    return Status::Unsupported(name + " " + text + ": more than " +
                               std::to_string(max_significant) +
                               " significant digits is not enforced");
  if (exp >= static_cast<int>(kMaxBoundDigits) || -exp > static_cast<int>(kMaxBoundDigits))
    return Status::Unsupported(name + " " + text + ": more than " +
                               std::to_string(kMaxBoundDigits) +
                               " digits before or after the point is not enforced");
  if (exp >= 0) {
    const size_t n = static_cast<size_t>(exp) + 1;
    if (digits.size() < n) digits.append(n - digits.size(), '0');
    out->int_part = digits.substr(0, n);
    out->frac = digits.substr(n);
  } else {
    out->frac = std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  return Status::Ok();
}

// The bound `v` (a minimum when `is_min`) as the inclusive decimal bound a text's exact value is
// compared with, so that every text within it is within `v` as a validator reads the text: its
// value rounded to the nearest double first. Rounding is monotone, so an inclusive bound is v's
// own shortest decimal D(v): x >= D(v) gives round(x) >= round(D(v)) = v. An exclusive one is
// the next double past v, inclusive: x >= D(next) gives round(x) >= next > v, where x > D(v)
// alone would let through a text of 16+ significant digits that rounds to v itself. The texts
// lost lie strictly inside next's rounding interval below D(next), so none has 15 significant
// digits or fewer (two such decimals never round to one double). Past zero the next double
// (5e-324) is beyond kMaxBoundDigits: 1e-40 stands for it (texts below it are lost).
Status InclusiveBound(double v, bool exclusive, bool is_min, bool* negative, Decimal* out) {
  const std::string name = is_min ? (exclusive ? "exclusiveMinimum" : "minimum")
                                  : (exclusive ? "exclusiveMaximum" : "maximum");
  LLMQ_RETURN_IF_ERROR(ToDecimal(v, name, kMaxSignificantDigits, negative, out));
  if (!exclusive) return Status::Ok();
  if (v == 0) {
    *negative = !is_min;
    out->int_part = "0";
    out->frac = std::string(kMaxBoundDigits - 1, '0') + "1";
    return Status::Ok();
  }
  const double next = std::nextafter(v, is_min ? HUGE_VAL : -HUGE_VAL);
  if (!ToDecimal(next, name, kMaxNextDigits, negative, out).ok())
    return Status::Unsupported(name + " " + std::to_string(v) +
                               ": the next double past it is beyond " +
                               std::to_string(kMaxBoundDigits) + " digits after the point");
  return Status::Ok();
}

// The formats' pieces.
// RFC 3339 full-date with the month's days (RFC 3339 5.7): 31, 30, 28, and February 29 in leap
// years only (divisible by 4, centuries by 400), as Python's date.fromisoformat checks.
constexpr const char* kDate =
    R"((?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29))";
constexpr const char* kTime = R"((?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?)"
                              R"((?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))";
constexpr const char* kLabel = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
constexpr const char* kOctet = R"((?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]))";
constexpr const char* kUriChar = R"([A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]-]|%[0-9A-Fa-f]{2})";
constexpr const char* kScheme = R"([A-Za-z][A-Za-z0-9+.-]*:)";
// A pointer's character: JSON's escapes for what JSON must escape, ~0 and ~1 for '~' and '/'.
constexpr const char* kPointer =
    R"((?:/(?:[^~/"\\\x00-\x1f]|~[01]|\\["\\bfnrt]|\\u00[01][0-9A-Fa-f])*)*)";

std::string Duration() {
  const std::string d = "[0-9]+", sec = d + "S", min = d + "M(?:" + sec + ")?",
                    hour = d + "H(?:" + min + ")?", day = d + "D", month = d + "M(?:" + day + ")?",
                    year = d + "Y(?:" + month + ")?";
  const std::string time = "T(?:" + hour + "|" + min + "|" + sec + ")";
  const std::string date = "(?:" + day + "|" + month + "|" + year + ")(?:" + time + ")?";
  return "P(?:" + date + "|" + time + "|" + d + "W)";
}

std::string Hostname() {
  return std::string(kLabel) + "(?:\\." + kLabel + ")*";
}

std::string Ipv4() {
  return std::string(kOctet) + "(?:\\." + kOctet + "){3}";
}

// RFC 4291 section 2.2 (RFC 3986's IPv6address): i groups before "::" at the most, or none.
std::string Ipv6() {
  const std::string h = "[0-9A-Fa-f]{1,4}", ls32 = "(?:" + h + ":" + h + "|" + Ipv4() + ")";
  auto groups = [&h](int n) {
    return n == 0 ? std::string() : "(?:" + h + ":){" + std::to_string(n) + "}";
  };
  Alts forms = {groups(6) + ls32, "::" + groups(5) + ls32};
  const std::vector<std::string> tails = {
      groups(4) + ls32, groups(3) + ls32, groups(2) + ls32, groups(1) + ls32, ls32, h, ""};
  for (int i = 0; i < 7; ++i)
    forms.push_back("(?:" + (i == 0 ? "" : "(?:" + h + ":){0," + std::to_string(i) + "}") + h +
                    ")?::" + tails[static_cast<size_t>(i)]);
  return Join(forms);
}

std::string Uri(bool scheme_optional, bool international) {
  const std::string more = international ? "|[^\\x00-\\x9f]" : "";
  const std::string c = std::string(kUriChar) + more;
  const std::string absolute = std::string(kScheme) + "(?:" + c + ")*";
  if (!scheme_optional) return absolute;
  // A relative reference: its first segment has no ':' (RFC 3986 path-noscheme), so "://" or
  // "a:b/c" without a scheme's syntax is not one.
  const std::string first = R"([A-Za-z0-9._~!$&'()*+,;=@\[\]-]|%[0-9A-Fa-f]{2})" + more;
  return "(?:" + absolute + "|(?:" + first + ")*(?:[/?#](?:" + c + ")*)?)";
}

}  // namespace

Status IntegerRangeRegex(std::optional<int64_t> min, std::optional<int64_t> max, std::string* out) {
  if (min && max && *min > *max)
    return Status::InvalidArgument("integer range: minimum " + std::to_string(*min) +
                                   " > maximum " + std::to_string(*max));
  Alts alts;
  if (!max || *max >= 0) {  // 0 and up
    const std::string lo = std::to_string(min && *min > 0 ? *min : 0);
    const Alts a = UnsignedRange(lo, max ? std::optional(std::to_string(*max)) : std::nullopt);
    alts.push_back(Join(a));
  }
  if (!min || *min <= 0) {  // "-" and a magnitude: -0 when 0 is in the range
    const uint64_t lo = max && *max < 0 ? 0 - static_cast<uint64_t>(*max) : 0;
    const std::optional<std::string> hi =
        min ? std::optional(std::to_string(0 - static_cast<uint64_t>(*min))) : std::nullopt;
    alts.push_back("-" + Join(UnsignedRange(std::to_string(lo), hi)));
  }
  *out = Join(alts);
  return Status::Ok();
}

Status NumberRangeRegex(std::optional<double> min, bool exclusive_min, std::optional<double> max,
                        bool exclusive_max, std::string* out) {
  if ((min && !std::isfinite(*min)) || (max && !std::isfinite(*max)))
    return Status::InvalidArgument(
        std::string(min && !std::isfinite(*min) ? "minimum" : "maximum") + " is not finite");
  if (min && max && (*min > *max || (*min == *max && (exclusive_min || exclusive_max))))
    return Status::InvalidArgument("number range: no number lies in it");
  // From here on both bounds are inclusive decimals.
  bool min_neg = false, max_neg = false;
  Decimal lo, hi;
  if (min) LLMQ_RETURN_IF_ERROR(InclusiveBound(*min, exclusive_min, true, &min_neg, &lo));
  if (max) LLMQ_RETURN_IF_ERROR(InclusiveBound(*max, exclusive_max, false, &max_neg, &hi));
  const Decimal zero;
  Alts alts;
  const bool min_zero = min && !min_neg && lo.int_part == "0" && lo.frac.empty();
  const bool max_zero = max && !max_neg && hi.int_part == "0" && hi.frac.empty();
  // Values >= 0, unsigned: from max(min, 0) to max; exponents when that is all of them.
  if (!max && (!min || min_neg || min_zero)) {
    alts.push_back(std::string(kUnsignedNumber) + kExponent);
  } else if (!max || !max_neg) {
    const bool from_min = min && !min_neg;
    const Alts a = Side(from_min ? lo : zero, max ? std::optional(hi) : std::nullopt);
    if (!a.empty()) alts.push_back(Join(a));
  }
  // Values <= 0: "-" and a magnitude from max(-max, 0) to -min.
  if (!min && (!max || !max_neg)) {
    alts.push_back(std::string("-") + kUnsignedNumber + kExponent);
  } else if (!min || min_neg || min_zero) {
    const bool from_max = max && (max_neg || max_zero);
    const Alts a = Side(from_max ? hi : zero, min ? std::optional(lo) : std::nullopt);
    if (!a.empty()) alts.push_back("-" + Join(a));
  }
  if (alts.empty()) return Status::InvalidArgument("number range: no number lies in it");
  *out = Join(alts);
  return Status::Ok();
}

Status FormatRegex(std::string_view format, std::string* out) {
  const std::string hex = "[0-9A-Fa-f]";
  const std::map<std::string_view, std::string> formats = {
      {"date-time", std::string(kDate) + "[Tt]" + kTime},
      {"date", kDate},
      {"time", kTime},
      {"duration", Duration()},
      {"email",
       R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)" + Hostname()},
      {"hostname", Hostname()},
      {"ipv4", Ipv4()},
      {"ipv6", Ipv6()},
      {"uuid", hex + "{8}-" + hex + "{4}-" + hex + "{4}-" + hex + "{4}-" + hex + "{12}"},
      {"uri", Uri(false, false)},
      {"uri-reference", Uri(true, false)},
      {"iri", Uri(false, true)},
      {"iri-reference", Uri(true, true)},
      {"json-pointer", kPointer},
      {"relative-json-pointer", std::string("(?:0|[1-9][0-9]*)(?:#|") + kPointer + ")"},
  };
  // Formats validators check that are not enforced here: refused, never let through unchecked.
  for (const char* known : {"regex", "uri-template", "idn-email", "idn-hostname"})
    if (format == known)
      return Status::Unsupported("format \"" + std::string(format) + "\" is not enforced");
  const auto it = formats.find(format);
  if (it == formats.end())
    return Status::NotFound("format \"" + std::string(format) + "\" is not known here");
  *out = it->second;
  return Status::Ok();
}

}  // namespace llmq
