#include "daemon/request_builder.h"

#include <algorithm>
#include <cstdio>

#include "daemon/tool_output.h"
#include "engine/structured/grammar.h"

namespace llmq {
namespace {

// "field 'messages[2].role': ..." from the chat template -> the body's field; `*param` is the
// OpenAI param it names ("messages[2].role"; "messages" when the message names no field). On
// /v1/responses the field is body.input, the message named after it ("field 'body.input' (the
// conversation's messages[2].role): ...").
std::string BodyField(std::string msg, jobs::Endpoint e, std::string* param) {
  *param = "messages";
  if (msg.rfind("field '", 0) == 0) {
    const size_t end = msg.find('\'', 7);
    if (end != std::string::npos) *param = msg.substr(7, end - 7);
    if (e == jobs::Endpoint::kResponses && end != std::string::npos)
      msg.replace(0, end + 1, "field 'body.input' (the conversation's " + *param + ")");
    else
      msg.insert(7, "body.");
  }
  *param = jobs::ParamOfField(jobs::FieldOn(e, "body." + *param));
  return msg;
}

std::string Where(const std::string& file, const jobs::BatchRequest& r) {
  return file + ":" + std::to_string(r.line) + ": ";
}

// Bytes packed four to an int32 (big-endian, so that a shared byte prefix is a shared key prefix
// up to the last whole group); the last group carries its length in its low byte's place when
// partial, so "ab" and "ab\0" differ.
void PackBytes(const std::string& s, std::vector<int32_t>* key) {
  key->clear();
  key->reserve(s.size() / 4 + 1);
  size_t i = 0;
  for (; i + 4 <= s.size(); i += 4)
    key->push_back(static_cast<int32_t>((uint32_t(uint8_t(s[i])) << 24) |
                                        (uint32_t(uint8_t(s[i + 1])) << 16) |
                                        (uint32_t(uint8_t(s[i + 2])) << 8) | uint8_t(s[i + 3])));
  uint32_t tail = 0;
  for (size_t k = 0; i + k < s.size(); ++k) tail |= uint32_t(uint8_t(s[i + k])) << (24 - 8 * k);
  key->push_back(static_cast<int32_t>(tail | uint32_t(s.size() - i)));
}

// The token ids a line names besides its prompt (logit_bias, stop_token_ids) lie in the vocabulary.
Status CheckTokenIds(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
                     std::string* param) {
  const int vocab = ctx.model->cfg.vocab_size;
  auto outside = [&](const std::string& field, int64_t id) {
    *param = jobs::ParamOfField(field);
    return Status::InvalidArgument(Where(file, r) + "field '" + field + "': token id " +
                                   std::to_string(id) + " is outside the vocabulary (" +
                                   std::to_string(vocab) + ")");
  };
  for (const auto& [id, bias] : r.logit_bias)
    if (id >= vocab) return outside("body.logit_bias." + std::to_string(id), id);
  for (size_t i = 0; i < r.stop_token_ids.size(); ++i)
    if (r.stop_token_ids[i] >= vocab)
      return outside("body.stop_token_ids[" + std::to_string(i) + "]", r.stop_token_ids[i]);
  return Status::Ok();
}

// A prompt given as token ids lies in the vocabulary.
Status CheckPromptIds(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
                      std::string* param) {
  for (int32_t id : r.prompt_token_ids)
    if (id < 0 || id >= ctx.model->cfg.vocab_size) {
      *param = "prompt";
      return Status::InvalidArgument(Where(file, r) + "field 'body.prompt': token id " +
                                     std::to_string(id) + " is outside the vocabulary (" +
                                     std::to_string(ctx.model->cfg.vocab_size) + ")");
    }
  return Status::Ok();
}

// What a line's grammar must begin with: "</think>" when its answer follows a thought the model
// is still to write (ctx.reasoning, a chat line whose prompt did not close the thought), else "".
std::string AnswerAfter(const BuildContext& ctx, const jobs::BatchRequest& r) {
  if (!ctx.reasoning || !jobs::IsChat(r.endpoint)) return "";
  return PromptThoughtFor(ctx, r) == PromptThought::kClosed ? "" : std::string(kThinkEnd);
}

// A grammar asked for after `after` ("" none) is applied lazily, from that text on.
void LazyAfter(const std::string& after, LineGrammar* out) {
  if (!after.empty()) out->trigger = ToolCallTrigger{after, false};
}

// The grammar of a line's tool calls: none for tool_choice "none" (or no tools).
Status ToolGrammar(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
                   LineGrammar* out, std::string* param) {
  if (r.tools.empty() || r.tool_choice == jobs::ToolChoice::kNone) return Status::Ok();
  auto refuse = [&](const std::string& chat_field, const std::string& why) {
    const std::string field = jobs::FieldOn(r.endpoint, chat_field);
    *param = jobs::ParamOfField(field);
    return Status::InvalidArgument(Where(file, r) + "field '" + field + "': " + why);
  };
  if (!ctx.tool_format) return refuse("body.tools", ctx.tool_format_problem);
  if (ctx.grammars == nullptr) return refuse("body.tools", "tool calls are not available here");
  if (r.response_format != jobs::ResponseFormat::kText)
    return refuse(r.structured_field, "cannot be combined with tools (tool_choice \"" +
                                          std::string(r.tool_choice == jobs::ToolChoice::kAuto
                                                          ? "auto"
                                                          : "required or a function") +
                                          "\"): one grammar per output");
  if (r.min_tokens > 0)
    return refuse("body.min_tokens", "cannot be combined with enforced tool calls");
  ToolCallGrammarSpec spec;
  spec.format = *ctx.tool_format;
  spec.parallel = r.parallel_tool_calls;
  // The tools a call may name: the named one, the allowed ones, else all of them.
  auto callable = [&](const jobs::ToolDef& t) {
    if (r.tool_choice == jobs::ToolChoice::kNamed) return t.name == r.tool_choice_name;
    return r.allowed_tools.empty() || std::find(r.allowed_tools.begin(), r.allowed_tools.end(),
                                                t.name) != r.allowed_tools.end();
  };
  for (const jobs::ToolDef& t : r.tools)
    if (callable(t)) spec.tools.push_back({t.name, t.parameters});
  // Under auto the calls' own trigger makes the grammar lazy already: it is looked for after the
  // thought (a trigger at the message's start, llama3_json's, is not: no thinking family uses it).
  const bool autos = r.tool_choice == jobs::ToolChoice::kAuto;
  const std::string after = autos ? "" : AnswerAfter(ctx, r);
  if (const Status st = ctx.grammars->ToolCalls(spec, &out->grammar, after); !st.ok()) {
    // "tools[1].function.parameters: why" -> field 'body.tools[1].function.parameters': why
    const std::string& m = st.message();
    const size_t colon = m.find(": ");
    if (m.rfind("tools[", 0) == 0 && colon != std::string::npos)
      return refuse("body." + m.substr(0, colon), m.substr(colon + 2));
    return refuse("body.tools", m);
  }
  if (autos) {
    out->trigger = TriggerOf(*ctx.tool_format);
    if (!out->trigger.at_start) out->trigger_after = AnswerAfter(ctx, r);
  }
  LazyAfter(after, out);
  return Status::Ok();
}

// The completion tokens of a thought: those through the one that completes </think>, all of them
// (less a closing control token) when there is none.
int64_t ThoughtTokens(const Tokenizer& tok, const Completion& c) {
  std::string bytes;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    // The tag ends in this token: look from where it could have begun.
    const size_t from = bytes.size() >= kThinkEnd.size() ? bytes.size() - kThinkEnd.size() + 1 : 0;
    bytes += tok.TokenBytes(c.ids[i]);
    if (bytes.find(kThinkEnd, from) != std::string::npos) return static_cast<int64_t>(i) + 1;
  }
  const bool stop = !c.ids.empty() && tok.IsControl(c.ids.back());
  return static_cast<int64_t>(c.ids.size()) - (stop ? 1 : 0);
}

jobs::LogprobToken Token(std::string bytes, float logprob) {
  std::string text = jobs::TokenText(bytes);
  return {std::move(text), std::move(bytes), logprob};
}

}  // namespace

Conversation ChatConversation(const jobs::BatchRequest& r) {
  Conversation c;
  c.messages.reserve(r.messages.size());
  for (const jobs::ChatMessage& m : r.messages)
    c.messages.push_back({m.role, m.content, m.tool_call_id, m.name, m.tool_calls, m.reasoning});
  c.tools.reserve(r.tools.size());
  for (const jobs::ToolDef& t : r.tools) c.tools.push_back(t.json);
  c.template_kwargs = r.chat_template_kwargs;
  c.add_generation_prompt = r.add_generation_prompt;
  c.continue_final_message = r.continue_final_message;
  return c;
}

PromptThought PromptThoughtFor(const BuildContext& ctx, const jobs::BatchRequest& r) {
  if (!jobs::IsChat(r.endpoint) || ctx.chat == nullptr) return PromptThought::kNone;
  Conversation c = ChatConversation(r);
  if (c.continue_final_message)
    return c.messages.empty() ? PromptThought::kNone : PromptThoughtOf(c.messages.back().content);
  if (!c.add_generation_prompt) return PromptThought::kNone;
  std::string with, without;
  if (!ctx.chat->Render(c, &with).ok()) return PromptThought::kNone;
  c.add_generation_prompt = false;
  if (!ctx.chat->Render(c, &without).ok()) return PromptThought::kNone;
  std::string_view tail = with;
  if (tail.substr(0, without.size()) == without) tail.remove_prefix(without.size());
  return PromptThoughtOf(tail);
}

void SetToolCallFormat(const std::string& config_format, const std::string& template_source,
                       const std::string& origin, BuildContext* ctx) {
  ctx->tool_format.reset();
  ToolCallFormat f;
  if (!config_format.empty()) {
    if (ToolCallFormatByName(config_format, &f).ok()) ctx->tool_format = f;
    return;
  }
  bool found = false;
  f = RecognizeToolCallFormat(template_source, &found);
  if (found) {
    ctx->tool_format = f;
    return;
  }
  ctx->tool_format_problem =
      template_source.empty()
          ? "the model has no chat template that renders tools"
          : "the model's chat template (" + origin +
                ") writes no tool-call format llmq knows (hermes, llama3_json, mistral): name one "
                "in model.tool_call_format";
}

Status GrammarFor(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
                  LineGrammar* out, std::string* param) {
  std::string unused;
  if (param == nullptr) param = &unused;
  *out = LineGrammar();
  if (r.response_format == jobs::ResponseFormat::kText)
    return ToolGrammar(ctx, r, file, out, param);
  using RF = jobs::ResponseFormat;
  // The field a refusal names: the schema itself under response_format json_schema, else the
  // field that asked (response_format, structured_outputs.regex, guided_choice, ...).
  const bool schema = r.response_format == RF::kJsonSchema;
  const std::string field = schema && r.structured_field == "body.response_format"
                                ? "body.response_format.json_schema.schema"
                            : schema && r.structured_field == "body.text.format"
                                ? "body.text.format.schema"
                                : r.structured_field;
  if (!r.tools.empty() && r.tool_choice != jobs::ToolChoice::kNone)
    return ToolGrammar(ctx, r, file, out, param);  // refuses the pair, naming the field
  *param = jobs::ParamOfField(field);
  if (ctx.grammars == nullptr)
    return Status::InvalidArgument(Where(file, r) + "field '" + field +
                                   "': structured outputs are not available here");
  const std::string after = AnswerAfter(ctx, r);
  Status st;
  switch (r.response_format) {
    case RF::kJsonObject:
      st = ctx.grammars->JsonObject(&out->grammar, after);
      break;
    case RF::kJsonSchema:
      st = ctx.grammars->JsonSchema(r.json_schema, &out->grammar, after);
      break;
    case RF::kRegex:
      st = ctx.grammars->MatchRegex(r.regex, &out->grammar, after);
      break;
    case RF::kGrammar:
      st = ctx.grammars->Ebnf(r.grammar, &out->grammar, after);
      break;
    default: {  // kChoice: the alternation of the strings, each as it is written
      std::string pattern;
      for (const std::string& c : r.choices)
        pattern += (pattern.empty() ? "" : "|") + RegexEscape(c);
      st = ctx.grammars->MatchRegex(pattern, &out->grammar, after);
    }
  }
  if (!st.ok())
    return Status::InvalidArgument(Where(file, r) + "field '" + field + "': " + st.message());
  LazyAfter(after, out);
  param->clear();
  return Status::Ok();
}

Status PlanKey(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
               std::vector<int32_t>* key, std::string* param) {
  std::string unused;
  if (param == nullptr) param = &unused;
  param->clear();
  LLMQ_RETURN_IF_ERROR(CheckTokenIds(ctx, r, file, param));
  LineGrammar grammar;
  LLMQ_RETURN_IF_ERROR(GrammarFor(ctx, r, file, &grammar, param));
  if (jobs::IsChat(r.endpoint)) {
    LLMQ_CHECK(ctx.chat != nullptr);  // set up by LoadServing / LoadChatFormat
    std::string text;
    if (Status st = ctx.chat->Render(ChatConversation(r), &text); !st.ok())
      return Status::InvalidArgument(Where(file, r) + BodyField(st.message(), r.endpoint, param));
    PackBytes(text, key);
  } else if (r.prompt_is_ids) {
    LLMQ_RETURN_IF_ERROR(CheckPromptIds(ctx, r, file, param));
    // Ids, kept apart from text keys by a leading marker no packed text group can equal.
    key->assign(1, INT32_MIN);
    key->insert(key->end(), r.prompt_token_ids.begin(), r.prompt_token_ids.end());
  } else {
    PackBytes(r.prompt, key);
  }
  return Status::Ok();
}

Status PromptIds(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
                 std::vector<int>* ids, std::string* param) {
  std::string unused;
  if (param == nullptr) param = &unused;
  if (jobs::IsChat(r.endpoint)) {
    LLMQ_CHECK(ctx.chat != nullptr);  // set up by LoadServing / LoadChatFormat
    if (Status st = ctx.chat->Encode(*ctx.model->tokenizer, ChatConversation(r), ids); !st.ok())
      return Status::InvalidArgument(Where(file, r) + BodyField(st.message(), r.endpoint, param));
  } else if (r.prompt_is_ids) {
    LLMQ_RETURN_IF_ERROR(CheckPromptIds(ctx, r, file, param));
    ids->assign(r.prompt_token_ids.begin(), r.prompt_token_ids.end());
  } else {
    *ids = ctx.model->tokenizer->Encode(r.prompt);
  }
  return Status::Ok();
}

Status BuildRequest(const BuildContext& ctx, const jobs::BatchRequest& r, const std::string& file,
                    const std::string& job_id, Request* out, std::string* param) {
  std::string unused;
  if (param == nullptr) param = &unused;
  param->clear();
  const Model& m = *ctx.model;
  const std::string where = Where(file, r);
  LLMQ_RETURN_IF_ERROR(CheckTokenIds(ctx, r, file, param));
  std::vector<int> ids;
  LLMQ_RETURN_IF_ERROR(PromptIds(ctx, r, file, &ids, param));
  const std::string prompt_field =
      jobs::IsChat(r.endpoint) ? jobs::FieldOn(r.endpoint, "body.messages") : "body.prompt";
  const int ctx_len = m.cfg.max_position_embeddings;
  const int n = static_cast<int>(ids.size());
  if (n == 0) {
    *param = jobs::ParamOfField(prompt_field);
    return Status::InvalidArgument(where + "field '" + prompt_field + "': the prompt is empty");
  }
  // Chat without max_tokens may use what is left of what one sequence can hold.
  const int64_t max_tokens = r.max_tokens.value_or(
      r.endpoint == jobs::Endpoint::kCompletions ? 16 : std::min(ctx.capacity, ctx_len) - n);
  const std::string field =
      r.max_tokens ? jobs::FieldOn(r.endpoint, "body.max_tokens") : prompt_field;
  if (n >= ctx_len || n + max_tokens > ctx_len) {
    *param = jobs::ParamOfField(field);
    return Status::InvalidArgument(where + "field '" + field + "': prompt (" + std::to_string(n) +
                                   " tokens) + max_tokens (" + std::to_string(max_tokens) +
                                   ") exceed the model's context of " + std::to_string(ctx_len) +
                                   " tokens");
  }
  // Within the model's context but beyond the KV cache: the operator's setting is the cause.
  if (n >= ctx.capacity || n + max_tokens > ctx.capacity)
    return Status::InvalidArgument(where + "prompt (" + std::to_string(n) +
                                   " tokens) + max_tokens (" + std::to_string(max_tokens) +
                                   ") do not fit the KV cache of " + std::to_string(ctx.capacity) +
                                   " tokens set by " + ctx.capacity_setting + ": raise it");
  LineGrammar grammar;
  LLMQ_RETURN_IF_ERROR(GrammarFor(ctx, r, file, &grammar, param));
  out->grammar = std::move(grammar.grammar);
  out->grammar_trigger = std::move(grammar.trigger.text);
  out->grammar_trigger_at_start = grammar.trigger.at_start;
  out->grammar_trigger_after = std::move(grammar.trigger_after);
  out->prompt_ids.assign(ids.begin(), ids.end());
  SamplingParams& p = out->params;
  p.max_tokens = static_cast<int>(max_tokens);
  p.temperature = static_cast<float>(r.temperature);
  p.top_p = static_cast<float>(r.top_p);
  p.top_k = r.top_k;
  p.min_p = static_cast<float>(r.min_p);
  p.seed = r.seed ? static_cast<uint64_t>(*r.seed) : DefaultSeed(job_id, r.custom_id);
  p.stop = r.stop;
  p.ignore_eos = r.ignore_eos;
  p.presence_penalty = static_cast<float>(r.presence_penalty);
  p.frequency_penalty = static_cast<float>(r.frequency_penalty);
  p.repetition_penalty = static_cast<float>(r.repetition_penalty);
  p.logit_bias.clear();
  for (const auto& [id, bias] : r.logit_bias)
    p.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  p.min_tokens = r.min_tokens;
  p.stop_token_ids.assign(r.stop_token_ids.begin(), r.stop_token_ids.end());
  p.logprobs = r.logprobs;
  out->n = r.n;
  return Status::Ok();
}

std::string OutputLine(const BuildContext& ctx, const jobs::BatchRequest& r, const RequestOutput& o,
                       const std::string& request_id, int64_t created) {
  std::vector<jobs::Choice> choices;
  choices.reserve(o.completions.size());
  const bool tools = !r.tools.empty() && r.tool_choice != jobs::ToolChoice::kNone &&
                     ctx.tool_format && ctx.model->tokenizer;
  const bool reasoning = ctx.reasoning && jobs::IsChat(r.endpoint);
  std::optional<PromptThought> prompt;  // rendered again once, when a text needs it
  int64_t reasoning_tokens = 0;
  for (const Completion& c : o.completions) {
    jobs::Choice& ch = choices.emplace_back(jobs::Choice{c.text, c.finish_reason, {}, {}});
    if (tools) {
      ToolMessage m = SplitToolCalls(*ctx.model->tokenizer, *ctx.tool_format, c,
                                     reasoning ? kThinkEnd : std::string_view());
      if (!m.calls.empty()) {
        const int index = static_cast<int>(choices.size()) - 1;
        for (size_t k = 0; k < m.calls.size(); ++k)
          ch.tool_calls.push_back(
              {ToolCallId(*ctx.tool_format, request_id, index, static_cast<int>(k)),
               std::move(m.calls[k].name), std::move(m.calls[k].arguments)});
        ch.text = std::move(m.content);
        if (c.finish_reason == "stop") ch.finish_reason = "tool_calls";
      }
    }
    if (reasoning) {
      ReasoningSplit s = SplitReasoning(*ctx.reasoning, ch.text, [&] {
        if (!prompt) prompt = PromptThoughtFor(ctx, r);
        return *prompt;
      });
      ch.reasoning_parsed = true;
      if (s.reasoning && ctx.model->tokenizer)
        reasoning_tokens += ThoughtTokens(*ctx.model->tokenizer, c);
      ch.reasoning_content = std::move(s.reasoning);
      ch.has_content = s.content.has_value();
      ch.text = std::move(s.content).value_or("");
    }
    if (r.logprobs < 0 || !ctx.model->tokenizer) continue;
    const Tokenizer& tok = *ctx.model->tokenizer;
    std::vector<std::string> pieces = TokenPieces(tok, c);
    ch.logprobs.reserve(c.logprobs.size());
    for (size_t i = 0; i < c.logprobs.size(); ++i) {
      const TokenLogprobs& t = c.logprobs[i];
      jobs::TokenLogprob& e = ch.logprobs.emplace_back();
      e.chosen = Token(std::move(pieces[i]), t.logprob);
      // The chosen id among the alternatives is named as it is chosen; the others by their bytes.
      for (const TopLogprob& x : t.top)
        e.top.push_back(x.id == t.id ? jobs::LogprobToken{e.chosen.token, e.chosen.bytes, x.logprob}
                                     : Token(tok.TokenBytes(x.id), x.logprob));
    }
  }
  const jobs::Usage usage{o.metrics.prompt_tokens, o.metrics.completion_tokens,
                          o.metrics.cached_prompt_tokens, reasoning_tokens};
  // The model that ran, not the request's echo (a request's "model" picks the workers that may
  // run its job: model.served_names).
  return jobs::SuccessLine(r, choices, usage, request_id, created, ctx.model_name,
                           ctx.system_fingerprint);
}

std::vector<std::string> TokenPieces(const Tokenizer& tok, const Completion& c) {
  const size_t n = c.logprobs.size();
  std::vector<std::string> pieces(n);
  if (c.text_begin.size() != n) {  // not from an engine: each id's own bytes
    for (size_t i = 0; i < n; ++i) pieces[i] = tok.TokenBytes(c.logprobs[i].id);
    return pieces;
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t begin = std::min<size_t>(c.text_begin[i], c.text.size());
    const size_t end =
        std::min<size_t>(i + 1 < n ? c.text_begin[i + 1] : c.text.size(), c.text.size());
    if (end > begin) pieces[i] = c.text.substr(begin, end - begin);
  }
  // Ids whose bytes were held back until a later id completed their character: when their own
  // bytes spell that id's text exactly, each gets its own (a part of a character).
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && pieces[j].empty()) ++j;
    if (j == n) break;
    if (j > i) {
      std::vector<std::string> own(j - i + 1), shown(j - i + 1);
      std::string all_own, all_shown;
      for (size_t k = i; k <= j; ++k) {
        own[k - i] = tok.TokenBytes(c.logprobs[k].id);
        shown[k - i] = Utf8Lossy(own[k - i]);
        all_own += own[k - i];
        all_shown += shown[k - i];
      }
      // Parts of one character; else bytes that never made one, each a U+FFFD in the text.
      const std::vector<std::string>* by = all_own == pieces[j]     ? &own
                                           : all_shown == pieces[j] ? &shown
                                                                    : nullptr;
      if (by != nullptr)
        for (size_t k = i; k <= j; ++k) pieces[k] = (*by)[k - i];
    }
    i = j + 1;
  }
  return pieces;
}

std::string RequestIdFor(const std::string& job_public_id, int64_t line) {
  const std::string hex =
      job_public_id.rfind("batch_", 0) == 0 ? job_public_id.substr(6) : job_public_id;
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%llx", static_cast<unsigned long long>(line));
  return "batch_req_" + hex + buf;
}

}  // namespace llmq
