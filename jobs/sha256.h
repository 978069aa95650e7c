// SHA-256 (FIPS 180-4), streaming: a job file's identity is the hash of its bytes, computed while
// it is read, so a file of any size is hashed in bounded memory. Computed by OpenSSL's libcrypto
// (EVP), which uses the CPU's SHA extensions where it has them: hashing is on ingest's one
// sequential pass over the file, so its speed is ingest's. Tested against the NIST vectors.
// Thread-safety: one object per thread; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace llmq::jobs {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Reset();
  // Adds bytes to the message; any split of the input gives the same digest.
  void Update(std::string_view data);
  // The digest of everything added since the last Reset, as 64 lowercase hex digits. Finishing
  // works on a copy: the object can keep taking Update calls (a running hash).
  std::string HexDigest() const;
  std::array<uint8_t, 32> Digest() const;

 private:
  EVP_MD_CTX* ctx_;  // owned; a failure of libcrypto on this state aborts (a programming error)
};

// The hex digest of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace llmq::jobs
