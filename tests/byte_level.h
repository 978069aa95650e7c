// GPT-2's byte-to-unicode map, as byte-level BPE vocabularies (Llama 3, Qwen) spell their 256 byte
// tokens: printable Latin-1 bytes stand for themselves, the others for U+0100 + their rank among
// the unprintable ones. Shared by the tokenizer tests and the tokenizer fuzz target.
#pragma once

#include <string>

namespace llmq::testing {

// The UTF-8 of byte b's symbol.
inline std::string ByteLevelChar(int b) {
  auto printable = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
  };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += !printable(x);
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace llmq::testing
