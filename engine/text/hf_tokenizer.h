// HfTokenizer: a Hugging Face `tokenizer.json` tokenizer (the `tokenizers` library's format):
// model BPE (byte-level as Llama 3 / Qwen, or byte_fallback as the Llama-2 / Mistral conversions),
// normalizers, pre-tokenizers, post-processors, decoders, and added tokens matched in the text
// before anything else. Encode(text, true) equals the reference's `encode(text)` id for id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace llmq {

namespace hf {
struct Normalizer;
struct PreTokenizer;
struct Decoder;
class BpeModel;
class AddedTokenMatcher;
}  // namespace hf

// Immutable once loaded; every method is safe to call from several threads at once.
class HfTokenizer {
 public:
  // Parses `path` (a tokenizer.json). Errors name the file and what is wrong (malformed JSON, an
  // unknown component type, a merge naming a token missing from the vocabulary); never aborts.
  static Status Load(const std::string& path, std::unique_ptr<HfTokenizer>* out);
  // The same from the file's text; `path` names it in errors (the fuzz target's entry point).
  static Status Parse(std::string_view json_text, const std::string& path,
                      std::unique_ptr<HfTokenizer>* out);
  ~HfTokenizer();

  // Hugging Face's encode(text, add_special_tokens): added tokens are split out first, the rest is
  // normalized, pre-tokenized and run through BPE; the post-processor adds its special tokens when
  // `add_special_tokens`.
  std::vector<int> Encode(const std::string& text, bool add_special_tokens) const;
  // decode(ids, skip_special_tokens): the decoders' raw bytes, which may hold invalid UTF-8 (a
  // byte-level token can end inside a character). Ids outside the vocabulary give nothing.
  std::string DecodeBytes(const std::vector<int>& ids, bool skip_special_tokens) const;
  // The same through the decoder pipeline, token strings and all: what DecodeBytes computes from
  // its per-id table when the decoder maps each token on its own (ByteLevel, the Llama 3 and
  // Qwen families': a streamed completion decodes a few ids per token, at every step of every
  // sequence). Tests compare the two.
  std::string DecodeBytesThroughDecoders(const std::vector<int>& ids,
                                         bool skip_special_tokens) const;
  // True when DecodeBytes concatenates PieceBytes (a ByteLevel decoder).
  bool decodes_per_token() const { return !piece_end_.empty(); }
  // With decodes_per_token(): id's bytes as DecodeBytes({id}, false) gives them; "" outside the
  // vocabulary.
  std::string_view PieceBytes(int id) const {
    if (id < 0 || id >= static_cast<int>(piece_end_.size())) return {};
    const uint32_t begin = id ? piece_end_[id - 1] : 0;
    return std::string_view(piece_bytes_).substr(begin, piece_end_[id] - begin);
  }

  int vocab_size() const { return static_cast<int>(id_to_token_.size()); }
  // The token spelled `token` (vocabulary or added token); -1 when none.
  int TokenToId(const std::string& token) const;
  bool IsSpecial(int id) const;
  // The byte of a byte_fallback token "<0xAB>"; -1 for any other id.
  int ByteValue(int id) const;
  // True when the post-processor adds ids in front of the text (a BOS).
  bool AddsPrefix() const { return !prefix_ids_.empty(); }
  // The first id the post-processor adds in front (BOS), or -1.
  int PrefixId() const { return prefix_ids_.empty() ? -1 : prefix_ids_.front(); }

 private:
  HfTokenizer();
  void EncodePiece(const std::string& text, bool first, std::vector<int>* ids) const;

  std::unique_ptr<hf::BpeModel> model_;
  std::unique_ptr<hf::Normalizer> normalizer_;         // null: none
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;    // null: none
  std::unique_ptr<hf::Decoder> decoder_;               // null: tokens joined as they are
  std::unique_ptr<hf::AddedTokenMatcher> added_;       // normalized=false: matched in the input
  std::unique_ptr<hf::AddedTokenMatcher> added_norm_;  // normalized=true: after normalization
  std::vector<std::string> id_to_token_;               // the vocabulary and the added tokens
  std::vector<uint8_t> special_;                       // per id: an added token marked "special"
  std::vector<int16_t> byte_value_;                    // per id: ByteValue(id)
  // With a per-token decoder (ByteLevel): id i decodes to piece_bytes_[piece_end_[i - 1] ..
  // piece_end_[i]) (from 0 for id 0); empty otherwise.
  std::string piece_bytes_;
  std::vector<uint32_t> piece_end_;
  std::unordered_map<std::string, int> added_ids_;
  // The ids TemplateProcessing's "single" puts before and after the sequence.
  std::vector<int> prefix_ids_, suffix_ids_;
};

// `bytes` with each maximal invalid UTF-8 subpart replaced by U+FFFD (as Rust's from_utf8_lossy
// and Python's errors="replace").
std::string Utf8Lossy(const std::string& bytes);
// The length of the well-formed UTF-8 sequence lead byte `c` begins (2 to 4), with the range
// [*lo, *hi] its second byte must be in (Unicode's table 3-7); 0 when `c` begins none (ASCII
// included).
int Utf8Lead(uint8_t c, uint8_t* lo, uint8_t* hi);

// "<0xAB>" -> 0xAB (a byte-fallback token, sentencepiece's and tokenizer.json's); -1 when `piece`
// has another form.
int ParseBytePiece(const std::string& piece);

}  // namespace llmq
