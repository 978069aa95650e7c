#include "engine/text/jinja_parser.h"

#include <charconv>
#include <cstdlib>

#include "engine/text/jinja_builtins.h"
#include "engine/text/jinja_lexer.h"

namespace llmq::jinja {

namespace {

using EPtr = std::unique_ptr<Expr>;
using TK = Token::Kind;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : toks_(std::move(tokens)), origin_(origin) {}

  Status Run(Program* out) {
    std::string end;
    LLMQ_RETURN_IF_ERROR(ParseBody({}, &out->body, &end));
    return Status::Ok();
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Next() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  bool IsOp(const char* op) const { return Cur().kind == TK::kOp && Cur().text == op; }
  bool IsName(const char* n) const { return Cur().kind == TK::kName && Cur().text == n; }
  void Skip() {
    if (Cur().kind != TK::kEof) ++pos_;
  }

  Status Error(int line, const std::string& what) const {
    return Status::InvalidArgument(origin_ + ":" + std::to_string(line) + ": " + what);
  }
  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case TK::kEof:
        return "end of template";
      case TK::kBlockEnd:
        return "'%}'";
      case TK::kVarEnd:
        return "'}}'";
      case TK::kString:
        return "string";
      case TK::kText:
        return "template text";
      default:
        return "'" + t.text + "'";
    }
  }
  Status Expected(const std::string& what) const {
    return Error(Cur().line, "expected " + what + ", found " + Describe(Cur()));
  }
  Status ExpectOp(const char* op) {
    if (!IsOp(op)) return Expected(std::string("'") + op + "'");
    Skip();
    return Status::Ok();
  }
  Status ExpectBlockEnd() {
    if (Cur().kind != TK::kBlockEnd) return Expected("'%}'");
    Skip();
    return Status::Ok();
  }
  Status ExpectName(std::string* name) {
    if (Cur().kind != TK::kName) return Expected("a name");
    *name = Cur().text;
    Skip();
    return Status::Ok();
  }

  // Records the subtree's height and refuses one so deep its evaluation could exhaust the stack.
  Status Seal(Expr* e) {
    int d = 0;
    for (const Expr* x : {e->a.get(), e->b.get(), e->c.get()})
      if (x) d = std::max(d, x->depth);
    for (const auto& x : e->args)
      if (x) d = std::max(d, x->depth);
    for (const auto& x : e->kwargs) d = std::max(d, x->depth);
    e->depth = d + 1;
    if (e->depth > kMaxDepth) return Error(e->line, "expression nested too deeply");
    return Status::Ok();
  }
  EPtr New(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Statements up to one of the tags in `ends` (its name in *end, the tag's name consumed), or
  // the end of the template when `ends` is empty.
  Status ParseBody(const std::vector<std::string>& ends, Body* body, std::string* end) {
    if (++depth_ > kMaxDepth) return Error(Cur().line, "blocks nested too deeply");
    while (true) {
      const Token& t = Cur();
      if (t.kind == TK::kEof) {
        if (ends.empty()) break;
        return Error(t.line, "expected '" + ends.front() + "', found end of template");
      }
      if (t.kind == TK::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body->push_back(std::move(s));
        Skip();
      } else if (t.kind == TK::kVarBegin) {
        Skip();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->exprs.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseTuple(&s->exprs[0], true));
        if (Cur().kind != TK::kVarEnd) return Expected("'}}'");
        Skip();
        body->push_back(std::move(s));
      } else if (t.kind == TK::kBlockBegin) {
        Skip();
        if (Cur().kind != TK::kName) return Expected("a tag name");
        const std::string tag = Cur().text;
        for (const std::string& e : ends) {
          if (tag == e) {
            *end = tag;
            Skip();
            --depth_;
            return Status::Ok();
          }
        }
        std::unique_ptr<Stmt> s;
        LLMQ_RETURN_IF_ERROR(ParseTag(ends, &s));
        body->push_back(std::move(s));
      } else {
        return Expected("template text or a tag");
      }
    }
    --depth_;
    return Status::Ok();
  }

  // A tag's statement; the current token is its name.
  Status ParseTag(const std::vector<std::string>& ends, std::unique_ptr<Stmt>* out) {
    const std::string tag = Cur().text;
    auto s = std::make_unique<Stmt>();
    s->line = Cur().line;
    Skip();
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      std::string end = "elif";
      while (end == "elif") {
        s->exprs.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseTuple(&s->exprs.back(), true));
        LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
        s->bodies.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseBody({"endif", "elif", "else"}, &s->bodies.back(), &end));
      }
      if (end == "else") {
        LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
        s->bodies.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseBody({"endif"}, &s->bodies.back(), &end));
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        if (IsOp(",")) Skip();
        if (IsOp("(")) return Error(Cur().line, "unsupported loop target: nested tuple");
        s->targets.emplace_back();
        LLMQ_RETURN_IF_ERROR(ExpectName(&s->targets.back()));
      } while (IsOp(","));
      if (!IsName("in")) return Expected("'in'");
      Skip();
      s->exprs.emplace_back();
      LLMQ_RETURN_IF_ERROR(ParseTuple(&s->exprs[0], false));
      if (IsName("if")) {
        Skip();
        s->exprs.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseCond(&s->exprs[1]));
      }
      if (IsName("recursive")) return Error(Cur().line, "unsupported loop option 'recursive'");
      LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      std::string end;
      ++loops_;
      Status st = ParseBody({"endfor", "else"}, &s->bodies[0], &end);
      --loops_;
      LLMQ_RETURN_IF_ERROR(st);
      if (end == "else") {
        LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
        s->bodies.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseBody({"endfor"}, &s->bodies[1], &end));
      }
    } else if (tag == "set") {
      std::string name;
      LLMQ_RETURN_IF_ERROR(ExpectName(&name));
      s->kind = Stmt::Kind::kSet;
      s->targets.push_back(name);
      if (IsOp(".")) {
        Skip();
        LLMQ_RETURN_IF_ERROR(ExpectName(&s->attr));
      } else {
        while (IsOp(",")) {
          Skip();
          s->targets.emplace_back();
          LLMQ_RETURN_IF_ERROR(ExpectName(&s->targets.back()));
        }
      }
      if (Cur().kind == TK::kBlockEnd && s->attr.empty() && s->targets.size() == 1) {
        Skip();
        s->kind = Stmt::Kind::kSetBlock;
        s->text = name;
        s->bodies.emplace_back();
        std::string end;
        LLMQ_RETURN_IF_ERROR(ParseBody({"endset"}, &s->bodies[0], &end));
      } else {
        LLMQ_RETURN_IF_ERROR(ExpectOp("="));
        s->exprs.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseTuple(&s->exprs[0], true));
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::kMacro;
      LLMQ_RETURN_IF_ERROR(ExpectName(&s->text));
      LLMQ_RETURN_IF_ERROR(ExpectOp("("));
      while (!IsOp(")")) {
        s->params.emplace_back();
        LLMQ_RETURN_IF_ERROR(ExpectName(&s->params.back()));
        s->defaults.emplace_back();
        if (IsOp("=")) {
          Skip();
          LLMQ_RETURN_IF_ERROR(ParseCond(&s->defaults.back()));
        }
        if (!IsOp(",")) break;
        Skip();
      }
      LLMQ_RETURN_IF_ERROR(ExpectOp(")"));
      LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      std::string end;
      const int loops = loops_;
      loops_ = 0;  // break/continue do not cross a macro
      Status st = ParseBody({"endmacro"}, &s->bodies[0], &end);
      loops_ = loops;
      LLMQ_RETURN_IF_ERROR(st);
      if (Cur().kind == TK::kName && Cur().text == s->text) Skip();
    } else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) return Error(s->line, "'" + tag + "' outside a loop");
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      std::string end;
      LLMQ_RETURN_IF_ERROR(ParseBody({"endgeneration"}, &s->bodies[0], &end));
    } else {
      for (const std::string& e : ends)
        if (tag == "endif" || tag == "endfor" || tag == "elif" || tag == "else" ||
            tag == "endset" || tag == "endmacro" || tag == "endgeneration")
          return Error(s->line, "expected '" + e + "', found '" + tag + "'");
      if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else")
        return Error(s->line, "unexpected '" + tag + "'");
      return Error(s->line, "unsupported tag '" + tag + "'");
    }
    LLMQ_RETURN_IF_ERROR(ExpectBlockEnd());
    *out = std::move(s);
    return Status::Ok();
  }

  // A conditional expression, or a tuple of them (a, b) when commas follow; `cond` false leaves
  // `x if y` unparsed (for loops' `for x in xs if cond`).
  Status ParseTuple(EPtr* out, bool cond) {
    const int line = Cur().line;
    EPtr first;
    LLMQ_RETURN_IF_ERROR(cond ? ParseCond(&first) : ParseOr(&first));
    if (!IsOp(",")) {
      *out = std::move(first);
      return Status::Ok();
    }
    EPtr t = New(Expr::Kind::kTuple, line);
    t->args.push_back(std::move(first));
    while (IsOp(",")) {
      Skip();
      if (Cur().kind == TK::kBlockEnd || Cur().kind == TK::kVarEnd || IsOp(")")) break;
      t->args.emplace_back();
      LLMQ_RETURN_IF_ERROR(cond ? ParseCond(&t->args.back()) : ParseOr(&t->args.back()));
    }
    LLMQ_RETURN_IF_ERROR(Seal(t.get()));
    *out = std::move(t);
    return Status::Ok();
  }

  Status ParseCond(EPtr* out) {
    if (++depth_ > kMaxDepth) return Error(Cur().line, "expression nested too deeply");
    LLMQ_RETURN_IF_ERROR(ParseOr(out));
    while (IsName("if")) {
      EPtr e = New(Expr::Kind::kCond, Cur().line);
      Skip();
      e->a = std::move(*out);
      LLMQ_RETURN_IF_ERROR(ParseOr(&e->b));
      if (IsName("else")) {
        Skip();
        LLMQ_RETURN_IF_ERROR(ParseCond(&e->c));
      }
      LLMQ_RETURN_IF_ERROR(Seal(e.get()));
      *out = std::move(e);
    }
    --depth_;
    return Status::Ok();
  }

  // `a or b` / `a and b`: left-associative, operands parsed by `next`.
  template <class F>
  Status ParseLogic(EPtr* out, const char* op, Expr::Kind kind, F next) {
    LLMQ_RETURN_IF_ERROR((this->*next)(out));
    while (IsName(op)) {
      EPtr e = New(kind, Cur().line);
      Skip();
      e->a = std::move(*out);
      LLMQ_RETURN_IF_ERROR((this->*next)(&e->b));
      LLMQ_RETURN_IF_ERROR(Seal(e.get()));
      *out = std::move(e);
    }
    return Status::Ok();
  }
  Status ParseOr(EPtr* out) { return ParseLogic(out, "or", Expr::Kind::kOr, &Parser::ParseAnd); }
  Status ParseAnd(EPtr* out) { return ParseLogic(out, "and", Expr::Kind::kAnd, &Parser::ParseNot); }

  Status ParseNot(EPtr* out) {
    if (!IsName("not")) return ParseCompare(out);
    if (++depth_ > kMaxDepth) return Error(Cur().line, "expression nested too deeply");
    EPtr e = New(Expr::Kind::kNot, Cur().line);
    Skip();
    LLMQ_RETURN_IF_ERROR(ParseNot(&e->a));
    LLMQ_RETURN_IF_ERROR(Seal(e.get()));
    *out = std::move(e);
    --depth_;
    return Status::Ok();
  }

  Status ParseCompare(EPtr* out) {
    const int line = Cur().line;
    EPtr first;
    LLMQ_RETURN_IF_ERROR(ParseConcat(&first));
    EPtr e;
    while (true) {
      std::string op;
      if (Cur().kind == TK::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Skip();
      } else if (IsName("in")) {
        op = "in";
        Skip();
      } else if (IsName("not") && Next().kind == TK::kName && Next().text == "in") {
        op = "notin";
        Skip();
        Skip();
      } else {
        break;
      }
      if (!e) {
        e = New(Expr::Kind::kCompare, line);
        e->a = std::move(first);
      }
      e->ops.push_back(op);
      e->args.emplace_back();
      LLMQ_RETURN_IF_ERROR(ParseConcat(&e->args.back()));
      LLMQ_RETURN_IF_ERROR(Seal(e.get()));
    }
    *out = e ? std::move(e) : std::move(first);
    return Status::Ok();
  }

  // Left-associative binary operators of one precedence level, each operand parsed by `next`.
  template <class F>
  Status ParseBinary(EPtr* out, std::initializer_list<const char*> ops, F next) {
    LLMQ_RETURN_IF_ERROR((this->*next)(out));
    while (Cur().kind == TK::kOp) {
      const char* found = nullptr;
      for (const char* op : ops)
        if (Cur().text == op) found = op;
      if (!found) break;
      EPtr e = New(Expr::Kind::kBinary, Cur().line);
      e->name = found;
      if (e->name == "%" && (*out)->kind == Expr::Kind::kLiteral && (*out)->value.is_string())
        return Error(e->line, "unsupported: string formatting with '%'");
      Skip();
      e->a = std::move(*out);
      LLMQ_RETURN_IF_ERROR((this->*next)(&e->b));
      LLMQ_RETURN_IF_ERROR(Seal(e.get()));
      *out = std::move(e);
    }
    return Status::Ok();
  }
  Status ParseConcat(EPtr* out) { return ParseBinary(out, {"~"}, &Parser::ParseMath1); }
  Status ParseMath1(EPtr* out) { return ParseBinary(out, {"+", "-"}, &Parser::ParseMath2); }
  Status ParseMath2(EPtr* out) {
    return ParseBinary(out, {"*", "/", "//", "%"}, &Parser::ParsePow);
  }
  Status ParsePow(EPtr* out) { return ParseBinary(out, {"**"}, &Parser::ParseUnaryF); }
  Status ParseUnaryF(EPtr* out) { return ParseUnary(out, true); }

  // -x, +x, then a primary with its postfixes, and (when `filters`) its filters and tests.
  Status ParseUnary(EPtr* out, bool filters) {
    if (++depth_ > kMaxDepth) return Error(Cur().line, "expression nested too deeply");
    if (IsOp("-") || IsOp("+")) {
      EPtr e = New(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().line);
      Skip();
      LLMQ_RETURN_IF_ERROR(ParseUnary(&e->a, false));
      LLMQ_RETURN_IF_ERROR(Seal(e.get()));
      *out = std::move(e);
    } else {
      LLMQ_RETURN_IF_ERROR(ParsePrimary(out));
    }
    LLMQ_RETURN_IF_ERROR(ParsePostfix(out));
    if (filters) LLMQ_RETURN_IF_ERROR(ParseFilters(out));
    --depth_;
    return Status::Ok();
  }

  Status ParsePrimary(EPtr* out) {
    const Token& t = Cur();
    EPtr e;
    if (t.kind == TK::kString) {
      std::string s = t.text;
      Skip();
      while (Cur().kind == TK::kString) {  // adjacent literals join, as in Python
        s += Cur().text;
        Skip();
      }
      e = New(Expr::Kind::kLiteral, t.line);
      e->value = Value::Str(std::move(s));
    } else if (t.kind == TK::kInt) {
      e = New(Expr::Kind::kLiteral, t.line);
      int64_t v = 0;
      auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      if (r.ec != std::errc()) return Error(t.line, "integer literal out of range");
      e->value = Value::Int(v);
      Skip();
    } else if (t.kind == TK::kFloat) {
      e = New(Expr::Kind::kLiteral, t.line);
      e->value = Value::Float(std::strtod(t.text.c_str(), nullptr));
      Skip();
    } else if (t.kind == TK::kName) {
      e = New(Expr::Kind::kLiteral, t.line);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      Skip();
    } else if (IsOp("(")) {
      Skip();
      if (IsOp(")")) {  // ()
        Skip();
        e = New(Expr::Kind::kTuple, t.line);
      } else {
        LLMQ_RETURN_IF_ERROR(ParseTuple(&e, true));
        LLMQ_RETURN_IF_ERROR(ExpectOp(")"));
      }
    } else if (IsOp("[") || IsOp("{")) {
      const bool dict = IsOp("{");
      e = New(dict ? Expr::Kind::kDict : Expr::Kind::kList, t.line);
      Skip();
      const char* close = dict ? "}" : "]";
      while (!IsOp(close)) {
        e->args.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseCond(&e->args.back()));
        if (dict) {
          LLMQ_RETURN_IF_ERROR(ExpectOp(":"));
          e->args.emplace_back();
          LLMQ_RETURN_IF_ERROR(ParseCond(&e->args.back()));
        }
        if (!IsOp(",")) break;
        Skip();
      }
      LLMQ_RETURN_IF_ERROR(ExpectOp(close));
    } else {
      return Expected("an expression");
    }
    LLMQ_RETURN_IF_ERROR(Seal(e.get()));
    *out = std::move(e);
    return Status::Ok();
  }

  // Positional and keyword arguments up to ')' (the '(' consumed).
  Status ParseArgs(Expr* e) {
    while (!IsOp(")")) {
      if (Cur().kind == TK::kName && Next().kind == TK::kOp && Next().text == "=") {
        e->kwnames.push_back(Cur().text);
        Skip();
        Skip();
        e->kwargs.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseCond(&e->kwargs.back()));
      } else {
        if (IsOp("*") || IsOp("**")) return Error(Cur().line, "unsupported argument unpacking");
        if (!e->kwargs.empty())
          return Error(Cur().line, "positional argument follows keyword argument");
        e->args.emplace_back();
        LLMQ_RETURN_IF_ERROR(ParseCond(&e->args.back()));
      }
      if (!IsOp(",")) break;
      Skip();
    }
    return ExpectOp(")");
  }

  Status ParsePostfix(EPtr* out) {
    while (true) {
      const int line = Cur().line;
      if (IsOp(".")) {
        Skip();
        EPtr e = New(Expr::Kind::kAttr, line);
        if (Cur().kind == TK::kInt) {  // x.0 is x[0]
          e->kind = Expr::Kind::kIndex;
          e->b = New(Expr::Kind::kLiteral, line);
          e->b->value = Value::Int(std::atoll(Cur().text.c_str()));
          Skip();
        } else {
          LLMQ_RETURN_IF_ERROR(ExpectName(&e->name));
        }
        e->a = std::move(*out);
        LLMQ_RETURN_IF_ERROR(Seal(e.get()));
        *out = std::move(e);
      } else if (IsOp("[")) {
        Skip();
        EPtr e = New(Expr::Kind::kIndex, line);
        e->a = std::move(*out);
        EPtr parts[3];
        int colons = 0;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) LLMQ_RETURN_IF_ERROR(ParseCond(&parts[k]));
          if (k < 2 && IsOp(":")) {
            Skip();
            ++colons;
          } else {
            break;
          }
        }
        LLMQ_RETURN_IF_ERROR(ExpectOp("]"));
        if (colons == 0) {
          if (!parts[0]) return Error(line, "expected a subscript");
          e->b = std::move(parts[0]);
        } else {
          e->kind = Expr::Kind::kSlice;
          for (auto& p : parts) e->args.push_back(std::move(p));
        }
        LLMQ_RETURN_IF_ERROR(Seal(e.get()));
        *out = std::move(e);
      } else if (IsOp("(")) {
        Skip();
        EPtr e = New(Expr::Kind::kCall, line);
        if ((*out)->kind == Expr::Kind::kAttr && !IsMethod((*out)->name))
          return Error(line, "unsupported method '" + (*out)->name + "'");
        e->a = std::move(*out);
        LLMQ_RETURN_IF_ERROR(ParseArgs(e.get()));
        LLMQ_RETURN_IF_ERROR(Seal(e.get()));
        *out = std::move(e);
      } else {
        return Status::Ok();
      }
    }
  }

  // `| name(args)` filters and `is [not] name args` tests, left to right.
  Status ParseFilters(EPtr* out) {
    while (true) {
      const int line = Cur().line;
      if (IsOp("|")) {
        Skip();
        EPtr e = New(Expr::Kind::kFilter, line);
        LLMQ_RETURN_IF_ERROR(ExpectName(&e->name));
        while (IsOp(".")) {  // dotted filter names are not jinja2's builtins
          Skip();
          std::string part;
          LLMQ_RETURN_IF_ERROR(ExpectName(&part));
          e->name += "." + part;
        }
        if (!IsFilter(e->name)) return Error(line, "unsupported filter '" + e->name + "'");
        if (IsOp("(")) {
          Skip();
          LLMQ_RETURN_IF_ERROR(ParseArgs(e.get()));
        }
        e->a = std::move(*out);
        LLMQ_RETURN_IF_ERROR(Seal(e.get()));
        *out = std::move(e);
      } else if (IsName("is")) {
        Skip();
        EPtr e = New(Expr::Kind::kTest, line);
        if (IsName("not")) {
          e->negated = true;
          Skip();
        }
        LLMQ_RETURN_IF_ERROR(ExpectName(&e->name));
        if (!IsTest(e->name)) return Error(line, "unsupported test '" + e->name + "'");
        if (IsOp("(")) {
          Skip();
          LLMQ_RETURN_IF_ERROR(ParseArgs(e.get()));
        } else if ((Cur().kind == TK::kString || Cur().kind == TK::kInt ||
                    Cur().kind == TK::kFloat || IsOp("[") || IsOp("{") ||
                    (Cur().kind == TK::kName && Cur().text != "else" && Cur().text != "or" &&
                     Cur().text != "and" && Cur().text != "if" && Cur().text != "is" &&
                     Cur().text != "in" && Cur().text != "not"))) {
          // jinja2: one argument may follow without parentheses (`x is divisibleby 3`).
          e->args.emplace_back();
          LLMQ_RETURN_IF_ERROR(ParseUnary(&e->args.back(), false));
        }
        e->a = std::move(*out);
        LLMQ_RETURN_IF_ERROR(Seal(e.get()));
        *out = std::move(e);
      } else {
        return Status::Ok();
      }
    }
  }

  std::vector<Token> toks_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;  // recursion of blocks and nested expressions
  int loops_ = 0;  // for loops enclosing the current statement (within its macro)
};

}  // namespace

Status ParseProgram(std::string_view source, const std::string& origin, Program* out) {
  std::vector<Token> tokens;
  LLMQ_RETURN_IF_ERROR(Lex(source, origin, &tokens));
  return Parser(std::move(tokens), origin).Run(out);
}

}  // namespace llmq::jinja
