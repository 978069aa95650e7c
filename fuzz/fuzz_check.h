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
