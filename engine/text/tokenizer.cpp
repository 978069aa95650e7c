#include "engine/text/tokenizer.h"

#include <sentencepiece_processor.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <unordered_map>

#include "base/durable_file.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;

constexpr uintmax_t kMaxModelBytes = 256u << 20;  // real tokenizer.model files are a few MiB

// Reads a whole file; NotFound when it does not exist.
Status ReadFile(const std::string& path, std::string* out) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": no such file");
  if (!fs::is_regular_file(path, ec)) return Status::IoError(path + ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  if (size > kMaxModelBytes) return Status::Corruption(path + ": implausibly large file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IoError(path + ": cannot open");
  out->resize(size);
  f.read(out->data(), static_cast<std::streamsize>(size));
  if (f.gcount() != static_cast<std::streamsize>(size))
    return Status::IoError(path + ": short read");
  return Status::Ok();
}

bool ReadVarint(const std::string& b, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < b.size(); shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[(*pos)++]);
    *v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (c < 0x80) return true;
  }
  return false;
}

// Walks the top level of a serialized sentencepiece ModelProto. Protobuf parsing already rejects a
// file cut inside a field, but a file cut between two fields parses as a smaller, different model.
// Every real model has pieces (1), trainer_spec (2) and normalizer_spec (3), in that order (fields
// are serialized by number), so requiring them catches every cut but one after normalizer_spec,
// which only drops the optional self_test_data / denormalizer_spec; and most random bytes.
Status CheckModelProto(const std::string& b, const std::string& path) {
  size_t pos = 0;
  int pieces = 0, trainer_spec = 0, normalizer_spec = 0;
  while (pos < b.size()) {
    uint64_t key = 0, len = 0;
    if (!ReadVarint(b, &pos, &key)) return Status::Corruption(path + ": truncated field key");
    const uint64_t field = key >> 3;
    if (field == 0) return Status::Corruption(path + ": not a sentencepiece model (field 0)");
    switch (key & 7) {
      case 0:  // varint
        if (!ReadVarint(b, &pos, &len)) return Status::Corruption(path + ": truncated varint");
        len = 0;
        break;
      case 1:
        len = 8;
        break;  // fixed64
      case 5:
        len = 4;
        break;  // fixed32
      case 2:   // length-delimited
        if (!ReadVarint(b, &pos, &len)) return Status::Corruption(path + ": truncated length");
        break;
      default:
        return Status::Corruption(path + ": not a sentencepiece model (bad wire type)");
    }
    if (b.size() - pos < len)
      return Status::Corruption(path + ": truncated (a field runs past the end of the file)");
    pos += len;
    pieces += field == 1;
    trainer_spec += field == 2;
    normalizer_spec += field == 3;
  }
  if (pieces == 0 || trainer_spec == 0 || normalizer_spec == 0)
    return Status::Corruption(path + ": truncated or not a sentencepiece model (missing " +
                              (pieces == 0         ? "pieces"
                               : trainer_spec == 0 ? "trainer_spec"
                                                   : "normalizer_spec") +
                              ")");
  return Status::Ok();
}

// Reads "add_bos_token" from tokenizer_config.json when the file exists.
Status ReadAddBos(const std::string& path, bool* add_bos) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::Ok();
  std::string text;
  LLMQ_RETURN_IF_ERROR(ReadFile(path, &text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption(path + ": malformed JSON");
  if (!j.is_object()) return Status::Corruption(path + ": expected a JSON object");
  const auto it = j.find("add_bos_token");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return Status::Corruption(path + ": \"add_bos_token\" must be a boolean");
  *add_bos = it->get<bool>();
  return Status::Ok();
}

// 1 + the number of continuation bytes a UTF-8 lead byte announces; 0 for other bytes. Loose on
// purpose (C0, C1, F5..FF count as leads): holding back too long only delays text, while releasing
// a character that later bytes could still complete would break the window invariant.
int Utf8Length(uint8_t c) {
  if (c < 0xC0) return 0;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

// tokenizer_config.json's `key` ("bos_token": "<s>" or {"content": "<s>", ...}) as an id of
// `tok`; -1 when absent or null.
Status ReadSpecialToken(const nlohmann::json& cfg, const char* key, const std::string& config_path,
                        const HfTokenizer& tok, int* id) {
  *id = -1;
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return Status::Ok();
  std::string name;
  if (it->is_string()) {
    name = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    name = (*it)["content"].get<std::string>();
  } else {
    return Status::Corruption(config_path + ": \"" + key + "\" must be a string");
  }
  *id = tok.TokenToId(name);
  if (*id < 0)
    return Status::Corruption(config_path + ": \"" + key + "\" " + name +
                              " is not a token of tokenizer.json");
  return Status::Ok();
}

}  // namespace

Tokenizer::~Tokenizer() = default;

Status Tokenizer::LoadHf(const std::string& model_dir, const std::string& path,
                         std::unique_ptr<Tokenizer>* out) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  LLMQ_RETURN_IF_ERROR(HfTokenizer::Load(path, &tok->hf_));
  tok->add_bos_ = tok->hf_->AddsPrefix();
  tok->hf_bos_ = tok->hf_->PrefixId();
  const std::string config = (fs::path(model_dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (fs::exists(config, ec)) {
    std::string text;
    LLMQ_RETURN_IF_ERROR(ReadFile(config, &text));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::Corruption(config + ": malformed JSON");
    if (!j.is_object()) return Status::Corruption(config + ": expected a JSON object");
    int bos = -1;
    LLMQ_RETURN_IF_ERROR(ReadSpecialToken(j, "bos_token", config, *tok->hf_, &bos));
    if (bos >= 0) tok->hf_bos_ = bos;
    LLMQ_RETURN_IF_ERROR(ReadSpecialToken(j, "eos_token", config, *tok->hf_, &tok->hf_eos_));
  }
  *out = std::move(tok);
  return Status::Ok();
}

Status Tokenizer::Load(const std::string& model_dir, std::unique_ptr<Tokenizer>* out) {
  const std::string json_path = (fs::path(model_dir) / "tokenizer.json").string();
  std::error_code ec;
  if (fs::exists(json_path, ec)) return LoadHf(model_dir, json_path, out);
  const std::string path = (fs::path(model_dir) / "tokenizer.model").string();
  if (!fs::exists(path, ec))
    return Status::NotFound(model_dir +
                            ": no tokenizer: neither tokenizer.json nor tokenizer.model is there");
  std::string bytes;
  LLMQ_RETURN_IF_ERROR(ReadFile(path, &bytes));
  LLMQ_RETURN_IF_ERROR(CheckModelProto(bytes, path));
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = tok->sp_->LoadFromSerializedProto(bytes);
  if (!st.ok()) return Status::Corruption(path + ": " + st.ToString());
  const int n = tok->sp_->GetPieceSize();
  if (n <= 0) return Status::Corruption(path + ": no pieces");
  tok->byte_value_.assign(n, -1);
  for (int id = 0; id < n; ++id) {
    if (!tok->sp_->IsByte(id)) continue;
    const int b = ParseBytePiece(tok->sp_->IdToPiece(id));
    if (b < 0) return Status::Corruption(path + ": malformed byte piece " + std::to_string(id));
    tok->byte_value_[id] = static_cast<int16_t>(b);
  }

  const std::string config = (fs::path(model_dir) / "tokenizer_config.json").string();
  LLMQ_RETURN_IF_ERROR(ReadAddBos(config, &tok->add_bos_));
  if (tok->add_bos_ && tok->bos_id() < 0)
    return Status::Corruption(config + ": add_bos_token is true but " + path + " has no BOS piece");
  *out = std::move(tok);
  return Status::Ok();
}

std::vector<int> Tokenizer::Encode(const std::string& text) const {
  if (hf_) return hf_->Encode(text, /*add_special_tokens=*/true);
  std::vector<int> ids;
  if (add_bos_) ids.push_back(bos_id());
  const std::vector<int> body = EncodeNoBos(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int> Tokenizer::EncodeNoBos(const std::string& text) const {
  if (hf_) return hf_->Encode(text, /*add_special_tokens=*/false);
  std::vector<int> ids;
  if (!sp_->Encode(text, &ids).ok()) ids.clear();  // cannot fail on a loaded model
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int>& ids) const {
  if (hf_) return Utf8Lossy(hf_->DecodeBytes(ids, /*skip_special_tokens=*/true));
  std::string text;
  const int n = vocab_size();
  if (std::all_of(ids.begin(), ids.end(), [n](int id) { return id >= 0 && id < n; })) {
    if (!sp_->Decode(ids, &text).ok()) text.clear();
    return text;
  }
  std::vector<int> valid;
  std::copy_if(ids.begin(), ids.end(), std::back_inserter(valid),
               [n](int id) { return id >= 0 && id < n; });
  if (!sp_->Decode(valid, &text).ok()) text.clear();
  return text;
}

std::string Tokenizer::TokenBytes(int id) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (hf_) return hf_->DecodeBytes({id}, /*skip_special_tokens=*/false);
  if (const int b = ByteValue(id); b >= 0) return std::string(1, static_cast<char>(b));
  const std::string piece = sp_->IdToPiece(id);
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's space
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

int Tokenizer::vocab_size() const {
  return hf_ ? hf_->vocab_size() : sp_->GetPieceSize();
}
int Tokenizer::bos_id() const {
  return hf_ ? hf_bos_ : sp_->bos_id();
}
int Tokenizer::eos_id() const {
  return hf_ ? hf_eos_ : sp_->eos_id();
}
bool Tokenizer::IsControl(int id) const {
  if (hf_) return hf_->IsSpecial(id);
  return id >= 0 && id < vocab_size() && sp_->IsControl(id);
}
int Tokenizer::ByteValue(int id) const {
  if (hf_) return hf_->ByteValue(id);
  return id >= 0 && id < static_cast<int>(byte_value_.size()) ? byte_value_[id] : -1;
}
int Tokenizer::PieceToId(const std::string& piece) const {
  if (hf_) return hf_->TokenToId(piece);
  const int id = sp_->PieceToId(piece);
  if (id < 0 || id >= vocab_size()) return -1;
  return sp_->IdToPiece(id) == piece ? id : -1;
}

// ---------------------------------------------------------------------------------------------

namespace {
constexpr size_t kContextIds = 4;  // context kept when the window is trimmed
constexpr size_t kMaxWindow = 16;  // the window is trimmed when it grows past this
}  // namespace

namespace {

// True when `bytes` end with a proper prefix of a well-formed UTF-8 sequence (a character later
// bytes can still finish): only then is Utf8Lossy(bytes + more) not Utf8Lossy(bytes) +
// Utf8Lossy(more). Strict, as Utf8Lossy: "E0 80" is already two replacements.
bool EndsInUnfinishedCharacter(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto lead = static_cast<uint8_t>(bytes[n - back]);
    if (lead >= 0x80 && lead < 0xC0) continue;  // a continuation byte: look further back
    uint8_t lo = 0, hi = 0;                     // the second byte's range
    const int need = Utf8Lead(lead, &lo, &hi);
    if (need == 0) return false;  // ASCII or an invalid byte: nothing is left open
    if (static_cast<int>(back) >= need) return false;  // complete (or longer: then invalid)
    for (size_t i = 1; i < back; ++i) {
      const auto c = static_cast<uint8_t>(bytes[n - back + i]);
      if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return false;  // already invalid
    }
    return true;
  }
  return false;
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, std::vector<int> prompt_ids,
                                       bool per_token)
    : tok_(tok), ids_(std::move(prompt_ids)) {
  if (per_token && tok_.hf() != nullptr && tok_.hf()->decodes_per_token()) {
    bytes_ = tok_.hf();
    // The prompt's last bytes (its last 3 ids give at least 3 unless some give none).
    size_t from = ids_.size();
    std::string last;
    while (from > 0 && last.size() < 3) {
      --from;
      last = WindowBytes(from, from + 1) + last;
    }
    Released(last);
    RebaseBytes();
  } else {
    // Rebase decodes only a tail of a long prompt; the full decode is needed for short ones only.
    Rebase(ids_.size() > kMaxWindow ? std::string() : tok_.Decode(ids_));
  }
  ids_.shrink_to_fit();  // keep only the window, not the whole prompt's allocation
}

std::string IncrementalDecoder::WindowBytes(size_t from, size_t to) const {
  std::string out;
  for (size_t i = from; i < to; ++i)
    if (!bytes_->IsSpecial(ids_[i])) out += bytes_->PieceBytes(ids_[i]);
  return out;
}

bool IncrementalDecoder::HasBytes(size_t from, size_t to) const {
  for (size_t i = from; i < to; ++i)
    if (!bytes_->IsSpecial(ids_[i]) && !bytes_->PieceBytes(ids_[i]).empty()) return true;
  return false;
}

void IncrementalDecoder::Released(const std::string& bytes) {
  tail_ += bytes;
  if (tail_.size() > 3) tail_.erase(0, tail_.size() - 3);
}

// Release on bytes. Decode(window) = Utf8Lossy(context bytes + new bytes), which is
// Utf8Lossy(context bytes) + Utf8Lossy(new bytes) when the context ends clean: the new text is the
// new bytes' own. Otherwise (only after a special token hid an open character from the hold-back
// check) the window is decoded from here on.
std::string IncrementalDecoder::ReleaseBytes() {
  if (prefix_len_ == ids_.size()) return std::string();
  if (EndsInUnfinishedCharacter(tail_)) {
    prefix_text_ = tok_.Decode(std::vector<int>(ids_.begin(), ids_.begin() + prefix_len_));
    bytes_ = nullptr;
    return Release();
  }
  const std::string fresh = WindowBytes(prefix_len_, ids_.size());
  std::string delta = Utf8Lossy(fresh);
  emitted_ += delta;
  Released(fresh);
  RebaseBytes();
  return delta;
}

// Rebase's trimming with "the text of ids is empty" read as "ids have no bytes".
void IncrementalDecoder::RebaseBytes() {
  bool empty = false;
  if (ids_.size() > kMaxWindow) {
    for (size_t k = kContextIds;; k *= 2) {
      if (k >= ids_.size()) {
        empty = !HasBytes(0, ids_.size());
        break;
      }
      if (HasBytes(ids_.size() - k, ids_.size())) {
        ids_.erase(ids_.begin(), ids_.end() - k);
        break;
      }
    }
  } else {
    empty = !HasBytes(0, ids_.size());
  }
  if (empty) ids_.clear();
  prefix_len_ = ids_.size();
}

// Sentencepiece decodes a run of consecutive byte pieces greedily, one UTF-8 character (or one
// invalid byte -> U+FFFD) at a time, so a lead byte followed by fewer continuation bytes than it
// announces is the only tail whose text later ids can still change. Any other id ends the run.
bool IncrementalDecoder::EndsInPartialCharacter() const {
  if (tok_.hf() != nullptr) {
    // Byte-level tokens can end inside a character: look at the raw bytes of the last ids (a
    // character has at most 4 bytes, and every non-special token at least one), and hold back
    // when they end in a lead byte still short of its continuation bytes.
    const size_t k = std::min<size_t>(ids_.size(), 4);
    const std::string tail =
        bytes_ ? WindowBytes(ids_.size() - k, ids_.size())
               : tok_.hf()->DecodeBytes(std::vector<int>(ids_.end() - k, ids_.end()), true);
    for (size_t trail = 0; trail < 4 && trail < tail.size(); ++trail) {
      const auto c = static_cast<uint8_t>(tail[tail.size() - 1 - trail]);
      if (c < 0x80) return false;
      const int len = Utf8Length(c);
      if (len > 0) return static_cast<int>(trail) + 1 < len;
    }
    return false;
  }
  size_t trail = 0;  // continuation bytes after the candidate lead byte
  for (size_t i = ids_.size(); i > 0 && trail < 3; --i) {
    const int b = tok_.ByteValue(ids_[i - 1]);
    if (b < 0x80) return false;  // not a byte piece, or ASCII: nothing open
    const int len = Utf8Length(static_cast<uint8_t>(b));
    if (len > 0) return static_cast<int>(trail) + 1 < len;
    ++trail;
  }
  return false;
}

std::string IncrementalDecoder::Add(int id) {
  ids_.push_back(id);
  if (EndsInPartialCharacter()) return std::string();
  return bytes_ ? ReleaseBytes() : Release();
}

std::string IncrementalDecoder::Flush() {
  return bytes_ ? ReleaseBytes() : Release();
}

// Releases the text of the ids after the context and makes them context.
std::string IncrementalDecoder::Release() {
  if (prefix_len_ == ids_.size()) return std::string();
  std::string window_text = tok_.Decode(ids_);
  size_t cut = prefix_text_.size();
  if (window_text.compare(0, cut, prefix_text_) != 0) {
    // Only when the prompt ended inside a character that the completion finished (or Flush cut
    // one short): start after the common prefix, at a character boundary.
    cut = std::mismatch(prefix_text_.begin(), prefix_text_.end(), window_text.begin(),
                        window_text.end())
              .first -
          prefix_text_.begin();
    while (cut > 0 && (static_cast<uint8_t>(window_text[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string delta = window_text.substr(cut);
  emitted_ += delta;
  Rebase(std::move(window_text));
  return delta;
}

// Makes all of ids_ context (`window_text` = Decode(ids_), or empty when ids_ is longer than
// kMaxWindow), then shortens the window from the front.
void IncrementalDecoder::Rebase(std::string window_text) {
  if (ids_.size() > kMaxWindow) {
    // Any start works as long as its text is non-empty: byte-fallback decoding resynchronises at
    // every lead byte, so a cut inside a byte run does not change the text of the ids after the
    // context. The whole window's text is non-empty unless it starts at the beginning and has no
    // text yet, which the loop's last step (k >= size) handles.
    for (size_t k = kContextIds;; k *= 2) {
      if (k >= ids_.size()) {
        window_text = tok_.Decode(ids_);
        break;
      }
      std::string tail = tok_.Decode(std::vector<int>(ids_.end() - k, ids_.end()));
      if (!tail.empty()) {
        ids_.erase(ids_.begin(), ids_.end() - k);
        window_text = std::move(tail);
        break;
      }
    }
  }
  if (window_text.empty()) {
    // No text so far: then ids_ starts at the beginning (invariant), and decoding what follows on
    // its own is identical (the leading space is still dropped, no byte is pending).
    ids_.clear();
  }
  prefix_len_ = ids_.size();
  prefix_text_ = std::move(window_text);
}

}  // namespace llmq
