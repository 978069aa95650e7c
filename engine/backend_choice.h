// BackendChoice: which backend LoadModel builds (engine.backend / --backend) and at what precision
// (engine.precision / --precision), and how `auto` resolves on this machine.
#pragma once

#include <string>
#include <string_view>

#include "engine/status.h"

namespace llmq {

enum class BackendKind { kAuto, kCpu, kCuda };
// The GPU backend's number format: bf16 weights, K/V and GEMM inputs (fp32 accumulate), or fp32
// throughout (the exact mode). The CPU backend is fp32 whatever is asked.
enum class Precision { kBf16, kFp32 };

struct BackendChoice {
  BackendKind kind = BackendKind::kAuto;
  Precision precision = Precision::kBf16;
};

// Header-only (the config loader validates names without linking the engine).
inline const char* BackendKindName(BackendKind k) {
  return k == BackendKind::kAuto ? "auto" : k == BackendKind::kCpu ? "cpu" : "cuda";
}
inline const char* PrecisionName(Precision p) {
  return p == Precision::kBf16 ? "bf16" : "fp32";
}
// False (and *out untouched) for anything but the names above.
inline bool ParseBackendKind(std::string_view s, BackendKind* out) {
  for (BackendKind k : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda})
    if (s == BackendKindName(k)) {
      *out = k;
      return true;
    }
  return false;
}
inline bool ParsePrecision(std::string_view s, Precision* out) {
  for (Precision p : {Precision::kBf16, Precision::kFp32})
    if (s == PrecisionName(p)) {
      *out = p;
      return true;
    }
  return false;
}

// True when this binary was built with the CUDA backend (LLMQ_HAVE_CUDA).
bool BuiltWithCuda();

// What `want` means here: cpu is cpu; auto is cuda when built with CUDA and a device is usable,
// else cpu; cuda is cuda, or Unsupported naming why not ("built without CUDA ...", "no usable
// CUDA device: <the runtime's reason>"). *got is kCpu or kCuda; *why (may be null) says why auto
// chose as it did ("" for an explicit choice).
Status ResolveBackend(BackendKind want, BackendKind* got, std::string* why);

}  // namespace llmq
