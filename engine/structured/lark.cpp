#include "engine/structured/lark.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/text.h"
#include "engine/structured/ebnf.h"
#include "engine/structured/gbnf.h"

namespace llmq {
namespace {

using ebnf::kMaxNesting;
using ebnf::kMaxParts;
using ebnf::kMaxRepeat;
using ebnf::Node;
using ebnf::Normalized;
using ebnf::RuleDef;
using ebnf::SyntaxError;
using Ranges = std::vector<std::pair<char32_t, char32_t>>;

[[noreturn]] void Fail(size_t at, std::string message, bool unsupported = false) {
  throw SyntaxError{at, std::move(message), unsupported};  // caught in CompileLark
}

// Lark's common.lark, in the syntax read here: ESCAPED_STRING and C_COMMENT without the lazy
// quantifiers and the lookbehind that Lark's own definitions use (the same strings).
constexpr std::string_view kCommon = R"(
DIGIT: "0".."9"
HEXDIGIT: "a".."f"|"A".."F"|DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
ESCAPED_STRING: "\"" (/[^"\\\n]/ | "\\" /./)* "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*([^*]|\*+[^*\/])*\*+\//
SQL_COMMENT: /--[^\n]*/
)";

// ---- Python's Unicode classes and case ------------------------------------------------------

Ranges FromPredicate(bool (*in)(char32_t)) {
  Ranges r;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (!in(c)) continue;
    if (!r.empty() && r.back().second + 1 == c)
      r.back().second = c;
    else
      r.push_back({c, c});
  }
  return Normalized(std::move(r), false);
}
bool IsDigit(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
}
bool IsWord(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return c == '_';
  }
}
const Ranges& Digits() {  // \d
  static const Ranges r = FromPredicate(IsDigit);
  return r;
}
const Ranges& WordChars() {  // \w
  static const Ranges r = FromPredicate(IsWord);
  return r;
}
const Ranges& Spaces() {  // \s: Python's str.isspace()
  static const Ranges r = {{0x09, 0x0D},     {0x1C, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},
                           {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                           {0x205F, 0x205F}, {0x3000, 0x3000}};
  return r;
}
// Pairs (c, d) with d a case of c (lower, upper, title) or c one of d's: sorted.
const std::vector<std::pair<char32_t, char32_t>>& CasePairs() {
  static const auto pairs = [] {
    std::vector<std::pair<char32_t, char32_t>> p;
    for (char32_t c = 0; c < 0x110000; ++c) {
      const auto i = static_cast<utf8proc_int32_t>(c);
      for (const utf8proc_int32_t v :
           {utf8proc_tolower(i), utf8proc_toupper(i), utf8proc_totitle(i)})
        if (v != i && v >= 0) {
          p.push_back({c, static_cast<char32_t>(v)});
          p.push_back({static_cast<char32_t>(v), c});
        }
    }
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    return p;
  }();
  return pairs;
}
bool In(const Ranges& r, char32_t c) {
  const auto it = std::upper_bound(r.begin(), r.end(), std::make_pair(c, char32_t{0x10FFFF}));
  return it != r.begin() && std::prev(it)->second >= c;
}
// `r` with every case of its characters (twice: the cases of the cases, as Python's re folds).
// Few characters are looked up; many are matched against every pair.
Ranges AnyCase(Ranges r) {
  r = Normalized(std::move(r), false);
  const auto& pairs = CasePairs();
  for (int round = 0; round < 2; ++round) {
    Ranges more = r;
    uint64_t size = 0;
    for (const auto& [lo, hi] : r) size += hi - lo + 1;
    if (size <= 64) {
      for (const auto& [lo, hi] : r)
        for (char32_t c = lo; c <= hi; ++c)
          for (auto it =
                   std::lower_bound(pairs.begin(), pairs.end(), std::make_pair(c, char32_t{0}));
               it != pairs.end() && it->first == c; ++it)
            more.push_back({it->second, it->second});
    } else {
      for (const auto& [c, d] : pairs)
        if (In(r, c)) more.push_back({d, d});
    }
    r = Normalized(std::move(more), false);
  }
  return r;
}

Node Class(Ranges r) {
  Node n;
  n.kind = Node::kClass;
  n.ranges = Normalized(std::move(r), false);
  return n;
}
// A sequence or alternation of `kids` (one kid: itself).
Node Join(Node::Kind kind, std::vector<Node> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Node n;
  n.kind = kind;
  n.kids = std::move(kids);
  return n;
}
Node Seq(std::vector<Node> kids) {
  return Join(Node::kSeq, std::move(kids));
}
Node Alt(std::vector<Node> kids) {
  return Join(Node::kAlt, std::move(kids));
}
Node Repeat(Node kid, int min, int max) {
  Node n;
  n.kind = Node::kRepeat;
  n.min = min;
  n.max = max;
  n.kids.push_back(std::move(kid));
  return n;
}
// A string's characters, each of any case when `icase`.
Node Text(const std::u32string& s, bool icase) {
  if (!icase) {
    Node n;
    n.kind = Node::kLiteral;
    n.text = s;
    return n;
  }
  std::vector<Node> kids;
  for (char32_t c : s) kids.push_back(Class(AnyCase({{c, c}})));
  return Seq(std::move(kids));
}

// The UTF-8 character at t[*i] (advancing), or fails at `base + *i`.
char32_t NextChar(std::string_view t, size_t* i, size_t base) {
  char32_t cp;
  if (!ebnf::NextUtf8(t, i, &cp)) Fail(base + *i, "the grammar is not UTF-8");
  return cp;
}
// `digits` hex digits at t[*i] (advancing): a Unicode scalar value, or fails at `at`.
char32_t Hex(std::string_view t, size_t* i, int digits, size_t at) {
  const int64_t v = ebnf::HexScalar(t, i, digits);
  if (v == -1) Fail(at, "an escape needs " + std::to_string(digits) + " hex digits");
  if (v == -2) Fail(at, "the escape is not a Unicode scalar value");
  return static_cast<char32_t>(v);
}

// ---- Regular expressions (Python's re on str) ------------------------------------------------

class RegexReader {
 public:
  // `p`: the pattern (between the slashes), at byte `base` of the grammar.
  RegexReader(std::string_view p, size_t base, bool icase, bool dotall, int* parts)
      : p_(p), base_(base), icase_(icase), dotall_(dotall), parts_(parts) {}

  Node Read() {
    GlobalFlags();
    Node n = Alternatives(0);
    if (i_ < p_.size()) Fail(At(), "unbalanced parenthesis in the expression");
    return n;
  }

 private:
  size_t At() const { return base_ + i_; }
  void Count() {
    if (++*parts_ > kMaxParts)
      Fail(At(), "the grammar has more than " + std::to_string(kMaxParts) + " parts", true);
  }
  // (?aiLmsux) at the start: flags for the whole expression.
  void GlobalFlags() {
    while (p_.substr(i_, 2) == "(?" && i_ + 2 < p_.size() &&
           std::string_view("aiLmsux").find(p_[i_ + 2]) != std::string_view::npos) {
      size_t j = i_ + 2;
      while (j < p_.size() && std::string_view("aiLmsux").find(p_[j]) != std::string_view::npos)
        ++j;
      if (j >= p_.size() || p_[j] != ')') return;  // scoped flags (?i:...): a group
      for (size_t k = i_ + 2; k < j; ++k) Flag(p_[k], true, base_ + k);
      i_ = j + 1;
    }
  }
  void Flag(char f, bool on, size_t at) {
    if (f == 'i') icase_ = on;
    if (f == 's') dotall_ = on;
    if (f == 'x') Fail(at, "the x (verbose) flag is not supported", true);
    if (f == 'L') Fail(at, "the L (locale) flag is not supported", true);
    // a, m, u: \d \w \s stay Unicode's only without a; m changes nothing without anchors.
    if (f == 'a') Fail(at, "the a (ASCII) flag is not supported", true);
  }

  Node Alternatives(int depth) {
    std::vector<Node> alts = {Sequence(depth)};
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alts.push_back(Sequence(depth));
    }
    return Alt(std::move(alts));
  }
  Node Sequence(int depth) {
    std::vector<Node> items;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      Count();
      Node atom = Atom(depth);
      items.push_back(Quantified(std::move(atom)));
    }
    return Seq(std::move(items));
  }
  // {m}, {m,}, {,n}, {m,n}, {,} at i_ ('{'): true and the bounds, else false (a literal '{').
  bool Braces(int* min, int* max) {
    size_t j = i_ + 1;
    std::string lo, hi;
    while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') lo += p_[j++];
    bool comma = false;
    if (j < p_.size() && p_[j] == ',') {
      comma = true;
      ++j;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') hi += p_[j++];
    }
    if (j >= p_.size() || p_[j] != '}' || (!comma && lo.empty())) return false;
    auto number = [&](const std::string& s) {
      if (s.size() > 6 || std::stoi(s) > kMaxRepeat)
        Fail(At(), "a repetition bound is at most " + std::to_string(kMaxRepeat), true);
      return std::stoi(s);
    };
    *min = lo.empty() ? 0 : number(lo);
    *max = comma ? (hi.empty() ? -1 : number(hi)) : *min;
    if (*max >= 0 && *max < *min) Fail(At(), "min repeat greater than max repeat");
    i_ = j + 1;
    return true;
  }
  bool AtQuantifier() {
    if (i_ >= p_.size()) return false;
    if (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?') return true;
    int a, b;
    const size_t keep = i_;
    const bool q = p_[i_] == '{' && Braces(&a, &b);
    i_ = keep;
    return q;
  }
  Node Quantified(Node atom) {
    if (!AtQuantifier()) return atom;
    int min = 0, max = -1;
    const char c = p_[i_];
    if (c == '{') {
      Braces(&min, &max);
    } else {
      ++i_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    }
    if (i_ < p_.size() && p_[i_] == '?') {
      ++i_;  // lazy: the same strings
    } else if (i_ < p_.size() && p_[i_] == '+') {
      Fail(At(), "possessive quantifiers are not supported", true);
    }
    if (AtQuantifier()) Fail(At(), "multiple repeat");
    return Repeat(std::move(atom), min, max);
  }

  Node Atom(int depth) {
    const size_t at = i_;
    const char c = p_[i_];
    if (c == '(') return Group(depth);
    if (c == '[') return Class(ClassBody());
    if (c == '^' || c == '$') Fail(At(), "anchors (^ $) are not supported", true);
    if (AtQuantifier()) Fail(At(), "nothing to repeat");
    if (c == '.') {
      ++i_;
      return Class(dotall_ ? Normalized({}, true) : Normalized({{'\n', '\n'}}, true));
    }
    if (c == '\\') {
      Ranges set;
      char32_t one;
      if (Escape(false, &set, &one)) return Class(icase_ ? AnyCase(set) : set);
      return Text(std::u32string(1, one), icase_);
    }
    (void)at;
    return Text(std::u32string(1, NextChar(p_, &i_, base_)), icase_);
  }

  Node Group(int depth) {
    const size_t at = i_;
    if (depth + 1 > kMaxNesting)
      Fail(At(), "groups are nested deeper than " + std::to_string(kMaxNesting), true);
    ++i_;
    const bool icase = icase_, dotall = dotall_;
    if (i_ < p_.size() && p_[i_] == '?') {
      const std::string_view rest = p_.substr(i_ + 1);
      if (rest.substr(0, 1) == ":") {
        i_ += 2;
      } else if (rest.substr(0, 2) == "P<") {
        const size_t close = p_.find('>', i_);
        if (close == std::string_view::npos) Fail(base_ + at, "missing >, unterminated name");
        i_ = close + 1;
      } else if (rest.substr(0, 1) == "#") {
        const size_t close = p_.find(')', i_);
        if (close == std::string_view::npos) Fail(base_ + at, "missing ), unterminated comment");
        i_ = close + 1;
        return Seq({});
      } else if (rest.substr(0, 1) == "=" || rest.substr(0, 1) == "!" ||
                 rest.substr(0, 2) == "<=" || rest.substr(0, 2) == "<!") {
        Fail(base_ + at, "lookaround assertions are not supported", true);
      } else if (rest.substr(0, 2) == "P=") {
        Fail(base_ + at, "backreferences are not supported", true);
      } else if (rest.substr(0, 1) == ">") {
        Fail(base_ + at, "atomic groups are not supported", true);
      } else if (rest.substr(0, 1) == "(") {
        Fail(base_ + at, "conditional groups are not supported", true);
      } else {  // scoped flags (?flags-flags:...)
        size_t j = i_ + 1;
        bool on = true;
        while (j < p_.size() && p_[j] != ':') {
          if (p_[j] == '-') {
            on = false;
          } else if (std::string_view("aiLmsux").find(p_[j]) != std::string_view::npos) {
            Flag(p_[j], on, base_ + j);
          } else if (p_[j] == ')') {
            Fail(base_ + at, "global flags not at the start of the expression");
          } else {
            Fail(base_ + j, "unknown extension ?" + std::string(1, p_[j]));
          }
          ++j;
        }
        if (j >= p_.size()) Fail(base_ + at, "missing :, unterminated flags");
        i_ = j + 1;
      }
    }
    Node inner = Alternatives(depth + 1);
    if (i_ >= p_.size() || p_[i_] != ')') Fail(base_ + at, "missing ), unterminated subpattern");
    ++i_;
    icase_ = icase;
    dotall_ = dotall;
    return inner;
  }

  // After a backslash at i_: a class (true, *set) or one character (false, *one). In a class,
  // \b is a backspace.
  bool Escape(bool in_class, Ranges* set, char32_t* one) {
    const size_t at = i_;
    ++i_;
    if (i_ >= p_.size()) Fail(base_ + at, "bad escape (end of pattern)");
    const char e = p_[i_];
    auto shorthand = [&](const Ranges& r, bool negated) {
      ++i_;
      *set = negated ? Normalized(r, true) : r;
      return true;
    };
    switch (e) {
      case 'd':
        return shorthand(Digits(), false);
      case 'D':
        return shorthand(Digits(), true);
      case 'w':
        return shorthand(WordChars(), false);
      case 'W':
        return shorthand(WordChars(), true);
      case 's':
        return shorthand(Spaces(), false);
      case 'S':
        return shorthand(Spaces(), true);
      case 'a':
        *one = 0x07;
        break;
      case 'f':
        *one = 0x0C;
        break;
      case 'n':
        *one = '\n';
        break;
      case 'r':
        *one = '\r';
        break;
      case 't':
        *one = '\t';
        break;
      case 'v':
        *one = 0x0B;
        break;
      case 'x':
        ++i_;
        *one = Hex(p_, &i_, 2, base_ + at);
        return false;
      case 'u':
        ++i_;
        *one = Hex(p_, &i_, 4, base_ + at);
        return false;
      case 'U':
        ++i_;
        *one = Hex(p_, &i_, 8, base_ + at);
        return false;
      case 'N':
        Fail(base_ + at, "named characters (\\N{...}) are not supported", true);
      case 'b':
        if (in_class) {
          *one = 0x08;
          break;
        }
        [[fallthrough]];
      case 'B':
      case 'A':
      case 'Z':
        if (in_class) Fail(base_ + at, "bad escape \\" + std::string(1, e));
        Fail(base_ + at,
             "anchors and word boundaries (\\" + std::string(1, e) + ") are not supported", true);
      default:
        if (e >= '0' && e <= '7') {  // octal: \0, \0o, \0oo, or three digits
          size_t j = i_;
          uint32_t v = 0;
          while (j < p_.size() && j - i_ < 3 && p_[j] >= '0' && p_[j] <= '7')
            v = v * 8 + static_cast<uint32_t>(p_[j++] - '0');
          if (e != '0' && j - i_ < 3 && !in_class)  // (in a class, \1 is octal)
            Fail(base_ + at, "backreferences are not supported", true);
          if (v > 0377) Fail(base_ + at, "octal escape value outside of range 0-0o377");
          i_ = j;
          *one = v;
          return false;
        }
        if (e == '8' || e == '9') {
          if (in_class) Fail(base_ + at, "bad escape \\" + std::string(1, e));
          Fail(base_ + at, "backreferences are not supported", true);
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
          Fail(base_ + at, "bad escape \\" + std::string(1, e));
        *one = NextChar(p_, &i_, base_);
        return false;
    }
    ++i_;
    return false;
  }

  // At '[': the class's characters (its cases too under i).
  Ranges ClassBody() {
    const size_t at = i_;
    ++i_;
    const bool negated = i_ < p_.size() && p_[i_] == '^';
    if (negated) ++i_;
    Ranges r;
    bool first = true;
    for (;;) {
      if (i_ >= p_.size()) Fail(base_ + at, "unterminated character set");
      if (p_[i_] == ']' && !first) break;
      first = false;
      Ranges set;
      char32_t lo;
      const size_t item = i_;
      if (p_[i_] == '\\' ? Escape(true, &set, &lo) : false) {
        r.insert(r.end(), set.begin(), set.end());
        if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']')
          Fail(base_ + item, "bad character range");
        continue;
      }
      if (p_[item] != '\\') lo = NextChar(p_, &i_, base_);
      char32_t hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (p_[i_] == '\\') {
          if (Escape(true, &set, &hi)) Fail(base_ + item, "bad character range");
        } else {
          hi = NextChar(p_, &i_, base_);
        }
        if (hi < lo) Fail(base_ + item, "bad character range");
      }
      r.push_back({lo, hi});
    }
    ++i_;
    if (icase_) r = AnyCase(std::move(r));
    return Normalized(std::move(r), negated);
  }

  std::string_view p_;
  size_t base_;
  size_t i_ = 0;
  bool icase_, dotall_;
  int* parts_;
};

// ---- The grammar -----------------------------------------------------------------------------

class LarkReader {
 public:
  explicit LarkReader(std::string_view t) : t_(t) {}

  // The rules; *root: the one to start from.
  std::vector<RuleDef> Read(int* root) {
    Statements();
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!rules_[r].defined)
        Fail(rules_[r].first_use, std::string(terminal_[r] ? "terminal" : "rule") + " '" +
                                      rules_[r].name + "' is not defined");
    // %ignore: what it names may come before each terminal of a rule, and at the end.
    const int skip =
        ignored_.empty() ? -1 : Define("%ignore", Repeat(Alt(std::move(ignored_)), 0, -1), true);
    for (size_t r = 0; r < rules_.size(); ++r)
      if (terminal_[r]) NoRules(rules_[r].body, r);
    const auto start = index_.find("start");
    if (start == index_.end()) Fail(t_.size(), "the grammar has no rule named start");
    if (skip < 0) {
      *root = start->second;
      return std::move(rules_);
    }
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!terminal_[r]) Skippable(&rules_[r].body, skip);
    Node ref_start, ref_skip;
    ref_start.kind = ref_skip.kind = Node::kRef;
    ref_start.rule = start->second;
    ref_skip.rule = skip;
    *root = Define("%start", Seq({std::move(ref_start), std::move(ref_skip)}), false);
    return std::move(rules_);
  }

 private:
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  }
  // A terminal's name begins (after underscores) with an uppercase letter.
  static bool IsTerminalName(std::string_view name) {
    const size_t k = name.find_first_not_of('_');
    return k != std::string_view::npos && name[k] >= 'A' && name[k] <= 'Z';
  }
  std::string Found() const {
    if (i_ >= t_.size()) return "the end of the grammar";
    if (t_[i_] == '\n' || t_[i_] == '\r') return "the end of the line";
    const size_t n = Utf8SequenceLength(t_.data(), t_.size(), i_);
    return "'" + Escaped(t_.substr(i_, n == 0 ? 1 : n)) + "'";
  }
  size_t At() const { return base_ + i_; }
  // Spaces, tabs and comments (// or #); line breaks too when `lines`.
  void Space(bool lines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || (lines && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#' || t_.substr(i_, 2) == "//") {
        while (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r') ++i_;
      } else {
        break;
      }
    }
  }
  std::string Name() {
    const size_t from = i_;
    if (i_ < t_.size() && t_[i_] != '-' && !(t_[i_] >= '0' && t_[i_] <= '9'))
      while (i_ < t_.size() && IsNameChar(t_[i_]) && t_.substr(i_, 2) != "->") ++i_;
    if (i_ == from) Fail(At(), "expected a name, found " + Found());
    return std::string(t_.substr(from, i_ - from));
  }
  int Ref(const std::string& name, size_t at) {
    const std::string key = prefix_ + name;
    auto [it, fresh] = index_.try_emplace(key, static_cast<int>(rules_.size()));
    if (fresh) {
      rules_.push_back({key, Node{}, false, at});
      terminal_.push_back(IsTerminalName(name));
    }
    return it->second;
  }
  int Define(const std::string& name, Node body, bool terminal) {
    rules_.push_back({name, std::move(body), true, 0});
    terminal_.push_back(terminal);
    return static_cast<int>(rules_.size()) - 1;
  }
  void Count() {
    if (++parts_ > kMaxParts)
      Fail(At(), "the grammar has more than " + std::to_string(kMaxParts) + " parts", true);
  }

  void Statements() {
    Space(true);
    while (i_ < t_.size()) {
      if (t_[i_] == '%')
        Directive();
      else
        Definition();
      Space(false);
      if (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r') Fail(At(), "unexpected " + Found());
      Space(true);
    }
  }

  void Definition() {
    const size_t at = At();
    bool modified = false;
    if (t_[i_] == '?' || t_[i_] == '!') {
      ++i_;
      modified = true;
    }
    const std::string name = Name();
    const bool terminal = IsTerminalName(name);
    if (modified && terminal) Fail(at, "'?' and '!' apply to rules, not to terminal " + name);
    if (i_ < t_.size() && t_[i_] == '{') Fail(At(), "templates are not supported", true);
    if (i_ < t_.size() && t_[i_] == '.') {  // a priority: the language is the same
      ++i_;
      if (i_ < t_.size() && t_[i_] == '-') ++i_;
      const size_t from = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      if (i_ == from) Fail(At(), "expected a priority (a number) after '.', found " + Found());
    }
    Space(false);
    if (t_.substr(i_, 3) == "::=")
      Fail(At(), "expected ':' (this grammar is read as Lark; GBNF's '::=' is not Lark)");
    if (i_ >= t_.size() || t_[i_] != ':')
      Fail(At(), "expected ':' after the " + std::string(terminal ? "terminal" : "rule") +
                     " name, found " + Found());
    ++i_;
    Space(false);
    const int r = Ref(name, at);
    if (rules_[r].defined)
      Fail(at, std::string(terminal ? "terminal" : "rule") + " '" + name + "' is defined twice");
    rules_[r].defined = true;
    rules_[r].first_use = at;
    Node body = Alternatives(terminal, 0);
    rules_[r].body = std::move(body);
  }

  void Directive() {
    const size_t at = At();
    ++i_;
    const std::string word = Name();
    Space(false);
    if (word == "ignore") {
      ignored_.push_back(Alternatives(true, 0));
    } else if (word == "import") {
      Import(at);
    } else if (word == "declare" || word == "override" || word == "extend") {
      Fail(at, "%" + word + " is not supported", true);
    } else if (word == "json" || word == "llguidance") {
      Fail(at, "%" + word + " (LLGuidance's extension) is not supported", true);
    } else {
      Fail(at, "unknown directive %" + word);
    }
  }

  void Import(size_t at) {
    const std::string module = Name();
    if (module != "common")
      Fail(at, "%import of '" + module + "' is not supported (only Lark's common terminals)", true);
    std::vector<std::pair<std::string, std::string>> names;  // (common's, ours)
    if (i_ < t_.size() && t_[i_] == '.') {
      ++i_;
      const std::string name = Name();
      Space(false);
      std::string alias = name;
      if (t_.substr(i_, 2) == "->") {
        i_ += 2;
        Space(false);
        alias = Name();
      }
      names.push_back({name, alias});
    } else {
      Space(false);
      if (i_ >= t_.size() || t_[i_] != '(')
        Fail(At(), "expected '.NAME' or '(NAME, ...)' after %import common, found " + Found());
      ++i_;
      for (;;) {
        Space(true);
        const std::string name = Name();
        names.push_back({name, name});
        Space(true);
        if (i_ < t_.size() && t_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ >= t_.size() || t_[i_] != ')') Fail(At(), "expected ',' or ')', found " + Found());
        ++i_;
        break;
      }
    }
    ReadCommon();
    for (const auto& [name, alias] : names) {
      const auto it = index_.find("common__" + name);
      if (it == index_.end() || !rules_[static_cast<size_t>(it->second)].defined)
        Fail(at, "Lark's common has no terminal '" + name + "'");
      const int r = Ref(alias, at);
      if (rules_[r].defined) Fail(at, "'" + alias + "' is defined twice");
      if (terminal_[static_cast<size_t>(r)] != IsTerminalName(name))
        Fail(at, "'" + alias + "' and '" + name + "' are not both terminals");
      rules_[r].defined = true;
      rules_[r].body.kind = Node::kRef;
      rules_[r].body.rule = it->second;
    }
  }
  // common.lark's terminals, named common__NAME (once).
  void ReadCommon() {
    if (common_read_) return;
    common_read_ = true;
    const std::string_view t = t_;
    const size_t i = i_, base = base_;
    t_ = kCommon;
    i_ = 0;
    base_ = base + i;  // (errors cannot happen in it; they would point at the import)
    prefix_ = "common__";
    Statements();
    prefix_.clear();
    t_ = t;
    i_ = i;
    base_ = base;
  }

  // Alternatives at i_: of a terminal (strings and expressions inline) or of a rule (each string
  // or expression its own terminal).
  Node Alternatives(bool terminal, int depth) {
    std::vector<Node> alts = {Sequence(terminal, depth)};
    for (;;) {
      if (depth == 0) {  // a line that begins with `|` goes on with the definition
        const size_t line_end = i_;
        Space(true);
        if (i_ >= t_.size() || t_[i_] != '|') i_ = line_end;
      }
      if (i_ >= t_.size() || t_[i_] != '|') break;
      ++i_;
      Space(depth > 0);
      alts.push_back(Sequence(terminal, depth));
    }
    return Alt(std::move(alts));
  }

  Node Sequence(bool terminal, int depth) {
    std::vector<Node> items;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '|' || c == ')' || c == ']' || c == '\n' || c == '\r') break;
      if (t_.substr(i_, 2) == "->") {  // an alias: names a tree node
        i_ += 2;
        Space(false);
        Name();
        Space(depth > 0);
        break;
      }
      Count();
      Node item = Atom(terminal, depth);
      Space(depth > 0);
      item = Quantified(std::move(item));
      Space(depth > 0);
      items.push_back(std::move(item));
    }
    return Seq(std::move(items));
  }

  int Number() {
    const size_t from = i_;
    int64_t v = 0;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
      v = std::min<int64_t>(v * 10 + (t_[i_] - '0'), int64_t{1} << 40);
      ++i_;
    }
    if (i_ == from) Fail(At(), "expected a number, found " + Found());
    if (v > kMaxRepeat)
      Fail(base_ + from, "a repetition bound is at most " + std::to_string(kMaxRepeat), true);
    return static_cast<int>(v);
  }
  Node Quantified(Node item) {
    if (i_ >= t_.size()) return item;
    const char c = t_[i_];
    int min = 0, max = -1;
    const size_t at = At();
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '~') {
      ++i_;
      Space(false);
      min = max = Number();
      Space(false);
      if (t_.substr(i_, 2) == "..") {
        i_ += 2;
        Space(false);
        max = Number();
      }
    } else if (c == '{') {  // LLGuidance's {n}, {n,}, {,m}, {n,m}
      ++i_;
      Space(false);
      min = i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' ? Number() : 0;
      Space(false);
      max = min;
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        Space(false);
        max = i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' ? Number() : -1;
        Space(false);
      }
      if (i_ >= t_.size() || t_[i_] != '}') Fail(At(), "expected '}', found " + Found());
      ++i_;
    } else {
      return item;
    }
    if (max >= 0 && max < min) Fail(at, "a repetition's maximum is below its minimum");
    return Repeat(std::move(item), min, max);
  }

  Node Atom(bool terminal, int depth) {
    const size_t at = At();
    const char c = t_[i_];
    if (c == '(' || c == '[') {
      if (depth + 1 > kMaxNesting)
        Fail(at, "groups are nested deeper than " + std::to_string(kMaxNesting), true);
      ++i_;
      Space(true);
      Node inner = Alternatives(terminal, depth + 1);
      Space(true);
      const char close = c == '(' ? ')' : ']';
      if (i_ >= t_.size() || t_[i_] != close)
        Fail(At(), std::string("expected '") + close + "', found " + Found());
      ++i_;
      return c == '(' ? std::move(inner) : Repeat(std::move(inner), 0, 1);
    }
    if (c == '"' || c == '/') {
      const size_t from = i_;
      Node lit = c == '"' ? StringOrRange() : Expression();
      if (terminal) return lit;
      // In a rule, an anonymous terminal (one per distinct text).
      const std::string key(t_.substr(from, i_ - from));
      auto [it, fresh] = anonymous_.try_emplace(key, 0);
      if (fresh)
        it->second = Define("%anon" + std::to_string(anonymous_.size()), std::move(lit), true);
      Node ref;
      ref.kind = Node::kRef;
      ref.rule = it->second;
      return ref;
    }
    if (c == '<') Fail(at, "special tokens (<...>) are not supported", true);
    if (c == '@') Fail(at, "references to other grammars (@...) are not supported", true);
    if (c == '%') Fail(at, "LLGuidance's %json is not supported", true);
    if (IsNameChar(c) && c != '-') {
      Node ref;
      ref.kind = Node::kRef;
      ref.rule = Ref(Name(), at);
      return ref;
    }
    Fail(at, "unexpected " + Found());
  }

  // "text", "text"i, or "a".."z".
  Node StringOrRange() {
    const size_t at = At();
    std::u32string s = String();
    bool icase = false;
    if (i_ < t_.size() && t_[i_] == 'i' && (i_ + 1 >= t_.size() || !IsNameChar(t_[i_ + 1]))) {
      ++i_;
      icase = true;
    }
    if (t_.substr(i_, 2) == ".." && !icase) {
      i_ += 2;
      if (i_ >= t_.size() || t_[i_] != '"') Fail(At(), "expected a string after '..'");
      const std::u32string hi = String();
      if (s.size() != 1 || hi.size() != 1) Fail(at, "a range's ends are strings of one character");
      if (hi[0] < s[0]) Fail(at, "a range's end is below its start");
      return Class({{s[0], hi[0]}});
    }
    if (s.empty()) Fail(at, "empty terminals are not allowed");
    return Text(s, icase);
  }
  // At '"': the string's characters (Lark's escaping: \\ \" \n \t \r \f \xHH \uHHHH
  // \UHHHHHHHH; any other backslash stays).
  std::u32string String() {
    const size_t at = At();
    ++i_;
    std::u32string s;
    for (;;) {
      if (i_ >= t_.size() || t_[i_] == '\n' || t_[i_] == '\r')
        Fail(at, "the string does not end on its line");
      if (t_[i_] == '"') break;
      if (t_[i_] != '\\') {
        s.push_back(NextChar(t_, &i_, base_));
        continue;
      }
      const size_t esc = At();
      ++i_;
      if (i_ >= t_.size()) Fail(esc, "the string does not end");
      const char e = t_[i_];
      switch (e) {
        case '\\':
        case '"':
          s.push_back(static_cast<char32_t>(e));
          ++i_;
          break;
        case 'n':
          s.push_back('\n');
          ++i_;
          break;
        case 't':
          s.push_back('\t');
          ++i_;
          break;
        case 'r':
          s.push_back('\r');
          ++i_;
          break;
        case 'f':
          s.push_back('\f');
          ++i_;
          break;
        case 'x':
        case 'u':
        case 'U':
          ++i_;
          s.push_back(Hex(t_, &i_, e == 'x' ? 2 : e == 'u' ? 4 : 8, esc));
          break;
        default:
          s.push_back('\\');
          break;
      }
    }
    ++i_;
    return s;
  }
  // At '/': /pattern/flags.
  Node Expression() {
    const size_t at = At();
    ++i_;
    const size_t from = i_;
    for (;;) {
      if (i_ >= t_.size() || t_[i_] == '\n' || t_[i_] == '\r')
        Fail(at, "the regular expression does not end on its line");
      if (t_[i_] == '/') break;
      if (t_[i_] == '\\' && i_ + 1 < t_.size() && t_[i_ + 1] != '\n') ++i_;
      ++i_;
    }
    const std::string_view pattern = t_.substr(from, i_ - from);
    ++i_;
    bool icase = false, dotall = false;
    while (i_ < t_.size() && std::string_view("imslux").find(t_[i_]) != std::string_view::npos) {
      if (t_[i_] == 'i') icase = true;
      if (t_[i_] == 's') dotall = true;
      if (t_[i_] == 'x') Fail(At(), "the x (verbose) flag is not supported", true);
      if (t_[i_] == 'l') Fail(At(), "the l flag is not supported", true);
      ++i_;
    }
    if (pattern.empty()) Fail(at, "empty terminals are not allowed");
    return RegexReader(pattern, base_ + from, icase, dotall, &parts_).Read();
  }

  // A terminal's body names no rule.
  void NoRules(const Node& n, size_t terminal) const {
    if (n.kind == Node::kRef && !terminal_[static_cast<size_t>(n.rule)])
      Fail(rules_[terminal].first_use, "terminal '" + rules_[terminal].name + "' names rule '" +
                                           rules_[static_cast<size_t>(n.rule)].name +
                                           "' (terminals are made of strings, expressions and "
                                           "terminals)");
    for (const Node& k : n.kids) NoRules(k, terminal);
  }
  // Each reference to a terminal in a rule's body: `skip` first.
  void Skippable(Node* n, int skip) const {
    if (n->kind == Node::kRef && terminal_[static_cast<size_t>(n->rule)]) {
      Node ref_skip;
      ref_skip.kind = Node::kRef;
      ref_skip.rule = skip;
      Node terminal = std::move(*n);
      *n = Seq({std::move(ref_skip), std::move(terminal)});
      return;
    }
    for (Node& k : n->kids) Skippable(&k, skip);
  }

  std::string_view t_;
  size_t i_ = 0;
  size_t base_ = 0;     // t_'s offset in the grammar (0, but for common's definitions)
  std::string prefix_;  // of the names defined and referenced ("common__" in common's)
  bool common_read_ = false;
  int parts_ = 0;
  std::vector<RuleDef> rules_;
  std::vector<char> terminal_;  // by rule
  std::map<std::string, int, std::less<>> index_;
  std::map<std::string, int> anonymous_;  // a string's or expression's text -> its terminal
  std::vector<Node> ignored_;
};

}  // namespace

Status CompileLark(std::string_view text, Grammar* out) {
  std::vector<RuleDef> rules;
  int root = 0;
  try {
    rules = LarkReader(text).Read(&root);
  } catch (const SyntaxError& e) {
    return ebnf::SyntaxStatus(text, e);
  }
  return ebnf::Lower(rules, root, out);
}

bool LooksLikeLark(std::string_view text) {
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    line = line.substr(0, std::min(line.find('#'), line.find("//")));
    if (line.find("::=") != std::string_view::npos) return false;
    at = end + 1;
  }
  return true;
}

Status CompileGrammarText(std::string_view text, Grammar* out) {
  return LooksLikeLark(text) ? CompileLark(text, out) : CompileGbnf(text, out);
}

}  // namespace llmq
