// The syntax tree of a parsed Jinja template (built by jinja_parser, run by jinja_eval).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/text/jinja_value.h"

namespace llmq::jinja {

// An expression. Which fields a node uses depends on its kind (noted per kind).
struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args: the items
    kTuple,    // args: the items
    kDict,     // args: key, value, key, value...
    kAttr,     // a.name
    kIndex,    // a[b]
    kSlice,    // a[args[0]:args[1]:args[2]], any of them null
    kCall,     // a(args, kwnames=kwargs)
    kFilter,   // a | name(args, kwnames=kwargs)
    kTest,     // a is [not] name(args); negated
    kNeg,      // -a
    kPos,      // +a
    kNot,      // not a
    kBinary,   // a name b, name one of + - * / // % ** ~
    kAnd,      // a and b
    kOr,       // a or b
    kCompare,  // a ops[0] args[0] ops[1] args[1]... (==, !=, <, <=, >, >=, in, notin)
    kCond,     // a if b else c (c may be null: undefined)
  };
  Kind kind;
  int line = 0;
  int depth = 1;  // height of this subtree: evaluation recursion is bounded by it
  Value value;
  std::string name;
  bool negated = false;
  std::unique_ptr<Expr> a, b, c;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::string> kwnames;
  std::vector<std::unique_ptr<Expr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// A statement of the template.
struct Stmt {
  enum class Kind {
    kText,      // text, written as is
    kOutput,    // {{ exprs[0] }}
    kIf,        // if exprs[k]: bodies[k] ... ; else bodies[exprs.size()] when present
    kFor,       // for targets in exprs[0] [if exprs[1]]: bodies[0]; else bodies[1] when present
    kSet,       // set targets = exprs[0]; or name.attr = exprs[0] when attr is set
    kSetBlock,  // set name: the rendered bodies[0]
    kMacro,     // macro name(params = defaults (null when none)): bodies[0]
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}: bodies[0] rendered as is
  };
  Kind kind;
  int line = 0;
  std::string text;  // text, or the name set / the macro's name
  std::string attr;
  std::vector<std::string> targets;
  std::vector<std::unique_ptr<Expr>> exprs;
  std::vector<Body> bodies;
  std::vector<std::string> params;
  std::vector<std::unique_ptr<Expr>> defaults;
};

struct Program {
  Body body;
};

}  // namespace llmq::jinja
