// What the grammar fuzz targets (json_schema_fuzz, gbnf_fuzz) share. Their input is a grammar's
// text, a NUL, and a document (SplitAtNul). CompileOrRefused compiles a Grammar for a trie of one
// token per byte, or checks that a refusal is InvalidArgument / Unsupported. WalkDocument: the
// document is fed byte by byte (at most 64) over a one-byte-per-token trie; before each byte the
// mask must hold exactly the sampled bytes (every `stride`-th) that a copy of the matcher takes,
// and at the end CanEnd must answer as a copy does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/structured/matcher.h"
#include "fuzz/fuzz_check.h"

struct FuzzInput {
  std::string_view text, doc;  // before the first NUL, after it ("" without one)
};
inline FuzzInput SplitAtNul(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  return {in.substr(0, nul), nul == std::string_view::npos ? "" : in.substr(nul + 1)};
}

// `s`: the front end's status on `g`. Null when refused (and the refusal is of a kind allowed; its
// message in *refusal).
inline std::shared_ptr<llmq::CompiledGrammar> CompileOrRefused(llmq::Status s, llmq::Grammar g,
                                                               std::string* refusal) {
  static const auto trie = llmq::TokenTrie::SingleBytes();
  std::shared_ptr<llmq::CompiledGrammar> c;
  if (s.ok()) s = llmq::CompiledGrammar::Compile(std::move(g), trie, &c);
  if (s.ok()) return c;
  FUZZ_CHECK(s.code() == llmq::Status::Code::kInvalidArgument ||
             s.code() == llmq::Status::Code::kUnsupported);
  FUZZ_CHECK(!s.message().empty());
  *refusal = s.message();
  return nullptr;
}

inline void WalkDocument(const std::shared_ptr<llmq::CompiledGrammar>& c, std::string_view doc,
                         int stride) {
  llmq::Matcher m(c);
  llmq::TokenMask mask(256);
  for (size_t k = 0; k < doc.size() && k < 64; ++k) {
    m.Mask(&mask);
    for (int b = 0; b < 256; b += stride) {  // a sample of the bytes: the mask is the brute force
      llmq::Matcher copy = m;
      FUZZ_CHECK(mask.Test(b) == copy.Consume(std::string(1, static_cast<char>(b))));
    }
    if (!m.Consume(doc.substr(k, 1))) break;
  }
  llmq::Matcher copy = m;
  FUZZ_CHECK(m.CanEnd() == copy.CanEnd());
}
