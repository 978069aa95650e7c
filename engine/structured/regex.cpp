#include "engine/structured/regex.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <utility>

namespace llmq {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int32_t kUnknown = -2;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code points, sorted, disjoint

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

Ranges Negate(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

Ranges Digits() {
  return {{'0', '9'}};
}
Ranges Word() {
  return Normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
}
Ranges Space() {  // ECMAScript's WhiteSpace and LineTerminator
  return Normalize({{'\t', '\r'},
                    {' ', ' '},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}
Ranges Dot() {  // any character but a line terminator
  return Negate(Normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
}

// The regular expression's tree.
struct Node {
  enum Kind { kEmpty, kSet, kConcat, kAlt, kRepeat, kBegin, kEnd } kind = kEmpty;
  Ranges set;
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRepeat; max -1: unbounded
  size_t offset = 0;     // in the pattern, for errors
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Status Parse(Node* out) {
    LLMQ_RETURN_IF_ERROR(Alt(out));
    if (i_ < p_.size()) return Error("unmatched ')'");
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what, size_t at) const {
    return Status::InvalidArgument("pattern: " + what + " at offset " + std::to_string(at));
  }
  Status Error(const std::string& what) const { return Error(what, i_); }
  Status Unsupported(const std::string& what, size_t at) const {
    return Status::Unsupported("pattern: " + what + " at offset " + std::to_string(at) +
                               " is not supported (it would not be enforced)");
  }
  bool More() const { return i_ < p_.size(); }
  char Peek() const { return p_[i_]; }

  Status Alt(Node* out) {
    Node first;
    LLMQ_RETURN_IF_ERROR(Concat(&first));
    if (!More() || Peek() != '|') {
      *out = std::move(first);
      return Status::Ok();
    }
    out->kind = Node::kAlt;
    out->kids.push_back(std::move(first));
    while (More() && Peek() == '|') {
      ++i_;
      Node next;
      LLMQ_RETURN_IF_ERROR(Concat(&next));
      out->kids.push_back(std::move(next));
    }
    return Status::Ok();
  }

  Status Concat(Node* out) {
    out->kind = Node::kConcat;
    out->offset = i_;
    while (More() && Peek() != '|' && Peek() != ')') {
      Node atom;
      LLMQ_RETURN_IF_ERROR(Atom(&atom));
      LLMQ_RETURN_IF_ERROR(Quantifiers(&atom));
      out->kids.push_back(std::move(atom));
    }
    return Status::Ok();
  }

  // {n}, {n,}, {n,m} at i_: true (and the bounds) when it is one; else '{' is a literal.
  bool Braces(int* min, int* max, size_t* end) const {
    size_t j = i_ + 1;
    auto number = [&](int* v) {
      const size_t from = j;
      long n = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        n = std::min<long>(n * 10 + (p_[j] - '0'), 1L << 30);
        ++j;
      }
      *v = static_cast<int>(n);
      return j > from;
    };
    if (!number(min)) return false;
    *max = *min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) *max = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    *end = j + 1;
    return true;
  }

  Status Quantifiers(Node* atom) {
    bool quantified = false;
    while (More()) {
      const size_t at = i_;
      int min = 0, max = 0;
      size_t end = 0;
      const char c = Peek();
      if (c == '*') {
        min = 0, max = -1, end = i_ + 1;
      } else if (c == '+') {
        min = 1, max = -1, end = i_ + 1;
      } else if (c == '?') {
        min = 0, max = 1, end = i_ + 1;
      } else if (c == '{' && Braces(&min, &max, &end)) {
        if (max >= 0 && max < min)
          return Error(
              "repetition {" + std::to_string(min) + "," + std::to_string(max) + "} out of order",
              at);
        if (min > Regex::kMaxRepeat || max > Regex::kMaxRepeat)
          return Unsupported("a repetition count over " + std::to_string(Regex::kMaxRepeat), at);
      } else {
        break;
      }
      if (quantified) return Error("nothing to repeat", at);
      if (atom->kind == Node::kBegin || atom->kind == Node::kEnd)
        return Error("nothing to repeat", at);
      i_ = end;
      if (More() && Peek() == '?') ++i_;  // lazy: the same strings match
      Node rep;
      rep.kind = Node::kRepeat;
      rep.min = min;
      rep.max = max;
      rep.offset = at;
      rep.kids.push_back(std::move(*atom));
      *atom = std::move(rep);
      quantified = true;
    }
    return Status::Ok();
  }

  // One UTF-8 character of the pattern as a code point.
  Status CodePoint(uint32_t* cp) {
    const auto b0 = static_cast<uint8_t>(p_[i_]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) return Error("invalid UTF-8");
    uint32_t v = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<uint8_t>(p_[i_ + k]);
      if ((b >> 6) != 2) return Error("invalid UTF-8");
      v = (v << 6) | (b & 0x3F);
    }
    i_ += n;
    *cp = v;
    return Status::Ok();
  }

  Status Hex(int digits, uint32_t* v) {
    *v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (!More() || !std::isxdigit(static_cast<unsigned char>(Peek())))
        return Error("expected " + std::to_string(digits) + " hex digits");
      const char c = Peek();
      *v = *v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return Status::Ok();
  }

  // An escape after '\' (i_ past it): a set of code points. `in_class`: \b is backspace there.
  Status Escape(bool in_class, Ranges* out) {
    const size_t at = i_ - 1;
    if (!More()) return Error("'\\' at the end");
    const char c = Peek();
    ++i_;
    uint32_t cp = 0;
    switch (c) {
      case 'd':
        *out = Digits();
        return Status::Ok();
      case 'D':
        *out = Negate(Digits());
        return Status::Ok();
      case 'w':
        *out = Word();
        return Status::Ok();
      case 'W':
        *out = Negate(Word());
        return Status::Ok();
      case 's':
        *out = Space();
        return Status::Ok();
      case 'S':
        *out = Negate(Space());
        return Status::Ok();
      case 'n':
        cp = '\n';
        break;
      case 'r':
        cp = '\r';
        break;
      case 't':
        cp = '\t';
        break;
      case 'f':
        cp = '\f';
        break;
      case 'v':
        cp = '\v';
        break;
      case '0':
        cp = 0;
        break;
      case 'x':
        LLMQ_RETURN_IF_ERROR(Hex(2, &cp));
        break;
      case 'u':
        if (More() && Peek() == '{') {
          ++i_;
          const size_t from = i_;
          while (More() && Peek() != '}') ++i_;
          if (!More() || i_ == from || i_ - from > 6) return Error("bad \\u{...}", at);
          const size_t end = i_;
          i_ = from;
          LLMQ_RETURN_IF_ERROR(Hex(static_cast<int>(end - from), &cp));
          ++i_;  // '}'
          if (cp > kMaxCodePoint) return Error("code point past U+10FFFF", at);
        } else {
          LLMQ_RETURN_IF_ERROR(Hex(4, &cp));
        }
        break;
      case 'b':
        if (in_class) {
          cp = '\b';
          break;
        }
        return Unsupported("\\b (a word boundary)", at);
      case 'B':
        return Unsupported("\\B (a word boundary)", at);
      case 'p':
      case 'P':
        return Unsupported(std::string("\\") + c + " (a Unicode property)", at);
      case 'c':
        return Unsupported("\\c (a control letter)", at);
      case 'k':
        return Unsupported("\\k (a named backreference)", at);
      default:
        if (c >= '1' && c <= '9') return Unsupported("a backreference", at);
        if (static_cast<unsigned char>(c) >= 0x80) {
          --i_;
          LLMQ_RETURN_IF_ERROR(CodePoint(&cp));
        } else {
          cp = static_cast<unsigned char>(c);  // \. \\ \/ \- \[ ... and identity escapes
        }
    }
    *out = {{cp, cp}};
    return Status::Ok();
  }

  Status Class(Node* out) {
    const size_t at = i_ - 1;
    bool negated = false;
    if (More() && Peek() == '^') {
      negated = true;
      ++i_;
    }
    Ranges set;
    while (true) {
      if (!More()) return Error("unterminated character class", at);
      if (Peek() == ']') {
        ++i_;
        break;
      }
      Ranges lo;
      LLMQ_RETURN_IF_ERROR(ClassAtom(&lo));
      // A range a-b: both ends single characters; a '-' before ']' or after a class is literal.
      if (i_ + 1 < p_.size() && Peek() == '-' && p_[i_ + 1] != ']') {
        const size_t dash = i_;
        ++i_;
        Ranges hi;
        LLMQ_RETURN_IF_ERROR(ClassAtom(&hi));
        if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second ||
            hi[0].first != hi[0].second)
          return Error("a class range with a class at one end", dash);
        if (hi[0].first < lo[0].first) return Error("a class range out of order", dash);
        set.emplace_back(lo[0].first, hi[0].first);
        continue;
      }
      set.insert(set.end(), lo.begin(), lo.end());
    }
    set = Normalize(std::move(set));
    out->kind = Node::kSet;
    out->set = negated ? Negate(set) : set;
    return Status::Ok();
  }

  Status ClassAtom(Ranges* out) {
    if (Peek() == '\\') {
      ++i_;
      return Escape(/*in_class=*/true, out);
    }
    uint32_t cp = 0;
    LLMQ_RETURN_IF_ERROR(CodePoint(&cp));
    *out = {{cp, cp}};
    return Status::Ok();
  }

  Status Atom(Node* out) {
    out->offset = i_;
    const char c = Peek();
    switch (c) {
      case '(': {
        ++i_;
        if (p_.substr(i_, 2) == "?:") {
          i_ += 2;
        } else if (p_.substr(i_, 2) == "?=" || p_.substr(i_, 2) == "?!" ||
                   p_.substr(i_, 3) == "?<=" || p_.substr(i_, 3) == "?<!") {
          return Unsupported("a lookaround group", out->offset);
        } else if (p_.substr(i_, 2) == "?<") {
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) return Error("unterminated group name");
          i_ = close + 1;
        } else if (More() && Peek() == '?') {
          return Error("unknown group syntax '(?'");
        }
        LLMQ_RETURN_IF_ERROR(Alt(out));
        if (!More() || Peek() != ')') return Error("unterminated group", out->offset);
        ++i_;
        return Status::Ok();
      }
      case '[':
        ++i_;
        return Class(out);
      case '.':
        ++i_;
        out->kind = Node::kSet;
        out->set = Dot();
        return Status::Ok();
      case '\\':
        ++i_;
        out->kind = Node::kSet;
        return Escape(/*in_class=*/false, &out->set);
      case '^':
        ++i_;
        out->kind = Node::kBegin;
        return Status::Ok();
      case '$':
        ++i_;
        out->kind = Node::kEnd;
        return Status::Ok();
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat");
      default: {
        if (c == '{') {
          int a = 0, b = 0;
          size_t e = 0;
          if (Braces(&a, &b, &e)) return Error("nothing to repeat");
        }
        uint32_t cp = 0;
        LLMQ_RETURN_IF_ERROR(CodePoint(&cp));
        out->kind = Node::kSet;
        out->set = {{cp, cp}};
        return Status::Ok();
      }
    }
  }

  std::string_view p_;
  size_t i_ = 0;
};

// Anchors: ^ first and $ last in a top-level alternative are taken away (and say whether that
// end is anchored); the others stay, assertions of the NFA (Nfa::State::begin, end).
void StripAnchors(Node* alt, bool* begin, bool* end) {
  *begin = *end = false;
  if (alt->kind != Node::kConcat) return;
  std::vector<Node>& k = alt->kids;
  while (!k.empty() && k.front().kind == Node::kBegin) {
    *begin = true;
    k.erase(k.begin());
  }
  while (!k.empty() && k.back().kind == Node::kEnd) {
    *end = true;
    k.pop_back();
  }
}

// UTF-8 byte-range sequences for code points [lo, hi] (surrogates left out): each sequence is a
// list of byte ranges, one per byte (Rust regex-syntax's Utf8Sequences).
void Utf8Sequences(uint32_t lo, uint32_t hi,
                   std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  if (lo > hi) return;
  if (lo <= 0xD7FF && hi >= 0xE000) {
    Utf8Sequences(lo, 0xD7FF, out);
    Utf8Sequences(0xE000, hi, out);
    return;
  }
  if (lo >= 0xD800 && hi <= 0xDFFF) return;
  if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
  if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
  if (lo > hi) return;
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && max < hi) {
      Utf8Sequences(lo, max, out);
      Utf8Sequences(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [](uint32_t cp, uint8_t* b) {
    if (cp < 0x800) {
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return 2;
    }
    if (cp < 0x10000) {
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return 3;
    }
    b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 4;
  };
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < n; ++k) seq.emplace_back(a[k], b[k]);
  out->push_back(std::move(seq));
}

// An upper bound of the NFA states `n` expands to (counted repetitions copy their body).
// JSON-string mode: the escapes' six states and the three more ranges the specials split off.
double ExpandedSize(const Node& n, bool json) {
  double size = 2;
  switch (n.kind) {
    case Node::kSet:
      size += 4.0 * static_cast<double>(n.set.size()) + (json ? 18 : 0);
      break;
    case Node::kRepeat:
      size += ExpandedSize(n.kids[0], json) * (n.max < 0 ? n.min + 1 : std::max(n.max, 1));
      break;
    default:
      for (const Node& k : n.kids) size += ExpandedSize(k, json);
  }
  return size;
}

}  // namespace

// The Thompson NFA over bytes: each state has byte-range edges and epsilon edges.
struct Regex::Nfa {
  struct Edge {
    uint8_t lo, hi;
    int32_t to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int32_t> eps;
    // Assertions (^ and $ inside the expression): an epsilon edge taken only at the start of the
    // text (before its first byte), or only at its end (no byte read after it).
    std::vector<int32_t> begin, end;
  };
  std::vector<State> states;
  int32_t match = 0;
  int32_t matched = 0;  // the end of the pattern's match (quoted: before the closing quote)
  bool quoted = false;
  int32_t open = -1;        // quoted: the state before the opening quote (the text starts after it)
  bool assertions = false;  // some state has a begin or end edge (else the sets below are one)
  // productive: a match is reachable from it, reading bytes and then only $ (the states a DFA
  // state keeps); ends: the end of the match is reachable by epsilon edges and $ (where the text
  // may end); starts: a productive state is reachable by epsilon edges and ^ (the start's closure
  // goes through it).
  std::vector<bool> productive, ends, starts;
  // kSearch: 2 for the states of the trailing "anything" after a match, 1 for those after it (the
  // end of the match, the closing quote). A thread in the trailing part accepts every continuation
  // of whole characters, and every thread of a DFA state is at the same place in a character
  // (UTF-8 and the JSON encoding are prefix codes), so a set holding one accepts what its tail
  // states alone do: the rest is dropped (Reduce), and after a match the DFA no longer follows
  // the search for the other alternatives.
  std::vector<char> tail;
  std::vector<int32_t> Reduce(std::vector<int32_t> set) const {
    if (tail.empty() ||
        std::none_of(set.begin(), set.end(), [&](int32_t s) { return tail[s] == 2; }))
      return set;
    set.erase(std::remove_if(set.begin(), set.end(), [&](int32_t s) { return tail[s] == 0; }),
              set.end());
    return set;
  }

  int32_t Add() {
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
  bool json = false;  // Options::json_string

  // The code points of `set` as UTF-8 byte sequences from s to e.
  void AddUtf8(int32_t s, int32_t e, const Ranges& set) {
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (const auto& [lo, hi] : set) Utf8Sequences(lo, hi, &seqs);
    for (const auto& seq : seqs) {
      int32_t at = s;
      for (size_t k = 0; k < seq.size(); ++k) {
        const int32_t to = k + 1 == seq.size() ? e : Add();
        states[at].edges.push_back({seq[k].first, seq[k].second, to});
        at = to;
      }
    }
  }
  void AddByte(int32_t from, char c, int32_t to) {
    const auto b = static_cast<uint8_t>(c);
    states[from].edges.push_back({b, b, to});
  }
  // The code points of `set` in their JSON-encoded forms (regex.h) from s to e: the escapes
  // share one path per prefix (\, \u00, \u000, \u001), so a set costs at most six states more.
  void AddJson(int32_t s, int32_t e, const Ranges& set) {
    const Ranges specials = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    Ranges outside = Negate(set);
    outside.insert(outside.end(), specials.begin(), specials.end());
    AddUtf8(s, e, Negate(Normalize(std::move(outside))));  // raw: '/' included
    auto in = [&set](uint32_t cp) {
      for (const auto& [lo, hi] : set)
        if (lo <= cp && cp <= hi) return true;
      return false;
    };
    int32_t backslash = -1, u00 = -1, hex[2] = {-1, -1};
    auto after_backslash = [&] {
      if (backslash < 0) AddByte(s, '\\', backslash = Add());
      return backslash;
    };
    for (const auto& [cp, letter] : std::initializer_list<std::pair<uint32_t, char>>{{'"', '"'},
                                                                                     {'\\', '\\'},
                                                                                     {'/', '/'},
                                                                                     {'\b', 'b'},
                                                                                     {'\f', 'f'},
                                                                                     {'\n', 'n'},
                                                                                     {'\r', 'r'},
                                                                                     {'\t', 't'}})
      if (in(cp)) AddByte(after_backslash(), letter, e);
    for (uint32_t cp = 0; cp < 0x20; ++cp) {
      if (!in(cp)) continue;
      if (u00 < 0) {
        const int32_t u = Add(), u0 = Add();
        AddByte(after_backslash(), 'u', u);
        AddByte(u, '0', u0);
        AddByte(u0, '0', u00 = Add());
      }
      int32_t& h = hex[cp >> 4];
      if (h < 0) AddByte(u00, static_cast<char>('0' + (cp >> 4)), h = Add());
      const uint32_t low = cp & 0xF;
      if (low < 10) {
        AddByte(h, static_cast<char>('0' + low), e);
      } else {
        AddByte(h, static_cast<char>('a' + low - 10), e);
        AddByte(h, static_cast<char>('A' + low - 10), e);
      }
    }
  }

  // Builds `n` between a new start state and a new end state: {start, end}.
  std::pair<int32_t, int32_t> Build(const Node& n) {
    const int32_t s = Add(), e = Add();
    switch (n.kind) {
      case Node::kEmpty:
        states[s].eps.push_back(e);
        break;
      case Node::kBegin:
        states[s].begin.push_back(e);
        assertions = true;
        break;
      case Node::kEnd:
        states[s].end.push_back(e);
        assertions = true;
        break;
      case Node::kSet:
        if (json)
          AddJson(s, e, n.set);
        else
          AddUtf8(s, e, n.set);
        break;
      case Node::kConcat: {
        int32_t at = s;
        for (const Node& k : n.kids) {
          const auto [ks, ke] = Build(k);
          states[at].eps.push_back(ks);
          at = ke;
        }
        states[at].eps.push_back(e);
        break;
      }
      case Node::kAlt:
        for (const Node& k : n.kids) {
          const auto [ks, ke] = Build(k);
          states[s].eps.push_back(ks);
          states[ke].eps.push_back(e);
        }
        break;
      case Node::kRepeat: {
        const Node& k = n.kids[0];
        int32_t at = s;
        for (int i = 0; i < n.min; ++i) {
          const auto [ks, ke] = Build(k);
          states[at].eps.push_back(ks);
          at = ke;
        }
        if (n.max < 0) {
          const auto [ks, ke] = Build(k);
          states[at].eps.push_back(ks);
          states[ke].eps.push_back(ks);
          states[ke].eps.push_back(e);
          states[at].eps.push_back(e);
        } else {
          for (int i = n.min; i < n.max; ++i) {
            const auto [ks, ke] = Build(k);
            states[at].eps.push_back(ks);
            states[at].eps.push_back(e);  // stop here
            at = ke;
          }
          states[at].eps.push_back(e);
        }
        break;
      }
    }
    return {s, e};
  }
  // The states from which one of `from` is reachable by the edges `follow` picks (backwards).
  template <typename Follow>
  std::vector<bool> Reaching(const std::vector<int32_t>& from, Follow follow) const {
    std::vector<std::vector<int32_t>> back(states.size());
    for (size_t s = 0; s < states.size(); ++s)
      follow(states[s], [&](int32_t t) { back[t].push_back(static_cast<int32_t>(s)); });
    std::vector<bool> seen(states.size(), false);
    std::vector<int32_t> stack;
    for (int32_t t : from)
      if (!seen[t]) {
        seen[t] = true;
        stack.push_back(t);
      }
    while (!stack.empty()) {
      const int32_t t = stack.back();
      stack.pop_back();
      for (int32_t s : back[t])
        if (!seen[s]) {
          seen[s] = true;
          stack.push_back(s);
        }
    }
    return seen;
  }
  static std::vector<int32_t> Marked(const std::vector<bool>& v) {
    std::vector<int32_t> out;
    for (size_t s = 0; s < v.size(); ++s)
      if (v[s]) out.push_back(static_cast<int32_t>(s));
    return out;
  }
  void MarkProductive() {
    if (!assertions) {  // no ^ or $ inside: productive is all (a set holds `matched` to end)
      productive = Reaching({match}, [](const State& st, auto add) {
        for (const Edge& e : st.edges) add(e.to);
        for (int32_t t : st.eps) add(t);
      });
      return;
    }
    ends = Reaching({matched}, [](const State& st, auto add) {
      for (int32_t t : st.eps) add(t);
      for (int32_t t : st.end) add(t);
    });
    std::vector<int32_t> from = Marked(ends);
    from.push_back(match);
    productive = Reaching(from, [](const State& st, auto add) {
      for (const Edge& e : st.edges) add(e.to);
      for (int32_t t : st.eps) add(t);
    });
    starts = Reaching(Marked(productive), [](const State& st, auto add) {
      for (int32_t t : st.eps) add(t);
      for (int32_t t : st.begin) add(t);
    });
    // Quoted: the opening quote leads to the start of the text, where ^ holds.
    if (open >= 0)
      for (const Edge& e : states[open].edges)
        if (starts[e.to] || CanEnd({e.to}, true)) productive[open] = starts[open] = true;
  }
  // The productive states reachable from `set` by epsilon edges (at the start of the text, ^'s
  // too), sorted.
  std::vector<int32_t> Closure(std::vector<int32_t> set, bool at_start) const {
    const std::vector<bool>& through = at_start && assertions ? starts : productive;
    std::vector<bool> seen(states.size(), false);
    std::vector<int32_t> out, stack;
    for (int32_t s : set)
      if (through[s] && !seen[s]) {
        seen[s] = true;
        stack.push_back(s);
      }
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (productive[s]) out.push_back(s);
      for (const auto* list : {&states[s].eps, &states[s].begin}) {
        if (list == &states[s].begin && !at_start) continue;
        for (int32_t t : *list)
          if (through[t] && !seen[t]) {
            seen[t] = true;
            stack.push_back(t);
          }
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // Whether the text may end after `set` (its closure; at its start, the states before it: the
  // empty text, where ^ and $ both hold).
  bool CanEnd(const std::vector<int32_t>& set, bool at_start) const {
    if (!at_start && !assertions) return std::binary_search(set.begin(), set.end(), matched);
    if (!at_start) return std::any_of(set.begin(), set.end(), [&](int32_t s) { return ends[s]; });
    std::vector<bool> seen(states.size(), false);
    std::vector<int32_t> stack(set.begin(), set.end());
    for (int32_t s : set) seen[s] = true;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (s == matched) return true;
      for (const auto* list : {&states[s].eps, &states[s].begin, &states[s].end})
        for (int32_t t : *list)
          if (!seen[t]) {
            seen[t] = true;
            stack.push_back(t);
          }
    }
    return false;
  }
};

Regex::Regex() : nfa_(std::make_unique<Nfa>()) {}
Regex::~Regex() = default;

size_t Regex::num_nfa_states() const {
  return nfa_->states.size();
}

Status Regex::Compile(std::string_view pattern, Mode mode, std::unique_ptr<Regex>* out) {
  return Compile(pattern, Options{.mode = mode}, out);
}

Status Regex::Compile(std::string_view pattern, const Options& options,
                      std::unique_ptr<Regex>* out) {
  const Mode mode = options.mode;
  Node root;
  LLMQ_RETURN_IF_ERROR(Parser(pattern).Parse(&root));
  // Each top-level alternative, its anchors taken away; unanchored ends match anything (search).
  std::vector<Node> alts;
  if (root.kind == Node::kAlt)
    alts = std::move(root.kids);
  else
    alts.push_back(std::move(root));
  Node any;
  any.kind = Node::kRepeat;
  any.min = 0;
  any.max = -1;
  Node all;
  all.kind = Node::kSet;
  all.set = {{0, kMaxCodePoint}};
  any.kids.push_back(std::move(all));
  // Alternatives whose end is anchored, and the others, which share one trailing "anything"
  // in kSearch (its states are the NFA's tail: Nfa::Reduce).
  Node anchored, open;
  anchored.kind = open.kind = Node::kAlt;
  for (Node& a : alts) {
    bool begin = false, end = false;
    StripAnchors(&a, &begin, &end);
    Node c;
    c.kind = Node::kConcat;
    if (mode == Mode::kSearch && !begin) c.kids.push_back(any);
    c.kids.push_back(std::move(a));
    (mode == Mode::kSearch && !end ? open : anchored).kids.push_back(std::move(c));
  }
  const double size = ExpandedSize(anchored, options.json_string) +
                      ExpandedSize(open, options.json_string) +
                      (open.kids.empty() ? 0 : ExpandedSize(any, options.json_string));
  if (size > kMaxNfaStates)
    return Status::Unsupported("pattern: its repetitions expand to more than " +
                               std::to_string(kMaxNfaStates) + " automaton states");
  std::unique_ptr<Regex> r(new Regex());
  Nfa& nfa = *r->nfa_;
  nfa.json = options.json_string;
  int32_t s = nfa.Add();
  const auto [as, ae] = nfa.Build(anchored);
  nfa.states[s].eps.push_back(as);
  int32_t e = ae;
  size_t tail_from = 0, tail_to = 0;  // the trailing part's states (none: empty)
  if (!open.kids.empty()) {
    const auto [os, oe] = nfa.Build(open);
    nfa.states[s].eps.push_back(os);
    tail_from = nfa.states.size();
    const auto [ts, te] = nfa.Build(any);
    tail_to = nfa.states.size();
    nfa.states[oe].eps.push_back(ts);
    e = nfa.Add();
    nfa.states[ae].eps.push_back(e);
    nfa.states[te].eps.push_back(e);
  }
  const int32_t matched = e;  // the end of a match (before the closing quote)
  if (options.quoted) {       // raw quotes around what the pattern reads
    const int32_t open_quote = nfa.Add(), close = nfa.Add();
    nfa.AddByte(open_quote, '"', s);
    nfa.open = open_quote;
    nfa.AddByte(e, '"', close);
    s = open_quote;
    e = close;
  }
  if (tail_to > tail_from) {
    nfa.tail.assign(nfa.states.size(), 0);
    for (size_t t = tail_from; t < tail_to; ++t) nfa.tail[t] = 2;
    nfa.tail[static_cast<size_t>(matched)] = 1;
    nfa.tail[static_cast<size_t>(e)] = 1;  // the closing quote's (where quoted)
  }
  r->nfa_->match = e;
  r->nfa_->matched = matched;
  r->nfa_->quoted = options.quoted;
  r->nfa_->MarkProductive();
  // The text starts here, unquoted (quoted: after the opening quote, Step).
  const bool at_start = !options.quoted;
  const std::vector<int32_t> start = r->nfa_->Reduce(r->nfa_->Closure({s}, at_start));
  const bool can_end = r->nfa_->CanEnd(at_start ? std::vector<int32_t>{s} : start, at_start);
  r->start_ = start.empty() && !can_end ? kDead : r->Intern(start, at_start, can_end);
  *out = std::move(r);
  return Status::Ok();
}

int Regex::Intern(std::vector<int32_t> set, bool at_start, bool can_end) {
  // The state at the start is made once (its transition from start_ is cached): not indexed.
  if (!at_start)
    if (const auto it = index_.find(set); it != index_.end()) return it->second;
  auto d = std::make_unique<DState>();
  d->at_start = at_start;
  d->can_end = can_end || nfa_->CanEnd(set, false);
  d->accepting =
      nfa_->quoted ? std::binary_search(set.begin(), set.end(), nfa_->match) : d->can_end;
  std::fill(std::begin(d->next), std::end(d->next), kUnknown);
  d->set = std::move(set);
  dfa_.push_back(std::move(d));
  const int id = static_cast<int>(dfa_.size() - 1);
  if (!at_start) index_.emplace(dfa_[static_cast<size_t>(id)]->set, id);
  return id;
}

int Regex::Step(int state, uint8_t byte) {
  if (state < 0) return kDead;
  if (const int32_t n = dfa_[static_cast<size_t>(state)]->next[byte]; n != kUnknown) return n;
  const DState& d = *dfa_[static_cast<size_t>(state)];
  std::vector<int32_t> moved;
  for (int32_t s : d.set)
    for (const Nfa::Edge& e : nfa_->states[static_cast<size_t>(s)].edges)
      if (e.lo <= byte && byte <= e.hi) moved.push_back(e.to);
  // Quoted: the closing quote where the text may end ($ inside the expression holds there).
  if (nfa_->quoted && byte == '"' && d.can_end) moved.push_back(nfa_->match);
  const bool at_start = nfa_->quoted && state == start_ && byte == '"';  // the opening quote
  const bool can_end = at_start && nfa_->CanEnd(moved, true);
  const std::vector<int32_t> next = nfa_->Reduce(nfa_->Closure(std::move(moved), at_start));
  const int id = next.empty() && !can_end ? kDead : Intern(next, at_start, can_end);
  dfa_[static_cast<size_t>(state)]->next[byte] = id;
  return id;
}

std::string Regex::StateKey(int state) const {
  if (state < 0) return "dead";
  std::string key = dfa_[static_cast<size_t>(state)]->at_start ? "^" : "";
  for (const int32_t s : dfa_[static_cast<size_t>(state)]->set) key += std::to_string(s) + ",";
  return key;
}

bool Regex::IsAccepting(int state) const {
  return state >= 0 && dfa_[static_cast<size_t>(state)]->accepting;
}

bool Regex::IsViablePrefix(std::string_view text) {
  int s = start_;
  for (char c : text)
    if ((s = Step(s, static_cast<uint8_t>(c))) == kDead) return false;
  return s != kDead;
}

bool Regex::Matches(std::string_view text) {
  int s = start_;
  for (char c : text)
    if ((s = Step(s, static_cast<uint8_t>(c))) == kDead) return false;
  return IsAccepting(s);
}

}  // namespace llmq
