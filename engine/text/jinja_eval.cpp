#include "engine/text/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "engine/text/jinja_builtins.h"

namespace llmq::jinja {

namespace {

using Kind = Value::Kind;
using EK = Expr::Kind;
using SK = Stmt::Kind;

// How deep Exec and Eval may recurse together (macro calls included): bounds the stack.
constexpr int kMaxRecursion = 1200;

const char* const kGlobals[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

class Renderer {
 public:
  Renderer(const std::string& origin, const Value& context) : origin_(origin), context_(context) {}

  Status Run(const Body& body, std::string* out) {
    scopes_.emplace_back();
    out_ = out;
    return ExecBody(body);
  }

 private:
  using Scope = std::vector<std::pair<std::string, Value>>;
  enum class Flow { kNormal, kBreak, kContinue };

  // Counts recursion for the lifetime of one Exec or Eval.
  struct Guard {
    explicit Guard(int* d) : d_(d) { ++*d_; }
    ~Guard() { --*d_; }
    int* d_;
  };

  Status At(int line, const std::string& what) const {
    return Status::InvalidArgument(origin_ + ":" + std::to_string(line) + ": " + what);
  }
  // A builtin's bare error, with the template and line added.
  Status At(int line, const Status& s) const { return s.ok() ? s : At(line, s.message()); }

  Status Step(int line, int64_t n = 1) {
    steps_ += n;
    if (steps_ > kMaxSteps)
      return At(line,
                "the template ran too long (more than " + std::to_string(kMaxSteps) + " steps)");
    return Status::Ok();
  }

  // Accounts a value just created against the allocation budget and the size limits.
  Status Charge(int line, const Value& v) {
    int64_t bytes = 0;
    if (v.is_string()) {
      if (v.str().size() > kMaxString) return At(line, "string too large");
      bytes = static_cast<int64_t>(v.str().size());
    } else if (v.is_list()) {
      if (v.list().items.size() > kMaxList) return At(line, "list too large");
      bytes = static_cast<int64_t>(v.list().items.size() * sizeof(Value));
    } else if (v.is_dict()) {
      if (v.dict().items.size() > kMaxList) return At(line, "dict too large");
      bytes = static_cast<int64_t>(v.dict().items.size() * (sizeof(Value) + 32));
    }
    if (Depth(v) > kMaxDepth) return At(line, "values nested too deeply");
    allocated_ += bytes;
    if (allocated_ > kMaxAllocated) return At(line, "the template allocated too much memory");
    return Step(line, bytes / 64);
  }

  Status Write(int line, std::string_view s) {
    if (out_->size() + s.size() > kMaxOutput)
      return At(line, "output larger than " + std::to_string(kMaxOutput >> 20) + " MB");
    out_->append(s);
    return Status::Ok();
  }

  static Value* FindIn(Scope& scope, std::string_view name) {
    for (auto& [k, v] : scope)
      if (k == name) return &v;
    return nullptr;
  }

  // The variable `name`: the running macro's scopes, the top level, the context, the globals.
  Value Lookup(const std::string& name) {
    for (size_t k = scopes_.size(); k-- > base_;)
      if (Value* v = FindIn(scopes_[k], name)) return *v;
    if (base_ > 0)
      if (Value* v = FindIn(scopes_[0], name)) return *v;
    if (const Value* v = context_.dict().Find(name)) return *v;
    for (const char* g : kGlobals)
      if (name == g) return Value::Func(name, nullptr);
    return Value::Undefined(name);
  }

  void Assign(const std::string& name, Value v) {
    if (Value* old = FindIn(scopes_.back(), name)) {
      *old = std::move(v);
    } else {
      scopes_.back().emplace_back(name, std::move(v));
    }
  }

  // Binds `v` to `targets`: one name, or several unpacking a sequence of as many items.
  Status AssignTargets(int line, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      Assign(targets[0], v);
      return Status::Ok();
    }
    std::vector<Value> items;
    LLMQ_RETURN_IF_ERROR(At(line, Iterate(v, &items)));
    if (items.size() != targets.size())
      return At(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) Assign(targets[k], items[k]);
    return Status::Ok();
  }

  Status ExecBody(const Body& body) {
    for (const auto& s : body) {
      LLMQ_RETURN_IF_ERROR(Exec(*s));
      if (flow_ != Flow::kNormal) break;
    }
    return Status::Ok();
  }

  // Runs `body` with its output captured in *text instead of written.
  Status Capture(const Body& body, std::string* text) {
    std::string* saved = out_;
    out_ = text;
    const Status st = ExecBody(body);
    out_ = saved;
    return st;
  }

  Status Exec(const Stmt& s) {
    Guard g(&depth_);
    if (depth_ > kMaxRecursion) return At(s.line, "template recursion too deep");
    LLMQ_RETURN_IF_ERROR(Step(s.line));
    switch (s.kind) {
      case SK::kText:
        return Write(s.line, s.text);
      case SK::kOutput: {
        Value v;
        LLMQ_RETURN_IF_ERROR(Eval(*s.exprs[0], &v));
        std::string text;
        LLMQ_RETURN_IF_ERROR(At(s.line, AppendStr(v, &text)));
        return Write(s.line, text);
      }
      case SK::kIf:
        for (size_t k = 0; k < s.exprs.size(); ++k) {
          Value c;
          LLMQ_RETURN_IF_ERROR(Eval(*s.exprs[k], &c));
          if (c.Truthy()) return ExecBody(s.bodies[k]);
        }
        if (s.bodies.size() > s.exprs.size()) return ExecBody(s.bodies.back());
        return Status::Ok();
      case SK::kFor:
        return ExecFor(s);
      case SK::kSet: {
        Value v;
        LLMQ_RETURN_IF_ERROR(Eval(*s.exprs[0], &v));
        if (s.attr.empty()) return AssignTargets(s.line, s.targets, v);
        Value target = Lookup(s.targets[0]);
        if (target.kind() != Kind::kNamespace)
          return At(s.line,
                    "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
        if (HoldsNamespace(v)) return At(s.line, "unsupported: a namespace holding a namespace");
        auto& attrs = target.ns().attrs;
        for (auto& [k, old] : attrs) {
          if (k == s.attr) {
            old = v;
            return Status::Ok();
          }
        }
        attrs.emplace_back(s.attr, v);
        return Status::Ok();
      }
      case SK::kSetBlock: {
        std::string text;
        LLMQ_RETURN_IF_ERROR(Capture(s.bodies[0], &text));
        Value v = Value::Str(std::move(text));
        LLMQ_RETURN_IF_ERROR(Charge(s.line, v));
        Assign(s.text, std::move(v));
        return Status::Ok();
      }
      case SK::kMacro:
        Assign(s.text, Value::Func(s.text, &s));
        return Status::Ok();
      case SK::kBreak:
        flow_ = Flow::kBreak;
        return Status::Ok();
      case SK::kContinue:
        flow_ = Flow::kContinue;
        return Status::Ok();
      case SK::kGeneration:
        return ExecBody(s.bodies[0]);
    }
    return Status::Ok();
  }

  Status ExecFor(const Stmt& s) {
    Value iterable;
    LLMQ_RETURN_IF_ERROR(Eval(*s.exprs[0], &iterable));
    std::vector<Value> items;
    LLMQ_RETURN_IF_ERROR(At(s.line, Iterate(iterable, &items)));
    scopes_.emplace_back();
    if (s.exprs.size() > 1) {  // `for x in xs if cond`: the loop sees only the items kept
      std::vector<Value> kept;
      for (const Value& item : items) {
        LLMQ_RETURN_IF_ERROR(Step(s.line));
        LLMQ_RETURN_IF_ERROR(AssignTargets(s.line, s.targets, item));
        Value c;
        LLMQ_RETURN_IF_ERROR(Eval(*s.exprs[1], &c));
        if (c.Truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      LLMQ_RETURN_IF_ERROR(Step(s.line));
      LLMQ_RETURN_IF_ERROR(AssignTargets(s.line, s.targets, items[static_cast<size_t>(k)]));
      std::vector<std::pair<std::string, Value>> loop = {
          {"index", Value::Int(k + 1)},    {"index0", Value::Int(k)},
          {"revindex", Value::Int(n - k)}, {"revindex0", Value::Int(n - k - 1)},
          {"first", Value::Bool(k == 0)},  {"last", Value::Bool(k == n - 1)},
          {"length", Value::Int(n)},       {"depth", Value::Int(1)},
          {"depth0", Value::Int(0)}};
      if (k > 0) loop.emplace_back("previtem", items[static_cast<size_t>(k - 1)]);
      if (k + 1 < n) loop.emplace_back("nextitem", items[static_cast<size_t>(k + 1)]);
      Assign("loop", Value::Dict(std::move(loop)));
      LLMQ_RETURN_IF_ERROR(ExecBody(s.bodies[0]));
      const Flow f = flow_;
      flow_ = Flow::kNormal;
      if (f == Flow::kBreak) break;
    }
    scopes_.pop_back();
    if (n == 0 && s.bodies.size() > 1) return ExecBody(s.bodies[1]);
    return Status::Ok();
  }

  Status EvalArgs(const Expr& e, Args* a) {
    a->pos.resize(e.args.size());
    for (size_t k = 0; k < e.args.size(); ++k) LLMQ_RETURN_IF_ERROR(Eval(*e.args[k], &a->pos[k]));
    for (size_t k = 0; k < e.kwargs.size(); ++k) {
      a->kw.emplace_back(e.kwnames[k], Value());
      LLMQ_RETURN_IF_ERROR(Eval(*e.kwargs[k], &a->kw.back().second));
    }
    return Status::Ok();
  }

  // Work a builtin does in proportion to its input, charged as steps.
  static int64_t Work(const Value& v) {
    if (v.is_list()) return static_cast<int64_t>(v.list().items.size());
    if (v.is_dict()) return static_cast<int64_t>(v.dict().items.size());
    if (v.is_string()) return static_cast<int64_t>(v.str().size() / 64);
    return 0;
  }

  Status Eval(const Expr& e, Value* out) {
    Guard g(&depth_);
    if (depth_ > kMaxRecursion) return At(e.line, "template recursion too deep");
    LLMQ_RETURN_IF_ERROR(Step(e.line));
    switch (e.kind) {
      case EK::kLiteral:
        *out = e.value;
        return Status::Ok();
      case EK::kName:
        *out = Lookup(e.name);
        return Status::Ok();
      case EK::kList:
      case EK::kTuple: {
        std::vector<Value> items(e.args.size());
        for (size_t k = 0; k < e.args.size(); ++k)
          LLMQ_RETURN_IF_ERROR(Eval(*e.args[k], &items[k]));
        *out = Value::List(std::move(items), e.kind == EK::kTuple);
        return Charge(e.line, *out);
      }
      case EK::kDict: {
        std::vector<std::pair<std::string, Value>> items;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key, v;
          LLMQ_RETURN_IF_ERROR(Eval(*e.args[k], &key));
          LLMQ_RETURN_IF_ERROR(Eval(*e.args[k + 1], &v));
          if (!key.is_string()) return At(e.line, "unsupported: a dict key that is not a string");
          auto it = std::find_if(items.begin(), items.end(),
                                 [&](auto& kv) { return kv.first == key.str(); });
          if (it != items.end())
            it->second = v;
          else
            items.emplace_back(key.str(), v);
        }
        *out = Value::Dict(std::move(items));
        return Charge(e.line, *out);
      }
      case EK::kAttr: {
        Value obj;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &obj));
        LLMQ_RETURN_IF_ERROR(At(e.line, GetItem(obj, Value::Str(e.name), out)));
        if (out->is_undefined()) *out = Value::Undefined(e.name);
        return Status::Ok();
      }
      case EK::kIndex: {
        Value obj, key;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &obj));
        LLMQ_RETURN_IF_ERROR(Eval(*e.b, &key));
        LLMQ_RETURN_IF_ERROR(At(e.line, GetItem(obj, key, out)));
        if (out->is_undefined()) {
          std::string k;
          LLMQ_RETURN_IF_ERROR(At(e.line, AppendRepr(key, &k)));
          *out = Value::Undefined("[" + k.substr(0, 64) + "]");
        }
        return Status::Ok();
      }
      case EK::kSlice: {
        Value obj, parts[3];
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &obj));
        for (int k = 0; k < 3; ++k)
          if (e.args[k]) LLMQ_RETURN_IF_ERROR(Eval(*e.args[k], &parts[k]));
        LLMQ_RETURN_IF_ERROR(Step(e.line, Work(obj)));
        LLMQ_RETURN_IF_ERROR(At(e.line, Slice(obj, parts[0], parts[1], parts[2], out)));
        return Charge(e.line, *out);
      }
      case EK::kCall:
        return EvalCall(e, out);
      case EK::kFilter: {
        Value in;
        Args a;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &in));
        LLMQ_RETURN_IF_ERROR(EvalArgs(e, &a));
        LLMQ_RETURN_IF_ERROR(Step(e.line, Work(in)));
        LLMQ_RETURN_IF_ERROR(At(e.line, ApplyFilter(e.name, in, a, out)));
        return Charge(e.line, *out);
      }
      case EK::kTest: {
        Value in;
        Args a;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &in));
        LLMQ_RETURN_IF_ERROR(EvalArgs(e, &a));
        bool r = false;
        LLMQ_RETURN_IF_ERROR(At(e.line, ApplyTest(e.name, in, a, &r)));
        *out = Value::Bool(r != e.negated);
        return Status::Ok();
      }
      case EK::kNeg:
      case EK::kPos: {
        Value v;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &v));
        if (!v.is_number())
          return At(e.line, UndefinedOr(v, std::string("bad operand type for unary ") +
                                               (e.kind == EK::kNeg ? "-" : "+") + ": '" +
                                               v.TypeName() + "'"));
        if (e.kind == EK::kPos)
          *out = v.kind() == Kind::kBool ? Value::Int(v.i()) : v;
        else if (v.kind() == Kind::kFloat)
          *out = Value::Float(-v.f());
        else if (v.i() == INT64_MIN)
          return At(e.line, "integer overflow");
        else
          *out = Value::Int(-v.i());
        return Status::Ok();
      }
      case EK::kNot: {
        Value v;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &v));
        *out = Value::Bool(!v.Truthy());
        return Status::Ok();
      }
      case EK::kAnd:
      case EK::kOr: {  // Python's: the deciding operand itself
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, out));
        if (out->Truthy() == (e.kind == EK::kOr)) return Status::Ok();
        return Eval(*e.b, out);
      }
      case EK::kCompare:
        return EvalCompare(e, out);
      case EK::kCond: {
        Value c;
        LLMQ_RETURN_IF_ERROR(Eval(*e.b, &c));
        if (c.Truthy()) return Eval(*e.a, out);
        if (e.c) return Eval(*e.c, out);
        *out = Value::Undefined("else branch");
        return Status::Ok();
      }
      case EK::kBinary: {
        Value a, b;
        LLMQ_RETURN_IF_ERROR(Eval(*e.a, &a));
        LLMQ_RETURN_IF_ERROR(Eval(*e.b, &b));
        LLMQ_RETURN_IF_ERROR(Binary(e, a, b, out));
        return Charge(e.line, *out);
      }
    }
    return Status::Ok();
  }

  // The message for an operand that is undefined, else `what`.
  static std::string UndefinedOr(const Value& v, const std::string& what) {
    return v.is_undefined() ? "'" + v.str() + "' is undefined" : what;
  }

  Status EvalCompare(const Expr& e, Value* out) {
    Value left;
    LLMQ_RETURN_IF_ERROR(Eval(*e.a, &left));
    for (size_t k = 0; k < e.ops.size(); ++k) {
      Value right;
      LLMQ_RETURN_IF_ERROR(Eval(*e.args[k], &right));
      const std::string& op = e.ops[k];
      bool r;
      if (op == "==") {
        r = Equals(left, right);
      } else if (op == "!=") {
        r = !Equals(left, right);
      } else if (op == "in" || op == "notin") {
        LLMQ_RETURN_IF_ERROR(Step(e.line, Work(right)));
        LLMQ_RETURN_IF_ERROR(At(e.line, Contains(right, left, &r)));
        if (op == "notin") r = !r;
      } else {
        if (left.is_undefined() || right.is_undefined())
          return At(e.line, UndefinedOr(left.is_undefined() ? left : right, ""));
        int c = 0;
        const Status st = Compare(left, right, &c);
        if (!st.ok())
          return At(e.line, "'" + op + "' not supported between instances of '" + left.TypeName() +
                                "' and '" + right.TypeName() + "'");
        r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      }
      if (!r) {
        *out = Value::Bool(false);
        return Status::Ok();
      }
      left = std::move(right);
    }
    *out = Value::Bool(true);
    return Status::Ok();
  }

  Status Binary(const Expr& e, const Value& a, const Value& b, Value* out) {
    const std::string& op = e.name;
    if (op == "~") {
      std::string s;
      LLMQ_RETURN_IF_ERROR(At(e.line, AppendStr(a, &s)));
      LLMQ_RETURN_IF_ERROR(At(e.line, AppendStr(b, &s)));
      *out = Value::Str(std::move(s));
      return Status::Ok();
    }
    if (a.is_undefined() || b.is_undefined())
      return At(e.line, UndefinedOr(a.is_undefined() ? a : b, ""));
    const std::string type_error = "unsupported operand type(s) for " + op + ": '" + a.TypeName() +
                                   "' and '" + b.TypeName() + "'";
    if (op == "+" && a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > kMaxString) return At(e.line, "string too large");
      *out = Value::Str(a.str() + b.str());
      return Status::Ok();
    }
    if (op == "+" && a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
      if (a.list().items.size() + b.list().items.size() > kMaxList)
        return At(e.line, "list too large");
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      *out = Value::List(std::move(items), a.list().tuple);
      return Status::Ok();
    }
    if (op == "*" && ((a.is_string() || a.is_list()) != (b.is_string() || b.is_list()))) {
      const Value& seq = a.is_string() || a.is_list() ? a : b;
      const Value& count = a.is_string() || a.is_list() ? b : a;
      if (count.kind() != Kind::kInt && count.kind() != Kind::kBool) return At(e.line, type_error);
      const int64_t n = std::max<int64_t>(0, count.i());
      const size_t unit = seq.is_string() ? seq.str().size() : seq.list().items.size();
      if (unit && static_cast<uint64_t>(n) > (seq.is_string() ? kMaxString : kMaxList) / unit)
        return At(e.line, seq.is_string() ? "string too large" : "list too large");
      if (seq.is_string()) {
        std::string s;
        s.reserve(unit * static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k) s += seq.str();
        *out = Value::Str(std::move(s));
      } else {
        std::vector<Value> items;
        for (int64_t k = 0; k < n; ++k)
          items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
        *out = Value::List(std::move(items), seq.list().tuple);
      }
      return Status::Ok();
    }
    if (!a.is_number() || !b.is_number()) return At(e.line, type_error);
    const bool ints = a.kind() != Kind::kFloat && b.kind() != Kind::kFloat;
    const int64_t x = a.i(), y = b.i();
    const double fx = a.f(), fy = b.f();
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      if (ints) {
        const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                              : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                          : __builtin_mul_overflow(x, y, &r);
        if (overflow) return At(e.line, "integer overflow");
        *out = Value::Int(r);
      } else {
        *out = Value::Float(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
      }
      return Status::Ok();
    }
    if (op == "/") {
      if (fy == 0) return At(e.line, "division by zero");
      *out = Value::Float(fx / fy);
      return Status::Ok();
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0)
          return At(e.line, op == "//" ? "integer division by zero" : "integer modulo by zero");
        if (x == INT64_MIN && y == -1) return At(e.line, "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
          --q;
          m += y;
        }
        *out = Value::Int(op == "//" ? q : m);
      } else {
        if (fy == 0) return At(e.line, "float division by zero");
        const double q = std::floor(fx / fy);
        double m = std::fmod(fx, fy);
        if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
        *out = Value::Float(op == "//" ? q : m);
      }
      return Status::Ok();
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t p = 1, base = x;
        for (int64_t k = y; k > 0; k >>= 1) {  // squaring: at most 63 rounds
          if (k & 1 && __builtin_mul_overflow(p, base, &p)) return At(e.line, "integer overflow");
          if (k > 1 && __builtin_mul_overflow(base, base, &base)) {
            if (p == 0) break;
            return At(e.line, "integer overflow");
          }
        }
        *out = Value::Int(p);
      } else {
        if (fx == 0 && fy < 0) return At(e.line, "0.0 cannot be raised to a negative power");
        *out = Value::Float(std::pow(fx, fy));
      }
      return Status::Ok();
    }
    return At(e.line, type_error);
  }

  Status EvalCall(const Expr& e, Value* out) {
    if (e.a->kind == EK::kAttr) {  // a method: x.name(args)
      Value obj;
      Args a;
      LLMQ_RETURN_IF_ERROR(Eval(*e.a->a, &obj));
      LLMQ_RETURN_IF_ERROR(EvalArgs(e, &a));
      LLMQ_RETURN_IF_ERROR(Step(e.line, Work(obj)));
      LLMQ_RETURN_IF_ERROR(At(e.line, CallMethod(obj, e.a->name, a, out)));
      return Charge(e.line, *out);
    }
    Value callee;
    LLMQ_RETURN_IF_ERROR(Eval(*e.a, &callee));
    if (callee.kind() != Kind::kFunction) {
      if (callee.is_undefined()) return At(e.line, "'" + callee.str() + "' is undefined");
      return At(e.line, std::string("'") + callee.TypeName() + "' object is not callable");
    }
    Args a;
    LLMQ_RETURN_IF_ERROR(EvalArgs(e, &a));
    const Function& f = callee.func();
    if (f.macro) return CallMacro(e.line, *f.macro, a, out);
    if (f.name == "raise_exception") {
      std::string msg;
      if (!a.pos.empty()) LLMQ_RETURN_IF_ERROR(At(e.line, AppendStr(a.pos[0], &msg)));
      return Status::InvalidArgument(origin_ + ": the template raised: " + msg);
    }
    if (f.name == "namespace" || f.name == "dict") {
      std::vector<std::pair<std::string, Value>> attrs;
      for (const Value& p : a.pos) {  // namespace({...}) / dict({...}) start from a mapping
        if (!p.is_dict()) return At(e.line, f.name + "() takes a mapping and keyword arguments");
        for (const auto& kv : p.dict().items) attrs.push_back(kv);
      }
      for (const auto& kv : a.kw) attrs.push_back(kv);
      if (f.name == "dict") {
        *out = Value::Dict(std::move(attrs));
        return Charge(e.line, *out);
      }
      for (const auto& kv : attrs)
        if (HoldsNamespace(kv.second))
          return At(e.line, "unsupported: a namespace holding a namespace");
      auto ns = std::make_shared<NamespaceData>();
      ns->attrs = std::move(attrs);
      *out = Value::Namespace(std::move(ns));
      return Status::Ok();
    }
    if (f.name == "range") return Range(e.line, a, out);
    if (f.name == "strftime_now") {
      if (a.pos.size() != 1 || !a.pos[0].is_string())
        return At(e.line, "strftime_now takes a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      std::string buf(256 + a.pos[0].str().size() * 8, '\0');
      if (a.pos[0].str().size() > 4096) return At(e.line, "strftime_now format too long");
      const size_t n = std::strftime(buf.data(), buf.size(), a.pos[0].str().c_str(), &tm);
      buf.resize(n);
      *out = Value::Str(std::move(buf));
      return Status::Ok();
    }
    return At(e.line, "'" + f.name + "' is not callable");
  }

  Status Range(int line, const Args& a, Value* out) {
    if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
      return At(line, "range takes 1 to 3 integers");
    for (const Value& v : a.pos)
      if (v.kind() != Kind::kInt && v.kind() != Kind::kBool)
        return At(line, UndefinedOr(v, std::string("'") + v.TypeName() +
                                           "' object cannot be interpreted as an integer"));
    const int64_t start = a.pos.size() == 1 ? 0 : a.pos[0].i();
    const int64_t stop = a.pos.size() == 1 ? a.pos[0].i() : a.pos[1].i();
    const int64_t step = a.pos.size() == 3 ? a.pos[2].i() : 1;
    if (step == 0) return At(line, "range() arg 3 must not be zero");
    const long double count =
        std::max<long double>(0, std::ceil((static_cast<long double>(stop) - start) / step));
    if (count > kMaxList) return At(line, "range too large");
    std::vector<Value> items;
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k)
      items.push_back(Value::Int(start + k * step));
    *out = Value::List(std::move(items));
    return Charge(line, *out);
  }

  Status CallMacro(int line, const Stmt& m, const Args& a, Value* out) {
    if (a.pos.size() > m.params.size())
      return At(line,
                "macro '" + m.text + "' takes " + std::to_string(m.params.size()) + " arguments");
    Scope scope;
    for (size_t k = 0; k < m.params.size(); ++k) {
      Value v;
      bool bound = k < a.pos.size();
      if (bound) v = a.pos[k];
      for (const auto& [key, val] : a.kw) {
        if (key != m.params[k]) continue;
        if (bound) return At(line, "macro '" + m.text + "' got multiple values for '" + key + "'");
        v = val;
        bound = true;
      }
      if (!bound) {
        v = Value::Undefined(m.params[k]);
        if (m.defaults[k]) LLMQ_RETURN_IF_ERROR(Eval(*m.defaults[k], &v));
      }
      scope.emplace_back(m.params[k], v);
    }
    for (const auto& kv : a.kw)
      if (std::find(m.params.begin(), m.params.end(), kv.first) == m.params.end())
        return At(line,
                  "macro '" + m.text + "' got an unexpected keyword argument '" + kv.first + "'");
    const size_t saved_base = base_;
    const Flow saved_flow = flow_;
    base_ = scopes_.size();
    scopes_.push_back(std::move(scope));
    std::string text;
    Status st = Capture(m.bodies[0], &text);
    scopes_.pop_back();
    base_ = saved_base;
    flow_ = saved_flow;
    LLMQ_RETURN_IF_ERROR(st);
    *out = Value::Str(std::move(text));
    return Charge(line, *out);
  }

  const std::string& origin_;
  const Value& context_;
  std::vector<Scope> scopes_;  // scopes_[0]: the template's top level
  size_t base_ = 0;            // the running macro's first scope (0 outside macros)
  std::string* out_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
  int64_t steps_ = 0;
  int64_t allocated_ = 0;
};

}  // namespace

Status RenderProgram(const Program& program, const std::string& origin, const Value& context,
                     std::string* out) {
  out->clear();
  if (!context.is_dict())
    return Status::InvalidArgument(origin + ": the context must be a JSON object");
  Renderer r(origin, context);
  Status st = r.Run(program.body, out);
  if (!st.ok()) out->clear();
  return st;
}

}  // namespace llmq::jinja
