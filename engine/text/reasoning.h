// Reasoning output (vLLM's --reasoning-parser): a thinking model (Qwen3, DeepSeek-R1, QwQ) writes
// its thought between <think> and </think> before its answer. With a parser chosen
// (model.reasoning_parser), a chat response carries the thought as message.reasoning_content and
// the answer as content, and a structured output (a schema, tool calls) is enforced on the answer
// only: from the first token when the prompt already closed the thought (Qwen3's enable_thinking
// false writes "<think>\n\n</think>\n\n" after the assistant's opening), else from the model's
// </think> on (a lazy grammar whose trigger is the end tag).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace llmq {

// How a model marks its thought. Both write <think>...</think>; they differ where a completion has
// neither tag and the prompt left the choice to the model: Qwen3 then answered without thinking
// (all content), DeepSeek-R1 (whose template may open the thought for it) thought until the end
// (all reasoning), as vLLM's two parsers read it.
enum class ReasoningFormat { kQwen3, kDeepSeekR1 };

inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

// "qwen3" | "deepseek_r1" (vLLM's parser names). InvalidArgument listing the names.
[[nodiscard]] Status ReasoningFormatByName(std::string_view name, ReasoningFormat* out);
const char* ReasoningFormatName(ReasoningFormat f);
// Every name ReasoningFormatByName accepts, for messages and the configuration's check.
inline constexpr const char* kReasoningFormatNames[] = {"qwen3", "deepseek_r1"};

// What the prompt's tail (what it adds after the conversation's messages: the generation prompt,
// or a continued final message's text) says of the thought: closed (its last tag is </think>),
// open (its last tag is <think>: the model is inside its thought), or nothing (no tag: the model
// chooses). Only the tail counts: an earlier turn's thought, which a template may keep in the
// prompt, says nothing of this one.
enum class PromptThought { kNone, kOpen, kClosed };
PromptThought PromptThoughtOf(std::string_view tail);

// A completion's text split into the thought and the answer. `reasoning` unset: no thought
// (written as null); `content` unset: no answer (null), as vLLM writes them.
struct ReasoningSplit {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
};
// The split of `text`, as vLLM's parsers split it: at its first </think> when it has one (the
// thought is what comes before it, from after a <think> when one is there; an empty answer is
// none); else the whole text is the thought when it holds <think> (from after it) or the prompt
// opened the thought (cut short by max_tokens), the answer when the prompt closed it, and as the
// format says when neither (ReasoningFormat). `prompt` (returning PromptThought) is called only
// when the text has neither tag (it may render the prompt again).
template <typename PromptFn>
ReasoningSplit SplitReasoning(ReasoningFormat f, std::string_view text, PromptFn prompt);

// The split itself, with the prompt's state known.
ReasoningSplit SplitReasoningWith(ReasoningFormat f, std::string_view text, PromptThought prompt);
// Whether SplitReasoning needs the prompt's state for `text` (it holds neither tag).
bool ReasoningNeedsPrompt(std::string_view text);

template <typename PromptFn>
ReasoningSplit SplitReasoning(ReasoningFormat f, std::string_view text, PromptFn prompt) {
  return SplitReasoningWith(f, text, ReasoningNeedsPrompt(text) ? prompt() : PromptThought::kNone);
}

}  // namespace llmq
