#include "daemon/tool_output.h"

#include <string_view>

#include "jobs/sha256.h"

namespace llmq {

ToolMessage SplitToolCalls(const Tokenizer& tok, ToolCallFormat format, const Completion& c,
                           std::string_view after) {
  ToolMessage m;
  m.content = c.text;
  const int from = c.grammar_from_token;
  if (from < 0 || from >= static_cast<int>(c.ids.size())) return m;
  size_t end = c.ids.size();
  while (end > static_cast<size_t>(from) && tok.IsControl(c.ids[end - 1])) --end;
  std::string calls_text;
  for (size_t i = static_cast<size_t>(from); i < end; ++i) calls_text += tok.TokenBytes(c.ids[i]);
  const std::string first = tok.TokenBytes(c.ids[static_cast<size_t>(from)]);
  const size_t cut = std::min(static_cast<size_t>(c.grammar_from_byte), first.size());
  calls_text.erase(0, cut);
  size_t lead = 0;  // `after` and its whitespace
  if (!after.empty() && calls_text.compare(0, after.size(), after) == 0) {
    lead = after.size();
    while (lead < calls_text.size() &&
           std::string_view(" \t\n\r").find(calls_text[lead]) != std::string_view::npos)
      ++lead;
  }
  const std::string lead_text = calls_text.substr(0, lead);
  calls_text.erase(0, lead);
  std::vector<ToolCall> calls;
  if (!ParseToolCalls(format, calls_text, &calls, c.finish_reason != "stop").ok()) return m;
  m.calls = std::move(calls);
  m.content = tok.Decode(std::vector<int>(c.ids.begin(), c.ids.begin() + from)) +
              first.substr(0, cut) + lead_text;
  return m;
}

std::string ToolCallId(ToolCallFormat format, const std::string& request_id, int choice, int call) {
  const std::string hash =
      jobs::Sha256Hex(request_id + "\n" + std::to_string(choice) + "\n" + std::to_string(call));
  return format == ToolCallFormat::kMistral ? hash.substr(0, 9) : "call_" + hash.substr(0, 24);
}

}  // namespace llmq
