#include "engine/text/jinja_lexer.h"

#include <cstdint>

#include "base/text.h"

namespace llmq::jinja {

namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  Lexer(std::string src, const std::string& origin) : src_(std::move(src)), origin_(origin) {}

  Status Run(std::vector<Token>* out) {
    out_ = out;
    bool line_start = true;  // the text to come starts a line (lstrip_blocks)
    while (pos_ < src_.size()) {
      // The next tag opener, or the end.
      size_t open = pos_;
      while (true) {
        open = src_.find('{', open);
        if (open == std::string::npos || open + 1 >= src_.size()) {
          open = std::string::npos;
          break;
        }
        const char c = src_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      std::string text =
          src_.substr(pos_, open == std::string::npos ? std::string::npos : open - pos_);
      const int text_line = line_;
      if (open == std::string::npos) {
        Emit(Token::Kind::kText, std::move(text), text_line);
        break;
      }
      const char kind = src_[open + 1];
      const char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (kind != '{' && marker != '+') {
        // lstrip_blocks: spaces and tabs between a line's start and a block or comment go.
        const size_t nl = text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos || line_start) {
          bool blank = true;
          for (size_t k = from; k < text.size(); ++k)
            blank = blank && (text[k] == ' ' || text[k] == '\t');
          if (blank) text.resize(from);
        }
      }
      Advance(open);
      Emit(Token::Kind::kText, std::move(text), text_line);
      Advance(open + 2 + (marker == '-' || marker == '+' ? 1 : 0));
      bool trim_after = false;
      keep_newline_ = false;
      if (kind == '#') {
        LLMQ_RETURN_IF_ERROR(Comment(&trim_after));
      } else if (kind == '%' && IsRaw()) {
        LLMQ_RETURN_IF_ERROR(Raw(&trim_after));
      } else {
        LLMQ_RETURN_IF_ERROR(Tag(kind == '{', &trim_after));
      }
      line_start = false;
      if (trim_after) {
        while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(pos_ + 1);
      } else if (kind != '{' && !keep_newline_ && pos_ < src_.size() && src_[pos_] == '\n') {
        Advance(pos_ + 1);  // trim_blocks
        line_start = true;
      }
    }
    Emit(Token::Kind::kEof, "", line_);
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(origin_ + ":" + std::to_string(line_) + ": " + what);
  }

  // Moves to `to`, counting lines.
  void Advance(size_t to) {
    for (; pos_ < to; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  void Emit(Token::Kind k, std::string text, int line) {
    if (k == Token::Kind::kText && text.empty()) return;
    out_->push_back(Token{k, std::move(text), line});
  }

  Status Comment(bool* trim_after) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error("unterminated comment");
    *trim_after = end > pos_ && src_[end - 1] == '-';
    Advance(end + 2);
    return Status::Ok();
  }

  // Whether the block tag just opened is {% raw %}.
  bool IsRaw() const {
    size_t p = pos_;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  // {% raw %}...{% endraw %}: the text between, as it is.
  Status Raw(bool* trim_after) {
    size_t p = src_.find("%}", pos_);
    const bool strip_inner = src_[p - 1] == '-';
    Advance(p + 2);
    size_t search = pos_;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) return Error("expected 'endraw', found end of template");
      size_t q = open + 2;
      const bool strip_before = q < src_.size() && src_[q] == '-';
      if (strip_before) ++q;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      *trim_after = q < src_.size() && src_[q] == '-';
      if (*trim_after) ++q;
      if (src_.compare(q, 2, "%}") != 0) return Error("expected '%}' after 'endraw'");
      std::string text = src_.substr(pos_, open - pos_);
      size_t b = 0;
      if (strip_inner)
        while (b < text.size() && IsSpace(text[b])) ++b;
      text.erase(0, b);
      if (strip_before)
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      Emit(Token::Kind::kText, std::move(text), line_);
      Advance(q + 2);
      return Status::Ok();
    }
  }

  // The tokens of a {{ }} or {% %} tag, up to and including its end.
  Status Tag(bool var, bool* trim_after) {
    const int begin_line = line_;
    Emit(var ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "", line_);
    int brackets = 0;
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(pos_ + 1);
      if (pos_ >= src_.size()) {
        line_ = begin_line;
        return Error(var ? "unterminated '{{'" : "unterminated '{%'");
      }
      const char c = src_[pos_];
      const char* end = var ? "}}" : "%}";
      if (brackets == 0) {
        const bool dash = c == '-' && src_.compare(pos_ + 1, 2, end) == 0;
        const bool plus = c == '+' && !var && src_.compare(pos_ + 1, 2, end) == 0;
        if (dash || plus || src_.compare(pos_, 2, end) == 0) {
          *trim_after = dash;
          keep_newline_ = plus;  // "+%}": no trim_blocks for this tag
          Advance(pos_ + (dash || plus ? 3 : 2));
          Emit(var ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "", line_);
          return Status::Ok();
        }
      }
      if (IsNameStart(c)) {
        size_t e = pos_;
        while (e < src_.size() && (IsNameStart(src_[e]) || IsDigit(src_[e]))) ++e;
        Emit(Token::Kind::kName, src_.substr(pos_, e - pos_), line_);
        Advance(e);
      } else if (IsDigit(c)) {
        LLMQ_RETURN_IF_ERROR(Number());
      } else if (c == '\'' || c == '"') {
        LLMQ_RETURN_IF_ERROR(String(c));
      } else {
        static const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : kTwo)
          if (src_.compare(pos_, 2, t) == 0) op = t;
        if (op.size() == 1 &&
            std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
          return Error(std::string("unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') ++brackets;
        if ((c == ')' || c == ']' || c == '}') && brackets > 0) --brackets;
        Emit(Token::Kind::kOp, op, line_);
        Advance(pos_ + op.size());
      }
    }
  }

  Status Number() {
    size_t e = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (e < src_.size() &&
             (IsDigit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && IsDigit(src_[e + 1]))))
        ++e;
    };
    digits();
    if (e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && IsDigit(src_[x])) {
        is_float = true;
        e = x;
        digits();
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (src_[k] != '_') text.push_back(src_[k]);
    Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, std::move(text), line_);
    Advance(e);
    return Status::Ok();
  }

  // A quoted literal with Python's escapes (unknown ones are kept as written).
  Status String(char quote) {
    const int begin_line = line_;
    std::string s;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) {
        line_ = begin_line;
        return Error("unterminated string");
      }
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        s.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) {
        ++p;
        continue;
      }
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n':
          s.push_back('\n');
          break;
        case 't':
          s.push_back('\t');
          break;
        case 'r':
          s.push_back('\r');
          break;
        case '\\':
          s.push_back('\\');
          break;
        case '\'':
          s.push_back('\'');
          break;
        case '"':
          s.push_back('"');
          break;
        case 'a':
          s.push_back('\a');
          break;
        case 'b':
          s.push_back('\b');
          break;
        case 'f':
          s.push_back('\f');
          break;
        case 'v':
          s.push_back('\v');
          break;
        case '0':
          s.push_back('\0');
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = p + k < src_.size() ? src_[p + k] : 'g';
            const int d = IsDigit(h)               ? h - '0'
                          : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                          : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                   : -1;
            if (d < 0) return Error(std::string("truncated \\") + e + " escape");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return Error("escape names no Unicode character");
          AppendUtf8(cp, &s);
          p += n;
          break;
        }
        default:
          s.push_back('\\');
          s.push_back(e);
      }
    }
    Emit(Token::Kind::kString, std::move(s), begin_line);
    Advance(p + 1);
    return Status::Ok();
  }

  std::string src_;
  const std::string& origin_;
  std::vector<Token>* out_ = nullptr;
  size_t pos_ = 0;
  int line_ = 1;
  bool keep_newline_ = false;  // the tag just lexed ended "+%}"
};

}  // namespace

Status Lex(std::string_view source, const std::string& origin, std::vector<Token>* out) {
  // Newlines normalized to "\n" and one trailing newline dropped, as jinja2 does
  // (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src.push_back('\n');
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src.push_back(source[k]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  out->clear();
  return Lexer(std::move(src), origin).Run(out);
}

}  // namespace llmq::jinja
