// Weight staging: the host half of a GPU backend's weight upload. A device buffer holds one
// tensor or several stacked (q, k, v; gate, up), in the buffer's element type; FillStaged writes a
// range of that concatenation into a host (pinned) staging buffer on the CPU pool, from the
// checkpoint's mapping, while the previous range's copy to the device runs.
//
// A part stored as the buffer's type (bf16 into bf16, f32 into f32: the usual checkpoint) is
// copied byte for byte; any other is widened by ConvertToF32 and, for bf16, rounded to nearest
// even (FloatToBf16): the values of the old path (Weights::ToF32, then narrowed one by one),
// without its three full-size host copies and one thread. Plain C++: tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/safetensors.h"

namespace llmq {

// One stacked part: `numel` values of `dtype` at `data` (a tensor in the mapping, or the floats
// Weights::ToF32 made of an FP8 weight and its scales).
struct StagedPart {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t numel = 0;
};

enum class StageType { kF32, kBf16 };

inline int64_t StagedNumel(const std::vector<StagedPart>& parts) {
  int64_t n = 0;
  for (const StagedPart& p : parts) n += p.numel;
  return n;
}

// Writes values [begin, begin + count) of the concatenation of `parts`, as `type`, to `dst`:
// count floats (kF32) or count bf16 bit patterns (kBf16). Requires
// begin + count <= StagedNumel(parts). Runs on the CPU pool (kernels/cpu/thread_pool.h).
void FillStaged(const std::vector<StagedPart>& parts, StageType type, int64_t begin, int64_t count,
                void* dst);

}  // namespace llmq
