// LineReader: the lines of a JSONL job file, read with memory bounded by a per-line limit
// (spool.max_line_bytes), so that one huge line among good ones costs a bounded buffer, not its
// size: the part over the limit is skipped, not stored, and the line is reported too long. Each
// line is also checked for UTF-8 (the first invalid byte is reported). A UTF-8 byte order mark
// at the start of the file and a trailing '\r' (CRLF files) are removed; a last line without a
// newline is a line.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "base/text.h"  // Utf8SequenceLength
#include "jobs/sha256.h"

namespace llmq::jobs {

struct FileLine {
  int64_t no = 0;         // 1-based line number
  int64_t offset = 0;     // byte offset of the line's start in the file
  std::string text;       // the line (no newline); empty when too long
  int64_t bytes = 0;      // the line's whole length, newline excluded
  bool too_long = false;  // bytes > the limit: `text` is empty
  int64_t bad_utf8 = -1;  // byte offset within the line of the first invalid UTF-8 sequence
  bool has_nul = false;   // a NUL byte in the line (a binary file)
  int64_t nul_at = -1;    // its offset within the line
};

class LineReader {
 public:
  // `hash`, when given, receives every byte read (the file's SHA-256 in the same pass).
  // `check_text` false leaves has_nul / bad_utf8 unset: the caller runs CheckLineText itself
  // (ingest does, on every core).
  LineReader(std::istream& in, int64_t max_line_bytes, Sha256* hash = nullptr,
             bool check_text = true)
      : in_(in), max_(max_line_bytes), hash_(hash), check_text_(check_text) {}
  // The next line; false at the end of the file or on a read error (then bad() is true).
  bool Next(FileLine* line);
  bool bad() const { return in_.bad(); }

 private:
  bool Fill();  // false when nothing more can be read
  std::istream& in_;
  int64_t max_;
  Sha256* hash_;
  bool check_text_;
  std::vector<char> buf_ = std::vector<char>(size_t{1} << 20);
  size_t pos_ = 0, end_ = 0;
  int64_t offset_ = 0, no_ = 0;
};

// Sets line->has_nul / nul_at and bad_utf8 from line->text.
void CheckLineText(FileLine* line);

// "" when `line` can be parsed; else why not, naming the line, e.g. "jobs.jsonl:3: the line is
// 104857600 bytes, over spool.max_line_bytes (16777216)" or "jobs.jsonl:4: not UTF-8: invalid
// byte 0xe9 at column 12".
std::string LineProblem(const FileLine& line, const std::string& file, int64_t max_line_bytes);

}  // namespace llmq::jobs
