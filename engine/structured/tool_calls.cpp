#include "engine/structured/tool_calls.h"

#include <nlohmann/json.hpp>

#include "base/json.h"
#include "engine/structured/json_schema.h"

namespace llmq {

namespace {

using json = nlohmann::ordered_json;

// Whitespace beside a call's delimiters, at most: the families write calls on one line (", " and
// ": "), and a model is not let pad them (random weights would, for hundreds of tokens).
constexpr int kCallWhitespace = 1;

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kPythonTag = "<|python_tag|>";
constexpr const char* kMistralOpen = "[TOOL_CALLS]";

// The key a format writes the arguments under.
const char* ArgumentsKey(ToolCallFormat f) {
  return f == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
}

// Every "$ref" of `v` that points into its own document ("#...") made to point into the document
// it is embedded in at `prefix` (a JSON pointer), so a tool's "#/$defs/x" still finds its $defs.
void Rebase(json* v, const std::string& prefix) {
  if (v->is_object()) {
    for (auto& [k, x] : v->items()) {
      if (k == "$ref" && x.is_string() && x.get<std::string>().rfind('#', 0) == 0)
        x = "#" + prefix + x.get<std::string>().substr(1);
      else
        Rebase(&x, prefix);
    }
  } else if (v->is_array()) {
    for (json& x : *v) Rebase(&x, prefix);
  }
}

// One call's object for `tool` in format `f`, its parameters' refs rebased to `at` (where the
// object sits in the whole schema).
Status CallSchema(ToolCallFormat f, const ToolSchema& tool, size_t index, const std::string& at,
                  json* out) {
  const std::string field = "tools[" + std::to_string(index) + "].function.parameters";
  json params =
      json{{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
  if (!tool.parameters.empty()) {
    params = json::parse(tool.parameters, nullptr, false);
    if (params.is_discarded()) return Status::InvalidArgument(field + ": not JSON");
  }
  const std::string key = ArgumentsKey(f);
  Rebase(&params, at + "/properties/" + key);
  *out = json{{"type", "object"},
              {"properties", json{{"name", json{{"const", tool.name}}}, {key, std::move(params)}}},
              {"required", json::array({"name", key})},
              {"additionalProperties", false}};
  return Status::Ok();
}

// Why the calls' schema was refused (`whole`), naming the tool: the first tool whose parameters
// are refused alone, the message then pointing into its own schema. Only on a refusal: the calls'
// schema is compiled once when it can be enforced.
Status WhichTool(const ToolCallGrammarSpec& spec, const Status& whole) {
  for (size_t i = 0; i < spec.tools.size(); ++i) {
    if (spec.tools[i].parameters.empty()) continue;
    Grammar alone;
    // (Parsed before: AnyCall refused text that is not JSON.)
    const Status st =
        CompileJsonSchema(json::parse(spec.tools[i].parameters, nullptr, false), &alone);
    if (st.ok()) continue;
    const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
    std::string why = st.message();
    if (why.rfind("json_schema: ", 0) == 0) why.erase(0, 13);
    return st.code() == Status::Code::kUnsupported ? Status::Unsupported(field + ": " + why)
                                                   : Status::InvalidArgument(field + ": " + why);
  }
  return whole;
}

// The schema of one call object naming any of the tools, placed at `at` in the whole schema.
Status AnyCall(const ToolCallGrammarSpec& spec, const std::string& at, json* out) {
  if (spec.tools.empty()) return Status::InvalidArgument("tools: no tool to call");
  if (spec.tools.size() == 1) return CallSchema(spec.format, spec.tools[0], 0, at, out);
  json any = json::array();
  for (size_t i = 0; i < spec.tools.size(); ++i) {
    json one;
    LLMQ_RETURN_IF_ERROR(
        CallSchema(spec.format, spec.tools[i], i, at + "/anyOf/" + std::to_string(i), &one));
    any.push_back(std::move(one));
  }
  *out = json{{"anyOf", std::move(any)}};
  return Status::Ok();
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
std::string_view SkipSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

// A call's object: {"name": "...", <key>: {...}} (other members refused).
Status CallOf(const json& v, const char* key, ToolCall* out) {
  if (!v.is_object()) return Status::InvalidArgument("a call is not a JSON object");
  if (!v.contains("name") || !v["name"].is_string())
    return Status::InvalidArgument("a call has no \"name\" string");
  if (!v.contains(key) || !v[key].is_object())
    return Status::InvalidArgument(std::string("a call has no \"") + key + "\" object");
  if (v.size() != 2)
    return Status::InvalidArgument(std::string("a call has members besides name and ") + key);
  out->name = v["name"].get<std::string>();
  out->arguments = PythonJsonDumps(v[key]);
  return Status::Ok();
}

// Deeper calls are refused unparsed (no schema a tool declares needs more).
constexpr int kMaxCallDepth = 256;

// The first JSON object or array of `s` (after whitespace) into *out, `s` left after it.
Status TakeJson(std::string_view* s, json* out) {
  *s = SkipSpace(*s);
  if (s->empty() || (s->front() != '{' && s->front() != '['))
    return Status::InvalidArgument("a call is not a JSON object or array");
  JsonBracketScan scan;
  int depth = 0;
  size_t end = 0;
  for (size_t i = 0; i < s->size() && end == 0; ++i) {
    depth += scan.Step((*s)[i]);
    if (depth > kMaxCallDepth) return Status::InvalidArgument("a call nests too deep");
    if (depth == 0) end = i + 1;
  }
  if (end == 0) return Status::InvalidArgument("a call's JSON is cut short");
  *out = json::parse(s->substr(0, end), nullptr, false);
  if (out->is_discarded()) return Status::InvalidArgument("a call is not valid JSON");
  s->remove_prefix(end);
  return Status::Ok();
}

Status ParseHermes(std::string_view s, bool cut, std::vector<ToolCall>* calls) {
  const std::string_view open = kHermesOpen, close = kHermesClose;
  while (true) {
    s = SkipSpace(s);
    if (s.empty() && !calls->empty()) return Status::Ok();
    // Cut: the calls before the cut (a cut is only ever inside the last call or before it).
    if (cut && !calls->empty() && s.size() < open.size() && open.substr(0, s.size()) == s)
      return Status::Ok();
    if (s.substr(0, open.size()) != open)
      return Status::InvalidArgument("text where a <tool_call> should begin");
    s.remove_prefix(open.size());
    json v;
    if (Status st = TakeJson(&s, &v); !st.ok()) return cut && !calls->empty() ? Status::Ok() : st;
    s = SkipSpace(s);
    if (s.substr(0, close.size()) != close) {
      if (cut && !calls->empty() && close.substr(0, s.size()) == s) return Status::Ok();
      return Status::InvalidArgument("a <tool_call> without its </tool_call>");
    }
    s.remove_prefix(close.size());
    LLMQ_RETURN_IF_ERROR(CallOf(v, "arguments", &calls->emplace_back()));
  }
}

Status ParseLlama(std::string_view s, bool cut, std::vector<ToolCall>* calls) {
  const std::string_view tag = kPythonTag;
  if (s.substr(0, tag.size()) == tag) s.remove_prefix(tag.size());
  while (true) {
    json v;
    if (Status st = TakeJson(&s, &v); !st.ok()) return cut && !calls->empty() ? Status::Ok() : st;
    ToolCall c;
    // Llama 3.x models write "parameters"; "arguments" is read too, as vLLM's parser does.
    LLMQ_RETURN_IF_ERROR(
        CallOf(v, v.is_object() && v.contains("arguments") ? "arguments" : "parameters", &c));
    calls->push_back(std::move(c));
    s = SkipSpace(s);
    if (s.empty()) return Status::Ok();
    if (s.front() != ';') return Status::InvalidArgument("text after a call");
    s.remove_prefix(1);
  }
}

Status ParseMistral(std::string_view s, bool cut, std::vector<ToolCall>* calls) {
  const std::string_view open = kMistralOpen;
  if (s.substr(0, open.size()) != open)
    return Status::InvalidArgument("the calls do not begin with [TOOL_CALLS]");
  s = SkipSpace(s.substr(open.size()));
  if (s.empty() || s.front() != '[' || SkipSpace(s.substr(1)).substr(0, 1) == "]")
    return Status::InvalidArgument("[TOOL_CALLS] is not followed by a list of calls");
  s.remove_prefix(1);
  // One call at a time, so that a cut list keeps its whole calls.
  while (true) {
    json v;
    if (Status st = TakeJson(&s, &v); !st.ok()) return cut && !calls->empty() ? Status::Ok() : st;
    LLMQ_RETURN_IF_ERROR(CallOf(v, "arguments", &calls->emplace_back()));
    s = SkipSpace(s);
    if (s.empty()) {
      return cut ? Status::Ok() : Status::InvalidArgument("the list of calls is not closed");
    }
    if (s.front() == ']') break;
    if (s.front() != ',') return Status::InvalidArgument("text between the calls");
    s.remove_prefix(1);
  }
  if (!SkipSpace(s.substr(1)).empty()) return Status::InvalidArgument("text after the calls");
  return Status::Ok();
}

}  // namespace

Status ToolCallFormatByName(std::string_view name, ToolCallFormat* out) {
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    if (name == ToolCallFormatName(f)) {
      *out = f;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown tool-call format \"" + std::string(name) +
                                 "\" (known: hermes, llama3_json, mistral)");
}

const char* ToolCallFormatName(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "?";
}

ToolCallFormat RecognizeToolCallFormat(std::string_view src, bool* found) {
  *found = true;
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (src.find(kMistralOpen) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (src.find(kPythonTag) != std::string_view::npos ||
      src.find("\"parameters\": dictionary of argument name") != std::string_view::npos)
    return ToolCallFormat::kLlama3Json;
  *found = false;
  return ToolCallFormat::kHermes;
}

Status BuildToolCallGrammar(const ToolCallGrammarSpec& spec, Grammar* out) {
  *out = Grammar();
  Grammar& g = *out;
  json schema;
  if (spec.format == ToolCallFormat::kMistral) {
    json item;
    LLMQ_RETURN_IF_ERROR(AnyCall(spec, "/items", &item));
    schema = json{{"type", "array"}, {"items", std::move(item)}, {"minItems", 1}};
    if (!spec.parallel) schema["maxItems"] = 1;
  } else {
    LLMQ_RETURN_IF_ERROR(AnyCall(spec, "", &schema));
  }
  JsonSchemaOptions opt;
  opt.max_whitespace = kCallWhitespace;
  if (const Status st = CompileJsonSchema(schema, &g, opt); !st.ok()) return WhichTool(spec, st);
  const Grammar::Symbol call{g.start(), false};
  const Grammar::Symbol calls = g.NewRule("tool_calls");
  switch (spec.format) {
    case ToolCallFormat::kHermes: {
      // calls ::= "<tool_call>\n" call "\n</tool_call>" more; more ::= "" | "\n" calls
      const Grammar::Symbol open = g.Literal(std::string(kHermesOpen) + "\n");
      const Grammar::Symbol close = g.Literal(std::string("\n") + kHermesClose);
      const Grammar::Symbol more = g.NewRule("more_tool_calls");
      g.AddAlternative(calls, {open, call, close, more});
      g.AddAlternative(more, {});
      if (spec.parallel) g.AddAlternative(more, {g.Literal("\n"), calls});
      break;
    }
    case ToolCallFormat::kLlama3Json: {
      // calls ::= call | call "; " calls
      g.AddAlternative(calls, {call});
      if (spec.parallel) g.AddAlternative(calls, {call, g.Literal("; "), calls});
      break;
    }
    case ToolCallFormat::kMistral:
      g.AddAlternative(calls, {g.Literal(kMistralOpen), call});
      break;
  }
  g.set_start(calls);
  return Status::Ok();
}

ToolCallTrigger TriggerOf(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return {kHermesOpen, false};
    case ToolCallFormat::kLlama3Json:
      return {"{", true};
    case ToolCallFormat::kMistral:
      return {kMistralOpen, false};
  }
  return {};
}

Status ParseToolCalls(ToolCallFormat f, std::string_view text, std::vector<ToolCall>* calls,
                      bool cut) {
  calls->clear();
  Status st;
  switch (f) {
    case ToolCallFormat::kHermes:
      st = ParseHermes(text, cut, calls);
      break;
    case ToolCallFormat::kLlama3Json:
      st = ParseLlama(text, cut, calls);
      break;
    case ToolCallFormat::kMistral:
      st = ParseMistral(text, cut, calls);
      break;
  }
  if (!st.ok()) calls->clear();
  return st;
}

}  // namespace llmq
