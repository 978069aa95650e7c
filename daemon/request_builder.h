// RequestBuilder: the one code path between an input line and the engine, shared by ingest
// (validation and planning, no tokenization: fast enough for 100,000-line jobs) and feeding
// (tokenization, limits, seeds), and from an engine output back to an output line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "engine/structured/grammar_cache.h"
#include "engine/structured/tool_calls.h"
#include "engine/text/chat_format.h"
#include "engine/text/reasoning.h"
#include "jobs/batch_output.h"
#include "jobs/batch_request.h"

namespace llmq {

// What turning lines into engine requests depends on.
struct BuildContext {
  const Model* model = nullptr;
  std::shared_ptr<const ChatFormat> chat;  // the model's chat format (never null once set up)
  int capacity = 0;  // tokens one sequence can hold (LlmEngine::max_sequence_tokens)
  // Names the setting that limits `capacity` in messages, e.g. "--kv-cache-memory 100 (the
  // KV cache holds 16 tokens)": a refusal caused by the operator's settings says so.
  std::string capacity_setting;
  std::string model_name;          // the "model" field of every response (the model that ran)
  std::string system_fingerprint;  // daemon/model_fingerprint.h; "" writes null
  // The model's compiled grammars (response_format json_object / json_schema); lines that ask for
  // one are refused when it is null.
  std::shared_ptr<GrammarCache> grammars;
  // How the model writes tool calls (model.tool_call_format, else recognised from its chat
  // template: SetToolCallFormat); unset, lines whose tool_choice is not "none" are refused with
  // `tool_format_problem`.
  std::optional<ToolCallFormat> tool_format;
  std::string tool_format_problem = "the model's tool-call format is not known";
  // How the model marks its thought (model.reasoning_parser, engine/text/reasoning.h): a chat
  // response carries it as message.reasoning_content, and a chat line's grammar binds the answer
  // after it. Unset: the thought, if any, is content like the rest.
  std::optional<ReasoningFormat> reasoning;
};

// ctx->tool_format from `config_format` (model.tool_call_format: a format's name, or "" to
// recognise it from the template source `template_source`, read from `origin`).
void SetToolCallFormat(const std::string& config_format, const std::string& template_source,
                       const std::string& origin, BuildContext* ctx);

// The grammar a line's output must follow: its response_format's schema, or its tools' calls
// (tool_choice "required" or a named function: from the first token; "auto": lazily, from the
// format's trigger on). With ctx.reasoning, a chat line's schema or required calls bind the answer
// only: lazily from </think> on (the grammar begins with it), and "auto" calls are looked for only
// after </think>, unless the prompt closed the thought (PromptThoughtFor). Null grammar: free text.
struct LineGrammar {
  std::shared_ptr<CompiledGrammar> grammar;
  ToolCallTrigger trigger;  // empty text: from the first token
  // Under tool_choice "auto" with ctx.reasoning and a thought the prompt left open: "</think>",
  // so that a call opened inside the thought is text (Request::grammar_trigger_after).
  std::string trigger_after;
};

// A chat line's conversation as the chat template gets it: its messages (tool calls, tool results,
// names) and its tools as written. Content null or absent (a tool-call turn) is given as "", as
// vLLM gives it (its "string" content format joins no parts): templates such as Qwen3's test
// `'</think>' in message.content`, which null would fail.
Conversation ChatConversation(const jobs::BatchRequest& r);

// What a chat line's prompt says of the model's thought (engine/text/reasoning.h): the tail read is
// what rendering the conversation with the generation prompt adds to rendering it without (under
// continue_final_message, the final message's text). kNone for the other endpoints, and when the
// template refuses the conversation (PlanKey says why).
PromptThought PromptThoughtFor(const BuildContext& ctx, const jobs::BatchRequest& r);

// Validates a parsed line beyond its JSON (the chat template accepts its messages) and gives the
// key the ingest planner orders it by: the rendered prompt's bytes, four to an int32 (requests
// sharing a textual prefix share a token prefix), or its token ids for a prompt given as ids. Its
// response_format's schema is compiled (GrammarFor), so that a schema that cannot be enforced
// refuses the line at ingest; its tools' calls likewise.
// InvalidArgument naming `file`, the line and the field when the line cannot run; `*param` (when
// given) is then that field as OpenAI's error param names it ("messages[1].role",
// jobs::ParamOfField), or "" when no single field is at fault.
[[nodiscard]] Status PlanKey(const BuildContext& ctx, const jobs::BatchRequest& r,
                             const std::string& file, std::vector<int32_t>* key,
                             std::string* param = nullptr);

// The grammar a line asks for (LineGrammar), compiled once per schema or set of tools.
// InvalidArgument naming `file`, the line and the field, with the compiler's refusal (`json_schema:
// keyword "K" at "/pointer": why`, `body.tools[1].function.parameters: keyword ...`) when it
// cannot be enforced, or the reason tools cannot be (the model's call format is not known,
// response_format beside tools, min_tokens with calls); `*param` as PlanKey's.
[[nodiscard]] Status GrammarFor(const BuildContext& ctx, const jobs::BatchRequest& r,
                                const std::string& file, LineGrammar* out,
                                std::string* param = nullptr);

// The prompt's token ids as the engine gets them: the chat template's encoding of the messages,
// the ids given, or the encoded prompt. Errors as BuildRequest's (a conversation the template
// refuses, ids outside the vocabulary); an empty prompt is not refused here.
[[nodiscard]] Status PromptIds(const BuildContext& ctx, const jobs::BatchRequest& r,
                               const std::string& file, std::vector<int>* ids,
                               std::string* param = nullptr);

// Tokenizes a valid line into an engine request: prompt ids, sampling parameters (an unseeded
// request gets DefaultSeed(job_id, custom_id)), n. InvalidArgument naming `file`, the line and
// the field, or the setting when the operator's configuration is the cause (then `*param` is "");
// `*param` as PlanKey's.
[[nodiscard]] Status BuildRequest(const BuildContext& ctx, const jobs::BatchRequest& r,
                                  const std::string& file, const std::string& job_id, Request* out,
                                  std::string* param = nullptr);

// The bytes each id of `c` added to its text, one per logprobs entry, so that joined they are
// c.text: from Completion::text_begin, nothing for an id that added nothing (a control id such as
// <|im_start|> or <s>, the stop id, ids past a stop string), the text Decode renders for the others
// (" ⁇ " for <unk>). Ids whose bytes were held back until a later id (byte-level or byte-fallback
// pieces) get their own bytes when these, joined, are that text exactly (parts of a character),
// else each its bytes with U+FFFD for what is not UTF-8 when that is the text (bytes that never
// made a character), else the last one gets the text. Without text_begin (a Completion not made by
// the engine): each id's TokenBytes.
std::vector<std::string> TokenPieces(const Tokenizer& tok, const Completion& c);

// The output line of a finished request: logprobs name each chosen token by TokenPieces (its bytes
// and their jobs::TokenText), and each other top token by its TokenBytes. A chat line whose tools
// were enforced (tool_choice other than "none") gets the calls of each completion that wrote them
// (daemon/tool_output.h) as message.tool_calls, finish_reason "tool_calls", and the text before
// them as content (null when none). With ctx.reasoning a chat message's text is split into
// reasoning_content and content (SplitReasoning; the prompt rendered again only for a text with
// neither tag).
std::string OutputLine(const BuildContext& ctx, const jobs::BatchRequest& r, const RequestOutput& o,
                       const std::string& request_id, int64_t created);

// "batch_req_<job hex>_<line hex>": unique across jobs (the job's public id is random).
std::string RequestIdFor(const std::string& job_public_id, int64_t line);

}  // namespace llmq
