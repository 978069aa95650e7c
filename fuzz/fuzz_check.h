// FUZZ_CHECK: the fuzz targets' assertion. Aborts (libFuzzer then saves the input) when a contract
// the target checks is violated.
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
