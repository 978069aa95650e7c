#include "engine/text/chat_format.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "engine/text/jinja.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;

// tokenizer_config.json's special token strings: "bos_token": "<s>", or {"content": "<s>", ...}
// (a serialized AddedToken), or null. Absent or null ones are left out, as transformers'
// special_tokens_map leaves out the unset ones.
nlohmann::ordered_json SpecialTokens(const std::string& model_dir, const Tokenizer& tok) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  std::ifstream f(fs::path(model_dir) / "tokenizer_config.json", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  // A malformed file was already refused by Tokenizer::Load; here it gives no tokens.
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!j.is_object() || !j.contains(key)) continue;
    const nlohmann::json& v = j[key];
    if (v.is_string()) out[key] = v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
      out[key] = v["content"].get<std::string>();
  }
  // A sentencepiece model without a config: transformers' LlamaTokenizer defaults.
  if (!tok.hf()) {
    if (!out.contains("bos_token") && tok.bos_id() >= 0 && tok.PieceToId("<s>") == tok.bos_id())
      out["bos_token"] = "<s>";
    if (!out.contains("eos_token") && tok.eos_id() >= 0 && tok.PieceToId("</s>") == tok.eos_id())
      out["eos_token"] = "</s>";
  }
  return out;
}

// FNV-1a, 64 bits: a portable digest for the resume identity (not a security boundary).
std::string Digest(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

ChatFormat::~ChatFormat() = default;

std::shared_ptr<const ChatFormat> ChatFormat::Builtin(ChatTemplate t, bool add_bos) {
  std::shared_ptr<ChatFormat> f(new ChatFormat());
  f->builtin_ = t;
  f->add_bos_ = add_bos;
  f->name_ = f->identity_ = ChatTemplateName(t);
  return f;
}

Status ChatFormat::Load(const std::string& model_dir, const std::string& choice,
                        const Tokenizer& tok, std::shared_ptr<const ChatFormat>* out) {
  if (!choice.empty()) {  // the operator's choice of a built-in
    ChatTemplate t;
    LLMQ_RETURN_IF_ERROR(ChatTemplateByName(choice, &t));
    *out = Builtin(t, tok.add_bos());
    return Status::Ok();
  }
  std::string origin;
  const std::string source = ReadTemplateSource(model_dir, &origin);
  bool found = false;
  const ChatTemplate detected = RecognizeTemplate(source, &found);
  // No template: llama-2, as before there were templates. A sentencepiece model whose template is
  // a built-in: the built-in (see the header).
  if (source.empty() || (found && !tok.hf())) {
    *out = Builtin(detected, tok.add_bos());
    return Status::Ok();
  }
  std::unique_ptr<jinja::Template> parsed;
  LLMQ_RETURN_IF_ERROR(jinja::Template::Parse(source, origin, &parsed));
  std::shared_ptr<ChatFormat> f(new ChatFormat());
  f->jinja_ = std::move(parsed);
  std::string tool_use_origin;
  const std::string tool_use = ReadNamedTemplateSource(model_dir, "tool_use", &tool_use_origin);
  if (!tool_use.empty()) {
    LLMQ_RETURN_IF_ERROR(jinja::Template::Parse(tool_use, tool_use_origin, &parsed));
    f->jinja_tool_use_ = std::move(parsed);
  }
  f->add_bos_ = tok.add_bos();
  const nlohmann::ordered_json specials = SpecialTokens(model_dir, tok);
  f->specials_json_ = specials.dump();
  f->bos_text_ = specials.value("bos_token", "");
  f->eos_text_ = specials.value("eos_token", "");
  f->name_ = origin;
  // (The tool_use template only when there is one: a model without keeps its identity.)
  f->identity_ = origin + " " +
                 Digest(source + '\0' + f->specials_json_ +
                        (tool_use.empty() ? std::string() : '\0' + tool_use));
  *out = std::move(f);
  return Status::Ok();
}

Status ChatFormat::CheckBuiltin(const Conversation& conversation) const {
  if (!conversation.add_generation_prompt || conversation.continue_final_message)
    return Status::InvalidArgument(
        std::string("field '") +
        (conversation.continue_final_message ? "continue_final_message" : "add_generation_prompt") +
        "': the " + name_ +
        " built-in chat template always opens the assistant's turn (the model's own template "
        "can leave it out)");
  if (conversation.tools.empty()) return Status::Ok();
  return Status::InvalidArgument("field 'tools': the " + name_ +
                                 " built-in chat template cannot render tools (the model's own "
                                 "template can)");
}

Status ChatFormat::RenderJinja(const Conversation& conversation, std::string* text) const {
  using ordered = nlohmann::ordered_json;
  // A JSON text the request layer already checked; `field` names it if it does not parse.
  const auto parse = [](const std::string& s, const std::string& field, ordered* out) {
    *out = ordered::parse(s, nullptr, /*allow_exceptions=*/false);
    if (out->is_discarded())
      return Status::InvalidArgument("field '" + field + "': not JSON: " + s.substr(0, 60));
    return Status::Ok();
  };
  // What transformers passes (to the "tool_use" template, when there is one, for tools): messages,
  // tools (null when none) and documents (none),
  // add_generation_prompt, and the special tokens map. Ordered, so that a template's tojson lists
  // keys as written. A message's keys as vLLM gives them: role, content, tool_calls, tool_call_id,
  // name, reasoning and reasoning_content (each only when the request has it).
  ordered ctx = ordered::parse(specials_json_);
  ordered msgs = ordered::array();
  for (size_t i = 0; i < conversation.messages.size(); ++i) {
    const Message& m = conversation.messages[i];
    ordered msg = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty())
      LLMQ_RETURN_IF_ERROR(parse(m.tool_calls, "messages[" + std::to_string(i) + "].tool_calls",
                                 &msg["tool_calls"]));
    if (!m.tool_call_id.empty()) msg["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) msg["name"] = m.name;
    if (m.reasoning) {
      msg["reasoning"] = *m.reasoning;
      msg["reasoning_content"] = *m.reasoning;
    }
    msgs.push_back(std::move(msg));
  }
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = nullptr;
  if (!conversation.tools.empty()) {
    ctx["tools"] = ordered::array();
    for (size_t i = 0; i < conversation.tools.size(); ++i)
      LLMQ_RETURN_IF_ERROR(parse(conversation.tools[i], "tools[" + std::to_string(i) + "]",
                                 &ctx["tools"].emplace_back()));
  }
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] =
      conversation.add_generation_prompt && !conversation.continue_final_message;
  if (!conversation.template_kwargs.empty()) {
    ordered kwargs;
    LLMQ_RETURN_IF_ERROR(parse(conversation.template_kwargs, "chat_template_kwargs", &kwargs));
    if (!kwargs.is_object())
      return Status::InvalidArgument("field 'chat_template_kwargs': not a JSON object");
    for (auto& [key, value] : kwargs.items()) {
      if (ctx.contains(key))
        return Status::InvalidArgument("field 'chat_template_kwargs." + key +
                                       "': the chat template's own variable, set by llmq");
      ctx[key] = std::move(value);
    }
  }
  const jinja::Template& tmpl =
      conversation.tools.empty() || !jinja_tool_use_ ? *jinja_ : *jinja_tool_use_;
  const Status st = tmpl.RenderOrdered(ctx, text);
  if (!st.ok()) return Status::InvalidArgument("field 'messages': " + st.message());
  if (conversation.continue_final_message) return CutAfterFinalMessage(conversation, text);
  return Status::Ok();
}

// As transformers' apply_chat_template(continue_final_message=True): the text ends where the final
// message's content ends, at its last occurrence (its stripped form: a template may trim it; where
// the template kept the content's trailing space, that space stays). Stripped of ASCII whitespace
// (Python's strip() also strips Unicode's).
Status ChatFormat::CutAfterFinalMessage(const Conversation& conversation, std::string* text) {
  const size_t last = conversation.messages.size() - 1;
  const std::string& content = conversation.messages[last].content;
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  size_t b = 0, e = content.size();
  while (b < e && space(content[b])) ++b;
  while (e > b && space(content[e - 1])) --e;
  const std::string_view stripped(content.data() + b, e - b), lstripped(content.data() + b);
  const size_t at = text->rfind(stripped);
  if (at == std::string::npos)
    return Status::InvalidArgument("field 'messages[" + std::to_string(last) +
                                   "].content': continue_final_message is set but the final "
                                   "message does not appear in the prompt the chat template "
                                   "renders (it changes or leaves out its text)");
  // (transformers compares the slice with the unstripped content: leading space never matches.)
  const bool kept = b == 0 && text->compare(at, lstripped.size(), lstripped) == 0;
  text->resize(at + (kept ? lstripped.size() : stripped.size()));
  return Status::Ok();
}

Status ChatFormat::Render(const Conversation& conversation, std::string* text) const {
  if (jinja_) return RenderJinja(conversation, text);
  LLMQ_RETURN_IF_ERROR(CheckBuiltin(conversation));
  return RenderChat(builtin_, conversation.messages, add_bos_, text);
}

Status ChatFormat::Render(const std::vector<Message>& messages, std::string* text) const {
  return Render(Conversation{messages, {}}, text);
}

Status ChatFormat::Encode(const Tokenizer& tok, const std::vector<Message>& messages,
                          std::vector<int>* ids) const {
  return Encode(tok, Conversation{messages, {}}, ids);
}

Status ChatFormat::Encode(const Tokenizer& tok, const Conversation& conversation,
                          std::vector<int>* ids) const {
  if (!jinja_) {
    LLMQ_RETURN_IF_ERROR(CheckBuiltin(conversation));
    return EncodeChat(tok, builtin_, conversation.messages, ids);
  }
  std::string text;
  LLMQ_RETURN_IF_ERROR(RenderJinja(conversation, &text));
  ids->clear();
  if (tok.hf()) {  // added tokens are matched in the text by the tokenizer itself
    *ids = tok.EncodeNoBos(text);
    return Status::Ok();
  }
  // Sentencepiece: the BOS / EOS strings are their ids; the runs of text between are encoded
  // alone (each with sentencepiece's dummy-prefix space, as the slow Llama tokenizer does).
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = std::string::npos, len = 0;
    int id = -1;
    for (const auto& [s, sid] : {std::pair{&bos_text_, tok.bos_id()}, {&eos_text_, tok.eos_id()}}) {
      if (s->empty() || sid < 0) continue;
      const size_t at = text.find(*s, pos);
      if (at < next) {
        next = at;
        len = s->size();
        id = sid;
      }
    }
    const std::string run = text.substr(pos, next == std::string::npos ? next : next - pos);
    if (!run.empty()) {
      const std::vector<int> part = tok.EncodeNoBos(run);
      ids->insert(ids->end(), part.begin(), part.end());
    }
    if (next == std::string::npos) break;
    ids->push_back(id);
    pos = next + len;
  }
  return Status::Ok();
}

}  // namespace llmq
