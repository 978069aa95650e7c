#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/bf16.h"
#include "base/durable_file.h"

namespace llmq {
namespace {

using json = nlohmann::json;

// Tensor names come from untrusted bytes: quote them and escape anything that would break a
// one-line message.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string TensorPrefix(const std::string& file, const std::string& name) {
  return file + ": tensor " + Quote(name) + ": ";
}

bool ParseDType(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "F16")
    *out = DType::kF16;
  else if (s == "BF16")
    *out = DType::kBF16;
  else if (s == "F8_E4M3")
    *out = DType::kF8E4M3;
  else
    return false;
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Validates one header entry. `data_len` is the size of the data section; `data_start` its offset
// in the file. On success `t` holds absolute offsets that satisfy data_start <= begin <= end <=
// data_start + data_len and end - begin == numel * DTypeSize(dtype).
Status ParseEntry(const std::string& file, const std::string& name, const json& e,
                  uint64_t data_start, uint64_t data_len, TensorInfo* t) {
  const std::string pre = TensorPrefix(file, name);
  if (name.empty()) return Status::Corruption(file + ": header has a tensor with an empty name");
  if (!e.is_object()) return Status::Corruption(pre + "entry is not a JSON object");
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string())
    return Status::Corruption(pre + "'dtype' is missing or not a string");
  const std::string dtype = dt->get<std::string>();
  if (!ParseDType(dtype, &t->dtype))
    return Status::Unsupported(pre + "dtype " + Quote(dtype) +
                               " is not supported (supported: F32, F16, BF16, F8_E4M3)");
  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array())
    return Status::Corruption(pre + "'shape' is missing or not an array");
  // numel is accumulated in unsigned 64-bit with an explicit overflow check; the byte count must
  // also fit, so the bound is max / dtype size.
  const uint64_t elem = DTypeSize(t->dtype);
  const uint64_t max_numel = std::numeric_limits<uint64_t>::max() / elem;
  uint64_t numel = 1;
  t->shape.clear();
  for (const json& d : *sh) {
    // nlohmann parses non-negative integer literals as number_unsigned; negative ones and
    // floats are rejected here.
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Status::Corruption(pre + "'shape' must hold non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    if (v != 0 && numel > max_numel / v)
      return Status::Corruption(pre + "shape " + sh->dump() + " overflows the element count");
    numel *= v;
    t->shape.push_back(static_cast<int64_t>(v));
  }
  // numel <= max_numel here, but a zero dimension after an overflow-sized prefix is fine; the
  // element count itself must fit int64 for TensorInfo::numel().
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return Status::Corruption(pre + "shape " + sh->dump() + " overflows the element count");
  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    return Status::Corruption(pre + "'data_offsets' must be two non-negative integers");
  const uint64_t b = (*off)[0].get<uint64_t>();
  const uint64_t en = (*off)[1].get<uint64_t>();
  const std::string range = "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "]";
  if (b > en) return Status::Corruption(pre + range + " has begin after end");
  if (en > data_len)
    return Status::Corruption(pre + range + " extend past the end of the data section (" +
                              std::to_string(data_len) + " bytes)");
  if (en - b != numel * elem)
    return Status::Corruption(pre + range + " hold " + std::to_string(en - b) +
                              " bytes, but shape " + ShapeString(t->shape) + " of " + dtype +
                              " needs " + std::to_string(numel * elem));
  t->name = name;
  t->begin = data_start + b;  // cannot overflow: data_start + data_len == file size
  t->end = data_start + en;
  return Status::Ok();
}

Status Errno(const std::string& path, const char* what) {
  return Status::IoError(path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status ParseSafetensors(const uint8_t* data, size_t size, const std::string& file,
                        std::vector<TensorInfo>* tensors) {
  tensors->clear();
  if (size < 8)
    return Status::Corruption(file + ": file is " + std::to_string(size) +
                              " bytes, too short for the 8-byte safetensors header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];  // little-endian
  if (header_len > size - 8)
    return Status::Corruption(file + ": header length " + std::to_string(header_len) +
                              " extends past the end of the file (" + std::to_string(size) +
                              " bytes; truncated or not a safetensors file)");
  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  // The parser callback records top-level keys: nlohmann keeps only one of duplicate keys, and
  // a duplicated tensor name is a corrupt header, not something to resolve silently.
  std::set<std::string> keys;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  json header = json::parse(hbegin, hbegin + header_len, cb, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::Corruption(file + ": header is not valid JSON");
  if (!header.is_object()) return Status::Corruption(file + ": header is not a JSON object");
  if (!duplicate.empty())
    return Status::Corruption(file + ": header names tensor " + Quote(duplicate) + " twice");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = size - data_start;
  std::vector<TensorInfo> out;
  out.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    TensorInfo t;
    LLMQ_RETURN_IF_ERROR(ParseEntry(file, it.key(), it.value(), data_start, data_len, &t));
    out.push_back(std::move(t));
  }
  // Invariant after this loop: sorted by begin, and every non-empty range starts at or after the
  // end of every earlier one. Empty ranges hold no bytes and overlap nothing.
  std::sort(out.begin(), out.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : out) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end)
      return Status::Corruption(
          TensorPrefix(file, t.name) + "data_offsets [" + std::to_string(t.begin - data_start) +
          ", " + std::to_string(t.end - data_start) + "] overlap tensor " + Quote(prev->name) +
          " [" + std::to_string(prev->begin - data_start) + ", " +
          std::to_string(prev->end - data_start) + "]");
    prev = &t;
  }
  *tensors = std::move(out);
  return Status::Ok();
}

Status MappedFile::Open(const std::string& path, std::unique_ptr<MappedFile>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Errno(path, "cannot open");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = Errno(path, "cannot stat");
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IoError(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return Status::Corruption(path + ": file is empty");
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  Status err = p == MAP_FAILED ? Errno(path, "mmap failed") : Status::Ok();
  ::close(fd);  // the mapping keeps the file alive
  if (!err.ok()) return err;
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->data_ = static_cast<const uint8_t*>(p);
  f->size_ = static_cast<size_t>(st.st_size);
  f->path_ = path;
  *out = std::move(f);
  return Status::Ok();
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name))
      return Status::InvalidArgument(path + ": tensor name " + Quote(t.name) +
                                     " is empty, reserved or repeated");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return Status::InvalidArgument(path + ": tensor " + Quote(t.name) + ": bad shape");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t bytes = numel * DTypeSize(t.dtype);
    if (bytes > 0 && t.data == nullptr)
      return Status::InvalidArgument(path + ": tensor " + Quote(t.name) + ": no data");
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{h.size()} >> (8 * i));

  DurableFile f;
  LLMQ_RETURN_IF_ERROR(f.Open(path));
  LLMQ_RETURN_IF_ERROR(f.Append(std::string_view(reinterpret_cast<const char*>(len), 8)));
  LLMQ_RETURN_IF_ERROR(f.Append(h));
  for (const TensorToWrite& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    LLMQ_RETURN_IF_ERROR(
        f.Append(std::string_view(static_cast<const char*>(t.data), numel * DTypeSize(t.dtype))));
  }
  return f.Commit();
}

// --- Conversions. Bit-level so that results do not depend on the FPU rounding mode. ---

uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity (or is infinity)
  if (a >= 0x38800000u) {                       // normal half: exponent >= -14
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even; a
    // mantissa carry correctly bumps the exponent.
    const uint32_t r = a - 0x38000000u;
    return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): rounds to zero
  // Subnormal half: value = m * 2^-24 with m = mant24 >> shift, rounded to nearest even.
  const uint32_t e = a >> 23;                         // 102..112
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // implicit leading one
  const uint32_t shift = 126 - e;                     // 14..24
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t m = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return sign | static_cast<uint16_t>(m);  // m == 0x400 becomes the smallest normal, correctly
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal: normalize
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    u = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float F8E4M3ToF32(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  float x;
  if (e == 15 && m == 7) {
    x = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    x = std::ldexp(static_cast<float>(m), -9);  // subnormal: m/8 * 2^-6
  } else {
    x = std::ldexp(static_cast<float>(8 + m), e - 10);  // (1 + m/8) * 2^(e-7)
  }
  return (v & 0x80) ? -x : x;
}

uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  // The non-negative finite codes 0..126 are increasing in value: find the nearest by bisection.
  int lo = 0, hi = 126;
  if (a >= F8E4M3ToF32(126)) return sign | 126;  // saturate
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (F8E4M3ToF32(static_cast<uint8_t>(mid)) <= a ? lo : hi) = mid;
  }
  // a in [value(lo), value(hi)): the nearer, the even code on a tie (its mantissa's low bit 0).
  const double below = a - static_cast<double>(F8E4M3ToF32(static_cast<uint8_t>(lo)));
  const double above = static_cast<double>(F8E4M3ToF32(static_cast<uint8_t>(hi))) - a;
  const int code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | static_cast<uint8_t>(code);
}

void ConvertToF32(DType dtype, const void* src, int64_t n, float* dst) {
  // Source bytes may be unaligned (safetensors does not align tensors), so read through memcpy.
  if (n <= 0) return;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kF8E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return;
  }
}

}  // namespace llmq
