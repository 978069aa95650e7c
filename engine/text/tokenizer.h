// Tokenizer: a Hugging Face `tokenizer.json` (engine/text/hf_tokenizer.h) when the model folder has
// one, else sentencepiece `tokenizer.model`; BOS as the model asks, and incremental detokenization
// that is correct across byte-fallback pieces, byte-level tokens that split a character, and
// leading spaces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/text/hf_tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llmq {

// Immutable once loaded; all methods are safe to call from several threads at once.
class Tokenizer {
 public:
  // Loads `model_dir`/tokenizer.json when it exists (then Encode is Hugging Face's encode(text):
  // the post-processor's special tokens added, e.g. Llama 3's <|begin_of_text|>; BOS/EOS are
  // tokenizer_config.json's bos_token/eos_token), else `model_dir`/tokenizer.model; reads
  // `model_dir`/tokenizer_config.json if present ("add_bos_token", default true, for
  // sentencepiece). Errors name the file: NotFound when neither tokenizer file exists,
  // Corruption when one cannot be parsed, Unsupported for a component type llmq lacks. Never
  // aborts.
  static Status Load(const std::string& model_dir, std::unique_ptr<Tokenizer>* out);
  ~Tokenizer();

  // Text -> ids; a BOS id is prepended when the model asks for it.
  std::vector<int> Encode(const std::string& text) const;
  // Text -> ids without any special token added (HF: add_special_tokens=False).
  std::vector<int> EncodeNoBos(const std::string& text) const;
  // Ids -> text, as sentencepiece decodes the whole sequence: control ids give no text, the
  // leading space of the first piece is dropped, invalid byte-fallback bytes become U+FFFD.
  // Ids outside [0, vocab_size()) give no text either.
  std::string Decode(const std::vector<int>& ids) const;
  // The bytes one token stands for, as OpenAI's logprobs report them: a byte-level token's raw
  // bytes (possibly part of a UTF-8 character), a byte-fallback piece's byte, a sentencepiece
  // piece with "▁" as a space, a special token's text ("</s>"). "" outside [0, vocab_size()).
  std::string TokenBytes(int id) const;
  int vocab_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;  // -1 when the model has none
  bool add_bos() const { return add_bos_; }
  bool IsControl(int id) const;
  // The byte of a byte-fallback piece ("<0x41>" -> 0x41); -1 for any other id.
  int ByteValue(int id) const;
  // The id of the vocabulary piece spelled exactly `piece` ("<|im_start|>", "▁the"); -1 when the
  // vocabulary has no such piece (sentencepiece's own PieceToId answers unk_id then).
  int PieceToId(const std::string& piece) const;
  // The tokenizer.json implementation; null for a sentencepiece model.
  const HfTokenizer* hf() const { return hf_.get(); }

 private:
  Tokenizer() = default;
  static Status LoadHf(const std::string& model_dir, const std::string& path,
                       std::unique_ptr<Tokenizer>* out);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<HfTokenizer> hf_;
  int hf_bos_ = -1, hf_eos_ = -1;
  std::vector<int16_t> byte_value_;  // per id: ByteValue(id)
  bool add_bos_ = true;
};

// Streams the text of a completion as ids arrive. The text of the completion is
// Decode(prompt + completion) minus Decode(prompt), so the leading space of the first completion
// piece is kept (" and", as an OpenAI completion returns it). Text is only released once it is
// complete UTF-8: a byte-fallback sequence split over several ids is held back until whole.
//
// Each Add decodes only a short window of ids (a few of context + the held-back ones), so it costs
// O(1) whatever the length of prompt and completion (as vLLM's detokenize_incrementally). When
// Decode(prompt) is not a prefix of Decode(prompt + completion) (the prompt ends inside a
// byte-fallback character the completion finishes), the text starts after their common prefix.
// `tok` must outlive the decoder.
class IncrementalDecoder {
 public:
  // With `per_token` and a tokenizer whose decoder maps each token on its own (ByteLevel:
  // HfTokenizer::decodes_per_token), the decoder works on the tokens' bytes and decodes nothing
  // (the same window, the same releases, the same text: while everything released so far ends
  // where no later byte can change its text, the new text is the new bytes' own); it falls back to
  // decoding the window for good the first time that does not hold (a special token hid the start
  // of a character from the hold-back check). Without, it always decodes (tests compare the two).
  IncrementalDecoder(const Tokenizer& tok, std::vector<int> prompt_ids, bool per_token = true);
  // Adds one completion id; returns the newly completed text (possibly empty). Always whole UTF-8
  // characters.
  std::string Add(int id);
  // Returns whatever is still held back (at the end of generation), with invalid bytes as U+FFFD.
  // A control id (EOS) passed to Add also ends any byte sequence, as it does in Decode.
  std::string Flush();
  // Everything Add and Flush have returned so far, concatenated.
  const std::string& text() const { return emitted_; }
  // The ids the next Add decodes besides its own: context + held-back ids, bounded whatever the
  // length of prompt and completion (what keeps a long stream linear; tests check it).
  size_t window() const { return ids_.size(); }

 private:
  bool EndsInPartialCharacter() const;
  std::string Release();
  void Rebase(std::string window_text);
  // The per-token path's: the bytes of ids_[from, to) (special tokens give none), Release, and
  // Rebase's trimming done on byte counts (a window's text is empty exactly when its bytes are).
  std::string WindowBytes(size_t from, size_t to) const;
  bool HasBytes(size_t from, size_t to) const;  // WindowBytes(from, to) is not empty
  std::string ReleaseBytes();
  void RebaseBytes();
  // Adds `bytes` to the last bytes released (tail_).
  void Released(const std::string& bytes);

  const Tokenizer& tok_;
  // Invariants: ids_ is a window: a few ids of context + the not yet released ids.
  // Either ids_ starts at the very beginning of prompt + completion, or the context decodes to
  // non-empty text (so that sentencepiece's dropping of a leading space happens inside it), and
  // the context ends where every earlier byte is final (no byte-fallback character is open).
  std::vector<int> ids_;
  size_t prefix_len_ = 0;    // ids_[0, prefix_len_) are context already released
  std::string prefix_text_;  // Decode(ids_[0, prefix_len_)); not kept on the per-token path
  std::string emitted_;
  // The per-token path (null: decoding), and what it keeps instead of prefix_text_: the last
  // bytes released (at most 3: whether they end clean, EndsInUnfinishedCharacter, is all it needs).
  const HfTokenizer* bytes_ = nullptr;
  std::string tail_;
};

}  // namespace llmq
