// libFuzzer target for HfTokenizer::Parse (tokenizer.json): whatever the bytes, it must not crash,
// hang or read out of bounds (ASan, UBSan), and what it accepts must keep its contract: every id
// Encode gives is inside the vocabulary, and decoding never fails. The always-on counterparts are
// the bad-file cases of tests/hf_tokenizer_test.cpp.
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file is a small program that writes a seed corpus
// (small valid tokenizer.json files of each kind the project reads) into the folder argv[1].
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/text/hf_tokenizer.h"
#include "fuzz/fuzz_check.h"
#include "tests/byte_level.h"

#ifndef LLMQ_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = "/fuzz/tokenizer.json";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<llmq::HfTokenizer> tok;
  const llmq::Status s = llmq::HfTokenizer::Parse(text, file, &tok);
  if (!s.ok()) {  // errors name the file and give nothing
    FUZZ_CHECK(s.message().find(file) != std::string::npos);
    FUZZ_CHECK(tok == nullptr);
    return 0;
  }
  FUZZ_CHECK(tok != nullptr);
  // Fixed texts (words, digits, spaces, an added-token look-alike, accents, an emoji, invalid
  // UTF-8) and the input's own first bytes.
  const std::string texts[] = {"Hello world, it's 2026!", "  leading spaces\tand\nnewlines  ",
                               "<|im_start|>user\ncafé naïve über<|im_end|>",
                               "\xF0\x9F\x91\x8B\xE2\x80\x8D x \xC3(\xFF",
                               std::string(text.substr(0, 256))};
  for (const std::string& t : texts) {
    for (bool special : {false, true}) {
      const std::vector<int> ids = tok->Encode(t, special);
      for (int id : ids) FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
      (void)tok->DecodeBytes(ids, /*skip_special_tokens=*/false);
      (void)tok->DecodeBytes(ids, /*skip_special_tokens=*/true);
    }
  }
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

namespace {

// A byte-level BPE (as Llama 3 / Qwen): the 256 byte symbols, a few merges, a Split regex.
std::string ByteLevel() {
  std::string vocab;
  // GPT-2's byte-to-unicode map (tests/byte_level.h).
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    std::string sym = llmq::testing::ByteLevelChar(b);
    if (sym == "\"" || sym == "\\") sym = "\\" + sym;
    vocab += (vocab.empty() ? "" : ",") + std::string("\"") + sym + "\":" + std::to_string(id++);
  }
  vocab += ",\"He\":256,\"ll\":257,\"Hell\":258,\"Hello\":259,\"\xC4\xA0w\":260";
  return R"({"version":"1.0","added_tokens":[{"id":261,"content":"<|im_start|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":262,"content":"<|im_end|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],)"
         R"("normalizer":{"type":"NFC"},)"
         R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},)"
         R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|im_start|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<|im_start|>":{"id":"<|im_start|>","ids":[261],"tokens":["<|im_start|>"]}}},)"
         R"("decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},)"
         R"("model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{)" +
         vocab + R"(},"merges":["H e","l l","He ll","Hell o","Ġ w"]}})";
}

// A sentencepiece conversion (as Llama 2 / Mistral): Metaspace, byte_fallback, <unk>.
std::string Metaspace() {
  std::string vocab = R"("<unk>":0,"<s>":1,"</s>":2)";
  int id = 3;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab += ",\"" + std::string(name) + "\":" + std::to_string(id++);
  }
  for (const char* piece : {"\xE2\x96\x81", "h", "i", "hi", "\xE2\x96\x81h", "\xE2\x96\x81hi"})
    vocab += ",\"" + std::string(piece) + "\":" + std::to_string(id++);
  return R"({"version":"1.0","added_tokens":[{"id":0,"content":"<unk>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":1,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],)"
         R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},)"
         R"("pre_tokenizer":null,)"
         R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},)"
         R"("decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},)"
         R"("model":{"type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true,"ignore_merges":false,"vocab":{)" +
         vocab + R"(},"merges":["▁ h","h i","▁h i"]}})";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::pair<std::string, std::string> seeds[] = {{"byte_level", ByteLevel()},
                                                       {"metaspace", Metaspace()}};
  for (const auto& [name, text] : seeds) {
    std::unique_ptr<llmq::HfTokenizer> tok;
    const llmq::Status s = llmq::HfTokenizer::Parse(text, name, &tok);
    if (!s.ok()) {  // a seed the parser refuses would only test its error path
      std::fprintf(stderr, "seed %s refused: %s\n", name.c_str(), s.message().c_str());
      return 1;
    }
    std::ofstream(dir + "/" + name + ".json", std::ios::binary) << text;
  }
  return 0;
}

#endif  // LLMQ_FUZZ_SEEDS
