// LineReader: bounded memory per line, BOM and CRLF, a last line without newline, UTF-8 and NUL.
#include "jobs/line_reader.h"

#include <gtest/gtest.h>

#include <sstream>

namespace llmq::jobs {
namespace {

std::vector<FileLine> ReadAll(const std::string& text, int64_t max) {
  std::istringstream in(text);
  LineReader r(in, max);
  std::vector<FileLine> out;
  for (FileLine l; r.Next(&l);) out.push_back(l);
  return out;
}

TEST(LineReader, SplitsStripsBomAndCrAndKeepsALastLineWithoutNewline) {
  const auto v = ReadAll("\xEF\xBB\xBF{\"a\":1}\r\n\r\nlast", 100);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].text, "{\"a\":1}");
  EXPECT_EQ(v[0].no, 1);
  EXPECT_EQ(v[1].text, "");
  EXPECT_EQ(v[2].text, "last");
  EXPECT_EQ(v[2].no, 3);
  EXPECT_EQ(v[2].offset, 14);
  for (const FileLine& l : v) EXPECT_EQ(LineProblem(l, "f", 100), "");
}

TEST(LineReader, ALineOverTheLimitIsCountedNotKept) {
  const std::string big(300000, 'x');  // spans several 64 KiB reads
  const auto v = ReadAll("ok\n" + big + "\nafter\n", 1024);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(v[1].too_long);
  EXPECT_TRUE(v[1].text.empty());
  EXPECT_EQ(v[1].bytes, 300000);
  EXPECT_EQ(
      LineProblem(v[1], "f.jsonl", 1024),
      "f.jsonl:2: the line is 300000 bytes, over spool.max_line_bytes (1024): it is not read");
  EXPECT_EQ(v[2].text, "after");
  EXPECT_EQ(ReadAll(std::string(1024, 'y') + "\r\n", 1024)[0].too_long, false);
}

TEST(LineReader, NamesTheFirstInvalidUtf8ByteAndNul) {
  const auto v = ReadAll("caf\xc3\xa9 ok\ncaf\xe9\n" + std::string("a\0b", 3) + "\n", 100);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(LineProblem(v[0], "f", 100), "");
  EXPECT_EQ(LineProblem(v[1], "f", 100), "f:2: not UTF-8: invalid byte 0xe9 at column 4");
  EXPECT_EQ(LineProblem(v[2], "f", 100),
            "f:3: a NUL byte at column 2 (a job line is UTF-8 JSON text)");
}

}  // namespace
}  // namespace llmq::jobs
