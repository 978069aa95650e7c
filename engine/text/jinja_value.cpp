#include "engine/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace llmq::jinja {

namespace {

Status TooDeep() {
  return Status::InvalidArgument("values nested too deeply");
}

// Python's repr of a string: single quotes unless it holds ' and no ".
void AppendStrRepr(const std::string& s, std::string* out) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  out->push_back(q);
  for (unsigned char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == q) {
      out->push_back('\\');
      out->push_back(q);
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      *out += buf;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back(q);
}

// json.dumps's string: ensure_ascii=False keeps non-ASCII bytes as they are.
void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// None, a bool, an int or a float as Python's repr writes it, or (`json`) as json.dumps does.
void AppendScalar(const Value& v, bool json, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += json ? "null" : "None";
      break;
    case Value::Kind::kBool:
      *out += v.b() ? (json ? "true" : "True") : (json ? "false" : "False");
      break;
    case Value::Kind::kInt:
      *out += std::to_string(v.i());
      break;
    default: {
      const double f = v.f();
      if (json && std::isnan(f)) {
        *out += "NaN";
      } else if (json && std::isinf(f)) {
        *out += f < 0 ? "-Infinity" : "Infinity";
      } else {
        *out += FloatRepr(f);
      }
    }
  }
}

int Sign(int64_t d) {
  return d < 0 ? -1 : d > 0 ? 1 : 0;
}

}  // namespace

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value Value::Undefined(std::string name) {
  Value v;
  v.ptr_ = std::make_shared<std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::List(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->tuple = tuple;
  for (const Value& x : l->items) l->depth = std::max(l->depth, Depth(x) + 1);
  v.ptr_ = std::move(l);
  return v;
}
Value Value::Dict(std::vector<std::pair<std::string, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  auto d = std::make_shared<DictData>();
  d->items = std::move(items);
  for (const auto& kv : d->items) d->depth = std::max(d->depth, Depth(kv.second) + 1);
  v.ptr_ = std::move(d);
  return v;
}
Value Value::Namespace(std::shared_ptr<NamespaceData> ns) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ptr_ = std::move(ns);
  return v;
}
Value Value::Func(std::string name, const Stmt* macro) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.ptr_ = std::make_shared<Function>(Function{std::move(name), macro});
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list().items.empty();
    case Kind::kDict:
      return !dict().items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list().tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

int Depth(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.list().depth;
    case Value::Kind::kDict:
      return v.dict().depth;
    case Value::Kind::kNamespace:
      return 1;
    default:
      return 0;
  }
}

bool HoldsNamespace(const Value& v) {
  if (v.kind() == Value::Kind::kNamespace) return true;
  if (v.is_list()) return std::any_of(v.list().items.begin(), v.list().items.end(), HoldsNamespace);
  if (v.is_dict()) {
    for (const auto& kv : v.dict().items)
      if (HoldsNamespace(kv.second)) return true;
  }
  return false;
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  // The shortest round-trip digits, then Python's layout: positional for exponents -4..15.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {  // -4 <= exp < 16
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + eb;
}

Status AppendStr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Status::Ok();
    case Value::Kind::kString:
      *out += v.str();
      return Status::Ok();
    default:
      return AppendRepr(v, out);
  }
}

Status AppendRepr(const Value& v, std::string* out, int depth) {
  if (depth > 2 * kMaxDepth + 2) return TooDeep();
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      break;
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      AppendScalar(v, false, out);
      break;
    case Value::Kind::kString:
      AppendStrRepr(v.str(), out);
      break;
    case Value::Kind::kList: {
      const ListData& l = v.list();
      out->push_back(l.tuple ? '(' : '[');
      for (size_t k = 0; k < l.items.size(); ++k) {
        if (k) *out += ", ";
        LLMQ_RETURN_IF_ERROR(AppendRepr(l.items[k], out, depth + 1));
        if (out->size() > kMaxOutput) return Status::InvalidArgument("output too large");
      }
      if (l.tuple && l.items.size() == 1) out->push_back(',');
      out->push_back(l.tuple ? ')' : ']');
      break;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const auto& items = v.is_dict() ? v.dict().items : v.ns().attrs;
      *out += v.is_dict() ? "{" : "<Namespace {";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) *out += ", ";
        AppendStrRepr(items[k].first, out);
        *out += ": ";
        LLMQ_RETURN_IF_ERROR(AppendRepr(items[k].second, out, depth + 1));
        if (out->size() > kMaxOutput) return Status::InvalidArgument("output too large");
      }
      *out += v.is_dict() ? "}" : "}>";
      break;
    }
    case Value::Kind::kFunction:
      *out += "<function " + v.func().name + ">";
      break;
  }
  return Status::Ok();
}

Status AppendJson(const Value& v, const JsonOptions& o, std::string* out, int depth) {
  if (depth > 2 * kMaxDepth + 2) return TooDeep();
  if (out->size() > kMaxOutput) return Status::InvalidArgument("output too large");
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * level, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined:  // Python's json.dumps refuses jinja2's Undefined
      return Status::InvalidArgument("Object of type Undefined is not JSON serializable");
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      AppendScalar(v, true, out);
      break;
    case Value::Kind::kString:
      AppendJsonString(v.str(), out);
      break;
    case Value::Kind::kList: {
      const auto& items = v.list().items;
      out->push_back('[');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) *out += o.item_sep;
        newline(depth + 1);
        LLMQ_RETURN_IF_ERROR(AppendJson(items[k], o, out, depth + 1));
      }
      if (!items.empty()) newline(depth);
      out->push_back(']');
      break;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.is_dict() ? v.dict().items : v.ns().attrs) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out->push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) *out += o.item_sep;
        newline(depth + 1);
        AppendJsonString(items[k]->first, out);
        *out += o.key_sep;
        LLMQ_RETURN_IF_ERROR(AppendJson(items[k]->second, o, out, depth + 1));
      }
      if (!items.empty()) newline(depth);
      out->push_back('}');
      break;
    }
    case Value::Kind::kFunction:
      return Status::InvalidArgument("Object of type function is not JSON serializable");
  }
  return Status::Ok();
}

bool Equals(const Value& a, const Value& b, int depth) {
  if (depth > 2 * kMaxDepth + 2) return false;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.f() == b.f();
    return a.i() == b.i();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      const auto &x = a.list().items, &y = b.list().items;
      if (x.size() != y.size() || a.list().tuple != b.list().tuple) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (!Equals(x[k], y[k], depth + 1)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.dict().items;
      const DictData& y = b.dict();
      if (x.size() != y.items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = y.Find(k);
        if (!w || !Equals(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.ns() == &b.ns();
    case Value::Kind::kFunction:
      return &a.func() == &b.func();
    default:
      return false;
  }
}

Status Compare(const Value& a, const Value& b, int* cmp, int depth) {
  if (depth > 2 * kMaxDepth + 2) return TooDeep();
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      *cmp = a.f() < b.f() ? -1 : a.f() > b.f() ? 1 : 0;
    } else {
      *cmp = a.i() < b.i() ? -1 : a.i() > b.i() ? 1 : 0;
    }
    return Status::Ok();
  }
  if (a.is_string() && b.is_string()) {  // UTF-8 byte order is code point order
    *cmp = Sign(a.str().compare(b.str()));
    return Status::Ok();
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (Equals(x[k], y[k], depth + 1)) continue;
      return Compare(x[k], y[k], cmp, depth + 1);
    }
    *cmp = Sign(static_cast<int64_t>(x.size()) - static_cast<int64_t>(y.size()));
    return Status::Ok();
  }
  return Status::InvalidArgument(std::string("'<' not supported between instances of '") +
                                 a.TypeName() + "' and '" + b.TypeName() + "'");
}

template <class Json>
Status FromJson(const Json& j, Value* out, int depth) {
  if (depth > kMaxDepth) return Status::InvalidArgument("context nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      *out = Value::None();
      break;
    case nlohmann::json::value_t::boolean:
      *out = Value::Bool(j.template get<bool>());
      break;
    case nlohmann::json::value_t::number_integer:
      *out = Value::Int(j.template get<int64_t>());
      break;
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      *out = u > static_cast<uint64_t>(INT64_MAX) ? Value::Float(static_cast<double>(u))
                                                  : Value::Int(static_cast<int64_t>(u));
      break;
    }
    case nlohmann::json::value_t::number_float:
      *out = Value::Float(j.template get<double>());
      break;
    case nlohmann::json::value_t::string:
      *out = Value::Str(j.template get<std::string>());
      break;
    case nlohmann::json::value_t::array: {
      std::vector<Value> items(j.size());
      for (size_t k = 0; k < j.size(); ++k)
        LLMQ_RETURN_IF_ERROR(FromJson(j[k], &items[k], depth + 1));
      *out = Value::List(std::move(items));
      break;
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (auto it = j.begin(); it != j.end(); ++it) {
        items.emplace_back(it.key(), Value());
        LLMQ_RETURN_IF_ERROR(FromJson(it.value(), &items.back().second, depth + 1));
      }
      *out = Value::Dict(std::move(items));
      break;
    }
    default:
      return Status::InvalidArgument("context holds a value JSON has no type for");
  }
  return Status::Ok();
}

template Status FromJson(const nlohmann::json&, Value*, int);
template Status FromJson(const nlohmann::ordered_json&, Value*, int);

}  // namespace llmq::jinja
