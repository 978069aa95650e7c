// Tests for engine/safetensors: round trips through real files, conversions, every kind of bad
// header, and a deterministic mutation sweep (the always-on counterpart of fuzz/).
#include "engine/model/safetensors.h"
#include "base/bf16.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace llmq {
namespace {

namespace fs = std::filesystem;

std::string TestDir() {
  return llmq::testing::CurrentTestDir();
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A safetensors image from a literal header and `data_len` bytes of data (0, 1, 2, ...).
std::vector<uint8_t> RawFile(const std::string& header, size_t data_len) {
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_len; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

uint64_t HeaderLen(const std::vector<uint8_t>& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  return n;
}

void SetHeaderLen(std::vector<uint8_t>* b, uint64_t n) {
  for (int i = 0; i < 8; ++i) (*b)[i] = static_cast<uint8_t>(n >> (8 * i));
}

// Writes `bytes` to a file in a fresh directory, then maps and parses it as the engine does.
Status ParseFile(const std::vector<uint8_t>& bytes, std::string* path,
                 std::vector<TensorInfo>* out) {
  *path = TestDir() + "/model.safetensors";
  WriteBytes(*path, bytes);
  std::unique_ptr<MappedFile> f;
  LLMQ_RETURN_IF_ERROR(MappedFile::Open(*path, &f));
  return ParseSafetensors(f->data(), f->size(), *path, out);
}

// Asserts a parse of `bytes` fails with a message naming the file and every string in `needles`.
void ExpectBad(const std::vector<uint8_t>& bytes, const std::vector<std::string>& needles,
               Status::Code code = Status::Code::kCorruption) {
  std::string path;
  std::vector<TensorInfo> t;
  Status s = ParseFile(bytes, &path, &t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  for (const std::string& n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "messages are one line";
  EXPECT_TRUE(t.empty());
}

struct Sample {
  std::vector<float> f32 = {1.5f, -2.25f, 0.0f, 3e-5f, 65504.0f, -1e10f};
  std::vector<uint16_t> f16, bf16;
  Sample() {
    for (float v : {0.5f, -1.0f, 1e-7f, 100.25f}) f16.push_back(F32ToF16(v));
    for (int i = 0; i < 8; ++i) bf16.push_back(FloatToBf16(0.1f * static_cast<float>(i) - 0.3f));
  }
  std::vector<TensorToWrite> Tensors() const {
    return {{"b.f32", DType::kF32, {2, 3}, f32.data()},
            {"a.f16", DType::kF16, {4}, f16.data()},
            {"c.bf16", DType::kBF16, {2, 2, 2}, bf16.data()},
            {"scalar", DType::kF32, {}, f32.data()},
            {"empty", DType::kBF16, {0, 5}, nullptr}};
  }
};

TEST(SafetensorsTest, RoundTripAllDtypes) {
  const std::string dir = TestDir();
  const std::string path = dir + "/rt.safetensors";
  Sample s;
  const std::vector<TensorToWrite> in = s.Tensors();
  ASSERT_TRUE(WriteSafetensors(path, in).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::vector<uint8_t> bytes = ReadBytes(path);
  const uint64_t hl = HeaderLen(bytes);
  EXPECT_EQ(hl % 8, 0u) << "header padded to a multiple of 8";
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(hl));
  // Keys appear in the given order, not sorted.
  EXPECT_LT(header.find("\"b.f32\""), header.find("\"a.f16\""));
  EXPECT_LT(header.find("\"a.f16\""), header.find("\"c.bf16\""));

  std::unique_ptr<MappedFile> f;
  ASSERT_TRUE(MappedFile::Open(path, &f).ok());
  EXPECT_EQ(f->size(), bytes.size());
  EXPECT_EQ(f->path(), path);
  std::vector<TensorInfo> out;
  Status st = ParseSafetensors(f->data(), f->size(), path, &out);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(out.size(), in.size());
  // Sorted by begin, which is the write order; offsets are absolute.
  uint64_t pos = 8 + hl;
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].name);
    EXPECT_EQ(out[i].begin, pos);
    EXPECT_EQ(out[i].dtype, in[i].dtype);
    EXPECT_EQ(out[i].shape, in[i].shape);
    const uint64_t n = static_cast<uint64_t>(out[i].numel()) * DTypeSize(out[i].dtype);
    EXPECT_EQ(out[i].end - out[i].begin, n);
    if (n > 0) {
      EXPECT_EQ(std::memcmp(f->data() + out[i].begin, in[i].data, n), 0);
    }
    pos = out[i].end;
  }
  // The empty tensor is last: its range [end, end) sorts after the scalar's.
  EXPECT_EQ(out[0].name, "b.f32");
  EXPECT_EQ(out[3].name, "scalar");
  EXPECT_EQ(out[3].numel(), 1);
  EXPECT_EQ(out[4].numel(), 0);
  EXPECT_EQ(pos, bytes.size());

  std::vector<float> back(6);
  ConvertToF32(out[0].dtype, f->data() + out[0].begin, 6, back.data());
  EXPECT_EQ(back, s.f32);
  ConvertToF32(out[1].dtype, f->data() + out[1].begin, 4, back.data());
  EXPECT_EQ(back[1], -1.0f);
  EXPECT_EQ(back[3], 100.25f);
  ConvertToF32(out[2].dtype, f->data() + out[2].begin, 1, back.data());
  EXPECT_EQ(back[0], Bf16ToFloat(FloatToBf16(-0.3f)));
}

TEST(SafetensorsTest, WriteRejectsBadInput) {
  const std::string path = TestDir() + "/x.safetensors";
  float v = 1;
  EXPECT_FALSE(
      WriteSafetensors(path, {{"a", DType::kF32, {1}, &v}, {"a", DType::kF32, {1}, &v}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"__metadata__", DType::kF32, {1}, &v}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"a", DType::kF32, {-1}, &v}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"a", DType::kF32, {2}, nullptr}}).ok());
  Status s = WriteSafetensors("/nonexistent-dir/x.safetensors", {{"a", DType::kF32, {1}, &v}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.safetensors"), std::string::npos);
}

TEST(SafetensorsTest, MetadataSkippedAndGapsAllowed) {
  std::vector<TensorInfo> t;
  std::string path;
  Status s = ParseFile(RawFile(R"({"__metadata__":{"format":"pt"},)"
                               R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                               20),
                       &path, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "w");
  EXPECT_EQ(t[0].shape, std::vector<int64_t>{2});
}

TEST(SafetensorsTest, BF16Conversion) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  EXPECT_EQ(FloatToBf16(bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(FloatToBf16(bits(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(bits(0x7f800001)))));  // low-payload NaN stays NaN
  EXPECT_EQ(FloatToBf16(bits(0x00000001)), 0x0000);                     // tiny subnormal
  // Every non-NaN bf16 survives bf16 -> f32 -> bf16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), h);
  }
}

TEST(SafetensorsTest, F16Conversion) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // tie with an odd mantissa: rounds to inf
  EXPECT_EQ(F32ToF16(INFINITY), 0x7c00);
  EXPECT_EQ(F32ToF16(-INFINITY), 0xfc00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);     // tie to even: zero
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -26)), 0x0001);     // above the tie
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp tie: to even 2
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0xfc00)) && F16ToF32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h);
  }
#if defined(__FLT16_MAX__)
  // Against the compiler's correctly rounded float -> _Float16 over a sweep of all exponents.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 251) {
    const uint32_t b = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    const _Float16 r = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &r, 2);
    ASSERT_EQ(F32ToF16(f), want) << std::hex << b;
    ASSERT_EQ(F16ToF32(want), static_cast<float>(r));
  }
#endif
}

TEST(SafetensorsTest, ConvertToF32Unaligned) {
  std::vector<uint8_t> buf(1 + 3 * 4);
  const float v[3] = {1.0f, -0.5f, 7.0f};
  std::memcpy(buf.data() + 1, v, sizeof(v));
  float out[3];
  ConvertToF32(DType::kF32, buf.data() + 1, 3, out);
  EXPECT_EQ(std::vector<float>(out, out + 3), std::vector<float>(v, v + 3));
  const uint16_t h[3] = {FloatToBf16(1.0f), FloatToBf16(-0.5f), FloatToBf16(7.0f)};
  std::memcpy(buf.data() + 1, h, sizeof(h));
  ConvertToF32(DType::kBF16, buf.data() + 1, 3, out);
  EXPECT_EQ(std::vector<float>(out, out + 3), std::vector<float>(v, v + 3));
  const uint16_t g[3] = {F32ToF16(1.0f), F32ToF16(-0.5f), F32ToF16(7.0f)};
  std::memcpy(buf.data() + 1, g, sizeof(g));
  ConvertToF32(DType::kF16, buf.data() + 1, 3, out);
  EXPECT_EQ(std::vector<float>(out, out + 3), std::vector<float>(v, v + 3));
}

TEST(SafetensorsTest, MappedFileErrors) {
  const std::string dir = TestDir();
  std::unique_ptr<MappedFile> f;
  Status s = MappedFile::Open(dir + "/missing.safetensors", &f);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find(dir + "/missing.safetensors"), std::string::npos);
  WriteBytes(dir + "/empty.safetensors", {});
  s = MappedFile::Open(dir + "/empty.safetensors", &f);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/empty.safetensors"), std::string::npos);
  EXPECT_NE(s.message().find("empty"), std::string::npos);
  s = MappedFile::Open(dir, &f);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(f, nullptr);
}

// A valid three-tensor file used as the base of the bad cases below.
std::vector<uint8_t> ValidFile() {
  return RawFile(
      R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("model.norm.weight":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]},)"
      R"("z.f16":{"dtype":"F16","shape":[2,2],"data_offsets":[24,32]}})",
      32);
}

TEST(SafetensorsTest, ValidBaseParses) {
  std::string path;
  std::vector<TensorInfo> t;
  Status s = ParseFile(ValidFile(), &path, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(t.size(), 3u);
}

TEST(SafetensorsTest, TooShortForLength) {
  ExpectBad({1, 0, 0}, {"too short"});
}

TEST(SafetensorsTest, TruncatedInHeader) {
  std::vector<uint8_t> b = ValidFile();
  b.resize(8 + HeaderLen(b) / 2);
  ExpectBad(b, {"header length " + std::to_string(HeaderLen(b)), "truncated"});
}

TEST(SafetensorsTest, TruncatedInData) {
  std::vector<uint8_t> b = ValidFile();
  b.resize(b.size() - 3);
  ExpectBad(b, {"tensor 'z.f16'",
                "data_offsets [24, 32] extend past the end of the data section "
                "(29 bytes)"});
}

TEST(SafetensorsTest, HeaderLengthLargerThanFile) {
  std::vector<uint8_t> b = ValidFile();
  SetHeaderLen(&b, b.size() - 7);
  ExpectBad(b, {"header length"});
  SetHeaderLen(&b, std::numeric_limits<uint64_t>::max());
  ExpectBad(b, {"header length"});
}

TEST(SafetensorsTest, HeaderNotJson) {
  ExpectBad(RawFile("this is not json", 0), {"header is not valid JSON"});
  ExpectBad(RawFile(R"({"a": {"dtype": "F32",)", 0), {"header is not valid JSON"});
  ExpectBad(RawFile("[1, 2]", 0), {"header is not a JSON object"});
  ExpectBad(RawFile("", 0), {"header is not valid JSON"});
}

TEST(SafetensorsTest, OffsetsOutsideFile) {
  ExpectBad(
      RawFile(R"({"model.norm.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,9999]}})", 1234),
      {"tensor 'model.norm.weight': data_offsets [0, 9999] extend past the end of the data "
       "section (1234 bytes)"});
  ExpectBad(RawFile(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[99,99]}})", 8),
            {"tensor 'w'", "extend past"});
}

TEST(SafetensorsTest, OverlappingOffsets) {
  ExpectBad(RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                    R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                    24),
            {"tensor 'b'", "overlap tensor 'a'"});
  // Same range twice.
  ExpectBad(RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})",
                    8),
            {"overlap"});
  // One range inside another, listed after a later one.
  ExpectBad(RawFile(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                    R"("c":{"dtype":"F32","shape":[1],"data_offsets":[32,36]}})",
                    36),
            {"tensor 'b'", "overlap"});
}

TEST(SafetensorsTest, SizeMismatch) {
  ExpectBad(RawFile(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16),
            {"tensor 'w'", "hold 12 bytes", "[2, 2]", "needs 16"});
  ExpectBad(RawFile(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],)"
                    R"("data_offsets":[0,0]}})",
                    0),
            {"tensor 'w'", "overflow"});
  ExpectBad(RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 16),
            {"tensor 'w'", "begin after end"});
}

TEST(SafetensorsTest, UnsupportedDtype) {
  for (const char* dt : {"I64", "F64", "U8", "F8_E5M2"}) {
    ExpectBad(RawFile(std::string(R"({"x.ids":{"dtype":")") + dt +
                          R"(","shape":[1],"data_offsets":[0,8]}})",
                      8),
              {"tensor 'x.ids'", std::string("'") + dt + "'", "not supported"},
              Status::Code::kUnsupported);
  }
}

TEST(SafetensorsTest, MalformedEntries) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "'dtype'"},
      {R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "'dtype'"},
      {R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "'shape'"},
      {R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "'shape'"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "'shape'"},
      {R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "'shape'"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", "'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", "'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "'data_offsets'"},
      {R"({"w":[1,2]})", "not a JSON object"},
  };
  for (const auto& [header, needle] : cases) {
    SCOPED_TRACE(header);
    ExpectBad(RawFile(header, 8), {"tensor 'w'", needle});
  }
  ExpectBad(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    8),
            {"'w' twice"});
  ExpectBad(RawFile(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), {"empty name"});
  // Control characters in a name are escaped: the message stays on one line.
  ExpectBad(RawFile(R"({"a\nb":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", 8),
            {"'a\\x0ab'"}, Status::Code::kUnsupported);
}

// --- Mutation sweep: the invariants the fuzz target checks, over deterministic mutations. ---

// Returns "" if `s`/`t` obey ParseSafetensors' contract for `b`, else what was violated.
std::string CheckContract(const std::vector<uint8_t>& b, const Status& s,
                          const std::vector<TensorInfo>& t, const std::string& file) {
  if (!s.ok()) {
    if (s.message().find(file) == std::string::npos) return "error does not name the file";
    return t.empty() ? "" : "tensors returned with an error";
  }
  if (b.size() < 8) return "OK for a file shorter than 8 bytes";
  const uint64_t data_start = 8 + HeaderLen(b);
  uint64_t prev_end = data_start, prev_begin = 0;
  for (const TensorInfo& x : t) {
    if (x.begin < data_start || x.begin > x.end || x.end > b.size())
      return x.name + ": out of range";
    if (x.end - x.begin != static_cast<uint64_t>(x.numel()) * DTypeSize(x.dtype))
      return x.name + ": size mismatch";
    if (x.begin < prev_begin) return x.name + ": not sorted";
    prev_begin = x.begin;
    if (x.begin == x.end) continue;
    if (x.begin < prev_end) return x.name + ": overlaps";
    prev_end = x.end;
  }
  return "";
}

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

std::vector<uint8_t> Mutate(const std::vector<uint8_t>& base, Rng& r) {
  std::vector<uint8_t> b = base;
  const size_t hl = static_cast<size_t>(HeaderLen(base));
  static const char kChars[] = "{}[]\",:0123456789-.eE tF";
  const int rounds = 1 + static_cast<int>(r.Below(3));
  for (int k = 0; k < rounds && !b.empty(); ++k) {
    switch (r.Below(6)) {
      case 0: {  // bit flips, mostly in the header
        const size_t n = r.Below(4) ? std::min(b.size(), 8 + hl) : b.size();
        for (int i = 0, m = 1 + static_cast<int>(r.Below(4)); i < m; ++i)
          b[r.Below(n)] ^= static_cast<uint8_t>(1u << r.Below(8));
        break;
      }
      case 1:  // truncation
        b.resize(r.Below(b.size() + 1));
        break;
      case 2: {  // length-field edits
        if (b.size() < 8) break;
        const uint64_t cur = HeaderLen(b);
        const uint64_t opts[] = {0,
                                 1,
                                 cur - 1,
                                 cur + 1,
                                 b.size() - 8,
                                 b.size() - 7,
                                 r.Next(),
                                 uint64_t{1} << 63,
                                 ~uint64_t{0},
                                 cur + 8 * r.Below(8)};
        SetHeaderLen(&b, opts[r.Below(std::size(opts))]);
        break;
      }
      case 3:  // a structural character in the header
        if (b.size() > 8)
          b[8 + r.Below(std::min(b.size() - 8, hl))] = kChars[r.Below(sizeof(kChars) - 1)];
        break;
      case 4: {  // insert or delete a header byte and keep the length field consistent
        if (b.size() <= 8 || hl == 0) break;
        const size_t pos = 8 + r.Below(std::min(b.size() - 8, hl));
        if (r.Below(2)) {
          b.insert(b.begin() + static_cast<long>(pos), kChars[r.Below(sizeof(kChars) - 1)]);
          SetHeaderLen(&b, HeaderLen(b) + 1);
        } else {
          b.erase(b.begin() + static_cast<long>(pos));
          SetHeaderLen(&b, HeaderLen(b) - 1);
        }
        break;
      }
      case 5: {  // rewrite a number in the header (offsets, shapes)
        if (b.size() <= 8) break;
        const size_t end = std::min(b.size(), 8 + hl);
        size_t pos = 8 + r.Below(end - 8);
        while (pos < end && !std::isdigit(b[pos])) ++pos;
        if (pos < end) b[pos] = static_cast<uint8_t>('0' + r.Below(10));
        break;
      }
    }
  }
  return b;
}

TEST(SafetensorsTest, MutationSweepKeepsContract) {
  // Base files: the hand-written three-tensor file and one from WriteSafetensors (with
  // metadata-free padded header and an empty tensor).
  Sample sample;
  const std::string path = TestDir() + "/base.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, sample.Tensors()).ok());
  const std::vector<std::vector<uint8_t>> bases = {ValidFile(), ReadBytes(path)};
  const std::string file = "/fuzz/mutant.safetensors";
  Rng r{0x9e3779b97f4a7c15ull};
  int ok = 0, total = 0;
  for (const auto& base : bases) {
    for (int i = 0; i < 10000; ++i, ++total) {
      const std::vector<uint8_t> m = Mutate(base, r);
      // Exact-size heap copy, so a sanitizer build would flag any read past the end.
      std::unique_ptr<uint8_t[]> buf(new uint8_t[m.size() + 1]);
      std::memcpy(buf.get(), m.data(), m.size());
      std::vector<TensorInfo> t;
      const Status s = ParseSafetensors(buf.get(), m.size(), file, &t);
      const std::string v = CheckContract(m, s, t, file);
      ASSERT_EQ(v, "") << "mutation " << total;
      if (s.ok()) {
        ++ok;
        for (const TensorInfo& x : t) {  // reading every tensor stays in bounds
          std::vector<float> f(static_cast<size_t>(x.numel()));
          ConvertToF32(x.dtype, buf.get() + x.begin, x.numel(), f.data());
        }
      }
    }
  }
  // The sweep exercises both outcomes.
  EXPECT_GT(ok, 100);
  EXPECT_LT(ok, total - 1000);
}

}  // namespace
}  // namespace llmq
