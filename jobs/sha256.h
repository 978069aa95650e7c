// SHA-256 (FIPS 180-4), streaming: a job file's identity is the hash of its bytes, computed while
// it is read, so a file of any size is hashed in bounded memory.
// Thread-safety: one object per thread; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace llmq::jobs {

class Sha256 {
 public:
  Sha256() { Reset(); }
  void Reset();
  // Adds bytes to the message; any split of the input gives the same digest.
  void Update(std::string_view data);
  // The digest of everything added since the last Reset, as 64 lowercase hex digits. Finishing
  // works on a copy: the object can keep taking Update calls (a running hash).
  std::string HexDigest() const;
  std::array<uint8_t, 32> Digest() const;

 private:
  void Block(const uint8_t* p);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buf_;
  size_t buf_len_ = 0;  // bytes waiting in buf_ (< 64)
  uint64_t total_ = 0;  // message length in bytes
};

// The hex digest of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace llmq::jobs
