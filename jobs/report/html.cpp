#include "jobs/report/html.h"

#include <algorithm>
#include <cstdio>

#include "base/text.h"

namespace llmq::jobs::report {

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = Utf8SequenceLength(text.data(), text.size(), i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(text.data() + i, len);
      i += len;
      continue;
    }
    ++i;
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (c >= 0x20 || c == '\t' || c == '\n') out += static_cast<char>(c);
    }
  }
  return out;
}

std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table><thead><tr>";
  for (const std::string& h : header) out += "<th>" + Escape(h) + "</th>";
  out += "</tr></thead><tbody>";
  for (const auto& row : rows) {
    out += "<tr>";
    for (size_t i = 0; i < std::max(header.size(), row.size()); ++i)
      out += "<td>" + (i < row.size() ? Escape(row[i]) : std::string()) + "</td>";
    out += "</tr>";
  }
  return out + "</tbody></table>\n";
}

std::string Num(double v, const char* fmt) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string Keyed(const std::string& key, double exact, const std::string& shown) {
  return "<span data-key=\"" + Escape(key) + "\" data-value=\"" + Num(exact, "%.17g") + "\">" +
         Escape(shown) + "</span>";
}

}  // namespace llmq::jobs::report
