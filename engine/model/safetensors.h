// safetensors: parsing (validated before any byte is trusted), memory mapping and writing.
// Format: u64 little-endian header length N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}
// then the data section; offsets are relative to the start of the data section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace llmq {

// kF8E4M3: OCP FP8 E4M3 ("e4m3fn", PyTorch's float8_e4m3fn): 1 sign, 4 exponent (bias 7) and 3
// mantissa bits, no infinities, S.1111.111 NaN, largest finite 448; the weights of FP8 checkpoints,
// meaningful only with their scales (engine/model/quantization.h).
enum class DType { kF32, kF16, kBF16, kF8E4M3 };
size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "F32", "F16", "BF16", "F8_E4M3"

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offset of the first element, from the start of the file
  uint64_t end = 0;    // one past the last byte, from the start of the file
  int64_t numel() const;
};

// Parses and validates the safetensors image `data[0, size)`. Checks: the 8-byte length and the
// header fit in the file; the header is a JSON object; every entry has a supported dtype (F32, F16,
// BF16; any other is kUnsupported naming the tensor and dtype), an integer shape and data_offsets;
// end - begin == numel * dtype size (no overflow); every range lies inside the data section; no two
// ranges overlap (empty ranges overlap nothing); a tensor name appears once; "__metadata__" is
// skipped. Errors name `file` and the tensor. Never reads past `size`, never crashes. On success
// `tensors` is sorted by `begin` and every range lies within [8 + header length, size); gaps
// between ranges are allowed. Tensor data is not necessarily aligned to its element size.
Status ParseSafetensors(const uint8_t* data, size_t size, const std::string& file,
                        std::vector<TensorInfo>* tensors);

// A read-only memory-mapped file (PROT_READ, MAP_PRIVATE), held by unique_ptr; unmaps on
// destruction. An empty file is an error (kCorruption); errors name the path.
class MappedFile {
 public:
  static Status Open(const std::string& path, std::unique_ptr<MappedFile>* out);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * DTypeSize(dtype) bytes
};

// Writes a safetensors file through DurableFile (temporary file, fsync, rename, fsync of the
// folder: readers never see a partial file). Header keys and data are laid out in the given order;
// the header is space-padded to a multiple of 8 bytes.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

// Converts `n` elements of `dtype` at `src` to float.
void ConvertToF32(DType dtype, const void* src, int64_t n, float* dst);
// fp16 helpers (round to nearest even); bf16's are base/bf16.h's FloatToBf16 / Bf16ToFloat.
uint16_t F32ToF16(float f);
float F16ToF32(uint16_t h);
// E4M3: exact decoding; encoding rounds to the nearest value (ties to the even code) and saturates
// at +-448, as quantizers clamp before the cast; NaN stays NaN.
float F8E4M3ToF32(uint8_t v);
uint8_t F32ToF8E4M3(float f);

}  // namespace llmq
