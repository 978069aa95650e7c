// The Jinja parser: tokens (jinja_lexer.h) to a Program (jinja_ast.h). Everything the interpreter
// cannot run (an unknown tag, filter, test or method) is refused here, naming line and construct.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/text/jinja_ast.h"

namespace llmq::jinja {

Status ParseProgram(std::string_view source, const std::string& origin, Program* out);

}  // namespace llmq::jinja
