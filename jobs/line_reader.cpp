#include "jobs/line_reader.h"

#include <cstdio>
#include <cstring>

namespace llmq::jobs {

bool LineReader::Fill() {
  if (pos_ < end_) return true;
  in_.read(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  pos_ = 0;
  end_ = static_cast<size_t>(in_.gcount());
  if (hash_) hash_->Update(std::string_view(buf_.data(), end_));
  return end_ > 0;
}

bool LineReader::Next(FileLine* line) {
  if (!Fill()) return false;
  *line = FileLine{};
  line->no = ++no_;
  line->offset = offset_;
  bool newline = false;
  while (!newline && Fill()) {
    const char* start = buf_.data() + pos_;
    const void* nl = std::memchr(start, '\n', end_ - pos_);
    const size_t n = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : end_ - pos_;
    // Past the limit the bytes are only counted: memory stays bounded by the limit.
    if (!line->too_long) {
      if (line->bytes + static_cast<int64_t>(n) > max_ + 1) {  // +1: a '\r' before the '\n'
        line->too_long = true;
        line->text.clear();
        line->text.shrink_to_fit();
      } else {
        line->text.append(start, n);
      }
    }
    line->bytes += static_cast<int64_t>(n);
    pos_ += n + (nl ? 1 : 0);
    offset_ += static_cast<int64_t>(n) + (nl ? 1 : 0);
    newline = nl != nullptr;
  }
  if (line->no == 1 && line->text.compare(0, 3, "\xEF\xBB\xBF") == 0) {
    line->text.erase(0, 3);  // a byte order mark: Windows editors write one
    line->bytes -= 3;
  }
  if (!line->text.empty() && line->text.back() == '\r') {
    line->text.pop_back();
    line->bytes -= 1;
  }
  if (!line->too_long && line->bytes > max_) {
    line->too_long = true;
    line->text.clear();
  }
  if (check_text_) CheckLineText(line);
  return true;
}

void CheckLineText(FileLine* line) {
  const std::string& t = line->text;
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '\0' && !line->has_nul) {
      line->has_nul = true;
      line->nul_at = static_cast<int64_t>(i);
    }
    const size_t k = Utf8SequenceLength(t.data(), t.size(), i);
    if (k == 0) {
      if (line->bad_utf8 < 0) line->bad_utf8 = static_cast<int64_t>(i);
      ++i;
    } else {
      i += k;
    }
  }
}

std::string LineProblem(const FileLine& line, const std::string& file, int64_t max_line_bytes) {
  const std::string where = file + ":" + std::to_string(line.no) + ": ";
  if (line.too_long)
    return where + "the line is " + std::to_string(line.bytes) +
           " bytes, over spool.max_line_bytes (" + std::to_string(max_line_bytes) +
           "): it is not read";
  if (line.has_nul)
    return where + "a NUL byte at column " + std::to_string(line.nul_at + 1) +
           " (a job line is UTF-8 JSON text)";
  if (line.bad_utf8 >= 0) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", static_cast<unsigned char>(line.text[line.bad_utf8]));
    return where + "not UTF-8: invalid byte 0x" + h + " at column " +
           std::to_string(line.bad_utf8 + 1);
  }
  return "";
}

}  // namespace llmq::jobs
