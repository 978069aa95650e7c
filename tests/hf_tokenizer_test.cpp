// Tests for engine/text/hf_tokenizer.h (tokenizer.json) through Tokenizer and `llmq tokenize`: the
// shared models' reference prompt ids (real Qwen3 / Llama 3.1 tokenizers), small hand-written
// tokenizer.json files for each component, bad files refused at load, and incremental decoding of
// byte-level tokens that split a character.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/text/hf_tokenizer.h"
#include "engine/text/tokenizer.h"
#include "tests/byte_level.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = std::string(LLMQ_SHARED_DIR) + "/models/";

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// A folder holding `tokenizer` as tokenizer.json (and `config` as tokenizer_config.json).
std::string TokenizerDir(const json& tokenizer, const json& config = json()) {
  const std::string dir = llmq::testing::CurrentTestDir();
  fs::create_directories(dir);
  WriteText(dir + "/tokenizer.json", tokenizer.dump());
  if (!config.is_null()) WriteText(dir + "/tokenizer_config.json", config.dump());
  return dir;
}

// The GPT-2 byte -> character table (as engine/text/hf_tokenizer.cpp, written independently).
std::string ByteChar(int b) {
  return testing::ByteLevelChar(b);
}

// A byte-level BPE tokenizer (Qwen-like): the 256 byte tokens (id = byte), a few merges, and
// added tokens exercising the flags.
json ByteLevelTokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  const std::string sp = ByteChar(' ');
  vocab[sp + "h"] = 256;
  vocab[sp + "hi"] = 257;
  vocab["hi"] = 258;
  const std::string pattern =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  return json{
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|im_start|>"}, {"special", true}, {"normalized", false}},
        {{"id", 301}, {"content", "<|im_end|>"}, {"special", true}, {"normalized", false}},
        {{"id", 302},
         {"content", "<L>"},
         {"special", false},
         {"normalized", false},
         {"lstrip", true}},
        {{"id", 303},
         {"content", "<R>"},
         {"special", false},
         {"normalized", false},
         {"rstrip", true}},
        {{"id", 304},
         {"content", "word"},
         {"special", false},
         {"normalized", false},
         {"single_word", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"<|im_start|>",
           {{"id", "<|im_start|>"}, {"ids", {300}}, {"tokens", {"<|im_start|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({sp + " h", json::array({sp + "h", "i"}), "h i"})}}}};
}

// A Llama-2 style conversion: Prepend/Replace normalizer, no pre-tokenizer, byte_fallback.
json MetaspaceTokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::string m = "\xE2\x96\x81";
  vocab[m] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab[m + "h"] = 262;
  vocab[m + "hi"] = 263;
  return json{{"added_tokens",
               {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                {{"id", 1}, {"content", "<s>"}, {"special", true}},
                {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
              {"normalizer",
               {{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", m}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
              {"pre_tokenizer", nullptr},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single",
                 {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
              {"model",
               {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"fuse_unk", true},
                {"vocab", vocab},
                {"merges", {m + " h", m + "h i"}}}}};
}

std::unique_ptr<Tokenizer> Load(const std::string& dir) {
  std::unique_ptr<Tokenizer> tok;
  const Status st = Tokenizer::Load(dir, &tok);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return tok;
}

std::vector<int> Bytes(const std::string& s) {
  std::vector<int> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(HfTokenizerTest, ByteLevelBpeMergesAndPostProcessor) {
  auto tok = Load(TokenizerDir(ByteLevelTokenizer()));
  ASSERT_TRUE(tok && tok->hf());
  EXPECT_EQ(tok->Encode("hi hi"), (std::vector<int>{300, 258, 257}));
  EXPECT_EQ(tok->EncodeNoBos("hi hi"), (std::vector<int>{258, 257}));
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 300);
  // "é" is two byte tokens; NFC composes "e" + U+0301 first.
  EXPECT_EQ(tok->EncodeNoBos("e\xCC\x81"), Bytes("\xC3\xA9"));
  EXPECT_EQ(tok->Decode(tok->EncodeNoBos("a\r\n  b\xF0\x9F\xA4\x96 c")),
            "a\r\n  b\xF0\x9F\xA4\x96 c");
}

TEST(HfTokenizerTest, AddedTokensMatchedBeforeBpeWithTheirFlags) {
  auto tok = Load(TokenizerDir(ByteLevelTokenizer()));
  ASSERT_TRUE(tok);
  // Special tokens are one id wherever they are, even inside a word.
  EXPECT_EQ(tok->EncodeNoBos("x<|im_start|>y<|im_end|>"), (std::vector<int>{'x', 300, 'y', 301}));
  // lstrip eats the whitespace before, rstrip the whitespace after.
  EXPECT_EQ(tok->EncodeNoBos("a  <L>b"), (std::vector<int>{'a', 302, 'b'}));
  EXPECT_EQ(tok->EncodeNoBos("a<R>  b"), (std::vector<int>{'a', 303, 'b'}));
  // single_word: only between non-alphanumerics.
  const std::vector<int> standalone = tok->EncodeNoBos("a word.");
  EXPECT_NE(std::find(standalone.begin(), standalone.end(), 304), standalone.end());
  const std::vector<int> inside = tok->EncodeNoBos("swordfish");
  EXPECT_EQ(std::find(inside.begin(), inside.end(), 304), inside.end());
  // Decode skips special tokens, keeps the others.
  EXPECT_EQ(tok->Decode({300, 'x', 303, 301}), "x<R>");
}

TEST(HfTokenizerTest, MetaspaceByteFallbackConversion) {
  auto tok = Load(TokenizerDir(MetaspaceTokenizer()));
  ASSERT_TRUE(tok);
  // "▁hi▁hi▁é": é is not in the vocabulary, so its two bytes.
  EXPECT_EQ(tok->Encode("hi hi \xC3\xA9"),
            (std::vector<int>{1, 263, 263, 259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->Decode(tok->Encode("hi hi \xC3\xA9")), "hi hi \xC3\xA9");
  EXPECT_EQ(tok->ByteValue(3 + 0xC3), 0xC3);
  EXPECT_EQ(tok->Encode("<s>hi"), (std::vector<int>{1, 1, 263}));
}

// The streamed text is Decode(prompt + completion) minus Decode(prompt), released in whole
// characters only, for a byte-level tokenizer and a Metaspace/byte_fallback one.
TEST(HfTokenizerTest, IncrementalDecoderNeverSplitsACharacter) {
  const std::string text = "Tokyo \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD hi";
  for (const json& file : {ByteLevelTokenizer(), MetaspaceTokenizer()}) {
    auto tok = Load(TokenizerDir(file));
    ASSERT_TRUE(tok);
    const std::vector<int> prompt = tok->Encode("say:");
    std::vector<int> all_ids = prompt;
    IncrementalDecoder dec(*tok, prompt);
    std::string all;
    for (int id : tok->EncodeNoBos(text)) {
      all_ids.push_back(id);
      const std::string piece = dec.Add(id);
      EXPECT_EQ(Utf8Lossy(piece), piece) << "broken UTF-8 released";
      all += piece;
    }
    all += dec.Flush();
    const std::string want = tok->Decode(all_ids).substr(tok->Decode(prompt).size());
    EXPECT_EQ(all, want);
    EXPECT_EQ(dec.text(), want);
    EXPECT_NE(want.find(text.substr(1)), std::string::npos) << want;
  }
}

TEST(HfTokenizerTest, BadFilesFailAtLoadNamingTheFileAndTheProblem) {
  const json good = ByteLevelTokenizer();
  struct Case {
    std::string name, want;
    json file;
  };
  std::vector<Case> cases;
  json unknown_model = good;
  unknown_model["model"]["type"] = "Unigram";
  cases.push_back({"unknown model", "Unigram", unknown_model});
  json unknown_norm = good;
  unknown_norm["normalizer"] = {{"type", "Lowercase2"}};
  cases.push_back({"unknown normalizer", "Lowercase2", unknown_norm});
  json bad_merge = good;
  bad_merge["model"]["merges"].push_back("zz qq");
  cases.push_back({"missing merge token", "zz", bad_merge});
  json bad_regex = good;
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([a-";
  cases.push_back({"bad regex", "regex", bad_regex});
  json sparse = good;
  sparse["model"]["vocab"]["far"] = 900000000;
  cases.push_back({"sparse id", "dense", sparse});
  json metaspace = good;
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", ""}};
  cases.push_back({"empty Metaspace replacement", "replacement", metaspace});
  json template_ids = good;
  template_ids["post_processor"]["special_tokens"]["<|im_start|>"]["ids"] = {"x"};
  cases.push_back({"bad template ids", "ids", template_ids});
  for (const Case& c : cases) {
    const std::string dir = TokenizerDir(c.file);
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(dir + "/tokenizer.json"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st.message();
  }
  const std::string text = good.dump();
  for (size_t cut : {size_t{0}, size_t{1}, text.size() / 2, text.size() - 1}) {
    const std::string dir = TokenizerDir(json());
    WriteText(dir + "/tokenizer.json", text.substr(0, cut));
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    EXPECT_FALSE(st.ok()) << cut;
    EXPECT_NE(st.message().find("tokenizer.json"), std::string::npos) << st.message();
  }
}

// Every truncation of a tokenizer.json and random byte changes to it load or fail cleanly (never a
// crash), and whatever loads encodes any bytes, invalid UTF-8 included, without crashing.
TEST(HfTokenizerTest, MutatedFilesAndInputsNeverCrash) {
  const std::string text = ByteLevelTokenizer().dump();
  const std::string dir = TokenizerDir(json());
  std::mt19937 rng(7);
  auto load = [&dir](const std::string& bytes) {
    WriteText(dir + "/tokenizer.json", bytes);
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    if (!st.ok()) {
      EXPECT_NE(st.message().find("tokenizer.json"), std::string::npos) << st.message();
    }
    return tok;
  };
  for (size_t cut = 0; cut < text.size(); cut += 1 + cut / 64) {
    EXPECT_EQ(load(text.substr(0, cut)), nullptr) << cut;
  }
  const std::string inputs[] = {"hi <|im_start|> x", std::string("\xff\xfe\xc3(\xe2\x82", 7),
                                std::string(300, '\x80'), std::string("a\0b", 3)};
  for (int i = 0; i < 300; ++i) {
    std::string m = text;
    for (int k = 0; k < 3; ++k) m[rng() % m.size()] = static_cast<char>(rng() % 128);
    const auto tok = load(m);
    if (!tok) continue;
    for (const std::string& in : inputs) {
      const std::string back = tok->Decode(tok->Encode(in));
      EXPECT_EQ(Utf8Lossy(back), back);
    }
  }
  auto tok = load(text);
  ASSERT_TRUE(tok);
  for (int i = 0; i < 200; ++i) {
    std::string in(rng() % 64, '\0');
    for (char& c : in) c = static_cast<char>(rng() % 256);
    const std::vector<int> ids = tok->EncodeNoBos(in);
    // Byte-level BPE loses nothing: the bytes come back (NFC leaves invalid UTF-8 as it is).
    if (Utf8Lossy(in) != in) {
      EXPECT_EQ(tok->hf()->DecodeBytes(ids, true), in);
    }
  }
}

// `llmq tokenize` reproduces every reference prompt_ids of the shared models (Hugging Face's own
// tokenizer): plain prompts with the special tokens added, rendered chats without.
void CheckReferences(const std::string& model) {
  const std::string dir = kModels + model;
  std::unique_ptr<Tokenizer> tok = Load(dir);
  ASSERT_TRUE(tok);
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dir + "/reference")) {
    std::ifstream f(e.path());
    const json r = json::parse(f);
    std::vector<std::string> args = {"tokenize", "--model", dir, "--json"};
    if (r.contains("prompt") && r["prompt"].is_string()) {
      args.insert(args.end(), {"--text", r["prompt"].get<std::string>()});
    } else if (r.contains("rendered")) {
      args.insert(args.end(), {"--text", r["rendered"].get<std::string>(), "--no-special-tokens"});
    } else {
      continue;
    }
    const auto res = llmq::testing::RunLlmqWith({}, args);
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_EQ(json::parse(res.out)["ids"], r["prompt_ids"]) << e.path();
    // The reference's completion text is Hugging Face's decode of its completion ids.
    if (r.contains("completion_ids") && r.contains("completion_text")) {
      const auto completion = r["completion_ids"].get<std::vector<int>>();
      EXPECT_EQ(tok->Decode(completion), r["completion_text"].get<std::string>()) << e.path();
      // Streamed as the engine does (byte-level prompts end on a character boundary).
      IncrementalDecoder dec(*tok, r["prompt_ids"].get<std::vector<int>>());
      for (int id : completion) dec.Add(id);
      dec.Flush();
      EXPECT_EQ(dec.text(), r["completion_text"].get<std::string>()) << e.path();
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(HfTokenizerTest, TokenizeMatchesQwen3References) {
  LLMQ_SKIP_WITHOUT_SHARED(llmq::testing::SharedModel("tiny-qwen3"), "tiny-qwen3");
  CheckReferences("tiny-qwen3");
}
TEST(HfTokenizerTest, TokenizeMatchesQwen2References) {
  LLMQ_SKIP_WITHOUT_SHARED(llmq::testing::SharedModel("tiny-qwen2"), "tiny-qwen2");
  CheckReferences("tiny-qwen2");
}
TEST(HfTokenizerTest, TokenizeMatchesLlama32References) {
  LLMQ_SKIP_WITHOUT_SHARED(llmq::testing::SharedModel("tiny-llama32"), "tiny-llama32");
  CheckReferences("tiny-llama32");
}

// The per-id table DecodeBytes reads for a ByteLevel decoder gives what the decoder pipeline
// gives, for random ids over each shared family's whole vocabulary (special and added tokens, ids
// outside it), with and without the special tokens; and the table is built for them.
TEST(HfTokenizerTest, PerTokenDecodeTableMatchesTheDecoders) {
  for (const std::string model : {"tiny-qwen3", "tiny-qwen2", "tiny-llama32"}) {
    LLMQ_SKIP_WITHOUT_SHARED(llmq::testing::SharedModel(model), model);
    std::unique_ptr<Tokenizer> tok = Load(kModels + model);
    ASSERT_TRUE(tok && tok->hf());
    const HfTokenizer& hf = *tok->hf();
    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int> ids(1 + rng() % 40);
      for (int& id : ids) id = static_cast<int>(rng() % (hf.vocab_size() + 4)) - 2;
      for (bool skip : {true, false})
        ASSERT_EQ(hf.DecodeBytes(ids, skip), hf.DecodeBytesThroughDecoders(ids, skip))
            << model << " trial " << trial;
    }
    // Every id alone, the specials included.
    for (int id = 0; id < hf.vocab_size(); ++id)
      ASSERT_EQ(hf.DecodeBytes({id}, false), hf.DecodeBytesThroughDecoders({id}, false))
          << model << " id " << id;
  }
}

// The incremental decoder's per-token path (bytes from the table, nothing decoded) against the
// decoding path, step by step: the same text from every Add and Flush, the same window. Random
// prompts and completions over each shared family's vocabulary, weighted towards the tokens that
// split characters (single bytes >= 0x80) and special tokens (which hide bytes from the hold-back
// check: the per-token path must fall back where the two would differ).
TEST(HfTokenizerTest, IncrementalDecoderPerTokenPathMatchesDecoding) {
  for (const std::string model : {"tiny-llama32", "tiny-qwen2"}) {
    LLMQ_SKIP_WITHOUT_SHARED(llmq::testing::SharedModel(model), model);
    std::unique_ptr<Tokenizer> tok = Load(kModels + model);
    ASSERT_TRUE(tok && tok->hf() && tok->hf()->decodes_per_token());
    const HfTokenizer& hf = *tok->hf();
    std::vector<int> high, special;  // single-byte tokens of bytes >= 0x80; special tokens
    for (int id = 0; id < hf.vocab_size(); ++id) {
      if (hf.IsSpecial(id)) special.push_back(id);
      const std::string_view b = hf.PieceBytes(id);
      if (b.size() == 1 && static_cast<uint8_t>(b[0]) >= 0x80) high.push_back(id);
    }
    ASSERT_FALSE(high.empty());
    ASSERT_FALSE(special.empty());
    std::mt19937 rng(11);
    auto random_ids = [&](size_t n) {
      std::vector<int> ids;
      for (size_t i = 0; i < n; ++i) {
        const int kind = static_cast<int>(rng() % 10);
        if (kind < 4)
          ids.push_back(high[rng() % high.size()]);
        else if (kind < 5)
          ids.push_back(special[rng() % special.size()]);
        else
          ids.push_back(static_cast<int>(rng() % hf.vocab_size()));
      }
      return ids;
    };
    for (int t = 0; t < 600; ++t) {
      const std::vector<int> prompt = random_ids(rng() % 24);
      const std::vector<int> completion = random_ids(rng() % 80);
      IncrementalDecoder fast(*tok, prompt), slow(*tok, prompt, /*per_token=*/false);
      ASSERT_EQ(fast.window(), slow.window()) << model << " case " << t;
      for (size_t i = 0; i < completion.size(); ++i) {
        ASSERT_EQ(fast.Add(completion[i]), slow.Add(completion[i]))
            << model << " case " << t << " id " << i;
        ASSERT_EQ(fast.window(), slow.window()) << model << " case " << t << " id " << i;
      }
      ASSERT_EQ(fast.Flush(), slow.Flush()) << model << " case " << t;
      ASSERT_EQ(fast.text(), slow.text());
    }
  }
}

TEST(HfTokenizerTest, TokenizeCommandLine) {
  const std::string dir = TokenizerDir(ByteLevelTokenizer());
  auto r = llmq::testing::RunLlmq({"tokenize", "--model", dir, "--text", "hi hi"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "300 258 257\n");
  r = llmq::testing::RunLlmq(
      {"tokenize", "--model", dir, "--text", "hi hi", "--no-special-tokens", "--json"});
  EXPECT_EQ(r.out, "{\"ids\":[258,257]}\n");
  WriteText(dir + "/in.txt", "hi");
  r = llmq::testing::RunLlmq({"tokenize", "--model", dir, "--file", dir + "/in.txt"});
  EXPECT_EQ(r.out, "300 258\n");
  r = llmq::testing::RunLlmq({"tokenize", "--model", dir});
  EXPECT_EQ(r.exit_code, 2);
  r = llmq::testing::RunLlmq({"tokenize", "--model", dir + "/nope", "--text", "x"});
  EXPECT_EQ(r.exit_code, 1);
}

}  // namespace
}  // namespace llmq
