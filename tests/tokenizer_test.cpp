// Tests for engine/text/tokenizer.h and engine/tools/corpus.h: loading (and refusing broken files),
// encoding the reference prompts, incremental detokenization against the reference completions and
// sentencepiece's own decode, and training tokenizers from the built-in corpus.
#include "engine/text/tokenizer.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "engine/tools/corpus.h"
#include "engine/tools/tokenizer_trainer.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kShared = LLMQ_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K";
const std::string kTinyLlama3 = kShared + "/models/tiny-llama3";

#define SKIP_WITHOUT(dir) LLMQ_SKIP_WITHOUT_FILE(std::string(dir) + "/tokenizer.model")

std::string ScratchDir() {
  return llmq::testing::CurrentTestDir();
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& dir) {
  std::unique_ptr<Tokenizer> tok;
  const Status st = Tokenizer::Load(dir, &tok);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return tok;
}

// A 512-piece byte-fallback tokenizer trained once per process (no shared files needed).
const std::string& Trained512Dir() {
  static const std::string dir = [] {
    const fs::path d = llmq::testing::TmpRoot() / "tokenizer_test" / "trained512";
    fs::create_directories(d);
    const Status st = TrainTokenizer(512, 7, (d / "tokenizer.model").string());
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d.string();
  }();
  return dir;
}

// Strict UTF-8 validation (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto t = static_cast<uint8_t>(s[i + k]);
      if ((t & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (t & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

// Streams `completion` after `prompt`; every chunk must be valid UTF-8. Returns the text.
std::string Stream(const Tokenizer& tok, const std::vector<int>& prompt,
                   const std::vector<int>& completion, int* held_back = nullptr) {
  IncrementalDecoder dec(tok, prompt);
  std::string out;
  for (int id : completion) {
    const std::string chunk = dec.Add(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "chunk after id " << id;
    if (chunk.empty() && held_back) ++*held_back;
    out += chunk;
  }
  const std::string rest = dec.Flush();
  EXPECT_TRUE(IsValidUtf8(rest));
  out += rest;
  EXPECT_EQ(dec.text(), out);
  EXPECT_EQ(dec.Flush(), "");
  return out;
}

// Decode(prompt + completion) minus Decode(prompt); false when the latter is not a prefix.
bool TextDifference(const Tokenizer& tok, const std::vector<int>& prompt,
                    const std::vector<int>& completion, std::string* out) {
  std::vector<int> all = prompt;
  all.insert(all.end(), completion.begin(), completion.end());
  const std::string full = tok.Decode(all), head = tok.Decode(prompt);
  if (full.compare(0, head.size(), head) != 0) return false;
  *out = full.substr(head.size());
  return true;
}

std::vector<json> References(const std::string& model_dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(model_dir + "/reference"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<json> refs;
  for (const auto& f : files) {
    json j = json::parse(ReadBytes(f.string()));
    j["file"] = f.filename().string();
    refs.push_back(std::move(j));
  }
  return refs;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

TEST(Tokenizer, LoadsStories260K) {
  SKIP_WITHOUT(kStories);
  auto tok = LoadOrDie(kStories);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->IsControl(1));
  EXPECT_TRUE(tok->IsControl(2));
  EXPECT_FALSE(tok->IsControl(291));
  EXPECT_FALSE(tok->IsControl(-1));
  EXPECT_FALSE(tok->IsControl(512));
  EXPECT_EQ(tok->ByteValue(3), 0x00);
  EXPECT_EQ(tok->ByteValue(3 + 0xE4), 0xE4);
  EXPECT_EQ(tok->ByteValue(291), -1);
  EXPECT_EQ(tok->ByteValue(100000), -1);
  EXPECT_EQ(tok->Encode("The cat"), (std::vector<int>{1, 291, 280, 294}));
  EXPECT_EQ(tok->EncodeNoBos("The cat"), (std::vector<int>{291, 280, 294}));
  EXPECT_EQ(tok->Encode(""), (std::vector<int>{1}));
  EXPECT_EQ(tok->Decode({1, 291, 280, 294}), "The cat");
  // Ids the tokenizer does not have give no text (a model may have a larger vocabulary).
  EXPECT_EQ(tok->Decode({1, 291, 512, -3, 280, 294}), "The cat");
}

TEST(Tokenizer, EncodesReferencePrompts) {
  for (const std::string& dir : {kStories, kTinyLlama3}) {
    SKIP_WITHOUT(dir);
    auto tok = LoadOrDie(dir);
    ASSERT_TRUE(tok);
    for (const json& ref : References(dir)) {
      EXPECT_EQ(tok->Encode(ref["prompt"].get<std::string>()),
                ref["prompt_ids"].get<std::vector<int>>())
          << dir << "/reference/" << ref["file"].get<std::string>();
    }
  }
}

TEST(Tokenizer, MissingModelIsNotFound) {
  const std::string dir = ScratchDir();
  std::unique_ptr<Tokenizer> tok;
  const Status st = Tokenizer::Load(dir, &tok);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  // Both files a model's tokenizer may be in are named (issue 23, row 10: only tokenizer.model
  // was, though tokenizer.json is looked for first).
  EXPECT_EQ(st.message(),
            dir + ": no tokenizer: neither tokenizer.json nor tokenizer.model is there");
  EXPECT_FALSE(tok);
}

// Offsets where a top-level field of a serialized ModelProto ends (all its fields are messages).
std::vector<size_t> FieldEnds(const std::string& b) {
  std::vector<size_t> ends;
  auto varint = [&](size_t* pos) {
    uint64_t v = 0;
    for (int shift = 0; *pos < b.size(); shift += 7) {
      const auto c = static_cast<uint8_t>(b[(*pos)++]);
      v |= static_cast<uint64_t>(c & 0x7F) << shift;
      if (c < 0x80) break;
    }
    return v;
  };
  for (size_t pos = 0; pos < b.size();) {
    varint(&pos);  // key
    pos += varint(&pos);
    ends.push_back(pos);
  }
  return ends;
}

// Truncations of a real model are refused, including cuts between two fields (which protobuf
// alone would accept as a smaller model). Cuts at every field end, and every 37th byte.
TEST(Tokenizer, TruncatedModelIsCorruption) {
  const std::string good = ReadBytes(Trained512Dir() + "/tokenizer.model");
  ASSERT_GT(good.size(), 1000u);
  std::vector<size_t> cuts = FieldEnds(good);
  ASSERT_EQ(cuts.back(), good.size());
  ASSERT_GT(cuts.size(), 512u);  // 512 pieces, trainer_spec, normalizer_spec, ...
  cuts.pop_back();
  for (size_t n = 0; n < good.size(); n += 37) cuts.push_back(n);
  const std::string dir = ScratchDir();
  const std::string path = dir + "/tokenizer.model";
  for (size_t n : cuts) {
    WriteBytes(path, good.substr(0, n));
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    ASSERT_EQ(st.code(), Status::Code::kCorruption)
        << "truncated to " << n << ": " << st.ToString();
    ASSERT_NE(st.message().find(path), std::string::npos) << st.message();
  }
  WriteBytes(path, good);
  EXPECT_TRUE(LoadOrDie(dir));
}

TEST(Tokenizer, RandomBytesAreCorruption) {
  const std::string dir = ScratchDir();
  const std::string path = dir + "/tokenizer.model";
  std::mt19937 rng(42);
  for (int t = 0; t < 100; ++t) {
    std::string bytes(rng() % 5000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    WriteBytes(path, bytes);
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    ASSERT_EQ(st.code(), Status::Code::kCorruption) << "try " << t << ": " << st.ToString();
    ASSERT_NE(st.message().find(path), std::string::npos) << st.message();
  }
  WriteBytes(path, "this is not a sentencepiece model\n");
  std::unique_ptr<Tokenizer> tok;
  EXPECT_EQ(Tokenizer::Load(dir, &tok).code(), Status::Code::kCorruption);
}

// A damaged model either loads (some flips hit piece text or scores) or is refused; it never
// crashes, and what loads encodes and decodes.
TEST(Tokenizer, BitFlippedModelNeverCrashes) {
  const std::string good = ReadBytes(Trained512Dir() + "/tokenizer.model");
  const std::string dir = ScratchDir();
  std::mt19937 rng(7);
  for (int t = 0; t < 300; ++t) {
    std::string bytes = good;
    for (int k = 0; k < 3; ++k) bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
    WriteBytes(dir + "/tokenizer.model", bytes);
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    if (!st.ok()) {
      ASSERT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
      continue;
    }
    const std::vector<int> ids = tok->Encode("héllo 世界 🙂 The cat sat.");
    IncrementalDecoder dec(*tok, {});
    for (int id : ids) dec.Add(id);
    dec.Flush();
  }
}

TEST(Tokenizer, ReadsAddBosToken) {
  const std::string dir = ScratchDir();
  fs::copy_file(Trained512Dir() + "/tokenizer.model", dir + "/tokenizer.model");
  EXPECT_TRUE(LoadOrDie(dir)->add_bos());  // no tokenizer_config.json: default true
  WriteBytes(dir + "/tokenizer_config.json", R"({"add_bos_token": false, "x": [1]})");
  auto tok = LoadOrDie(dir);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->Encode("The cat"), tok->EncodeNoBos("The cat"));
  WriteBytes(dir + "/tokenizer_config.json", R"({"add_bos_token": true})");
  tok = LoadOrDie(dir);
  EXPECT_EQ(tok->Encode("The cat")[0], 1);
  WriteBytes(dir + "/tokenizer_config.json", R"({"add_bos_token": null})");
  EXPECT_TRUE(LoadOrDie(dir)->add_bos());
}

TEST(Tokenizer, BadTokenizerConfigNamesTheFile) {
  const std::string dir = ScratchDir();
  fs::copy_file(Trained512Dir() + "/tokenizer.model", dir + "/tokenizer.model");
  const std::string path = dir + "/tokenizer_config.json";
  for (const char* text : {R"({"add_bos_token": tru)", "", "[1, 2]", R"({"add_bos_token": "yes"})",
                           R"({"add_bos_token": 1})"}) {
    WriteBytes(path, text);
    std::unique_ptr<Tokenizer> tok;
    const Status st = Tokenizer::Load(dir, &tok);
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << text;
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_FALSE(tok);
  }
}

// ---------------------------------------------------------------------------------------------
// IncrementalDecoder

TEST(IncrementalDecoder, MatchesStories260KReferences) {
  SKIP_WITHOUT(kStories);
  auto tok = LoadOrDie(kStories);
  ASSERT_TRUE(tok);
  for (const json& ref : References(kStories)) {
    const std::string name = ref["file"];
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    auto completion = ref["completion_ids"].get<std::vector<int>>();
    const auto stops = ref["stop_token_ids"].get<std::vector<int>>();
    if (ref["finish_reason"] == "stop") {
      ASSERT_NE(std::find(stops.begin(), stops.end(), completion.back()), stops.end()) << name;
      completion.pop_back();
    }
    EXPECT_EQ(tok->Encode(ref["prompt"]), prompt) << name;
    EXPECT_EQ(Stream(*tok, prompt, completion), ref["completion_text"].get<std::string>()) << name;
  }
}

TEST(IncrementalDecoder, LeadingSpaceFollowsThePrompt) {
  SKIP_WITHOUT(kStories);
  auto tok = LoadOrDie(kStories);
  ASSERT_TRUE(tok);
  const std::vector<int> once = tok->EncodeNoBos("Once upon a time");
  // Empty prompt: the text starts the output, so its leading space goes (as in Decode).
  EXPECT_EQ(Stream(*tok, {1}, once), "Once upon a time");
  EXPECT_EQ(Stream(*tok, {}, once), "Once upon a time");
  EXPECT_EQ(Stream(*tok, std::vector<int>(40, 1), once), "Once upon a time");
  // After "The cat" the completion keeps its space.
  EXPECT_EQ(Stream(*tok, {1, 291, 280, 294}, tok->EncodeNoBos("and a boy")), " and a boy");
  // A long prompt (only its tail is decoded).
  std::vector<int> long_prompt = tok->Encode("One day, a little boy named Tom went to the park.");
  for (int i = 0; i < 6; ++i) {
    const auto more = tok->EncodeNoBos("He saw a big red ball and he was happy.");
    long_prompt.insert(long_prompt.end(), more.begin(), more.end());
  }
  EXPECT_EQ(Stream(*tok, long_prompt, tok->EncodeNoBos("The end.")), " The end.");
}

TEST(IncrementalDecoder, HoldsBackIncompleteCharacters) {
  SKIP_WITHOUT(kStories);
  auto tok = LoadOrDie(kStories);
  ASSERT_TRUE(tok);
  auto byte = [](int b) { return 3 + b; };  // stories260K: <0x00> is id 3
  const std::string kReplacement = "\xEF\xBF\xBD";
  {
    IncrementalDecoder dec(*tok, {1, 291, 280, 294});
    EXPECT_EQ(dec.Add(byte(0xE4)), "");
    EXPECT_EQ(dec.Add(byte(0xB8)), "");
    EXPECT_EQ(dec.Add(byte(0x96)), "世");
    EXPECT_EQ(dec.Add(265), " the");
    EXPECT_EQ(dec.Add(byte(0xF0)), "");
    EXPECT_EQ(dec.Add(byte(0x9F)), "");
    EXPECT_EQ(dec.Add(byte(0x99)), "");
    EXPECT_EQ(dec.Add(byte(0x82)), "🙂");
    EXPECT_EQ(dec.Flush(), "");
    EXPECT_EQ(dec.text(), "世 the🙂");
  }
  {  // Flush releases an unfinished character as U+FFFD, as Decode renders it.
    IncrementalDecoder dec(*tok, {1});
    EXPECT_EQ(dec.Add(byte(0xE4)), "");
    EXPECT_EQ(dec.Add(byte(0xB8)), "");
    EXPECT_EQ(dec.Flush(), kReplacement + kReplacement);
  }
  {  // A control id (EOS) ends the byte run, as in Decode.
    IncrementalDecoder dec(*tok, {1, 291});
    EXPECT_EQ(dec.Add(byte(0xE4)), "");
    EXPECT_EQ(dec.Add(2), kReplacement);
    EXPECT_EQ(dec.Add(byte(0xB8)), kReplacement);  // a lone continuation byte is final at once
    EXPECT_EQ(dec.Add(byte(0x41)), "A");
  }
  {  // An invalid sequence is released as soon as it cannot become valid.
    IncrementalDecoder dec(*tok, {1, 291});
    EXPECT_EQ(dec.Add(byte(0xE4)), "");
    EXPECT_EQ(dec.Add(byte(0x41)), kReplacement + "A");
  }
  {  // The prompt ends inside a character the completion finishes: text after the common prefix.
    IncrementalDecoder dec(*tok, {1, 291, byte(0xE4)});
    EXPECT_EQ(dec.Add(byte(0xB8)), "");
    EXPECT_EQ(dec.Add(byte(0x96)), "世");
    EXPECT_EQ(dec.Add(265), " the");
  }
  {  // Ids outside the vocabulary give no text.
    IncrementalDecoder dec(*tok, {1, 291});
    EXPECT_EQ(dec.Add(100000), "");
    EXPECT_EQ(dec.Add(-5), "");
    EXPECT_EQ(dec.Add(265), " the");
  }
}

// tiny-llama3's completions are random ids: byte pieces that often form no valid UTF-8.
TEST(IncrementalDecoder, MatchesDecodeOnTinyLlama3References) {
  SKIP_WITHOUT(kTinyLlama3);
  auto tok = LoadOrDie(kTinyLlama3);
  ASSERT_TRUE(tok);
  for (const json& ref : References(kTinyLlama3)) {
    const auto prompt = ref["prompt_ids"].get<std::vector<int>>();
    const auto completion = ref["completion_ids"].get<std::vector<int>>();
    std::string expected;
    ASSERT_TRUE(TextDifference(*tok, prompt, completion, &expected)) << ref["file"];
    EXPECT_EQ(Stream(*tok, prompt, completion), expected) << ref["file"];
    // Every prefix of the completion, flushed there, also matches.
    for (size_t n = 0; n <= completion.size(); n += 7) {
      const std::vector<int> part(completion.begin(), completion.begin() + n);
      ASSERT_TRUE(TextDifference(*tok, prompt, part, &expected));
      EXPECT_EQ(Stream(*tok, prompt, part), expected) << ref["file"] << " first " << n;
    }
  }
}

// Random ids, weighted towards byte pieces and control ids, after random prompts.
TEST(IncrementalDecoder, MatchesDecodeOnRandomIds) {
  auto tok = LoadOrDie(Trained512Dir());
  ASSERT_TRUE(tok);
  std::mt19937 rng(3);
  int compared = 0;
  for (int t = 0; t < 400; ++t) {
    auto random_ids = [&](size_t n) {
      std::vector<int> ids;
      for (size_t i = 0; i < n; ++i) {
        const int kind = rng() % 10;
        if (kind < 4)
          ids.push_back(3 + 0x80 + rng() % 0x80);  // high byte pieces
        else if (kind < 5)
          ids.push_back(rng() % 3);  // unk, bos, eos
        else if (kind < 6)
          ids.push_back(3 + rng() % 0x80);  // ASCII byte pieces
        else
          ids.push_back(rng() % tok->vocab_size());
      }
      return ids;
    };
    std::vector<int> prompt = random_ids(rng() % 30);
    if (t % 3 == 0) prompt.insert(prompt.begin(), 1);
    const std::vector<int> completion = random_ids(rng() % 60);
    std::string expected;
    if (!TextDifference(*tok, prompt, completion, &expected)) continue;
    ++compared;
    ASSERT_EQ(Stream(*tok, prompt, completion), expected) << "case " << t;
  }
  EXPECT_GT(compared, 300);
}

TEST(IncrementalDecoder, MultiByteTextWithTrainedTokenizer) {
  auto tok = LoadOrDie(Trained512Dir());
  ASSERT_TRUE(tok);
  for (const std::string text : {"héllo 世界 🙂", "Ωμέγα and 日本語 🎉🙂 done.",
                                 "naïve café 😀", "🙂🙂🙂"}) {
    const std::vector<int> ids = tok->EncodeNoBos(text);
    const int bytes = static_cast<int>(
        std::count_if(ids.begin(), ids.end(), [&](int id) { return tok->ByteValue(id) >= 0x80; }));
    EXPECT_GT(bytes, 0) << "expected byte-fallback pieces in " << text;
    int held_back = 0;
    EXPECT_EQ(Stream(*tok, {1}, ids, &held_back), text);
    EXPECT_GT(held_back, 0) << text;
    std::string expected;
    const std::vector<int> prompt = tok->Encode("Say:");
    ASSERT_TRUE(TextDifference(*tok, prompt, ids, &expected));
    EXPECT_EQ(expected, " " + text);
    EXPECT_EQ(Stream(*tok, prompt, ids), expected);
  }
}

// Each Add decodes a bounded window: a long stream costs time linear in its length. (How fast:
// tokenize_bench's streaming row.)
TEST(IncrementalDecoder, LongStreamIsLinear) {
  auto tok = LoadOrDie(Trained512Dir());
  ASSERT_TRUE(tok);
  std::string text;
  for (int i = 0; i < 2500; ++i) text += "The cat 🙂 sat on the mat in 1987, café! ";
  const std::vector<int> ids = tok->EncodeNoBos(text);
  ASSERT_GT(ids.size(), 50000u);
  EXPECT_EQ(Stream(*tok, {1}, ids), tok->Decode(ids));
  // Linear because the window each Add decodes stays a few ids of context and the held-back bytes
  // of one character, wherever the stream is, and after a prompt of any length.
  IncrementalDecoder dec(*tok, {1});
  size_t widest = 0;
  for (int id : ids) {
    dec.Add(id);
    widest = std::max(widest, dec.window());
  }
  dec.Flush();
  EXPECT_EQ(dec.text(), tok->Decode(ids));
  EXPECT_LE(IncrementalDecoder(*tok, ids).window(), 16u) << "a " << ids.size() << "-id prompt";
  EXPECT_LE(widest, 24u) << "a window that grows with the stream makes it quadratic";
}

// ---------------------------------------------------------------------------------------------
// TrainTokenizer and the corpus

// (How fast: tokenize_bench's training row.)
TEST(TrainTokenizer, Vocab512IsExactAndDeterministic) {
  const std::string dir = ScratchDir();
  ASSERT_TRUE(TrainTokenizer(512, 11, dir + "/tokenizer.model").ok());
  const std::string first = ReadBytes(dir + "/tokenizer.model");
  ASSERT_TRUE(TrainTokenizer(512, 11, dir + "/tokenizer.model").ok());  // overwrites
  EXPECT_TRUE(first == ReadBytes(dir + "/tokenizer.model")) << "same seed, different model";
  ASSERT_TRUE(TrainTokenizer(512, 12, dir + "/other.model").ok());
  EXPECT_FALSE(first == ReadBytes(dir + "/other.model")) << "seed is ignored";
  for (const auto& e : fs::directory_iterator(dir))  // no temporary files left behind
    EXPECT_TRUE(e.path().filename() == "tokenizer.model" || e.path().filename() == "other.model")
        << e.path();

  auto tok = LoadOrDie(dir);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->Decode({0}), " \xE2\x81\x87 ");  // <unk>
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok->ByteValue(3 + b), b);
  // Byte fallback and kept whitespace make every text round-trip.
  for (const std::string text :
       {"The cat sat.", "héllo 世界 🙂", "  two  spaces\tand\nlines ", "x = 3.14159 + 2024"}) {
    EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
  }
  EXPECT_EQ(tok->EncodeNoBos("12").size(), 3u);  // split_digits: "▁", "1", "2"
}

TEST(TrainTokenizer, ErrorsNameThePath) {
  const std::string dir = ScratchDir();
  const std::string missing = dir + "/no/such/dir/tokenizer.model";
  Status st = TrainTokenizer(512, 1, missing);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(missing), std::string::npos) << st.message();
  for (int vocab : {0, -5, 100}) {  // 100 < 256 byte pieces + 3 + the corpus's characters
    st = TrainTokenizer(vocab, 1, dir + "/tokenizer.model");
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << vocab;
    EXPECT_NE(st.message().find(dir + "/tokenizer.model"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(fs::exists(dir + "/tokenizer.model"));
}

// The bench-110m shape: 3-10 s on two cores.
TEST(TrainTokenizer, Vocab32000IsExact) {
  const std::string dir = ScratchDir();
  ASSERT_TRUE(TrainTokenizer(32000, 1, dir + "/tokenizer.model").ok());
  auto tok = LoadOrDie(dir);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->Decode(tok->Encode("héllo 世界 🙂")), "héllo 世界 🙂");
}

TEST(TrainTokenizer, CorpusIsDeterministic) {
  CorpusOptions opt;
  opt.seed = 5;
  opt.num_sentences = 300;
  opt.num_pseudo_words = 200;
  const auto a = GenerateCorpus(opt);
  EXPECT_EQ(a, GenerateCorpus(opt));
  ASSERT_EQ(a.size(), 300u);
  opt.seed = 6;
  EXPECT_NE(a, GenerateCorpus(opt));
  bool digits = false, non_ascii = false;
  for (const std::string& line : a) {
    EXPECT_TRUE(IsValidUtf8(line));
    EXPECT_EQ(line.find('\n'), std::string::npos);
    for (char c : line) {
      digits |= c >= '0' && c <= '9';
      non_ascii |= static_cast<uint8_t>(c) >= 0x80;
      EXPECT_LT(static_cast<uint8_t>(c), 0xF0) << "no 4-byte characters (emoji) in the corpus";
    }
  }
  EXPECT_TRUE(digits);
  EXPECT_TRUE(non_ascii);
}

}  // namespace
}  // namespace llmq
