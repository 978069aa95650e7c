// The assistant message of a completion whose request declared tools (issue 25): the calls the
// model wrote in its family's format (engine/structured/tool_calls.h), read from where the
// grammar took over (Completion::grammar_from_token / _byte: the first token under tool_choice
// required or a named function, the trigger under auto, a reasoning model's </think> when the
// grammar began there), and the text before them as content.
#pragma once

#include <string>
#include <vector>

#include "engine/core/sequence.h"
#include "engine/structured/tool_calls.h"
#include "engine/text/tokenizer.h"

namespace llmq {

struct ToolMessage {
  // Calls, in the order written; empty: a message of text alone (`content` is the completion's
  // text then).
  std::vector<ToolCall> calls;
  std::string content;  // the text before the calls ("" beside calls: written as null)
};

// Calls only where the grammar took over (the grammar enforced each, so each parses, names a
// declared tool and satisfies its parameters): all of them when the sample ended "stop", the whole
// calls before the cut when it was cut by its length (the cut one is dropped). A sample whose
// grammar never took over (auto: the model wrote text), or one with no whole call, or text the
// parser refuses, is text alone. The stop token (a control token, which no grammar allows) is not
// part of the calls. `after` ("" none: a reasoning model's "</think>", GrammarCache's `after`):
// when the grammar's text begins with it, it and the whitespace after it are content, not calls.
ToolMessage SplitToolCalls(const Tokenizer& tok, ToolCallFormat format, const Completion& c,
                           std::string_view after = {});

// A call's id, from SHA-256 over the line's request id, the choice and the call's index: the same
// on a resumed run, distinct across calls, choices and lines. "call_" and 24 hex digits; for the
// mistral format 9 hex digits, since Mistral's templates raise on any other length when the call
// comes back in a later request (vLLM makes them 9 alphanumerics too).
std::string ToolCallId(ToolCallFormat format, const std::string& request_id, int choice, int call);

}  // namespace llmq
