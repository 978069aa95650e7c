// The names of engine.backend and engine.precision: the config validates them (config/ does not
// depend on the engine), the engine builds what they name (engine/backends/backend_choice.h).
#pragma once

#include <string_view>

namespace llmq {

enum class BackendKind { kAuto, kCpu, kCuda };
// The GPU backend's number format: bf16 weights, K/V and GEMM inputs (fp32 accumulate), or fp32
// throughout (the exact mode). The CPU backend is fp32 whatever is asked.
enum class Precision { kBf16, kFp32 };

struct BackendChoice {
  BackendKind kind = BackendKind::kAuto;
  Precision precision = Precision::kBf16;
};

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

}  // namespace llmq
