// libFuzzer target for the regex compiler (engine/structured/regex.h): schemas' `pattern` values
// are input from job files. The input is a mode byte, a pattern, a NUL, and a text. Whatever the
// bytes: the pattern compiles or is refused with InvalidArgument / Unsupported naming "pattern:";
// a compiled one stays within its state bound, and a text it matches has every prefix viable.
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file writes a seed corpus into argv[1].
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "engine/structured/regex.h"
#include "fuzz/fuzz_check.h"

#ifndef LLMQ_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto mode = (data[0] & 1) ? llmq::Regex::Mode::kFull : llmq::Regex::Mode::kSearch;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view pattern = rest.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : rest.substr(nul + 1);
  std::unique_ptr<llmq::Regex> r;
  const llmq::Status s = llmq::Regex::Compile(pattern, mode, &r);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == llmq::Status::Code::kInvalidArgument ||
               s.code() == llmq::Status::Code::kUnsupported);
    FUZZ_CHECK(s.message().rfind("pattern:", 0) == 0);
    FUZZ_CHECK(!r);
    return 0;
  }
  FUZZ_CHECK(r->num_nfa_states() <= static_cast<size_t>(llmq::Regex::kMaxNfaStates));
  if (r->Matches(text))
    for (size_t k = 0; k <= text.size(); ++k) FUZZ_CHECK(r->IsViablePrefix(text.substr(0, k)));
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

template <size_t N>
std::string Seed(const char (&bytes)[N]) {  // every byte of the literal, its NULs too
  return std::string(bytes, N - 1);
}

int main(int argc, char** argv) {
  const std::string kSeeds[] = {
      Seed("\x01^\\d{4}-\\d{2}-\\d{2}$\0002026-12-01"),
      Seed("\x00[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}\0x@y.io"),
      Seed("\x01^(?:[01]?\\d|2[0-3]):[0-5]\\d$\00023:59"),
      Seed("\x00^[\\u00c0-\\u024f ]{1,8}$|^\\w+?$\000caf\xc3\xa9"),
      Seed("\x01(a|b)*c{2,3}[^\\s\\S]?\\x41\000abcc"),
  };
  return WriteSeeds(argc, argv, kSeeds);
}

#endif  // LLMQ_FUZZ_SEEDS
