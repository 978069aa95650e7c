#include "daemon/model_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "jobs/sha256.h"

#ifndef LLMQ_VERSION
#define LLMQ_VERSION "0.0.0"
#endif

namespace llmq {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kWhole = uint64_t{16} << 20;  // files up to this are hashed whole
constexpr uint64_t kEnds = uint64_t{1} << 20;    // of larger ones: the first and last MiB
constexpr uint64_t kPiece = uint64_t{64} << 10;  // and this many bytes ...
constexpr int kPieces = 64;                      // ... at this many evenly spaced offsets

// Hashes `len` bytes of `f` from `offset` (fewer at the end of the file).
void HashRange(std::ifstream& f, uint64_t offset, uint64_t len, jobs::Sha256* h) {
  std::vector<char> buf(std::min<uint64_t>(len, kEnds));
  f.clear();
  f.seekg(static_cast<std::streamoff>(offset));
  while (len > 0 && f) {
    f.read(buf.data(), static_cast<std::streamsize>(std::min<uint64_t>(len, buf.size())));
    const auto got = static_cast<uint64_t>(f.gcount());
    if (got == 0) break;
    h->Update(std::string_view(buf.data(), got));
    len -= got;
  }
}

}  // namespace

std::string ModelFingerprint(const std::string& model_dir) {
  jobs::Sha256 h;
  h.Update("llmq " LLMQ_VERSION "\n");
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec))
    if (e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const uint64_t size = fs::file_size(p, ec);
    h.Update(p.filename().string() + "\n" + std::to_string(ec ? 0 : size) + "\n");
    std::ifstream f(p, std::ios::binary);
    if (!f) continue;
    if (size <= kWhole) {
      HashRange(f, 0, size, &h);
      continue;
    }
    HashRange(f, 0, kEnds, &h);
    for (int i = 0; i < kPieces; ++i)
      HashRange(f, kEnds + (size - 2 * kEnds - kPiece) / (kPieces - 1) * i, kPiece, &h);
    HashRange(f, size - kEnds, kEnds, &h);
  }
  return "fp_llmq-" LLMQ_VERSION "_" + h.HexDigest().substr(0, 16);
}

}  // namespace llmq
