// One line of an OpenAI Batch API input file (as vLLM's run_batch reads it), parsed and validated.
// jobs/ knows nothing of the engine: the daemon layer turns a BatchRequest into engine requests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace llmq::jobs {

// One message of body.messages, as the chat template gets it.
struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
  // An assistant message with tool_calls and content null or absent (`content` is then "", what
  // the template gets, as from vLLM).
  bool content_null = false;
  std::string tool_call_id;  // role "tool": the call it answers ("" none)
  std::string name;          // the message's "name" ("" none)
  // Assistant: its tool_calls as the JSON array text the template gets ("" none): each call's
  // keys in the order written, function.arguments parsed from its JSON string into the value it
  // holds (as vLLM does before rendering: templates write `arguments | tojson`).
  std::string tool_calls;
  // Assistant: its thought (a reasoning model's earlier turn: "reasoning", else
  // "reasoning_content", as vLLM reads them; empty counts as none), which the template gets as
  // both names (Qwen3's writes it back inside <think>); unset: none. Ignored on other roles.
  std::optional<std::string> reasoning = {};
};

// One entry of body.tools: {"type": "function", "function": {"name", "description"?,
// "parameters"?, "strict"?}}.
struct ToolDef {
  std::string name;         // function.name: [A-Za-z0-9_-]{1,64} as OpenAI requires
  std::string description;  // "" when absent
  std::string parameters;   // function.parameters as JSON text, key order kept; "" when absent (=
                            // no arguments: {"type":"object","properties":{}})
  bool strict = false;
  std::string json;  // the whole tool object as written (what the template gets)
};

// body.tool_choice: OpenAI's default is "none" without tools, "auto" with them.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// /v1/chat/completions, /v1/completions, /v1/responses. A responses line is a conversation, read
// into the same fields as a chat line (instructions and input as messages, text.format as
// response_format, flat function tools as tools) and run as one; only its output differs (a
// Response object: jobs/batch_output.h).
enum class Endpoint { kChatCompletions, kCompletions, kResponses };

// Whether lines of `e` are conversations rendered by the chat template (chat and responses).
inline bool IsChat(Endpoint e) {
  return e != Endpoint::kCompletions;
}

// The name a chat line's field has on a line of endpoint `e`, for messages about it: on
// /v1/responses "body.messages..." is "body.input" (its items do not map one to one onto the
// messages), "body.max_tokens" is "body.max_output_tokens" and "body.tools[i].function.X" is
// "body.tools[i].X"; other fields and endpoints as given.
std::string FieldOn(Endpoint e, const std::string& chat_field);

// body.response_format: free text, any JSON object, or the documents a JSON Schema accepts
// (structured outputs, issue 24; enforced token by token by the engine).
// The grammar a line's output must follow (response_format, or vLLM's structured_outputs /
// guided_*): none, any JSON object, a JSON Schema, a regular expression, one of a list of strings.
enum class ResponseFormat { kText, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };

struct BatchRequest {
  int line = 0;  // 1-based line number in the file
  std::string custom_id;
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;                      // body.model: the job's model (jobs::JobRecord::model)
  std::vector<ChatMessage> messages;      // chat
  std::string prompt;                     // completions, text prompt
  std::vector<int32_t> prompt_token_ids;  // completions, when "prompt" is a list of ints
  bool prompt_is_ids = false;
  // Sampling (OpenAI defaults when absent): max_tokens 16 for completions, unset (= up to the
  // context) for chat; temperature 1; top_p 1; n 1.
  std::optional<int> max_tokens;  // "max_tokens" or "max_completion_tokens"
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;       // vLLM extension
  double min_p = 0.0;  // vLLM extension
  std::optional<int64_t> seed;
  std::vector<std::string> stop;  // "stop": string or list of up to 4 strings
  int n = 1;
  bool ignore_eos = false;  // vLLM extension
  // Penalties and biases (engine/sampling/penalties.h states their order).
  double presence_penalty = 0.0;                       // OpenAI: [-2, 2]
  double frequency_penalty = 0.0;                      // OpenAI: [-2, 2]
  double repetition_penalty = 1.0;                     // vLLM extension: > 0
  std::vector<std::pair<int64_t, double>> logit_bias;  // token id -> [-100, 100], by id
  int min_tokens = 0;                                  // vLLM extension
  std::vector<int32_t> stop_token_ids;                 // vLLM extension
  // Log-probabilities: -1 none; k >= 0 the chosen token's and the top k of each position. Chat:
  // "logprobs": true with "top_logprobs" 0-20; completions: "logprobs" 0-5.
  int logprobs = -1;
  // Structured outputs: {"type": "json_object"} or {"type": "json_schema", "json_schema":
  // {"name": ..., "schema": ..., "strict": ..., "description": ...}} (also on /v1/completions, as
  // vLLM accepts it). `json_schema`: the schema as its JSON text, in the key order it was written
  // in (properties are generated in that order); checked here only for its shape (an object or a
  // boolean): whether it can be enforced is the daemon's to say (it compiles it).
  // vLLM's extensions ask for the same through structured_outputs ({"json": schema (or its JSON
  // text)}, {"json_object": true}, {"regex": ...}, {"choice": [...]}, {"grammar": GBNF}) or the
  // older guided_json, guided_regex, guided_choice, guided_grammar (llama.cpp's server: grammar):
  // one of them per line, not beside a response_format other than text. `structured_field` names
  // the field that asked ("body.response_format", "body.guided_choice",
  // "body.structured_outputs.regex", ...), for messages.
  ResponseFormat response_format = ResponseFormat::kText;
  std::string json_schema;
  std::string json_schema_name;
  std::string regex;                 // kRegex: the whole output matches it (ECMAScript syntax)
  std::vector<std::string> choices;  // kChoice: the output is one of them (non-empty, distinct)
  std::string grammar;  // kGrammar: a GBNF or Lark grammar (engine/structured/gbnf.h, lark.h)
  std::string structured_field = "body.response_format";
  // Tools (chat): the functions on offer, given to the chat template as written; the calls are
  // enforced token by token (engine/structured/tool_calls.h).
  std::vector<ToolDef> tools;
  ToolChoice tool_choice = ToolChoice::kNone;  // OpenAI: "none" without tools, "auto" with them
  std::string tool_choice_name;                // kNamed: the function's name (among tools)
  // tool_choice {"type": "allowed_tools", ...} (OpenAI's): the calls may name only these tools
  // (distinct, among tools), under tool_choice kAuto or kRequired (its mode); every tool is still
  // given to the template, so that lines with one list of tools share their prompt's prefix.
  // Empty: every tool.
  std::vector<std::string> allowed_tools;
  bool parallel_tool_calls = true;
  // Chat (vLLM's extension): further variables for the model's chat template, a JSON object's
  // text in the key order written ("" = none; {} counts as none), e.g. {"enable_thinking": false}
  // for Qwen3. Names the template gets from llmq (messages, tools, documents,
  // add_generation_prompt, the special tokens) and vLLM's chat_template, tokenize and
  // continue_final_message are refused naming the key.
  std::string chat_template_kwargs;
  // Chat (vLLM's extensions): whether the prompt ends with the assistant turn's opening (default
  // true), or with the final message left open for the model to continue (continue_final_message:
  // only with add_generation_prompt false, and a final message with text content, as vLLM asks).
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // /v1/responses: what the Response object repeats of the request, as a JSON object's text
  // (instructions, max_output_tokens, metadata, parallel_tool_calls, reasoning, temperature, text,
  // tool_choice, tools, top_logprobs, top_p, truncation, in the Response's own shapes); "" on the
  // other endpoints.
  std::string responses_echo;
  std::string error;  // non-empty: the line is refused, with this message
  // With `error`: the field at fault as OpenAI's error "param" names it (ParamOfField:
  // "max_tokens", "messages[1].role", "custom_id"); "" when no single field is (invalid JSON).
  std::string error_param;
};

// The OpenAI param of one of our field names: "body.max_tokens" -> "max_tokens",
// "body.messages[1].role" -> "messages[1].role", "custom_id" -> "custom_id", "" -> "".
std::string ParamOfField(const std::string& field);

// Parses and validates one line. Never throws. On a bad line, `error` names the file, the line and
// the field, e.g. "jobs.jsonl:17: field 'body.max_tokens' must be a positive integer", and
// custom_id is kept when it could be read (so the error output can carry it). Only the first
// problem is reported. Every field of the body is either honoured, ignored as OpenAI ignores it
// (user, metadata, store, service_tier, prompt_cache_key, safety_identifier), or refused by name
// (functions, echo, suffix, best_of != n, an unknown field, ...: the
// table is BodyFieldRules() and the README); fields outside the body are ignored. Accepted as
// OpenAI / vLLM do: a field set to null counts as absent; integers may be written as integral
// floats (16.0); content as a list of
// {"type": "text", "text": ...} parts (joined with "\n", as vLLM joins them); role "developer"
// (OpenAI's newer name) becomes "system"; prompt as ["one string"]; top_k -1 is stored as 0 (no
// limit); max_completion_tokens wins over max_tokens; max_tokens defaults to 16 for completions
// here. Refused: stream true, a list of several prompts, non-text content parts. Duplicate
// custom_ids are the caller's to find (they span lines).
// Tools as OpenAI checks them: tools a list of function tools with distinct names; tool_choice
// "none" | "auto" | "required" | {"type": "function", "function": {"name": one of the tools}} |
// {"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [{"type":
// "function", "function": {"name": one of the tools}}, ...]}}, and
// other than "none" only with tools; messages of role "tool" need tool_call_id and content;
// assistant messages may carry tool_calls ([{"id", "type": "function", "function": {"name",
// "arguments": JSON text}}]) and then content null or absent; arguments that are not JSON are
// refused naming messages[i].tool_calls[j].function.arguments.
BatchRequest ParseBatchLine(std::string_view text, int line, const std::string& file);

// What llmq does with a body field on an endpoint: honours it, ignores it (as OpenAI does), or
// refuses the line naming it (`why` says why; some values of a conditionally refused field, such as
// response_format {"type": "text"}, are honoured).
enum class FieldUse { kHonoured, kIgnored, kRefused };
struct FieldRule {
  const char* name;
  // Where it is a field at all (elsewhere it is refused as unknown); a name may have a rule per
  // endpoint (completions' prompt is honoured, responses' refused).
  bool chat, completions, responses;
  FieldUse use;
  const char* why;  // for kRefused: the reason in the message; else what it does
};
const std::vector<FieldRule>& BodyFieldRules();

// A JSON list of chat messages (the CLI's --messages), checked and read as a chat request's
// body.messages is. InvalidArgument naming `what` and the field, e.g. "--messages: field
// 'body.messages[1].role' must be ...".
Status ParseChatMessages(std::string_view text, const std::string& what,
                         std::vector<ChatMessage>* out);
// A JSON list of tools (the CLI's --tools), checked and read as a chat request's body.tools is.
// Errors as ParseChatMessages's ("--tools: field 'body.tools[0].type' ...").
Status ParseChatTools(std::string_view text, const std::string& what, std::vector<ToolDef>* out);
// A JSON object of chat template variables (the CLI's --chat-template-kwargs), checked and read as
// a chat request's body.chat_template_kwargs is ("" for {}). Errors as ParseChatMessages's.
Status ParseChatTemplateKwargs(std::string_view text, const std::string& what, std::string* out);

}  // namespace llmq::jobs
