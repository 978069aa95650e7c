#include "base/text.h"

#include <cstdint>
#include <cstdio>

namespace llmq {

size_t Utf8SequenceLength(const char* s, size_t size, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > size) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

namespace {
// Walks `s` by UTF-8 sequences: f(i, len, control) for each valid one (control: C0, DEL or C1),
// f(i, 0, false) for each byte that is not part of one.
template <typename F>
void ForEachSequence(std::string_view s, F&& f) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s.data(), s.size(), i);
    if (n == 0) {
      f(i, 0, false);
      ++i;
      continue;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    const bool control = (n == 1 && (c < 0x20 || c == 0x7f)) ||
                         (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0);
    f(i, n, control);
    i += n;
  }
}
}  // namespace

bool IsUtf8(std::string_view s) {
  bool ok = true;
  ForEachSequence(s, [&](size_t, size_t n, bool) { ok = ok && n > 0; });
  return ok;
}

bool HasControlOrInvalid(std::string_view s) {
  bool bad = false;
  ForEachSequence(s, [&](size_t, size_t n, bool control) { bad = bad || n == 0 || control; });
  return bad;
}

namespace {
std::string Escape(std::string_view s, bool double_backslashes) {
  std::string out;
  out.reserve(s.size());
  ForEachSequence(s, [&](size_t i, size_t n, bool control) {
    const auto hex = [&](unsigned char c) {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    };
    if (n == 0) return hex(static_cast<unsigned char>(s[i]));
    if (!control) {
      if (s[i] == '\\' && double_backslashes) return void(out += "\\\\");
      return void(out.append(s.data() + i, n));
    }
    switch (s[i]) {
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      default:
        for (size_t k = 0; k < n; ++k) hex(static_cast<unsigned char>(s[i + k]));
    }
  });
  return out;
}
}  // namespace

std::string Escaped(std::string_view s) {
  return Escape(s, true);
}
std::string OneLine(std::string_view s) {
  return Escape(s, false);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace llmq
