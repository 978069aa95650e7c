// Untrusted byte strings on their way into logs, reason files, JSON and the database. Two rules,
// each written once:
//  - Utf8SequenceLength / IsUtf8: what counts as UTF-8 (shortest forms only; no surrogates, nothing
//    above U+10FFFF). Job lines, job names and file names are checked with these.
//  - Escaped: the one way an untrusted string is shown. A control character (U+0000-U+001F,
//    U+007F-U+009F) becomes \n, \t, \r or \xNN, a byte that is not part of valid UTF-8 \xNN,
//    and a backslash is doubled; everything else is kept. The result is valid UTF-8, holds no
//    line break (a name with a newline cannot forge a second log line) and is the input itself
//    for an ordinary name.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace llmq {

// Length of the valid UTF-8 sequence at s[i] (i < n), or 0 when invalid (overlongs, surrogates
// and code points above U+10FFFF are invalid).
size_t Utf8SequenceLength(const char* s, size_t n, size_t i);

// Whether all of `s` is valid UTF-8.
bool IsUtf8(std::string_view s);

// Appends code point `cp` (at most U+10FFFF) as its UTF-8 bytes.
void AppendUtf8(char32_t cp, std::string* out);

// `s` shown safely (see above).
std::string Escaped(std::string_view s);

// A whole line bound for a log or a reason file, made safe to print as one line: control
// characters and bytes that are not UTF-8 escaped as Escaped does, backslashes kept (the untrusted
// pieces in it were Escaped already; this is the last guard, never a double escape).
std::string OneLine(std::string_view s);

// Whether `s` holds a control character (U+0000-U+001F, U+007F-U+009F) or bytes that are not
// UTF-8: exactly the strings Escaped changes, backslashes aside.
bool HasControlOrInvalid(std::string_view s);

}  // namespace llmq
