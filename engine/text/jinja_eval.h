// Running a parsed Jinja template (jinja_ast.h) against a context: statements, expressions and
// the builtin globals (range, namespace, raise_exception, strftime_now, dict).
#pragma once

#include <string>

#include "base/status.h"
#include "engine/text/jinja_ast.h"

namespace llmq::jinja {

// Renders `program` with `context` (a dict value) into *out. Errors name `origin` and the line.
Status RenderProgram(const Program& program, const std::string& origin, const Value& context,
                     std::string* out);

}  // namespace llmq::jinja
