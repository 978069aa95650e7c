#include "engine/text/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <shared_mutex>
#include <system_error>

namespace llmq {
namespace hf {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ----------------------------------------------------------------------------------- UTF-8

// Length of the UTF-8 character starting at s[i] (1 for a stray byte, never past the end).
size_t CharLen(const std::string& s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (c >= 0x80 && c < 0xC0) n = 1;
  return std::min(n, s.size() - i);
}

int32_t CodepointAt(const std::string& s, size_t i, size_t* len) {
  utf8proc_int32_t cp = -1;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()) + i,
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  *len = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? cp : -1;
}

void AppendCodepoint(int32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(cp, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Rust's char::is_whitespace: the Unicode White_Space property.
bool IsWhitespace(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust's char::is_alphanumeric: Alphabetic or Numeric (approximated by the general categories).
bool IsAlphanumeric(int32_t c) {
  if (c < 0) return false;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// GPT-2's byte <-> printable character table (ByteLevel): printable Latin-1 bytes stand for
// themselves, the others map to U+0100.. in byte order.
struct ByteTable {
  static constexpr int32_t kChars = 256 + 68;  // the stand-ins end below U+0144
  std::string byte_to_char[256];
  int16_t char_to_byte[kChars];  // -1: not a stand-in (decoding is a flat lookup per character)
  ByteTable() {
    std::fill(std::begin(char_to_byte), std::end(char_to_byte), int16_t{-1});
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int32_t cp = printable ? b : 256 + n++;
      AppendCodepoint(cp, &byte_to_char[b]);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
  int ByteOf(int32_t cp) const { return cp >= 0 && cp < kChars ? char_to_byte[cp] : -1; }
};
const ByteTable& Bytes() {
  static const ByteTable t;
  return t;
}

// ----------------------------------------------------------------------------------- Regex

// The patterns of tokenizer.json are Oniguruma regexes (the Rust crate's). PCRE2 with UTF + UCP
// reads them the same way except for \s: Oniguruma's is Unicode White_Space, which includes
// U+0085 (NEL) that PCRE2 10.42's UCP \s lacks. Translate() adds it.
std::string Translate(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[++i];
      if (n == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

class Regex {
 public:
  static Status Compile(const std::string& pattern, bool literal, const std::string& where,
                        std::unique_ptr<Regex>* out) {
    int err = 0;
    PCRE2_SIZE off = 0;
    const std::string p = literal ? pattern : Translate(pattern);
    const uint32_t opts =
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0u);
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), opts, &err, &off, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return Status::Corruption(where + ": regex " + pattern + " does not compile at offset " +
                                std::to_string(off) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT (unsupported CPU) it still works
    out->reset(new Regex(code));
    return Status::Ok();
  }
  ~Regex() { pcre2_code_free(code_); }

  // Every non-overlapping match, left to right, as [start, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> FindAll(const std::string& s) const {
    std::vector<std::pair<size_t, size_t>> out;
    // Per thread: the JIT stack big patterns need on long whitespace runs (the default 32 KiB
    // is too small for \s+(?!\S) over 100 KB).
    thread_local struct Ctx {
      pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 64 << 20, nullptr);
      pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
      Ctx() { pcre2_jit_stack_assign(mctx, nullptr, stack); }
      ~Ctx() {
        pcre2_match_context_free(mctx);
        pcre2_jit_stack_free(stack);
      }
    } ctx;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t pos = 0;
    while (pos <= s.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md,
                           ctx.mctx);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, PCRE2_NO_JIT,
                         md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t a = ov[0], b = ov[1];
      if (b == a) {
        // An empty match produces no split; move on by one character.
        if (a >= s.size()) break;
        pos = a + CharLen(s, a);
        continue;
      }
      out.emplace_back(a, b);
      pos = b;
    }
    pcre2_match_data_free(md);
    return out;
  }

 private:
  explicit Regex(pcre2_code* c) : code_(c) {}
  pcre2_code* code_;
};

// ----------------------------------------------------------------------------------- Pieces

// A piece of text on its way to the model. `origin`: the piece starts at offset 0 of the input
// (Metaspace's prepend_scheme "first" prepends only there).
struct Piece {
  std::string s;
  bool origin = false;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `p` at the given matches (the Rust crate's NormalizedString::split).
void SplitPiece(const Piece& p, std::vector<std::pair<size_t, size_t>> matches, Behavior b,
                bool invert, std::vector<Piece>* out) {
  // (start, end, is_match) covering the whole piece.
  std::vector<std::tuple<size_t, size_t, bool>> parts;
  size_t last = 0;
  for (const auto& [a, e] : matches) {
    if (a > last) parts.emplace_back(last, a, invert);
    parts.emplace_back(a, e, !invert);
    last = e;
  }
  if (last < p.s.size()) parts.emplace_back(last, p.s.size(), invert);

  std::vector<std::pair<size_t, size_t>> spans;
  switch (b) {
    case Behavior::kIsolated:
      for (const auto& [a, e, m] : parts) spans.emplace_back(a, e);
      break;
    case Behavior::kRemoved:
      for (const auto& [a, e, m] : parts)
        if (!m) spans.emplace_back(a, e);
      break;
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const auto& [a, e, m] : parts) {
        if (m && prev_match && !spans.empty()) {
          spans.back().second = e;
        } else {
          spans.emplace_back(a, e);
        }
        prev_match = m;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& [a, e, m] : parts) {
        if (m && !prev_match && !spans.empty()) {
          spans.back().second = e;
        } else {
          spans.emplace_back(a, e);
        }
        prev_match = m;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (const auto& [a, e, m] : parts) {
        if (prev_match && !spans.empty()) {
          spans.back().second = e;
        } else {
          spans.emplace_back(a, e);
        }
        prev_match = m;
      }
      break;
    }
  }
  for (const auto& [a, e] : spans) {
    if (e > a) out->push_back(Piece{p.s.substr(a, e - a), p.origin && a == 0});
  }
}

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t f; (f = s->find(from, pos)) != std::string::npos; pos = f + from.size()) {
    out.append(*s, pos, f - pos);
    out += to;
  }
  out.append(*s, pos, std::string::npos);
  *s = std::move(out);
}

// A "pattern" field: {"String": s} (a literal) or {"Regex": r}.
Status ParsePattern(const json& j, const std::string& where, std::string* text, bool* literal) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    *text = j["String"].get<std::string>();
    *literal = true;
    return Status::Ok();
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    *text = j["Regex"].get<std::string>();
    *literal = false;
    return Status::Ok();
  }
  return Status::Corruption(where + ": \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
}

std::string StrField(const json& j, const char* key, const std::string& def) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}
int IntField(const json& j, const char* key, int def) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() && it->get<int64_t>() >= 0 &&
                 it->get<int64_t>() < (1 << 20)
             ? it->get<int>()
             : def;
}
bool BoolField(const json& j, const char* key, bool def) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

// ----------------------------------------------------------------------------------- Normalizers

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void Apply(std::string* s) const = 0;
};

struct UnicodeNormalizer : Normalizer {
  utf8proc_option_t opts;
  explicit UnicodeNormalizer(utf8proc_option_t o) : opts(o) {}
  void Apply(std::string* s) const override {
    if (std::all_of(s->begin(), s->end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; }))
      return;  // ASCII is invariant under every normalization form
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s->data()),
                                static_cast<utf8proc_ssize_t>(s->size()), &out,
                                static_cast<utf8proc_option_t>(opts | UTF8PROC_STABLE));
    if (n >= 0) s->assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);  // invalid UTF-8 (never from a std::string of text) is left as it is
  }
};

struct ReplaceNormalizer : Normalizer {
  std::string pattern, content;
  std::unique_ptr<Regex> re;  // null for a literal pattern
  void Apply(std::string* s) const override {
    if (!re) {
      ReplaceAll(s, pattern, content);
      return;
    }
    std::string out;
    size_t last = 0;
    for (const auto& [a, e] : re->FindAll(*s)) {
      out.append(*s, last, a - last);
      out += content;
      last = e;
    }
    out.append(*s, last, std::string::npos);
    *s = std::move(out);
  }
};

struct PrependNormalizer : Normalizer {
  std::string prepend;
  void Apply(std::string* s) const override {
    if (!s->empty()) s->insert(0, prepend);
  }
};

struct StripNormalizer : Normalizer {
  bool left = true, right = true;
  void Apply(std::string* s) const override {
    size_t a = 0, e = s->size(), len = 0;
    while (left && a < e && IsWhitespace(CodepointAt(*s, a, &len))) a += len;
    while (right && e > a) {
      size_t b = e - 1;
      while (b > a && (static_cast<uint8_t>((*s)[b]) & 0xC0) == 0x80) --b;
      if (!IsWhitespace(CodepointAt(*s, b, &len))) break;
      e = b;
    }
    *s = s->substr(a, e - a);
  }
};

struct SequenceNormalizer : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> items;
  void Apply(std::string* s) const override {
    for (const auto& n : items) n->Apply(s);
  }
};

Status ParseNormalizer(const json& j, const std::string& where, std::unique_ptr<Normalizer>* out) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_object()) return Status::Corruption(where + ": normalizer must be an object");
  const std::string type = StrField(j, "type", "");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    int o = type == "NFC"    ? UTF8PROC_COMPOSE
            : type == "NFD"  ? UTF8PROC_DECOMPOSE
            : type == "NFKC" ? UTF8PROC_COMPOSE | UTF8PROC_COMPAT
                             : UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    *out = std::make_unique<UnicodeNormalizer>(static_cast<utf8proc_option_t>(o));
  } else if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return Status::Corruption(where + ": normalizer Sequence needs \"normalizers\"");
    for (const json& item : j["normalizers"]) {
      std::unique_ptr<Normalizer> n;
      LLMQ_RETURN_IF_ERROR(ParseNormalizer(item, where, &n));
      if (n) seq->items.push_back(std::move(n));
    }
    *out = std::move(seq);
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceNormalizer>();
    bool literal = true;
    LLMQ_RETURN_IF_ERROR(ParsePattern(j.value("pattern", json()), where, &r->pattern, &literal));
    r->content = StrField(j, "content", "");
    if (!literal) LLMQ_RETURN_IF_ERROR(Regex::Compile(r->pattern, false, where, &r->re));
    *out = std::move(r);
  } else if (type == "Prepend") {
    auto p = std::make_unique<PrependNormalizer>();
    p->prepend = StrField(j, "prepend", "");
    *out = std::move(p);
  } else if (type == "Strip") {
    auto p = std::make_unique<StripNormalizer>();
    p->left = BoolField(j, "strip_left", true);
    p->right = BoolField(j, "strip_right", true);
    *out = std::move(p);
  } else {
    return Status::Unsupported(where + ": unsupported normalizer type \"" + type + "\"");
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------- Pre-tokenizers

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  virtual void Apply(std::vector<Piece>* pieces) const = 0;
};

struct SplitPre : PreTokenizer {
  std::unique_ptr<Regex> re;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : *pieces) SplitPiece(p, re->FindAll(p.s), behavior, invert, &out);
    *pieces = std::move(out);
  }
};

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct ByteLevelPre : PreTokenizer {
  bool add_prefix_space = false;
  std::unique_ptr<Regex> re;  // the GPT-2 pattern when use_regex
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (Piece p : *pieces) {
      // As the Rust crate: every piece (not only the first) gets the prefix space.
      if (add_prefix_space && (p.s.empty() || p.s[0] != ' ')) p.s.insert(0, " ");
      if (re) {
        SplitPiece(p, re->FindAll(p.s), Behavior::kIsolated, false, &out);
      } else {
        out.push_back(std::move(p));
      }
    }
    const ByteTable& t = Bytes();
    for (Piece& p : out) {
      std::string mapped;
      mapped.reserve(p.s.size() * 2);
      for (char c : p.s) mapped += t.byte_to_char[static_cast<uint8_t>(c)];
      p.s = std::move(mapped);
    }
    *pieces = std::move(out);
  }
};

struct MetaspacePre : PreTokenizer {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (Piece p : *pieces) {
      ReplaceAll(&p.s, " ", replacement);
      const bool starts = p.s.compare(0, replacement.size(), replacement) == 0;
      if (!starts && (prepend == kAlways || (prepend == kFirst && p.origin)))
        p.s.insert(0, replacement);
      if (!split) {
        out.push_back(std::move(p));
        continue;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t f = 0; (f = p.s.find(replacement, f)) != std::string::npos;
           f += replacement.size())
        m.emplace_back(f, f + replacement.size());
      SplitPiece(p, m, Behavior::kMergedWithNext, false, &out);
    }
    *pieces = std::move(out);
  }
};

struct DigitsPre : PreTokenizer {
  bool individual = false;
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : *pieces) {
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t i = 0; i < p.s.size();) {
        size_t len = 0;
        const int32_t c = CodepointAt(p.s, i, &len);
        if (c >= 0 && utf8proc_category(c) == UTF8PROC_CATEGORY_ND) m.emplace_back(i, i + len);
        i += len;
      }
      SplitPiece(p, m, individual ? Behavior::kIsolated : Behavior::kContiguous, false, &out);
    }
    *pieces = std::move(out);
  }
};

struct SequencePre : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void Apply(std::vector<Piece>* pieces) const override {
    for (const auto& p : items) p->Apply(pieces);
  }
};

Status ParseBehavior(const std::string& s, const std::string& where, Behavior* b) {
  if (s == "Removed") {
    *b = Behavior::kRemoved;
  } else if (s == "Isolated") {
    *b = Behavior::kIsolated;
  } else if (s == "MergedWithPrevious") {
    *b = Behavior::kMergedWithPrevious;
  } else if (s == "MergedWithNext") {
    *b = Behavior::kMergedWithNext;
  } else if (s == "Contiguous") {
    *b = Behavior::kContiguous;
  } else {
    return Status::Unsupported(where + ": unsupported Split behavior \"" + s + "\"");
  }
  return Status::Ok();
}

Status ParsePrependScheme(const json& j, const std::string& where,
                          decltype(MetaspacePre::prepend)* p) {
  std::string s = StrField(j, "prepend_scheme", "");
  if (s.empty()) s = BoolField(j, "add_prefix_space", true) ? "always" : "never";
  if (s == "always") {
    *p = MetaspacePre::kAlways;
  } else if (s == "first") {
    *p = MetaspacePre::kFirst;
  } else if (s == "never") {
    *p = MetaspacePre::kNever;
  } else {
    return Status::Unsupported(where + ": unsupported Metaspace prepend_scheme \"" + s + "\"");
  }
  return Status::Ok();
}

Status ParsePreTokenizer(const json& j, const std::string& where,
                         std::unique_ptr<PreTokenizer>* out) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_object()) return Status::Corruption(where + ": pre_tokenizer must be an object");
  const std::string type = StrField(j, "type", "");
  if (type == "Split") {
    auto s = std::make_unique<SplitPre>();
    std::string pattern;
    bool literal = true;
    LLMQ_RETURN_IF_ERROR(ParsePattern(j.value("pattern", json()), where, &pattern, &literal));
    LLMQ_RETURN_IF_ERROR(Regex::Compile(pattern, literal, where, &s->re));
    LLMQ_RETURN_IF_ERROR(ParseBehavior(StrField(j, "behavior", ""), where, &s->behavior));
    s->invert = BoolField(j, "invert", false);
    *out = std::move(s);
  } else if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPre>();
    b->add_prefix_space = BoolField(j, "add_prefix_space", true);
    if (BoolField(j, "use_regex", true))
      LLMQ_RETURN_IF_ERROR(Regex::Compile(kGpt2Pattern, false, where, &b->re));
    *out = std::move(b);
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspacePre>();
    m->replacement = StrField(j, "replacement", m->replacement);
    if (m->replacement.empty())
      return Status::Corruption(where + ": Metaspace \"replacement\" must not be empty");
    m->split = BoolField(j, "split", true);
    LLMQ_RETURN_IF_ERROR(ParsePrependScheme(j, where, &m->prepend));
    *out = std::move(m);
  } else if (type == "Digits") {
    auto d = std::make_unique<DigitsPre>();
    d->individual = BoolField(j, "individual_digits", false);
    *out = std::move(d);
  } else if (type == "Sequence") {
    auto seq = std::make_unique<SequencePre>();
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return Status::Corruption(where + ": pre_tokenizer Sequence needs \"pretokenizers\"");
    for (const json& item : j["pretokenizers"]) {
      std::unique_ptr<PreTokenizer> p;
      LLMQ_RETURN_IF_ERROR(ParsePreTokenizer(item, where, &p));
      if (p) seq->items.push_back(std::move(p));
    }
    *out = std::move(seq);
  } else {
    return Status::Unsupported(where + ": unsupported pre_tokenizer type \"" + type + "\"");
  }
  return Status::Ok();
}

// ----------------------------------------------------------------------------------- Decoders

struct Decoder {
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>* tokens) const = 0;
};

struct ByteLevelDecoder : Decoder {
  void Apply(std::vector<std::string>* tokens) const override {
    const ByteTable& t = Bytes();
    std::string bytes;
    for (const std::string& tok : *tokens) {
      std::string mapped;
      bool ok = true;
      for (size_t i = 0; i < tok.size() && ok;) {
        size_t len = 0;
        const int b = t.ByteOf(CodepointAt(tok, i, &len));
        ok = b >= 0;
        if (ok) mapped += static_cast<char>(b);
        i += len;
      }
      // A token with a character outside the table (an added token) stands for itself.
      bytes += ok ? mapped : tok;
    }
    tokens->assign(1, std::move(bytes));
  }
};

// As the Rust crate: the replacement becomes a space, except in the first token, where (unless
// prepend_scheme is "never") every replacement is dropped, not only a leading one.
struct MetaspaceDecoder : Decoder {
  std::string replacement = "\xE2\x96\x81";
  bool strip_first = true;  // prepend_scheme != never
  void Apply(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i)
      ReplaceAll(&(*tokens)[i], replacement, i == 0 && strip_first ? "" : " ");
  }
};

// "<0xAB>" tokens become their bytes. The Rust crate turns an invalid run into one U+FFFD per
// byte; the raw bytes are kept here and the final conversion (Utf8Lossy) replaces them.
struct ByteFallbackDecoder : Decoder {
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      const int b = ParseBytePiece(t);
      if (b >= 0) t.assign(1, static_cast<char>(b));
    }
  }
};

struct FuseDecoder : Decoder {
  void Apply(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

struct StripDecoder : Decoder {
  std::string content;
  int start = 0, stop = 0;
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      for (int i = 0; i < start && t.compare(0, content.size(), content) == 0; ++i)
        t.erase(0, content.size());
      for (int i = 0; i < stop && t.size() >= content.size() &&
                      t.compare(t.size() - content.size(), content.size(), content) == 0;
           ++i)
        t.erase(t.size() - content.size());
    }
  }
};

struct ReplaceDecoder : Decoder {
  std::string pattern, content;
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) ReplaceAll(&t, pattern, content);
  }
};

struct SequenceDecoder : Decoder {
  std::vector<std::unique_ptr<Decoder>> items;
  void Apply(std::vector<std::string>* tokens) const override {
    for (const auto& d : items) d->Apply(tokens);
  }
};

Status ParseDecoder(const json& j, const std::string& where, std::unique_ptr<Decoder>* out) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_object()) return Status::Corruption(where + ": decoder must be an object");
  const std::string type = StrField(j, "type", "");
  if (type == "ByteLevel") {
    *out = std::make_unique<ByteLevelDecoder>();
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceDecoder>();
    m->replacement = StrField(j, "replacement", m->replacement);
    decltype(MetaspacePre::prepend) scheme = MetaspacePre::kAlways;
    LLMQ_RETURN_IF_ERROR(ParsePrependScheme(j, where, &scheme));
    m->strip_first = scheme != MetaspacePre::kNever;
    *out = std::move(m);
  } else if (type == "ByteFallback") {
    *out = std::make_unique<ByteFallbackDecoder>();
  } else if (type == "Fuse") {
    *out = std::make_unique<FuseDecoder>();
  } else if (type == "Strip") {
    auto s = std::make_unique<StripDecoder>();
    s->content = StrField(j, "content", " ");
    s->start = IntField(j, "start", 0);
    s->stop = IntField(j, "stop", 0);
    *out = std::move(s);
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceDecoder>();
    bool literal = true;
    LLMQ_RETURN_IF_ERROR(ParsePattern(j.value("pattern", json()), where, &r->pattern, &literal));
    if (!literal)
      return Status::Unsupported(where + ": decoder Replace with a Regex pattern is unsupported");
    r->content = StrField(j, "content", "");
    *out = std::move(r);
  } else if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    if (!j.contains("decoders") || !j["decoders"].is_array())
      return Status::Corruption(where + ": decoder Sequence needs \"decoders\"");
    for (const json& item : j["decoders"]) {
      std::unique_ptr<Decoder> d;
      LLMQ_RETURN_IF_ERROR(ParseDecoder(item, where, &d));
      if (d) seq->items.push_back(std::move(d));
    }
    *out = std::move(seq);
  } else {
    return Status::Unsupported(where + ": unsupported decoder type \"" + type + "\"");
  }
  return Status::Ok();
}

// ----------------------------------------------------------------------------------- BPE

class BpeModel {
 public:
  std::unordered_map<std::string, int> vocab;
  // (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int, int>> merges;
  int unk_id = -1;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix
  int byte_ids[256];           // "<0xAB>" ids when byte_fallback (-1 when missing)

  static uint64_t Key(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // Memoized Merge: words repeat (Zipf), and a cached word costs one lookup. Bounded: once full,
  // new words are computed but not kept.
  void Tokenize(const std::string& word, std::vector<int>* out) const {
    constexpr size_t kMaxCached = 1 << 16, kMaxWordBytes = 64;
    if (word.size() <= kMaxWordBytes) {
      {
        std::shared_lock<std::shared_mutex> lock(cache_mu_);
        const auto it = cache_.find(word);
        if (it != cache_.end()) {
          out->insert(out->end(), it->second.begin(), it->second.end());
          return;
        }
      }
      const size_t start = out->size();
      Merge(word, out);
      // Once full, a miss takes no exclusive lock (threads encoding at once are not serialized).
      if (cache_full_.load(std::memory_order_relaxed)) return;
      std::unique_lock<std::shared_mutex> lock(cache_mu_);
      if (cache_.size() < kMaxCached)
        cache_.emplace(word, std::vector<int>(out->begin() + start, out->end()));
      else
        cache_full_.store(true, std::memory_order_relaxed);
      return;
    }
    Merge(word, out);
  }

  void Merge(const std::string& word, std::vector<int>* out) const {
    if (ignore_merges) {
      const auto it = vocab.find(word);
      if (it != vocab.end()) {
        out->push_back(it->second);
        return;
      }
    }
    struct Sym {
      int id, prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    int unk_pending = 0;  // 1 while a (fused) unknown is open
    auto push = [&syms](int id) {
      const int n = static_cast<int>(syms.size());
      syms.push_back(Sym{id, n - 1, n + 1, true});
    };
    for (size_t i = 0; i < word.size();) {
      const size_t len = CharLen(word, i);
      std::string s = word.substr(i, len);
      if (i > 0 && !prefix.empty()) s = prefix + s;
      if (i + len == word.size() && !suffix.empty()) s += suffix;
      const auto it = vocab.find(s);
      if (it != vocab.end()) {
        unk_pending = 0;
        push(it->second);
      } else {
        bool done = false;
        if (byte_fallback) {
          done = true;
          for (size_t k = i; k < i + len; ++k)
            done = done && byte_ids[static_cast<uint8_t>(word[k])] >= 0;
          if (done) {
            unk_pending = 0;
            for (size_t k = i; k < i + len; ++k) push(byte_ids[static_cast<uint8_t>(word[k])]);
          }
        }
        if (!done && unk_id >= 0 && !(fuse_unk && unk_pending)) {
          push(unk_id);
          unk_pending = 1;
        }
      }
      i += len;
    }
    if (syms.empty()) return;
    syms.back().next = -1;

    // Lowest rank first; among equal ranks the leftmost (as the Rust crate's merge_all).
    struct Cand {
      int rank, pos, new_id;
      bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand> q;
    auto consider = [&](int pos) {
      if (pos < 0 || syms[pos].next < 0) return;
      const auto it = merges.find(Key(syms[pos].id, syms[syms[pos].next].id));
      if (it != merges.end()) q.push(Cand{it->second.first, pos, it->second.second});
    };
    for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);
    while (!q.empty()) {
      const Cand c = q.top();
      q.pop();
      Sym& a = syms[c.pos];
      if (!a.alive || a.next < 0) continue;
      // The pair may have changed since the candidate was queued.
      const auto it = merges.find(Key(a.id, syms[a.next].id));
      if (it == merges.end() || it->second.first != c.rank || it->second.second != c.new_id)
        continue;
      Sym& b = syms[a.next];
      b.alive = false;
      a.id = c.new_id;
      a.next = b.next;
      if (a.next >= 0) syms[a.next].prev = c.pos;
      consider(a.prev);
      consider(c.pos);
    }
    for (int i = 0; i >= 0; i = syms[i].next) out->push_back(syms[i].id);
  }

 private:
  mutable std::shared_mutex cache_mu_;
  mutable std::atomic<bool> cache_full_{false};  // cache_ reached its bound: misses skip the lock
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// ----------------------------------------------------------------------------------- Added tokens

struct AddedToken {
  std::string content;
  int id = -1;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = false;
};

// Finds added tokens in text: leftmost-longest (the Rust crate's aho-corasick LeftmostLongest),
// with the single_word / lstrip / rstrip rules applied to each match.
class AddedTokenMatcher {
 public:
  std::vector<AddedToken> tokens;
  void Build() {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i].content.empty()) continue;
      by_first_[static_cast<uint8_t>(tokens[i].content[0])].push_back(static_cast<int>(i));
    }
  }
  bool empty() const { return tokens.empty(); }

  // Splits `text` into (segment, -1) and (token text, id) parts, in order.
  void Split(const std::string& text, std::vector<std::pair<std::string, int>>* out) const {
    size_t last = 0;  // end of the previous match (after rstrip)
    for (size_t pos = 0; pos < text.size();) {
      const auto& cands = by_first_[static_cast<uint8_t>(text[pos])];
      int best = -1;
      for (int c : cands) {
        const std::string& s = tokens[c].content;
        if (text.compare(pos, s.size(), s) == 0 &&
            (best < 0 || s.size() > tokens[best].content.size()))
          best = c;
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      const AddedToken& t = tokens[best];
      size_t start = pos, stop = pos + t.content.size();
      if (t.single_word && !SingleWordOk(text, start, stop)) {
        // The Rust crate skips a rejected match and resumes after it.
        pos = stop;
        continue;
      }
      if (t.lstrip) {
        size_t a = start;
        while (a > last) {
          size_t b = a - 1;
          while (b > last && (static_cast<uint8_t>(text[b]) & 0xC0) == 0x80) --b;
          size_t len = 0;
          if (!IsWhitespace(CodepointAt(text, b, &len))) break;
          a = b;
        }
        start = a;
      }
      if (t.rstrip) {
        size_t len = 0;
        while (stop < text.size() && IsWhitespace(CodepointAt(text, stop, &len))) stop += len;
      }
      if (start > last) out->emplace_back(text.substr(last, start - last), -1);
      out->emplace_back(text.substr(start, stop - start), t.id);
      last = stop;
      pos = stop;
    }
    if (last < text.size()) out->emplace_back(text.substr(last), -1);
  }

 private:
  static bool SingleWordOk(const std::string& text, size_t start, size_t stop) {
    size_t len = 0;
    if (start > 0) {
      size_t b = start - 1;
      while (b > 0 && (static_cast<uint8_t>(text[b]) & 0xC0) == 0x80) --b;
      if (IsAlphanumeric(CodepointAt(text, b, &len))) return false;
    }
    return stop >= text.size() || !IsAlphanumeric(CodepointAt(text, stop, &len));
  }
  std::vector<int> by_first_[256];
};

}  // namespace hf

// ----------------------------------------------------------------------------------- HfTokenizer

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

namespace {

constexpr uintmax_t kMaxJsonBytes = 512u << 20;

Status ReadTextFile(const std::string& path, std::string* text) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound(path + ": no such file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  if (size > kMaxJsonBytes) return Status::Corruption(path + ": implausibly large file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IoError(path + ": cannot open");
  text->assign(size, '\0');
  f.read(text->data(), static_cast<std::streamsize>(size));
  if (f.gcount() != static_cast<std::streamsize>(size))
    return Status::IoError(path + ": short read");
  return Status::Ok();
}

// Reads the "single" template of a TemplateProcessing: the special ids before and after $A.
Status ParseTemplate(const nlohmann::json& j, const std::string& where, std::vector<int>* prefix,
                     std::vector<int>* suffix) {
  const auto single = j.find("single");
  const auto specials = j.find("special_tokens");
  if (single == j.end() || !single->is_array())
    return Status::Corruption(where + ": TemplateProcessing needs \"single\"");
  bool seen_a = false;
  for (const auto& item : *single) {
    if (item.contains("Sequence")) {
      const auto& seq = item["Sequence"];
      if (!seq.is_object() || hf::StrField(seq, "id", "") != "A")
        return Status::Unsupported(where + ": TemplateProcessing \"single\" may only use $A");
      seen_a = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].is_object() &&
               item["SpecialToken"].contains("id") && item["SpecialToken"]["id"].is_string()) {
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      if (specials == j.end() || !specials->is_object() || !specials->contains(name) ||
          !(*specials)[name].contains("ids") || !(*specials)[name]["ids"].is_array())
        return Status::Corruption(where + ": TemplateProcessing special token \"" + name +
                                  "\" missing from \"special_tokens\"");
      for (const auto& id : (*specials)[name]["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30))
          return Status::Corruption(where + ": special token ids must be valid ids");
        (seen_a ? suffix : prefix)->push_back(id.get<int>());
      }
    } else {
      return Status::Corruption(where + ": malformed TemplateProcessing item");
    }
  }
  return Status::Ok();
}

Status ParsePostProcessor(const nlohmann::json& j, const std::string& where,
                          std::vector<int>* prefix, std::vector<int>* suffix) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_object()) return Status::Corruption(where + ": post_processor must be an object");
  const std::string type = hf::StrField(j, "type", "");
  if (type == "ByteLevel") return Status::Ok();  // offsets only: no effect on ids
  if (type == "TemplateProcessing") return ParseTemplate(j, where, prefix, suffix);
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      return Status::Corruption(where + ": post_processor Sequence needs \"processors\"");
    for (const auto& p : j["processors"])
      LLMQ_RETURN_IF_ERROR(ParsePostProcessor(p, where, prefix, suffix));
    return Status::Ok();
  }
  return Status::Unsupported(where + ": unsupported post_processor type \"" + type + "\"");
}

// A merge: "a b" or ["a", "b"].
bool ParseMerge(const nlohmann::json& m, std::string* a, std::string* b) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) return false;
    *a = s.substr(0, sp);
    *b = s.substr(sp + 1);
    return true;
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *a = m[0].get<std::string>();
    *b = m[1].get<std::string>();
    return true;
  }
  return false;
}

Status ParseBpe(const nlohmann::json& j, const std::string& where, hf::BpeModel* m) {
  const std::string type = hf::StrField(j, "type", "BPE");
  if (type != "BPE")
    return Status::Unsupported(where + ": unsupported model type \"" + type + "\"");
  if (!j.contains("vocab") || !j["vocab"].is_object())
    return Status::Corruption(where + ": model \"vocab\" missing or not an object");
  if (!j.contains("merges") || !j["merges"].is_array())
    return Status::Corruption(where + ": model \"merges\" missing or not an array");
  m->vocab.reserve(j["vocab"].size());
  for (const auto& [tok, id] : j["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30))
      return Status::Corruption(where + ": vocab id of \"" + tok + "\" is not a valid id");
    m->vocab.emplace(tok, id.get<int>());
  }
  const auto& merges = j["merges"];
  m->merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a, b;
    if (!ParseMerge(merges[r], &a, &b))
      return Status::Corruption(where + ": merge " + std::to_string(r) + " is malformed");
    const auto ia = m->vocab.find(a), ib = m->vocab.find(b), iab = m->vocab.find(a + b);
    if (ia == m->vocab.end() || ib == m->vocab.end())
      return Status::Corruption(where + ": merge " + std::to_string(r) + " names token \"" +
                                (ia == m->vocab.end() ? a : b) + "\" missing from the vocab");
    if (iab == m->vocab.end())
      return Status::Corruption(where + ": merge " + std::to_string(r) + " makes \"" + a + b +
                                "\", missing from the vocab");
    m->merges.emplace(hf::BpeModel::Key(ia->second, ib->second),
                      std::make_pair(static_cast<int>(r), iab->second));
  }
  m->byte_fallback = hf::BoolField(j, "byte_fallback", false);
  m->fuse_unk = hf::BoolField(j, "fuse_unk", false);
  m->ignore_merges = hf::BoolField(j, "ignore_merges", false);
  m->prefix = hf::StrField(j, "continuing_subword_prefix", "");
  m->suffix = hf::StrField(j, "end_of_word_suffix", "");
  if (j.contains("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() > 0)
    return Status::Unsupported(where + ": BPE dropout is unsupported");
  const std::string unk = hf::StrField(j, "unk_token", "");
  if (!unk.empty()) {
    const auto it = m->vocab.find(unk);
    if (it == m->vocab.end())
      return Status::Corruption(where + ": unk_token \"" + unk + "\" missing from the vocab");
    m->unk_id = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = m->vocab.find(name);
    m->byte_ids[b] = it == m->vocab.end() ? -1 : it->second;
  }
  return Status::Ok();
}

}  // namespace

Status HfTokenizer::Load(const std::string& path, std::unique_ptr<HfTokenizer>* out) {
  std::string text;
  LLMQ_RETURN_IF_ERROR(ReadTextFile(path, &text));
  return Parse(text, path, out);
}

Status HfTokenizer::Parse(std::string_view json_text, const std::string& path,
                          std::unique_ptr<HfTokenizer>* out) {
  if (json_text.size() > kMaxJsonBytes)
    return Status::Corruption(path + ": implausibly large file");
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption(path + ": malformed JSON (truncated?)");
  if (!j.is_object()) return Status::Corruption(path + ": expected a JSON object");
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  if (!j.contains("model") || !j["model"].is_object())
    return Status::Corruption(path + ": \"model\" missing or not an object");
  t->model_ = std::make_unique<hf::BpeModel>();
  LLMQ_RETURN_IF_ERROR(ParseBpe(j["model"], path, t->model_.get()));
  LLMQ_RETURN_IF_ERROR(
      hf::ParseNormalizer(j.value("normalizer", nlohmann::json()), path, &t->normalizer_));
  LLMQ_RETURN_IF_ERROR(
      hf::ParsePreTokenizer(j.value("pre_tokenizer", nlohmann::json()), path, &t->pre_tokenizer_));
  LLMQ_RETURN_IF_ERROR(hf::ParseDecoder(j.value("decoder", nlohmann::json()), path, &t->decoder_));
  LLMQ_RETURN_IF_ERROR(ParsePostProcessor(j.value("post_processor", nlohmann::json()), path,
                                          &t->prefix_ids_, &t->suffix_ids_));

  t->added_ = std::make_unique<hf::AddedTokenMatcher>();
  t->added_norm_ = std::make_unique<hf::AddedTokenMatcher>();
  int max_id = -1;
  for (const auto& [tok, id] : t->model_->vocab) max_id = std::max(max_id, id);
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array())
      return Status::Corruption(path + ": \"added_tokens\" must be an array");
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() >= (1 << 30))
        return Status::Corruption(path + ": malformed entry in \"added_tokens\"");
      hf::AddedToken at;
      at.content = a["content"].get<std::string>();
      at.id = a["id"].get<int>();
      at.lstrip = hf::BoolField(a, "lstrip", false);
      at.rstrip = hf::BoolField(a, "rstrip", false);
      at.single_word = hf::BoolField(a, "single_word", false);
      at.special = hf::BoolField(a, "special", false);
      at.normalized = hf::BoolField(a, "normalized", !at.special);
      max_id = std::max(max_id, at.id);
      t->added_ids_[at.content] = at.id;
      // normalized=true tokens are matched in the normalized text, the others in the input.
      (at.normalized ? t->added_norm_ : t->added_)->tokens.push_back(std::move(at));
    }
  }
  // Ids index a table: refuse sparse ones (a corrupt id would make it huge).
  const size_t entries =
      t->model_->vocab.size() + t->added_->tokens.size() + t->added_norm_->tokens.size();
  if (static_cast<size_t>(max_id) >= entries + 65536)
    return Status::Corruption(path + ": token id " + std::to_string(max_id) + " far beyond the " +
                              std::to_string(entries) + " tokens (ids must be dense)");
  t->added_->Build();
  t->added_norm_->Build();
  t->id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  t->special_.assign(t->id_to_token_.size(), 0);
  t->byte_value_.assign(t->id_to_token_.size(), -1);
  for (const auto& [tok, id] : t->model_->vocab) t->id_to_token_[id] = tok;
  for (const auto* m : {t->added_.get(), t->added_norm_.get()}) {
    for (const auto& at : m->tokens) {
      t->id_to_token_[at.id] = at.content;
      t->special_[at.id] = at.special;
    }
  }
  // ByteLevel decodes each token on its own: its bytes per id, once.
  if (dynamic_cast<const hf::ByteLevelDecoder*>(t->decoder_.get()) != nullptr) {
    t->piece_end_.reserve(t->id_to_token_.size());
    std::vector<std::string> one(1);
    for (const std::string& tok : t->id_to_token_) {
      one.assign(1, tok);
      t->decoder_->Apply(&one);
      t->piece_bytes_ += one[0];
      t->piece_end_.push_back(static_cast<uint32_t>(t->piece_bytes_.size()));
    }
  }
  if (t->model_->byte_fallback) {
    for (int b = 0; b < 256; ++b)
      if (t->model_->byte_ids[b] >= 0)
        t->byte_value_[t->model_->byte_ids[b]] = static_cast<int16_t>(b);
  }
  for (int id : t->prefix_ids_)
    if (id < 0 || id >= t->vocab_size())
      return Status::Corruption(path + ": post_processor id " + std::to_string(id) +
                                " outside the vocabulary");
  for (int id : t->suffix_ids_)
    if (id < 0 || id >= t->vocab_size())
      return Status::Corruption(path + ": post_processor id " + std::to_string(id) +
                                " outside the vocabulary");
  *out = std::move(t);
  return Status::Ok();
}

// One segment of the input between added tokens: normalized, split on the normalized added
// tokens, pre-tokenized and run through the model. `first`: the segment starts the input.
void HfTokenizer::EncodePiece(const std::string& text, bool first, std::vector<int>* ids) const {
  std::string s = text;
  if (normalizer_) normalizer_->Apply(&s);
  std::vector<std::pair<std::string, int>> parts;
  if (added_norm_->empty()) {
    parts.emplace_back(std::move(s), -1);
  } else {
    added_norm_->Split(s, &parts);
  }
  for (auto& [seg, id] : parts) {
    if (id >= 0) {
      ids->push_back(id);
      first = false;
      continue;
    }
    std::vector<hf::Piece> pieces{hf::Piece{std::move(seg), first}};
    first = false;
    if (pre_tokenizer_) pre_tokenizer_->Apply(&pieces);
    for (const hf::Piece& p : pieces) {
      if (!p.s.empty()) model_->Tokenize(p.s, ids);
    }
  }
}

std::vector<int> HfTokenizer::Encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int> ids;
  if (add_special_tokens) ids = prefix_ids_;
  std::vector<std::pair<std::string, int>> parts;
  if (added_->empty()) {
    parts.emplace_back(text, -1);
  } else {
    added_->Split(text, &parts);
  }
  size_t offset = 0;  // of the part in `text`
  for (const auto& [s, id] : parts) {
    if (id >= 0) {
      ids.push_back(id);
    } else {
      EncodePiece(s, offset == 0, &ids);
    }
    offset += s.size();
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string HfTokenizer::DecodeBytes(const std::vector<int>& ids, bool skip_special_tokens) const {
  if (piece_end_.empty()) return DecodeBytesThroughDecoders(ids, skip_special_tokens);
  std::string out;
  for (int id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && special_[id]) continue;
    const uint32_t begin = id ? piece_end_[id - 1] : 0;
    out.append(piece_bytes_, begin, piece_end_[id] - begin);
  }
  return out;
}

std::string HfTokenizer::DecodeBytesThroughDecoders(const std::vector<int>& ids,
                                                    bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && special_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  if (decoder_) decoder_->Apply(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

int ParseBytePiece(const std::string& piece) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

int Utf8Lead(uint8_t c, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) {
    if (c == 0xE0) *lo = 0xA0;
    if (c == 0xED) *hi = 0x9F;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (c == 0xF0) *lo = 0x90;
    if (c == 0xF4) *hi = 0x8F;
    return 4;
  }
  return 0;
}

std::string Utf8Lossy(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    uint8_t lo = 0, hi = 0;  // the range of the second byte
    const int need = Utf8Lead(c, &lo, &hi) - 1;
    size_t j = i + 1;
    bool ok = need > 0;
    for (int k = 0; ok && k < need; ++k) {
      const auto b = j < n ? static_cast<uint8_t>(s[j]) : 0;
      ok = j < n && b >= (k == 0 ? lo : 0x80) && b <= (k == 0 ? hi : 0xBF);
      if (ok) ++j;
    }
    if (ok) {
      out.append(s, i, j - i);
    } else {
      out += "\xEF\xBF\xBD";
      j = std::max(j, i + 1);  // the offending byte starts the next sequence
    }
    i = j;
  }
  return out;
}

int HfTokenizer::TokenToId(const std::string& token) const {
  const auto a = added_ids_.find(token);
  if (a != added_ids_.end()) return a->second;
  const auto it = model_->vocab.find(token);
  return it == model_->vocab.end() ? -1 : it->second;
}

bool HfTokenizer::IsSpecial(int id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

int HfTokenizer::ByteValue(int id) const {
  return id >= 0 && id < vocab_size() ? byte_value_[id] : -1;
}

}  // namespace llmq
