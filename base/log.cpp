#include "base/log.h"

#include <cstdarg>
#include <cstdio>
#include <string>

#include "base/text.h"

namespace llmq {

void Log(const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "llmq: %s\n", OneLine(buf).c_str());
}

}  // namespace llmq
