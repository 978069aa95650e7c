// The Jinja lexer: template text and the tokens inside {{ }}, {% %}, with comments dropped and
// the whitespace control of transformers' environment applied (trim_blocks, lstrip_blocks, the
// "-" and "+" markers, CRLF read as LF, one trailing newline of the template dropped).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace llmq::jinja {

struct Token {
  enum class Kind {
    kText,        // literal template text, whitespace control already applied
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // string literal, escapes decoded
    kInt,
    kFloat,
    kOp,  // operator or punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
    kEof
  };
  Kind kind;
  std::string text;
  int line;
};

// Tokens of `source`; a syntax error reads "<origin>:<line>: <what>".
Status Lex(std::string_view source, const std::string& origin, std::vector<Token>* out);

}  // namespace llmq::jinja
