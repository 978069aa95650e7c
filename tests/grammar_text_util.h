// Grammar texts in tests (gbnf_test, lark_test): compiled by a front end for a trie of one token
// per byte, or the front end's error message.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/structured/grammar.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"

namespace llmq::testing {

using GrammarFrontEnd = Status (*)(std::string_view, Grammar*);

// `text` compiled by `front` and for single bytes; null (and a test failure) when refused.
inline std::shared_ptr<CompiledGrammar> CompileForBytes(GrammarFrontEnd front,
                                                        const std::string& text) {
  Grammar g;
  const Status st = front(text, &g);
  EXPECT_TRUE(st.ok()) << st.message() << "\n" << text;
  if (!st.ok()) return nullptr;
  std::shared_ptr<CompiledGrammar> c;
  const Status cst = CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c);
  EXPECT_TRUE(cst.ok()) << cst.message() << "\n" << text;
  return c;
}

// The front end's error message for `text`, or "ok".
inline std::string FrontEndError(GrammarFrontEnd front, const std::string& text) {
  Grammar g;
  const Status st = front(text, &g);
  return st.ok() ? "ok" : st.message();
}

}  // namespace llmq::testing
