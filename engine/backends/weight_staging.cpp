#include "engine/backends/weight_staging.h"

#include <algorithm>
#include <cstring>

#include "base/bf16.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq {
namespace {

// Values [begin, begin + count) of one part, as `type`, to dst.
void FillPart(const StagedPart& p, StageType type, int64_t begin, int64_t count, void* dst) {
  const size_t in = DTypeSize(p.dtype);
  const auto* src = static_cast<const uint8_t*>(p.data) + begin * static_cast<int64_t>(in);
  if (type == StageType::kF32) {
    if (p.dtype == DType::kF32)
      std::memcpy(dst, src, count * sizeof(float));
    else
      ConvertToF32(p.dtype, src, count, static_cast<float*>(dst));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  if (p.dtype == DType::kBF16) {
    std::memcpy(out, src, count * sizeof(uint16_t));
    return;
  }
  constexpr int64_t kTile = 1024;  // widened on the stack, then rounded
  float tile[kTile];
  for (int64_t i = 0; i < count; i += kTile) {
    const int64_t n = std::min(kTile, count - i);
    ConvertToF32(p.dtype, src + i * static_cast<int64_t>(in), n, tile);
    for (int64_t j = 0; j < n; ++j) out[i + j] = FloatToBf16(tile[j]);
  }
}

// The same over the concatenation, serially: [begin, begin + count) cut at the parts' edges.
void FillRange(const std::vector<StagedPart>& parts, StageType type, int64_t begin, int64_t count,
               uint8_t* dst) {
  const size_t es = type == StageType::kF32 ? sizeof(float) : sizeof(uint16_t);
  int64_t part_begin = 0;
  for (const StagedPart& p : parts) {
    const int64_t lo = std::max(begin, part_begin),
                  hi = std::min(begin + count, part_begin + p.numel);
    if (lo < hi) FillPart(p, type, lo - part_begin, hi - lo, dst + (lo - begin) * es);
    part_begin += p.numel;
  }
}

}  // namespace

void FillStaged(const std::vector<StagedPart>& parts, StageType type, int64_t begin, int64_t count,
                void* dst) {
  const size_t es = type == StageType::kF32 ? sizeof(float) : sizeof(uint16_t);
  // The cost is mostly the source's pages faulted in and streamed: about 2 bytes in, es out.
  kernels::ParallelFor(
      count, (2.0 + es) * kernels::kNsPerStreamedByte, [&](int64_t lo, int64_t hi) {
        FillRange(parts, type, begin + lo, hi - lo, static_cast<uint8_t*>(dst) + lo * es);
      });
}

}  // namespace llmq
