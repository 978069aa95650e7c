// The job report's HTML pieces: text escaping and simple tables. Everything written is
// well-formed XML as well as HTML (every element closed, attributes quoted, text escaped), so the
// report can be checked by an XML parser.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llmq::jobs::report {

// `text` with & < > " ' as entities, bytes that are not UTF-8 as U+FFFD, and control bytes other
// than tab and newline dropped (XML 1.0 forbids them): safe as element text and as a quoted
// attribute value.
std::string Escape(std::string_view text);

// A <table> with a header row; each cell escaped. Rows shorter than the header are padded.
std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows);

// Formats `v` with printf's `fmt` (one double), e.g. Num(0.1234, "%.3f") == "0.123".
std::string Num(double v, const char* fmt);

// A number a test reads back: <span data-key="KEY" data-value="EXACT (%.17g)">SHOWN</span>.
std::string Keyed(const std::string& key, double exact, const std::string& shown);

}  // namespace llmq::jobs::report
