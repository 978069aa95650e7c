#include "jobs/sha256.h"

#include <openssl/evp.h>

#include "base/status.h"

namespace llmq::jobs {

// libcrypto fails these calls only on allocation failure or a corrupted context: both are aborts
// with context, not recoverable errors.
Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  LLMQ_CHECK(ctx_ != nullptr);
  Reset();
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(ctx_);
}

void Sha256::Reset() {
  LLMQ_CHECK(EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1);
}

void Sha256::Update(std::string_view data) {
  LLMQ_CHECK(EVP_DigestUpdate(ctx_, data.data(), data.size()) == 1);
}

std::array<uint8_t, 32> Sha256::Digest() const {
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  LLMQ_CHECK(copy != nullptr);
  std::array<uint8_t, 32> out{};
  unsigned int n = 0;
  const bool ok =
      EVP_MD_CTX_copy_ex(copy, ctx_) == 1 && EVP_DigestFinal_ex(copy, out.data(), &n) == 1;
  EVP_MD_CTX_free(copy);
  LLMQ_CHECK(ok && n == out.size());
  return out;
}

std::string Sha256::HexDigest() const {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint8_t b : Digest()) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 15]);
  }
  return hex;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

}  // namespace llmq::jobs
