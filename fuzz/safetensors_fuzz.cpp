// libFuzzer target for ParseSafetensors: whatever the bytes, it must not crash or read out of
// bounds (ASan), and what it accepts must satisfy its documented contract. The always-on
// counterpart is SafetensorsTest.MutationSweepKeepsContract in tests/safetensors_test.cpp.
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file is a small program that writes a seed corpus
// (valid files of every dtype) into the directory given as argv[1].
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "fuzz/fuzz_check.h"

#ifndef LLMQ_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = "/fuzz/input.safetensors";
  std::vector<llmq::TensorInfo> tensors;
  const llmq::Status s = llmq::ParseSafetensors(data, size, file, &tensors);
  if (!s.ok()) {  // errors name the file and return nothing
    FUZZ_CHECK(s.message().find(file) != std::string::npos);
    FUZZ_CHECK(tensors.empty());
    return 0;
  }
  FUZZ_CHECK(size >= 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_CHECK(header_len <= size - 8);
  const uint64_t data_start = 8 + header_len;
  uint64_t prev_begin = 0, prev_end = data_start;
  for (const llmq::TensorInfo& t : tensors) {
    // Inside the data section, sized by shape and dtype, sorted, non-overlapping.
    FUZZ_CHECK(t.begin >= data_start && t.begin <= t.end && t.end <= size);
    FUZZ_CHECK(t.numel() >= 0);
    FUZZ_CHECK(t.end - t.begin == static_cast<uint64_t>(t.numel()) * llmq::DTypeSize(t.dtype));
    FUZZ_CHECK(t.begin >= prev_begin);
    prev_begin = t.begin;
    if (t.begin == t.end) continue;
    FUZZ_CHECK(t.begin >= prev_end);
    prev_end = t.end;
    // Reading the whole tensor must stay inside the input (ASan checks every byte).
    std::vector<float> f(static_cast<size_t>(t.numel()));
    llmq::ConvertToF32(t.dtype, data + t.begin, t.numel(), f.data());
  }
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<float> f32 = {1.0f, -2.0f, 0.5f, 3.25f, 0.0f, 7.0f};
  const std::vector<uint16_t> h16 = {0x3c00, 0xc000, 0x3800, 0x7bff};
  using llmq::DType;
  const std::vector<std::pair<std::string, std::vector<llmq::TensorToWrite> > > seeds = {
      {"three_dtypes",
       {{"model.embed_tokens.weight", DType::kF32, {2, 3}, f32.data()},
        {"model.norm.weight", DType::kBF16, {4}, h16.data()},
        {"lm_head.weight", DType::kF16, {2, 2}, h16.data()}}},
      {"one_f32", {{"w", DType::kF32, {6}, f32.data()}}},
      {"scalar_and_empty",
       {{"s", DType::kF16, {}, h16.data()}, {"e", DType::kBF16, {0, 3}, nullptr}}},
      {"no_tensors", {}},
  };
  for (const auto& [name, tensors] : seeds) {
    const llmq::Status s = llmq::WriteSafetensors(dir + "/" + name + ".safetensors", tensors);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
  }
  return 0;
}

#endif  // LLMQ_FUZZ_SEEDS
