// FUZZ_CHECK: a contract check in a fuzz target; a violation aborts, which libFuzzer reports as a
// crash with the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      std::fprintf(stderr, "contract violated: %s\n", #cond); \
      std::abort();                                           \
    }                                                         \
  } while (0)

#ifdef LLMQ_FUZZ_SEEDS
#include <fstream>
#include <string>

// Writes `seeds` as seed0.bin, seed1.bin... into the corpus folder argv[1] (the seed writers'
// main); 2 without it.
template <size_t N>
int WriteSeeds(int argc, char** argv, const std::string (&seeds)[N]) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < N; ++i)
    std::ofstream(std::string(argv[1]) + "/seed" + std::to_string(i) + ".bin", std::ios::binary)
        << seeds[i];
  std::printf("wrote %zu seeds to %s\n", N, argv[1]);
  return 0;
}
#endif
