#include "engine/text/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <functional>
#include <string_view>

namespace llmq::jinja {

namespace {

using Kind = Value::Kind;

Status Err(std::string m) {
  return Status::InvalidArgument(std::move(m));
}

// ---- Strings as Python sees them: sequences of code points. An invalid UTF-8 byte b stands
// for itself, as the pseudo code point kRawByte + b, so decoding and encoding round-trip.
constexpr uint32_t kRawByte = 0x110000;

std::vector<uint32_t> Decode(const std::string& s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  size_t k = 0;
  while (k < s.size()) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n =
        utf8proc_iterate(p + k, static_cast<utf8proc_ssize_t>(s.size() - k), &cp);
    if (n <= 0) {
      cps.push_back(kRawByte + p[k]);
      ++k;
    } else {
      cps.push_back(static_cast<uint32_t>(cp));
      k += static_cast<size_t>(n);
    }
  }
  return cps;
}

void Encode(uint32_t cp, std::string* out) {
  if (cp >= kRawByte) {
    out->push_back(static_cast<char>(cp - kRawByte));
    return;
  }
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string Encode(const std::vector<uint32_t>& cps, size_t from = 0, size_t to = SIZE_MAX) {
  std::string out;
  for (size_t k = from; k < cps.size() && k < to; ++k) Encode(cps[k], &out);
  return out;
}

// Python's str.isspace.
bool IsSpaceCp(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
bool IsAlphaCp(uint32_t c) {
  if (c >= kRawByte) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
uint32_t Upper(uint32_t c) {
  return c >= kRawByte ? c
                       : static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
uint32_t Lower(uint32_t c) {
  return c >= kRawByte ? c
                       : static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

std::string MapCase(const std::string& s, uint32_t (*f)(uint32_t)) {
  std::vector<uint32_t> cps = Decode(s);
  for (uint32_t& c : cps) c = f(c);
  return Encode(cps);
}
std::string LowerCase(const std::string& s) {
  return MapCase(s, Lower);
}
std::string UpperCase(const std::string& s) {
  return MapCase(s, Upper);
}

std::string Capitalize(const std::string& s) {
  std::vector<uint32_t> cps = Decode(s);
  for (size_t k = 0; k < cps.size(); ++k) cps[k] = k ? Lower(cps[k]) : Upper(cps[k]);
  return Encode(cps);
}

// Python's str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string PyTitle(const std::string& s) {
  std::vector<uint32_t> cps = Decode(s);
  bool prev_alpha = false;
  for (uint32_t& c : cps) {
    const bool alpha = IsAlphaCp(c);
    c = alpha ? (prev_alpha ? Lower(c) : Upper(c)) : c;
    prev_alpha = alpha;
  }
  return Encode(cps);
}

// jinja2's title filter: words start after whitespace or one of -([{<.
std::string JinjaTitle(const std::string& s) {
  std::vector<uint32_t> cps = Decode(s);
  bool start = true;
  for (uint32_t& c : cps) {
    const bool sep = IsSpaceCp(c) || c == '-' || c == '(' || c == '[' || c == '{' || c == '<';
    if (!sep) c = start ? Upper(c) : Lower(c);
    start = sep;
  }
  return Encode(cps);
}

// Python's strip family: `chars` undefined/None strips whitespace.
Status Strip(const std::string& s, const Value& chars, bool left, bool right, std::string* out) {
  std::vector<uint32_t> cps = Decode(s);
  std::vector<uint32_t> set;
  const bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) {
    if (!chars.is_string()) return Err("strip arg must be None or str");
    set = Decode(chars.str());
  }
  auto strip = [&](uint32_t c) {
    return ws ? IsSpaceCp(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  *out = Encode(cps, b, e);
  return Status::Ok();
}

// Python's str.split / rsplit.
Status Split(const std::string& s, const Value& sep, const Value& maxv, bool reverse, Value* out) {
  int64_t max = -1;
  if (!maxv.is_undefined() && !maxv.is_none()) {
    if (maxv.kind() != Kind::kInt && maxv.kind() != Kind::kBool)
      return Err("maxsplit must be an int");
    max = maxv.i();
  }
  std::vector<Value> parts;
  if (sep.is_undefined() || sep.is_none()) {
    std::vector<uint32_t> cps = Decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // runs of non-space
    if (!reverse) {
      size_t k = 0;
      while (k < cps.size()) {
        while (k < cps.size() && IsSpaceCp(cps[k])) ++k;
        if (k == cps.size()) break;
        if (max >= 0 && static_cast<int64_t>(words.size()) == max) {
          size_t e = cps.size();
          while (e > k && IsSpaceCp(cps[e - 1])) --e;
          words.emplace_back(k, e);
          break;
        }
        size_t e = k;
        while (e < cps.size() && !IsSpaceCp(cps[e])) ++e;
        words.emplace_back(k, e);
        k = e;
      }
    } else {
      size_t k = cps.size();
      while (k > 0) {
        while (k > 0 && IsSpaceCp(cps[k - 1])) --k;
        if (k == 0) break;
        if (max >= 0 && static_cast<int64_t>(words.size()) == max) {
          size_t b = 0;
          while (b < k && IsSpaceCp(cps[b])) ++b;
          words.emplace_back(b, k);
          break;
        }
        size_t b = k;
        while (b > 0 && !IsSpaceCp(cps[b - 1])) --b;
        words.emplace_back(b, k);
        k = b;
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto [b, e] : words) parts.push_back(Value::Str(Encode(cps, b, e)));
  } else {
    if (!sep.is_string()) return Err("must be str or None, not " + std::string(sep.TypeName()));
    const std::string& d = sep.str();
    if (d.empty()) return Err("empty separator");
    std::vector<std::string> pieces;
    if (!reverse) {
      size_t from = 0;
      while (true) {
        const size_t at = s.find(d, from);
        if (at == std::string::npos || (max >= 0 && static_cast<int64_t>(pieces.size()) == max)) {
          pieces.push_back(s.substr(from));
          break;
        }
        pieces.push_back(s.substr(from, at - from));
        from = at + d.size();
      }
    } else {
      size_t to = s.size();
      while (true) {
        const size_t at = to >= d.size() ? s.rfind(d, to - d.size()) : std::string::npos;
        if (at == std::string::npos || (max >= 0 && static_cast<int64_t>(pieces.size()) == max)) {
          pieces.push_back(s.substr(0, to));
          break;
        }
        pieces.push_back(s.substr(at + d.size(), to - at - d.size()));
        to = at;
      }
      std::reverse(pieces.begin(), pieces.end());
    }
    for (std::string& p : pieces) parts.push_back(Value::Str(std::move(p)));
  }
  *out = Value::List(std::move(parts));
  return Status::Ok();
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters, and at both ends
    std::vector<uint32_t> cps = Decode(s);
    int64_t n = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (k < cps.size()) Encode(cps[k], &out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

// Binds positional then keyword arguments to `names`; unbound slots stay undefined.
Status Bind(const std::string& fn, const Args& a, std::initializer_list<const char*> names,
            std::vector<Value>* out) {
  out->assign(names.size(), Value());
  if (a.pos.size() > names.size()) return Err(fn + "() takes too many arguments");
  for (size_t k = 0; k < a.pos.size(); ++k) (*out)[k] = a.pos[k];
  for (const auto& [key, v] : a.kw) {
    size_t k = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++k;
    }
    if (k == names.size()) return Err(fn + "() got an unexpected keyword argument '" + key + "'");
    (*out)[k] = v;
  }
  return Status::Ok();
}

// The attribute path "a.b.0" of `v` (jinja2's make_attrgetter), undefined when absent.
Status GetAttrPath(const Value& v, const std::string& path, Value* out) {
  Value cur = v;
  size_t from = 0;
  while (true) {
    const size_t dot = path.find('.', from);
    const std::string part =
        path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    Value key = Value::Str(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18)
      key = Value::Int(std::stoll(part));
    if (cur.is_undefined()) return Err("'" + cur.str() + "' is undefined");
    Value next;
    LLMQ_RETURN_IF_ERROR(GetItem(cur, key, &next));
    if (next.is_undefined() && key.kind() == Kind::kInt)
      LLMQ_RETURN_IF_ERROR(GetItem(cur, Value::Str(part), &next));
    cur = next;
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  *out = cur;
  return Status::Ok();
}

Status ToInt(const Value& v, const Value& dflt, Value* out) {
  const Value d = dflt.is_undefined() ? Value::Int(0) : dflt;
  switch (v.kind()) {
    case Kind::kBool:
    case Kind::kInt:
      *out = Value::Int(v.i());
      return Status::Ok();
    case Kind::kFloat:
      *out = std::isfinite(v.f()) && std::fabs(v.f()) < 9.2e18
                 ? Value::Int(static_cast<int64_t>(v.f()))
                 : d;
      return Status::Ok();
    case Kind::kString: {
      std::string s;
      LLMQ_RETURN_IF_ERROR(Strip(v.str(), Value(), true, true, &s));
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0) {
        *out = Value::Int(i);
        return Status::Ok();
      }
      const double f = std::strtod(s.c_str(), &end);  // jinja2 falls back to int(float(s))
      *out = !s.empty() && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18
                 ? Value::Int(static_cast<int64_t>(f))
                 : d;
      return Status::Ok();
    }
    default:
      *out = d;
      return Status::Ok();
  }
}

Status ToFloat(const Value& v, const Value& dflt, Value* out) {
  const Value d = dflt.is_undefined() ? Value::Float(0) : dflt;
  if (v.is_number()) {
    *out = Value::Float(v.f());
  } else if (v.is_string()) {
    std::string s;
    LLMQ_RETURN_IF_ERROR(Strip(v.str(), Value(), true, true, &s));
    char* end = nullptr;
    const double f = std::strtod(s.c_str(), &end);
    *out = !s.empty() && *end == '\0' ? Value::Float(f) : d;
  } else {
    *out = d;
  }
  return Status::Ok();
}

Status Length(const Value& v, int64_t* n) {
  switch (v.kind()) {
    case Kind::kUndefined:
      *n = 0;
      return Status::Ok();
    case Kind::kString:
      *n = static_cast<int64_t>(Decode(v.str()).size());
      return Status::Ok();
    case Kind::kList:
      *n = static_cast<int64_t>(v.list().items.size());
      return Status::Ok();
    case Kind::kDict:
      *n = static_cast<int64_t>(v.dict().items.size());
      return Status::Ok();
    default:
      return Err(std::string("object of type '") + v.TypeName() + "' has no len()");
  }
}

// select/reject/selectattr/rejectattr: items for which the test (default: truthiness) of the
// item (or of its attribute) is `want`.
Status Select(const Value& in, const Args& a, bool attr, bool want, Value* out) {
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  size_t k = 0;
  std::string path;
  if (attr) {
    if (a.pos.empty() || !a.pos[0].is_string()) return Err("selectattr needs an attribute name");
    path = a.pos[k++].str();
  }
  std::string test;
  if (k < a.pos.size()) {
    if (!a.pos[k].is_string()) return Err("the test's name must be a string");
    test = a.pos[k++].str();
    if (!IsTest(test)) return Err("unsupported test '" + test + "'");
  }
  Args targs;
  targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
  targs.kw = a.kw;
  std::vector<Value> kept;
  for (const Value& item : items) {
    Value x = item;
    if (attr) LLMQ_RETURN_IF_ERROR(GetAttrPath(item, path, &x));
    bool r = x.Truthy();
    if (!test.empty()) LLMQ_RETURN_IF_ERROR(ApplyTest(test, x, targs, &r));
    if (r == want) kept.push_back(item);
  }
  *out = Value::List(std::move(kept));
  return Status::Ok();
}

Status Map(const Value& in, const Args& a, Value* out) {
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  std::vector<Value> mapped;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, v] : a.kw) {
    if (k == "attribute")
      attribute = &v;
    else if (k == "default")
      dflt = &v;
    else if (!a.pos.empty())
      return Err("map() got an unexpected keyword argument '" + k + "'");
  }
  if (attribute) {
    if (!attribute->is_string()) return Err("map's attribute must be a string");
    for (const Value& item : items) {
      Value x;
      LLMQ_RETURN_IF_ERROR(GetAttrPath(item, attribute->str(), &x));
      if (x.is_undefined() && dflt) x = *dflt;
      mapped.push_back(x);
    }
  } else {
    if (a.pos.empty() || !a.pos[0].is_string()) return Err("map needs a filter name or attribute=");
    const std::string f = a.pos[0].str();
    if (!IsFilter(f) || f == "map") return Err("unsupported filter '" + f + "'");
    Args fargs;
    fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
    fargs.kw = a.kw;
    for (const Value& item : items) {
      mapped.emplace_back();
      LLMQ_RETURN_IF_ERROR(ApplyFilter(f, item, fargs, &mapped.back()));
    }
  }
  *out = Value::List(std::move(mapped));
  return Status::Ok();
}

// sort / dictsort / unique / min / max compare strings case-insensitively unless told not to.
Value SortKey(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::Str(MapCase(v.str(), Lower)) : v;
}

Status Sorted(std::vector<Value>* items, const std::string& attribute, bool case_sensitive,
              bool reverse, const std::function<Value(const Value&)>* key_of = nullptr) {
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& v : *items) {
    Value k = v;
    if (key_of) k = (*key_of)(v);
    if (!attribute.empty()) LLMQ_RETURN_IF_ERROR(GetAttrPath(v, attribute, &k));
    keyed.emplace_back(SortKey(k, case_sensitive), v);
  }
  Status st;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    int c = 0;
    const Status s = Compare(x.first, y.first, &c);
    if (!s.ok()) st = s;
    return reverse ? c > 0 : c < 0;
  });
  LLMQ_RETURN_IF_ERROR(st);
  for (size_t k = 0; k < items->size(); ++k) (*items)[k] = keyed[k].second;
  return Status::Ok();
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// ---- The filters: one table ------------------------------------------------------------------
// Each filter is one row of kFilters: its name (written there only: the parser's check, map's and
// ApplyFilter all read the table), whether an undefined input reaches it, and its code. The code
// gets the name it was called by, for its messages.

// The parameters of the code in the tables' rows.
using S = const std::string&;
using V = const Value&;
using A = const Args&;

using FilterFn = Status (*)(const std::string& name, const Value& in, const Args& a, Value* out);

// Whether a filter makes something of an undefined input (jinja2's `x | default`, `x | length`,
// ...); the others fail, naming it.
enum class Undef { kTaken, kRefused };

struct FilterDef {
  const char* name;
  Undef undefined;
  FilterFn fn;
};

// A dict's (key, value) as the items of jinja2's dict.items() and filters give it: a tuple.
Value DictItem(const std::string& k, const Value& v) {
  return Value::List({Value::Str(k), v}, true);
}

// A filter of the input's text: `f` of its string form.
Status TextFilter(const Value& in, std::string (*f)(const std::string&), Value* out) {
  std::string s;
  LLMQ_RETURN_IF_ERROR(AppendStr(in, &s));
  *out = Value::Str(f(s));
  return Status::Ok();
}

Status LengthFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  int64_t n = 0;
  LLMQ_RETURN_IF_ERROR(Length(in, &n));
  *out = Value::Int(n);
  return Status::Ok();
}

Status DefaultFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"default_value", "boolean"}, &p));
  const bool use = in.is_undefined() || (p[1].Truthy() && !in.Truthy());
  *out = use ? (p[0].is_undefined() ? Value::Str("") : p[0]) : in;
  return Status::Ok();
}

Status EscapeFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  return TextFilter(in, HtmlEscape, out);
}

// first and last (an empty input gives an undefined named "no first item" for both).
Status End(const Value& in, bool first, Value* out) {
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  *out = items.empty() ? Value::Undefined("no first item") : first ? items.front() : items.back();
  return Status::Ok();
}

// min and max: the first item in ascending (min) or descending (max) order.
Status MinMax(const std::string& name, const Value& in, const Args& a, bool max, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"case_sensitive", "attribute"}, &p));
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  LLMQ_RETURN_IF_ERROR(Sorted(&items, p[1].is_string() ? p[1].str() : "", p[0].Truthy(), max));
  *out = items.empty() ? Value::Undefined("no " + name + " item") : items.front();
  return Status::Ok();
}

Status ToJsonFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"indent", "ensure_ascii", "separators", "sort_keys"}, &p));
  JsonOptions o;
  if (!p[0].is_undefined() && !p[0].is_none()) {
    if (p[0].kind() != Kind::kInt || p[0].i() < 0 || p[0].i() > 64)
      return Err("tojson's indent must be an int 0..64");
    o.indent = static_cast<int>(p[0].i());
    o.item_sep = ",";
  }
  if (!p[1].is_undefined() && p[1].Truthy())
    return Err("unsupported tojson option ensure_ascii=True");
  if (!p[2].is_undefined() && !p[2].is_none()) {
    if (!p[2].is_list() || p[2].list().items.size() != 2 || !p[2].list().items[0].is_string() ||
        !p[2].list().items[1].is_string())
      return Err("tojson's separators must be two strings");
    o.item_sep = p[2].list().items[0].str();
    o.key_sep = p[2].list().items[1].str();
  }
  o.sort_keys = p[3].Truthy();
  std::string s;
  LLMQ_RETURN_IF_ERROR(AppendJson(in, o, &s));
  *out = Value::Str(std::move(s));
  return Status::Ok();
}

Status IndentFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"width", "first", "blank"}, &p));
  std::string pad;
  if (p[0].is_string())
    pad = p[0].str();
  else
    pad.assign(
        static_cast<size_t>(std::clamp<int64_t>(p[0].is_undefined() ? 4 : p[0].i(), 0, 1024)), ' ');
  std::string s;
  LLMQ_RETURN_IF_ERROR(AppendStr(in, &s));
  // Lines split at "\n" (jinja2 splits on all line breaks; templates write "\n").
  std::vector<std::string> lines;
  size_t from = 0;
  while (true) {
    const size_t nl = s.find('\n', from);
    lines.push_back(s.substr(from, nl == std::string::npos ? std::string::npos : nl - from));
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
  std::string r;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) r += "\n";
    const bool blank = lines[k].find_first_not_of(" \t") == std::string::npos;
    if ((k > 0 || p[1].Truthy()) && (!blank || p[2].Truthy())) r += pad;
    r += lines[k];
    if (r.size() > kMaxString) return Err("string too large");
  }
  *out = Value::Str(std::move(r));
  return Status::Ok();
}

Status RoundFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"precision", "method"}, &p));
  if (!in.is_number()) return Err("round expects a number");
  const int64_t prec = std::clamp<int64_t>(p[0].is_undefined() ? 0 : p[0].i(), -300, 300);
  const std::string method = p[1].is_string() ? p[1].str() : "common";
  const double m = std::pow(10.0, static_cast<double>(prec));
  const double x = in.f() * m;
  double r;
  if (method == "common")
    r = std::round(x);  // half away from zero, as jinja2's common
  else if (method == "floor")
    r = std::floor(x);
  else if (method == "ceil")
    r = std::ceil(x);
  else
    return Err("method must be common, ceil or floor");
  *out = Value::Float(r / m);
  return Status::Ok();
}

Status ReplaceFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"old", "new", "count"}, &p));
  std::string s;
  LLMQ_RETURN_IF_ERROR(AppendStr(in, &s));
  if (!p[0].is_string() || !p[1].is_string()) return Err("replace expects strings");
  const int64_t count = p[2].is_number() ? p[2].i() : -1;
  if (s.size() + (p[0].str().empty() ? s.size() + 1 : s.size() / p[0].str().size() + 1) *
                     p[1].str().size() >
      kMaxString)
    return Err("string too large");
  *out = Value::Str(Replace(s, p[0].str(), p[1].str(), count));
  return Status::Ok();
}

Status JoinFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"d", "attribute"}, &p));
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  std::string sep, s;
  if (!p[0].is_undefined()) LLMQ_RETURN_IF_ERROR(AppendStr(p[0], &sep));
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) s += sep;
    Value x = items[k];
    if (p[1].is_string()) LLMQ_RETURN_IF_ERROR(GetAttrPath(items[k], p[1].str(), &x));
    LLMQ_RETURN_IF_ERROR(AppendStr(x, &s));
    if (s.size() > kMaxString) return Err("string too large");
  }
  *out = Value::Str(std::move(s));
  return Status::Ok();
}

Status ReverseFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  if (in.is_string()) {
    std::vector<uint32_t> cps = Decode(in.str());
    std::reverse(cps.begin(), cps.end());
    *out = Value::Str(Encode(cps));
  } else {
    std::vector<Value> items;
    LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
    std::reverse(items.begin(), items.end());
    *out = Value::List(std::move(items));
  }
  return Status::Ok();
}

Status ItemsFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  if (in.is_undefined()) {
    *out = Value::List({});
  } else if (!in.is_dict()) {
    return Err(std::string("items expects a mapping, got ") + in.TypeName());
  } else {
    std::vector<Value> items;
    for (const auto& [k, v] : in.dict().items) items.push_back(DictItem(k, v));
    *out = Value::List(std::move(items));
  }
  return Status::Ok();
}

Status DictSortFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"case_sensitive", "by", "reverse"}, &p));
  if (!in.is_dict()) return Err("dictsort expects a mapping");
  std::vector<Value> items;
  for (const auto& [k, v] : in.dict().items) items.push_back(DictItem(k, v));
  const bool by_value = p[1].is_string() && p[1].str() == "value";
  const std::function<Value(const Value&)> key = [by_value](const Value& t) {
    return t.list().items[by_value ? 1 : 0];
  };
  LLMQ_RETURN_IF_ERROR(Sorted(&items, "", p[0].Truthy(), p[2].Truthy(), &key));
  *out = Value::List(std::move(items));
  return Status::Ok();
}

Status SortFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"reverse", "case_sensitive", "attribute"}, &p));
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  LLMQ_RETURN_IF_ERROR(
      Sorted(&items, p[2].is_string() ? p[2].str() : "", p[1].Truthy(), p[0].Truthy()));
  *out = Value::List(std::move(items));
  return Status::Ok();
}

Status UniqueFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"case_sensitive", "attribute"}, &p));
  std::vector<Value> items, kept, seen;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  for (const Value& v : items) {
    Value k = v;
    if (p[1].is_string()) LLMQ_RETURN_IF_ERROR(GetAttrPath(v, p[1].str(), &k));
    k = SortKey(k, p[0].Truthy());
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, k); })) {
      seen.push_back(k);
      kept.push_back(v);
    }
  }
  *out = Value::List(std::move(kept));
  return Status::Ok();
}

Status SumFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"attribute", "start"}, &p));
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
  Value acc = p[1].is_undefined() ? Value::Int(0) : p[1];
  for (const Value& v : items) {
    Value x = v;
    if (p[0].is_string()) LLMQ_RETURN_IF_ERROR(GetAttrPath(v, p[0].str(), &x));
    if (!acc.is_number() || !x.is_number()) return Err("sum expects numbers");
    int64_t r;
    if (acc.kind() != Kind::kFloat && x.kind() != Kind::kFloat &&
        !__builtin_add_overflow(acc.i(), x.i(), &r))
      acc = Value::Int(r);
    else
      acc = Value::Float(acc.f() + x.f());
  }
  *out = acc;
  return Status::Ok();
}

Status AbsFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  if (in.kind() == Kind::kFloat)
    *out = Value::Float(std::fabs(in.f()));
  else if (in.is_number() && in.i() != INT64_MIN)
    *out = Value::Int(in.i() < 0 ? -in.i() : in.i());
  else
    return Err(std::string("bad operand type for abs(): '") + in.TypeName() + "'");
  return Status::Ok();
}

// The filters, in name order; the short ones are written in their row.
constexpr FilterDef kFilters[] = {
    {"abs", Undef::kRefused, AbsFilter},
    {"capitalize", Undef::kTaken,
     [](S, V in, A, Value* out) { return TextFilter(in, Capitalize, out); }},
    {"count", Undef::kTaken, LengthFilter},
    {"d", Undef::kTaken, DefaultFilter},
    {"default", Undef::kTaken, DefaultFilter},
    {"dictsort", Undef::kRefused, DictSortFilter},
    {"e", Undef::kTaken, EscapeFilter},
    {"escape", Undef::kTaken, EscapeFilter},
    {"first", Undef::kTaken, [](S, V in, A, Value* out) { return End(in, true, out); }},
    {"float", Undef::kTaken,
     [](S name, V in, A a, Value* out) {
       std::vector<Value> p;
       LLMQ_RETURN_IF_ERROR(Bind(name, a, {"default"}, &p));
       return ToFloat(in, p[0], out);
     }},
    {"indent", Undef::kTaken, IndentFilter},
    {"int", Undef::kTaken,
     [](S name, V in, A a, Value* out) {
       std::vector<Value> p;
       LLMQ_RETURN_IF_ERROR(Bind(name, a, {"default", "base"}, &p));
       return ToInt(in, p[0], out);
     }},
    {"items", Undef::kTaken, ItemsFilter},
    {"join", Undef::kTaken, JoinFilter},
    {"last", Undef::kTaken, [](S, V in, A, Value* out) { return End(in, false, out); }},
    {"length", Undef::kTaken, LengthFilter},
    {"list", Undef::kTaken,
     [](S, V in, A, Value* out) {
       std::vector<Value> items;
       LLMQ_RETURN_IF_ERROR(Iterate(in, &items));
       *out = Value::List(std::move(items));
       return Status::Ok();
     }},
    {"lower", Undef::kTaken, [](S, V in, A, Value* out) { return TextFilter(in, LowerCase, out); }},
    {"map", Undef::kTaken, [](S, V in, A a, Value* out) { return Map(in, a, out); }},
    {"max", Undef::kRefused,
     [](S name, V in, A a, Value* out) { return MinMax(name, in, a, true, out); }},
    {"min", Undef::kRefused,
     [](S name, V in, A a, Value* out) { return MinMax(name, in, a, false, out); }},
    {"reject", Undef::kTaken,
     [](S, V in, A a, Value* out) { return Select(in, a, false, false, out); }},
    {"rejectattr", Undef::kTaken,
     [](S, V in, A a, Value* out) { return Select(in, a, true, false, out); }},
    {"replace", Undef::kTaken, ReplaceFilter},
    {"reverse", Undef::kTaken, ReverseFilter},
    {"round", Undef::kRefused, RoundFilter},
    {"safe", Undef::kTaken,
     [](S, V in, A, Value* out) {
       *out = in;
       return Status::Ok();
     }},
    {"select", Undef::kTaken,
     [](S, V in, A a, Value* out) { return Select(in, a, false, true, out); }},
    {"selectattr", Undef::kTaken,
     [](S, V in, A a, Value* out) { return Select(in, a, true, true, out); }},
    {"sort", Undef::kTaken, SortFilter},
    {"string", Undef::kTaken,
     [](S, V in, A, Value* out) {
       std::string s;
       LLMQ_RETURN_IF_ERROR(AppendStr(in, &s));
       *out = Value::Str(std::move(s));
       return Status::Ok();
     }},
    {"sum", Undef::kTaken, SumFilter},
    {"title", Undef::kTaken,
     [](S, V in, A, Value* out) { return TextFilter(in, JinjaTitle, out); }},
    {"tojson", Undef::kTaken, ToJsonFilter},
    {"trim", Undef::kTaken,
     [](S, V in, A a, Value* out) {
       std::string s, r;
       LLMQ_RETURN_IF_ERROR(AppendStr(in, &s));
       LLMQ_RETURN_IF_ERROR(Strip(s, a.pos.empty() ? Value() : a.pos[0], true, true, &r));
       *out = Value::Str(std::move(r));
       return Status::Ok();
     }},
    {"unique", Undef::kTaken, UniqueFilter},
    {"upper", Undef::kTaken, [](S, V in, A, Value* out) { return TextFilter(in, UpperCase, out); }},
};

// ---- The tests: one table --------------------------------------------------------------------
// `x is name(arg)`: each test is one row of kTests, its name and its code. The code gets the
// tested value and the first argument (positional, else keyword).

using TestFn = Status (*)(const std::string& name, const Value& in, const Value& arg, bool* out);

struct TestDef {
  const char* name;
  TestFn fn;
};

Status Is(bool* out, bool holds) {
  *out = holds;
  return Status::Ok();
}

Status CaseTest(const std::string& name, const Value& in, uint32_t (*f)(uint32_t), bool* out) {
  if (!in.is_string()) return Err("'" + name + "' test expects a string");
  return Is(out, MapCase(in.str(), f) == in.str());
}

// even, odd and divisibleby take an integer (or a bool).
Status Integral(const std::string& name, const Value& in) {
  if (in.kind() != Kind::kInt && in.kind() != Kind::kBool)
    return Err("'" + name + "' test expects an integer");
  return Status::Ok();
}

Status EqTest(const std::string& name, const Value& in, const Value& arg, bool* out) {
  return Is(out, Equals(in, arg));
}
Status NeTest(const std::string& name, const Value& in, const Value& arg, bool* out) {
  return Is(out, !Equals(in, arg));
}
Status LtTest(const std::string& name, const Value& in, const Value& arg, bool* out) {
  int c = 0;
  LLMQ_RETURN_IF_ERROR(Compare(in, arg, &c));
  return Is(out, c < 0);
}
Status LeTest(const std::string& name, const Value& in, const Value& arg, bool* out) {
  int c = 0;
  LLMQ_RETURN_IF_ERROR(Compare(in, arg, &c));
  return Is(out, c <= 0);
}
Status GtTest(const std::string& name, const Value& in, const Value& arg, bool* out) {
  int c = 0;
  LLMQ_RETURN_IF_ERROR(Compare(in, arg, &c));
  return Is(out, c > 0);
}
Status GeTest(const std::string& name, const Value& in, const Value& arg, bool* out) {
  int c = 0;
  LLMQ_RETURN_IF_ERROR(Compare(in, arg, &c));
  return Is(out, c >= 0);
}

// The tests, in name order (the operators last).
constexpr TestDef kTests[] = {
    {"boolean", [](S, V in, V, bool* out) { return Is(out, in.kind() == Kind::kBool); }},
    {"callable", [](S, V in, V, bool* out) { return Is(out, in.kind() == Kind::kFunction); }},
    {"defined", [](S, V in, V, bool* out) { return Is(out, !in.is_undefined()); }},
    {"divisibleby",
     [](S name, V in, V arg, bool* out) {
       LLMQ_RETURN_IF_ERROR(Integral(name, in));
       if (arg.kind() != Kind::kInt || arg.i() == 0)
         return Err("divisibleby needs a non-zero integer");
       return Is(out, arg.i() == -1 || in.i() % arg.i() == 0);  // INT64_MIN % -1 overflows
     }},
    {"eq", EqTest},
    {"equalto", EqTest},
    {"even",
     [](S name, V in, V, bool* out) {
       LLMQ_RETURN_IF_ERROR(Integral(name, in));
       return Is(out, in.i() % 2 == 0);
     }},
    {"false", [](S, V in, V, bool* out) { return Is(out, in.kind() == Kind::kBool && !in.b()); }},
    {"float", [](S, V in, V, bool* out) { return Is(out, in.kind() == Kind::kFloat); }},
    {"ge", GeTest},
    {"gt", GtTest},
    {"in", [](S, V in, V arg, bool* out) { return Contains(arg, in, out); }},
    {"integer", [](S, V in, V, bool* out) { return Is(out, in.kind() == Kind::kInt); }},
    {"iterable",
     [](S, V in, V, bool* out) {
       return Is(out, in.is_list() || in.is_string() || in.is_dict() || in.is_undefined());
     }},
    {"le", LeTest},
    {"lower", [](S name, V in, V, bool* out) { return CaseTest(name, in, Lower, out); }},
    {"lt", LtTest},
    {"mapping", [](S, V in, V, bool* out) { return Is(out, in.is_dict()); }},
    {"ne", NeTest},
    {"none", [](S, V in, V, bool* out) { return Is(out, in.is_none()); }},
    {"number", [](S, V in, V, bool* out) { return Is(out, in.is_number()); }},
    {"odd",
     [](S name, V in, V, bool* out) {
       LLMQ_RETURN_IF_ERROR(Integral(name, in));
       return Is(out, in.i() % 2 != 0);
     }},
    {"sameas",
     [](S, V in, V arg, bool* out) { return Is(out, Equals(in, arg) && in.kind() == arg.kind()); }},
    {"sequence",
     [](S, V in, V, bool* out) { return Is(out, in.is_list() || in.is_string() || in.is_dict()); }},
    {"string", [](S, V in, V, bool* out) { return Is(out, in.is_string()); }},
    {"true", [](S, V in, V, bool* out) { return Is(out, in.kind() == Kind::kBool && in.b()); }},
    {"undefined", [](S, V in, V, bool* out) { return Is(out, in.is_undefined()); }},
    {"upper", [](S name, V in, V, bool* out) { return CaseTest(name, in, Upper, out); }},
    {"==", EqTest},
    {"!=", NeTest},
    {"<", LtTest},
    {"<=", LeTest},
    {">", GtTest},
    {">=", GeTest},
};

// ---- The methods: one table ------------------------------------------------------------------
// x.name(args) of a str or a dict: each method is one row of kMethods, the kind of value it is a
// method of, its name and its code.

using MethodFn = Status (*)(const std::string& name, const Value& obj, const Args& a, Value* out);

struct MethodDef {
  Kind of;
  const char* name;
  MethodFn fn;
};

Status NoArgs(const std::string& name, const Args& a) {
  if (!a.pos.empty() || !a.kw.empty()) return Err(name + "() takes no arguments");
  return Status::Ok();
}

Value DictKey(const std::string& k, const Value& v) {
  return Value::Str(k);
}
Value DictValue(const std::string& k, const Value& v) {
  return v;
}

// items, keys and values: `item` of each (key, value), in order.
Status DictList(const std::string& name, const Value& obj, const Args& a,
                Value (*item)(const std::string& key, const Value& v), Value* out) {
  LLMQ_RETURN_IF_ERROR(NoArgs(name, a));
  std::vector<Value> r;
  for (const auto& [k, v] : obj.dict().items) r.push_back(item(k, v));
  *out = Value::List(std::move(r));
  return Status::Ok();
}

// upper, lower, capitalize, title: `f` of the string.
Status StrCase(const std::string& name, const Value& obj, const Args& a,
               std::string (*f)(const std::string&), Value* out) {
  LLMQ_RETURN_IF_ERROR(NoArgs(name, a));
  *out = Value::Str(f(obj.str()));
  return Status::Ok();
}

// startswith, endswith: whether the string has the affix, or one of a tuple of them.
Status HasAffix(const std::string& name, const Value& obj, const Args& a, bool prefix, Value* out) {
  const std::string& s = obj.str();
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"prefix"}, &p));
  std::vector<Value> options = {p[0]};
  if (p[0].is_list() && p[0].list().tuple) options = p[0].list().items;
  bool r = false;
  for (const Value& o : options) {
    if (!o.is_string()) return Err(name + " arg must be str or a tuple of str");
    const std::string& x = o.str();
    r = r || (x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0
                                              : s.compare(s.size() - x.size(), x.size(), x) == 0));
  }
  *out = Value::Bool(r);
  return Status::Ok();
}

Status StrSplit(const std::string& name, const Value& obj, const Args& a, bool reverse,
                Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"sep", "maxsplit"}, &p));
  return Split(obj.str(), p[0], p[1], reverse, out);
}

Status StrStrip(const std::string& name, const Value& obj, const Args& a, bool left, bool right,
                Value* out) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"chars"}, &p));
  std::string r;
  LLMQ_RETURN_IF_ERROR(Strip(obj.str(), p[0], left, right, &r));
  *out = Value::Str(std::move(r));
  return Status::Ok();
}

Status StrJoin(const std::string& name, const Value& obj, const Args& a, Value* out) {
  const std::string& s = obj.str();
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"iterable"}, &p));
  std::vector<Value> items;
  LLMQ_RETURN_IF_ERROR(Iterate(p[0], &items));
  std::string r;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!items[k].is_string()) return Err("sequence item: expected str instance");
    if (k) r += s;
    r += items[k].str();
    if (r.size() > kMaxString) return Err("string too large");
  }
  *out = Value::Str(std::move(r));
  return Status::Ok();
}

// find and count: their one argument, a string.
Status SubArg(const std::string& name, const Args& a, std::string* sub) {
  std::vector<Value> p;
  LLMQ_RETURN_IF_ERROR(Bind(name, a, {"sub"}, &p));
  if (!p[0].is_string()) return Err(name + " expects a string");
  *sub = p[0].str();
  return Status::Ok();
}

Status StrFind(const std::string& name, const Value& obj, const Args& a, Value* out) {
  const std::string& s = obj.str();
  std::string x;
  LLMQ_RETURN_IF_ERROR(SubArg(name, a, &x));
  const size_t at = s.find(x);
  *out = Value::Int(at == std::string::npos ? -1
                                            : static_cast<int64_t>(Decode(s.substr(0, at)).size()));
  return Status::Ok();
}

Status StrCount(const std::string& name, const Value& obj, const Args& a, Value* out) {
  const std::string& s = obj.str();
  std::string x;
  LLMQ_RETURN_IF_ERROR(SubArg(name, a, &x));
  int64_t n = 0;
  if (x.empty()) {
    n = static_cast<int64_t>(Decode(s).size()) + 1;
  } else {
    for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
  }
  *out = Value::Int(n);
  return Status::Ok();
}

// The methods, by kind, in name order.
constexpr MethodDef kMethods[] = {
    {Kind::kDict, "get",
     [](S name, V obj, A a, Value* out) {
       std::vector<Value> p;
       LLMQ_RETURN_IF_ERROR(Bind(name, a, {"key", "default"}, &p));
       const Value* v = p[0].is_string() ? obj.dict().Find(p[0].str()) : nullptr;
       *out = v ? *v : p[1].is_undefined() ? Value::None() : p[1];
       return Status::Ok();
     }},
    {Kind::kDict, "items",
     [](S name, V obj, A a, Value* out) { return DictList(name, obj, a, DictItem, out); }},
    {Kind::kDict, "keys",
     [](S name, V obj, A a, Value* out) { return DictList(name, obj, a, DictKey, out); }},
    {Kind::kDict, "values",
     [](S name, V obj, A a, Value* out) { return DictList(name, obj, a, DictValue, out); }},
    {Kind::kString, "capitalize",
     [](S name, V obj, A a, Value* out) { return StrCase(name, obj, a, Capitalize, out); }},
    {Kind::kString, "count", StrCount},
    {Kind::kString, "endswith",
     [](S name, V obj, A a, Value* out) { return HasAffix(name, obj, a, false, out); }},
    {Kind::kString, "find", StrFind},
    {Kind::kString, "join", StrJoin},
    {Kind::kString, "lower",
     [](S name, V obj, A a, Value* out) { return StrCase(name, obj, a, LowerCase, out); }},
    {Kind::kString, "lstrip",
     [](S name, V obj, A a, Value* out) { return StrStrip(name, obj, a, true, false, out); }},
    {Kind::kString, "replace", ReplaceFilter},  // the filter's code: the same arguments
    {Kind::kString, "rsplit",
     [](S name, V obj, A a, Value* out) { return StrSplit(name, obj, a, true, out); }},
    {Kind::kString, "rstrip",
     [](S name, V obj, A a, Value* out) { return StrStrip(name, obj, a, false, true, out); }},
    {Kind::kString, "split",
     [](S name, V obj, A a, Value* out) { return StrSplit(name, obj, a, false, out); }},
    {Kind::kString, "startswith",
     [](S name, V obj, A a, Value* out) { return HasAffix(name, obj, a, true, out); }},
    {Kind::kString, "strip",
     [](S name, V obj, A a, Value* out) { return StrStrip(name, obj, a, true, true, out); }},
    {Kind::kString, "title",
     [](S name, V obj, A a, Value* out) { return StrCase(name, obj, a, PyTitle, out); }},
    {Kind::kString, "upper",
     [](S name, V obj, A a, Value* out) { return StrCase(name, obj, a, UpperCase, out); }},
};

// The first row of `table` named `name`, or null (CallMethod matches the kind of value too).
template <class Row, size_t N>
const Row* Find(const Row (&table)[N], std::string_view name) {
  for (const Row& r : table)
    if (name == r.name) return &r;
  return nullptr;
}

}  // namespace

bool IsFilter(std::string_view name) {
  return Find(kFilters, name) != nullptr;
}
bool IsTest(std::string_view name) {
  return Find(kTests, name) != nullptr;
}
bool IsMethod(std::string_view name) {
  return Find(kMethods, name) != nullptr;
}

Status Iterate(const Value& v, std::vector<Value>* out) {
  out->clear();
  switch (v.kind()) {
    case Kind::kUndefined:
      return Status::Ok();  // jinja2's Undefined iterates as empty
    case Kind::kList:
      *out = v.list().items;
      return Status::Ok();
    case Kind::kDict:
      for (const auto& kv : v.dict().items) out->push_back(Value::Str(kv.first));
      return Status::Ok();
    case Kind::kString:
      for (uint32_t c : Decode(v.str())) {
        std::string s;
        Encode(c, &s);
        out->push_back(Value::Str(std::move(s)));
      }
      return Status::Ok();
    default:
      return Err(std::string("'") + v.TypeName() + "' object is not iterable");
  }
}

Status GetItem(const Value& x, const Value& key, Value* out) {
  *out = Value::Undefined("");
  if (x.is_undefined()) return Err("'" + x.str() + "' is undefined");
  if (x.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = x.dict().Find(key.str())) *out = *v;
    }
    return Status::Ok();
  }
  if (x.kind() == Kind::kNamespace) {
    if (key.is_string())
      for (const auto& [k, v] : x.ns().attrs)
        if (k == key.str()) *out = v;
    return Status::Ok();
  }
  if ((x.is_list() || x.is_string()) && (key.kind() == Kind::kInt || key.kind() == Kind::kBool)) {
    if (x.is_list()) {
      const auto& items = x.list().items;
      int64_t i = key.i();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i >= 0 && i < static_cast<int64_t>(items.size())) *out = items[static_cast<size_t>(i)];
    } else {
      const std::vector<uint32_t> cps = Decode(x.str());
      int64_t i = key.i();
      if (i < 0) i += static_cast<int64_t>(cps.size());
      if (i >= 0 && i < static_cast<int64_t>(cps.size())) {
        std::string s;
        Encode(cps[static_cast<size_t>(i)], &s);
        *out = Value::Str(std::move(s));
      }
    }
  }
  return Status::Ok();
}

Status Slice(const Value& x, const Value& start, const Value& stop, const Value& step, Value* out) {
  auto bound = [](const Value& v, int64_t* b, bool* set) -> Status {
    *set = !v.is_undefined() && !v.is_none();
    if (!*set) return Status::Ok();
    if (v.kind() != Kind::kInt && v.kind() != Kind::kBool)
      return Err("slice indices must be integers or None");
    *b = v.i();
    return Status::Ok();
  };
  int64_t b = 0, e = 0, s = 1;
  bool has_b, has_e, has_s;
  LLMQ_RETURN_IF_ERROR(bound(start, &b, &has_b));
  LLMQ_RETURN_IF_ERROR(bound(stop, &e, &has_e));
  LLMQ_RETURN_IF_ERROR(bound(step, &s, &has_s));
  if (s == 0) return Err("slice step cannot be zero");
  if (!x.is_list() && !x.is_string()) {
    if (x.is_undefined()) return Err("'" + x.str() + "' is undefined");
    return Err(std::string("'") + x.TypeName() + "' object is not subscriptable");
  }
  std::vector<uint32_t> cps;
  if (x.is_string()) cps = Decode(x.str());
  const int64_t n = static_cast<int64_t>(x.is_list() ? x.list().items.size() : cps.size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](bool has, int64_t v, int64_t dflt) {
    if (!has) return dflt;
    if (v < 0) {
      v += n;
      if (v < 0) v = s < 0 ? -1 : 0;
    } else if (v >= n) {
      v = s < 0 ? n - 1 : n;
    }
    return v;
  };
  b = adjust(has_b, b, s < 0 ? n - 1 : 0);
  e = adjust(has_e, e, s < 0 ? -1 : n);
  std::vector<Value> items;
  std::string str;
  for (int64_t i = b; s > 0 ? i < e : i > e;) {
    if (x.is_list())
      items.push_back(x.list().items[static_cast<size_t>(i)]);
    else
      Encode(cps[static_cast<size_t>(i)], &str);
    if (__builtin_add_overflow(i, s, &i)) break;  // a step past the end of int64
  }
  *out = x.is_list() ? Value::List(std::move(items), x.list().tuple) : Value::Str(std::move(str));
  return Status::Ok();
}

Status Contains(const Value& hay, const Value& needle, bool* out) {
  *out = false;
  switch (hay.kind()) {
    case Kind::kUndefined:
      return Status::Ok();
    case Kind::kString:
      if (!needle.is_string())
        return Err(std::string("'in <string>' requires string as left operand, not ") +
                   needle.TypeName());
      *out = hay.str().find(needle.str()) != std::string::npos;
      return Status::Ok();
    case Kind::kList:
      for (const Value& v : hay.list().items)
        if (Equals(v, needle)) *out = true;
      return Status::Ok();
    case Kind::kDict:
      *out = needle.is_string() && hay.dict().Find(needle.str());
      return Status::Ok();
    default:
      return Err(std::string("argument of type '") + hay.TypeName() + "' is not iterable");
  }
}

Status ApplyTest(const std::string& name, const Value& in, const Args& a, bool* out) {
  const TestDef* t = Find(kTests, name);
  if (t == nullptr) return Err("unsupported test '" + name + "'");
  const Value arg = a.pos.empty() ? (a.kw.empty() ? Value() : a.kw[0].second) : a.pos[0];
  return t->fn(name, in, arg, out);
}

Status ApplyFilter(const std::string& name, const Value& in, const Args& a, Value* out) {
  const FilterDef* f = Find(kFilters, name);
  if (f == nullptr) return Err("unsupported filter '" + name + "'");
  if (in.is_undefined() && f->undefined == Undef::kRefused)
    return Err("'" + in.str() + "' is undefined");
  return f->fn(name, in, a, out);
}

Status CallMethod(const Value& obj, const std::string& name, const Args& a, Value* out) {
  for (const MethodDef& m : kMethods)
    if (m.of == obj.kind() && name == m.name) return m.fn(name, obj, a, out);
  if (obj.is_undefined()) return Err("'" + obj.str() + "' is undefined");
  return Err(std::string("'") + obj.TypeName() + "' object has no method '" + name + "'");
}

}  // namespace llmq::jinja
