#include "engine/text/reasoning.h"

namespace llmq {

Status ReasoningFormatByName(std::string_view name, ReasoningFormat* out) {
  if (name == "qwen3") {
    *out = ReasoningFormat::kQwen3;
  } else if (name == "deepseek_r1") {
    *out = ReasoningFormat::kDeepSeekR1;
  } else {
    std::string names;
    for (const char* n : kReasoningFormatNames)
      names += (names.empty() ? "" : ", ") + std::string(n);
    return Status::InvalidArgument("unknown reasoning parser '" + std::string(name) +
                                   "': must be one of " + names);
  }
  return Status::Ok();
}

const char* ReasoningFormatName(ReasoningFormat f) {
  return f == ReasoningFormat::kQwen3 ? "qwen3" : "deepseek_r1";
}

PromptThought PromptThoughtOf(std::string_view tail) {
  const size_t start = tail.rfind(kThinkStart);
  const size_t end = tail.rfind(kThinkEnd);
  if (end != std::string_view::npos && (start == std::string_view::npos || end > start))
    return PromptThought::kClosed;
  return start != std::string_view::npos ? PromptThought::kOpen : PromptThought::kNone;
}

bool ReasoningNeedsPrompt(std::string_view text) {
  return text.find(kThinkEnd) == std::string_view::npos &&
         text.find(kThinkStart) == std::string_view::npos;
}

ReasoningSplit SplitReasoningWith(ReasoningFormat f, std::string_view text, PromptThought prompt) {
  ReasoningSplit s;
  const size_t end = text.find(kThinkEnd);
  std::string_view thought = end == std::string_view::npos ? text : text.substr(0, end);
  const size_t start = thought.find(kThinkStart);
  if (start != std::string_view::npos) thought.remove_prefix(start + kThinkStart.size());
  if (end != std::string_view::npos) {
    s.reasoning = std::string(thought);
    const std::string_view answer = text.substr(end + kThinkEnd.size());
    if (!answer.empty()) s.content = std::string(answer);
    return s;
  }
  const bool thinking = start != std::string_view::npos || prompt == PromptThought::kOpen ||
                        (prompt == PromptThought::kNone && f == ReasoningFormat::kDeepSeekR1);
  if (thinking) {
    s.reasoning = std::string(thought);
  } else {
    s.content = std::string(text);
  }
  return s;
}

}  // namespace llmq
