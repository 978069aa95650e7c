// The names of engine.backend, engine.precision, engine.weight_dtype and engine.kv_dtype: the
// config validates them (config/ does not depend on the engine), the engine builds what they name
// (engine/backends/backend_choice.h).
#pragma once

#include <string_view>

namespace llmq {

enum class BackendKind { kAuto, kCpu, kCuda };
// The GPU backend's number format: bf16 weights, K/V and GEMM inputs (fp32 accumulate), fp32
// throughout (the exact mode), or fp8: bf16 with the projections' weights in FP8 E4M3 with
// per-channel scales (compute capability 8.9 or later). The CPU backend takes engine.weight_dtype
// and engine.kv_dtype instead.
enum class Precision { kBf16, kFp32, kFp8 };
// How the CPU backend holds its matrices (the projections, the LM head and the embedding;
// kernels/cpu/gemm.h),
// chosen once at load: auto (the checkpoint's own type where supported: BF16 -> bf16, an FP8
// checkpoint's (E4M3 with scales, dequantized) -> bf16, F32 and F16 -> f32), f32, bf16 (rounded to
// nearest even), int8 (symmetric per output channel, fp32 scales, quantized at load from the float
// checkpoint).
enum class WeightDtype { kAuto, kF32, kBf16, kInt8 };
// How the CPU backend holds its KV cache (kernels::PagedKv), chosen once at load: auto (f32 on the
// CPU; on the GPU the cache follows engine.precision), f32 (exact), bf16 (rounded to nearest even
// when written, widened to fp32 when read: half the bytes, twice the tokens in the same pool).
enum class KvDtype { kAuto, kF32, kBf16 };

struct BackendChoice {
  BackendKind kind = BackendKind::kAuto;
  Precision precision = Precision::kBf16;
  WeightDtype weight_dtype = WeightDtype::kAuto;
  KvDtype kv_dtype = KvDtype::kAuto;
  int device = 0;  // engine.device / --device: the CUDA device's index (the cuda backend's only)
};

inline const char* BackendKindName(BackendKind k) {
  return k == BackendKind::kAuto ? "auto" : k == BackendKind::kCpu ? "cpu" : "cuda";
}
inline const char* PrecisionName(Precision p) {
  return p == Precision::kBf16 ? "bf16" : p == Precision::kFp32 ? "fp32" : "fp8";
}
inline const char* WeightDtypeName(WeightDtype d) {
  return d == WeightDtype::kAuto   ? "auto"
         : d == WeightDtype::kF32  ? "f32"
         : d == WeightDtype::kBf16 ? "bf16"
                                   : "int8";
}
inline const char* KvDtypeName(KvDtype d) {
  return d == KvDtype::kAuto ? "auto" : d == KvDtype::kF32 ? "f32" : "bf16";
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
  for (Precision p : {Precision::kBf16, Precision::kFp32, Precision::kFp8})
    if (s == PrecisionName(p)) {
      *out = p;
      return true;
    }
  return false;
}
inline bool ParseWeightDtype(std::string_view s, WeightDtype* out) {
  for (WeightDtype d :
       {WeightDtype::kAuto, WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8})
    if (s == WeightDtypeName(d)) {
      *out = d;
      return true;
    }
  return false;
}
inline bool ParseKvDtype(std::string_view s, KvDtype* out) {
  for (KvDtype d : {KvDtype::kAuto, KvDtype::kF32, KvDtype::kBf16})
    if (s == KvDtypeName(d)) {
      *out = d;
      return true;
    }
  return false;
}

}  // namespace llmq
