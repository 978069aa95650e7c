#include "engine/structured/gbnf.h"

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/text.h"
#include "engine/structured/ebnf.h"
#include "engine/structured/regex.h"

namespace llmq {
namespace {

using ebnf::kMaxNesting;
using ebnf::kMaxParts;
using ebnf::kMaxRepeat;
using ebnf::Node;
using ebnf::Normalized;
using ebnf::RuleDef;
using ebnf::SyntaxError;

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  std::vector<RuleDef> Parse() {
    Space(true);
    while (i_ < t_.size()) {
      const size_t at = i_;
      const std::string name = Name();
      Space(false);
      if (t_.substr(i_, 3) != "::=") {
        if (i_ < t_.size() && t_[i_] == ':')
          Fail(i_,
               "expected '::=' (a grammar with a '::=' line is read as GBNF, as llama.cpp and "
               "XGrammar write it; without one, as Lark)");
        Fail(i_, "expected '::=' after the rule name, found " + Found());
      }
      i_ += 3;
      Space(true);
      const int r = Rule(name, at);
      if (rules_[r].defined) Fail(at, "rule '" + name + "' is defined twice");
      rules_[r].defined = true;
      rules_[r].body = Alternatives(false);
      if (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r') Fail(i_, "unexpected " + Found());
      Space(true);
    }
    for (const RuleDef& r : rules_)
      if (!r.defined) Fail(r.first_use, "rule '" + r.name + "' is not defined");
    return std::move(rules_);
  }

 private:
  [[noreturn]] static void Fail(size_t at, std::string message, bool unsupported = false) {
    throw SyntaxError{at, std::move(message), unsupported};  // caught in CompileGbnf
  }
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  std::string Found() const {
    if (i_ >= t_.size()) return "the end of the grammar";
    if (t_[i_] == '\n' || t_[i_] == '\r') return "the end of the line";
    const size_t n = Utf8SequenceLength(t_.data(), t_.size(), i_);
    return "'" + Escaped(t_.substr(i_, n == 0 ? 1 : n)) + "'";
  }
  // Spaces, tabs and comments; line breaks too when `lines`.
  void Space(bool lines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || (lines && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r') ++i_;
      } else {
        break;
      }
    }
  }
  std::string Name() {
    const size_t from = i_;
    while (i_ < t_.size() && IsNameChar(t_[i_])) ++i_;
    if (i_ == from) Fail(i_, "expected a rule name, found " + Found());
    return std::string(t_.substr(from, i_ - from));
  }
  int Rule(const std::string& name, size_t at) {
    auto [it, fresh] = index_.try_emplace(name, static_cast<int>(rules_.size()));
    if (fresh) rules_.push_back({name, Node{}, false, at});
    return it->second;
  }

  Node Alternatives(bool nested) {
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(Sequence(nested));
    for (;;) {
      if (!nested) {  // a line that begins with `|` goes on with the rule (XGrammar)
        const size_t line_end = i_;
        Space(true);
        if (i_ >= t_.size() || t_[i_] != '|') i_ = line_end;
      }
      if (i_ >= t_.size() || t_[i_] != '|') break;
      ++i_;
      Space(true);
      alt.kids.push_back(Sequence(nested));
    }
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : std::move(alt);
  }

  Node Sequence(bool nested) {
    Node seq;
    seq.kind = Node::kSeq;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      Node item;
      if (++parts_ > kMaxParts)
        Fail(i_, "the grammar has more than " + std::to_string(kMaxParts) + " parts", true);
      if (c == '"') {
        item = Literal();
      } else if (c == '[') {
        item = Class();
      } else if (c == '(') {
        ++i_;
        Space(true);
        if (i_ < t_.size() && t_[i_] == '=')
          Fail(i_ - 1, "lookahead assertions '(= ...)' are not supported", true);
        if (++depth_ > kMaxNesting)
          Fail(i_ - 1, "groups are nested deeper than " + std::to_string(kMaxNesting), true);
        item = Alternatives(true);
        if (i_ >= t_.size() || t_[i_] != ')') Fail(i_, "expected ')', found " + Found());
        ++i_;
        --depth_;
      } else if (c == '.') {
        ++i_;
        item.kind = Node::kClass;
        item.ranges = Normalized({}, true);
      } else if (IsNameChar(c)) {
        const size_t at = i_;
        item.kind = Node::kRef;
        item.rule = Rule(Name(), at);
      } else {
        break;
      }
      Space(nested);
      item = Repetition(std::move(item));
      Space(nested);
      seq.kids.push_back(std::move(item));
    }
    return seq.kids.size() == 1 ? std::move(seq.kids[0]) : std::move(seq);
  }

  int Count() {
    const size_t from = i_;
    int64_t v = 0;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
      v = std::min<int64_t>(v * 10 + (t_[i_] - '0'), int64_t{1} << 40);
      ++i_;
    }
    if (i_ == from) Fail(i_, "expected a number, found " + Found());
    if (v > kMaxRepeat)
      Fail(from, "a repetition bound is at most " + std::to_string(kMaxRepeat), true);
    return static_cast<int>(v);
  }
  Node Repetition(Node item) {
    if (i_ >= t_.size()) return item;
    Node rep;
    rep.kind = Node::kRepeat;
    const char c = t_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      rep.min = c == '+' ? 1 : 0;
      rep.max = c == '?' ? 1 : -1;
    } else if (c == '{') {
      const size_t at = i_++;
      Space(true);
      rep.min = rep.max = Count();
      Space(true);
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        Space(true);
        rep.max = i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' ? Count() : -1;
        Space(true);
      }
      if (i_ >= t_.size() || t_[i_] != '}') Fail(i_, "expected '}', found " + Found());
      ++i_;
      if (rep.max >= 0 && rep.max < rep.min)
        Fail(at, "a repetition's maximum is below its minimum");
    } else {
      return item;
    }
    rep.kids.push_back(std::move(item));
    return rep;
  }

  // One character of a literal or a class, escapes decoded.
  char32_t Char() {
    if (i_ >= t_.size() || t_[i_] == '\n' || t_[i_] == '\r')
      Fail(i_, "unexpected " + Found() + " inside a literal or a class");
    if (t_[i_] != '\\') {
      char32_t cp;
      if (!ebnf::NextUtf8(t_, &i_, &cp)) Fail(i_, "the grammar is not UTF-8");
      return cp;
    }
    const size_t at = i_++;
    if (i_ >= t_.size()) Fail(at, "an escape at the end of the grammar");
    const char e = t_[i_++];
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return e;
      case 'x':
        return Hex(at, 2);
      case 'u':
        return Hex(at, 4);
      case 'U':
        return Hex(at, 8);
      default:
        --i_;
        Fail(at, "unknown escape '\\" + Found().substr(1));
    }
  }
  char32_t Hex(size_t at, int digits) {
    const int64_t v = ebnf::HexScalar(t_, &i_, digits);
    if (v == -1) Fail(at, "an escape needs " + std::to_string(digits) + " hex digits");
    if (v == -2) Fail(at, "the escape is not a Unicode scalar value");
    return static_cast<char32_t>(v);
  }
  Node Literal() {
    Node lit;
    lit.kind = Node::kLiteral;
    ++i_;
    while (i_ >= t_.size() || t_[i_] != '"') lit.text.push_back(Char());
    ++i_;
    return lit;
  }
  Node Class() {
    Node cls;
    cls.kind = Node::kClass;
    ++i_;
    const bool negated = i_ < t_.size() && t_[i_] == '^';
    if (negated) ++i_;
    std::vector<std::pair<char32_t, char32_t>> ranges;
    while (i_ >= t_.size() || t_[i_] != ']') {
      const size_t at = i_;
      const char32_t lo = Char();
      char32_t hi = lo;
      if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        hi = Char();
        if (hi < lo) Fail(at, "a class range's end is below its start");
      }
      ranges.push_back({lo, hi});
    }
    ++i_;
    cls.ranges = Normalized(std::move(ranges), negated);
    return cls;
  }

  std::string_view t_;
  size_t i_ = 0;
  int depth_ = 0;  // groups open
  int parts_ = 0;  // items read
  std::vector<RuleDef> rules_;
  std::map<std::string, int, std::less<>> index_;
};

}  // namespace

Status CompileGbnf(std::string_view text, Grammar* out) {
  std::vector<RuleDef> rules;
  try {
    rules = Parser(text).Parse();
  } catch (const SyntaxError& e) {
    return ebnf::SyntaxStatus(text, e);
  }
  const auto root =
      std::find_if(rules.begin(), rules.end(), [](const RuleDef& r) { return r.name == "root"; });
  if (root == rules.end()) return Status::InvalidArgument("the grammar has no rule named root");
  return ebnf::Lower(rules, static_cast<int>(root - rules.begin()), out);
}

}  // namespace llmq
