// The values a Jinja template computes with, and what Python does with them: truthiness, str(),
// repr(), ==, <, and json.dumps (transformers' tojson). Internal to the interpreter (jinja.h).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace llmq::jinja {

// Limits that keep a hostile template or context from exhausting the process. The fuzz target
// builds with LLMQ_JINJA_SMALL_LIMITS: the same checks, reached sooner.
inline constexpr int kMaxDepth = 200;  // nesting of syntax and of values
#ifndef LLMQ_JINJA_SMALL_LIMITS
inline constexpr size_t kMaxOutput = 64u << 20;        // bytes rendered
inline constexpr size_t kMaxString = 64u << 20;        // bytes of one string value
inline constexpr size_t kMaxList = 1u << 20;           // items of one list or dict
inline constexpr int64_t kMaxSteps = 5'000'000;        // loop iterations, calls and nodes run
inline constexpr int64_t kMaxAllocated = 512ll << 20;  // bytes of values created by one render
#else
inline constexpr size_t kMaxOutput = 1u << 20;
inline constexpr size_t kMaxString = 1u << 20;
inline constexpr size_t kMaxList = 1u << 16;
inline constexpr int64_t kMaxSteps = 200'000;
inline constexpr int64_t kMaxAllocated = 64ll << 20;
#endif

class Value;
struct Stmt;

// A list or tuple. Immutable once built: values share it.
struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // printed (a, b) rather than [a, b]
  int depth = 1;       // 1 + the deepest item's depth (see Depth)
};

// A dict with string keys in insertion order (Python's), immutable once built.
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  int depth = 1;  // 1 + the deepest value's depth (see Depth)
  const Value* Find(std::string_view key) const;
};

// namespace(): the one mutable object (`{% set ns.x = ... %}`). It never holds another namespace,
// so values cannot form cycles (shared_ptr would leak them) and stay boundedly deep.
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
};

// A function value: a builtin global (range, namespace...) or a macro of the template.
struct Function {
  std::string name;
  const Stmt* macro = nullptr;  // null for a builtin
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value Str(std::string s);
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(std::vector<std::pair<std::string, Value>> items);
  static Value Namespace(std::shared_ptr<NamespaceData> ns);
  static Value Func(std::string name, const Stmt* macro);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool b() const { return b_; }
  int64_t i() const { return kind_ == Kind::kBool ? b_ : i_; }
  double f() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i()); }
  // The payload of a string (or an undefined's name), list, dict, namespace or function: the
  // kind says which type ptr_ points to.
  const std::string& str() const {
    static const std::string kNone;  // a default-constructed undefined has no name
    return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : kNone;
  }
  const ListData& list() const { return *static_cast<const ListData*>(ptr_.get()); }
  const DictData& dict() const { return *static_cast<const DictData*>(ptr_.get()); }
  NamespaceData& ns() const { return *static_cast<NamespaceData*>(ptr_.get()); }
  const Function& func() const { return *static_cast<const Function*>(ptr_.get()); }

  // Python's bool().
  bool Truthy() const;
  // Python's type name, for errors ("str", "list", "dict", "NoneType"...).
  const char* TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> ptr_;  // immutable but for a namespace's
};

// How deeply `v` nests lists and dicts (0 for a scalar, 1 for a namespace: it holds no
// namespace and what it holds was at most kMaxDepth deep when assigned, so a value's true
// nesting stays below 2 * kMaxDepth + 2). Cached when a list or dict is built: O(1).
int Depth(const Value& v);
// Whether `v` is or holds a namespace.
bool HoldsNamespace(const Value& v);

// Python's str(v) appended to *out (undefined prints as nothing); repr(v) for Repr.
Status AppendStr(const Value& v, std::string* out);
Status AppendRepr(const Value& v, std::string* out, int depth = 0);
// Python's repr(float): the shortest digits that round-trip, "1.0", "1e+16", "inf", "nan".
std::string FloatRepr(double f);

// json.dumps(v, ensure_ascii=False, indent=indent (<0: none), separators, sort_keys).
struct JsonOptions {
  int indent = -1;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
Status AppendJson(const Value& v, const JsonOptions& o, std::string* out, int depth = 0);

// Python's == (1 == 1.0 == True; lists and dicts compare deeply).
bool Equals(const Value& a, const Value& b, int depth = 0);
// Python's <, > ...: *cmp is -1, 0 or 1; an error for types Python cannot order.
Status Compare(const Value& a, const Value& b, int* cmp, int depth = 0);

// A JSON context as values (objects keep the order the json type iterates them in).
template <class Json>
Status FromJson(const Json& j, Value* out, int depth = 0);

}  // namespace llmq::jinja
