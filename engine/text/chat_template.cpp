// The four built-in chat templates, rendered as their canonical Hugging Face Jinja templates render
// the common conversations, and encoded as Hugging Face's (legacy, sentencepiece) Llama tokenizer
// encodes the rendered text:
//
// - The rendering is kept as a list of parts: text, BOS, EOS and markers (<|im_start|>, <|user|>,
//   ...). BOS/EOS become the tokenizer's control ids, never the text "<s>"; a marker becomes one id
//   when the vocabulary has that exact piece (as a user-defined or control piece: Hugging Face then
//   lists it as an added token), else it is ordinary text merged with its neighbours.
// - Each maximal run of text between two ids is one segment, encoded on its own with EncodeNoBos.
//   Sentencepiece prepends its dummy-prefix space to every segment, so "[INST]" after <s> starts
//   with "▁[" and "user" after <|im_start|> is "▁user". This is what Hugging Face's slow
//   LlamaTokenizer (legacy=True, the default of every Llama-2 / Mistral-7B-v0.1 era config) does:
//   it splits the text on its added tokens and runs sentencepiece on each piece; and what Meta's
//   reference llama-2 chat code does (sp.encode of "[INST] ... [/INST] ... " per turn).
// - Message content is never scanned for markers or "<s>": a user who writes "<s>" or
//   "<|im_start|>" gets that text (no prompt injection of control ids). A vocabulary's
//   user-defined pieces are still matched inside text by sentencepiece itself, as in HF.
// - BOS: llama-2 and mistral write it themselves (their templates start turns with bos_token).
//   chatml and zephyr templates write none; llmq prepends one when the tokenizer's add_bos says so
//   (tokenizer_config.json "add_bos_token", default true for Llama tokenizers), because a model
//   whose tokenizer adds BOS was trained with it. (HF's apply_chat_template and vLLM's chat
//   endpoint pass add_special_tokens=False and so write no BOS there; Qwen-style chatml tokenizers
//   have add_bos false and get none either way.)
#include "engine/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace llmq {
namespace {

namespace fs = std::filesystem;

enum class PartKind { kText, kBos, kEos, kMarker };

struct Part {
  PartKind kind;
  std::string text;  // kText and kMarker
};

class Rendering {
 public:
  void Text(const std::string& s) {
    if (!s.empty()) parts_.push_back({PartKind::kText, s});
  }
  void Bos() { parts_.push_back({PartKind::kBos, ""}); }
  void Eos() { parts_.push_back({PartKind::kEos, ""}); }
  void Marker(const std::string& m) { parts_.push_back({PartKind::kMarker, m}); }
  const std::vector<Part>& parts() const { return parts_; }

 private:
  std::vector<Part> parts_;
};

std::string Field(size_t i, const char* name) {
  return "field 'messages[" + std::to_string(i) + "]." + name + "'";
}

// Python's str.strip() for the ASCII whitespace it strips (the llama-2 template strips content).
std::string Strip(const std::string& s) {
  constexpr const char* kWs = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(kWs);
  return s.substr(b, e - b + 1);
}

// Checks roles common to every template: known roles, a system message only first, not empty.
Status CheckRoles(const std::vector<Message>& messages) {
  if (messages.empty())
    return Status::InvalidArgument("field 'messages': the conversation is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      return Status::InvalidArgument(Field(i, "role") + ": unknown role '" + r +
                                     "' (expected system, user or assistant)");
    if (r == "system" && i != 0)
      return Status::InvalidArgument(Field(i, "role") +
                                     ": a system message must be the first message");
    // Tool calls are the model's own template's (a built-in has no syntax for them).
    const Message& m = messages[i];
    const char* tool_field = !m.tool_calls.empty()     ? "tool_calls"
                             : !m.tool_call_id.empty() ? "tool_call_id"
                                                       : nullptr;
    if (tool_field != nullptr)
      return Status::InvalidArgument(Field(i, tool_field) +
                                     ": a built-in chat template cannot render tool calls (the "
                                     "model's own template can)");
  }
  return Status::Ok();
}

// llama-2 and mistral: after an optional system message, user/assistant/user/... ending with user.
Status CheckAlternation(const std::vector<Message>& messages, const char* name) {
  const size_t first = messages[0].role == "system" ? 1 : 0;
  if (first == messages.size())
    return Status::InvalidArgument(std::string("field 'messages': the ") + name +
                                   " template needs a user message after the system message");
  for (size_t i = first; i < messages.size(); ++i) {
    const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != want)
      return Status::InvalidArgument(Field(i, "role") + ": expected '" + want + "', got '" +
                                     messages[i].role + "' (the " + name +
                                     " template needs user and assistant messages to alternate, "
                                     "starting with user)");
  }
  if (messages.back().role != "user")
    return Status::InvalidArgument(Field(messages.size() - 1, "role") +
                                   ": the last message must be from the user (the " + name +
                                   " template has no generation prompt after an assistant turn)");
  return Status::Ok();
}

// {% if messages[0]['role'] == 'system' %} ... '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content
// ... bos_token + '[INST] ' + content.strip() + ' [/INST]'  |  ' ' + content.strip() + ' ' + eos
Status RenderLlama2(const std::vector<Message>& m, Rendering* r) {
  LLMQ_RETURN_IF_ERROR(CheckAlternation(m, "llama-2"));
  const bool sys = m[0].role == "system";
  for (size_t i = sys ? 1 : 0; i < m.size(); ++i) {
    std::string content = m[i].content;
    if (sys && i == 1) content = "<<SYS>>\n" + m[0].content + "\n<</SYS>>\n\n" + content;
    if (m[i].role == "user") {
      r->Bos();
      r->Text("[INST] " + Strip(content) + " [/INST]");
    } else {
      r->Text(" " + Strip(content) + " ");
      r->Eos();
    }
  }
  return Status::Ok();
}

// Mistral-7B-Instruct-v0.1: bos_token + ('[INST] ' + content + ' [/INST]' | content + eos_token)*.
// v0.1's own template refuses a system message; like later Mistral templates (and vLLM's
// examples), it is prepended to the first user message with "\n\n".
Status RenderMistral(const std::vector<Message>& m, Rendering* r) {
  LLMQ_RETURN_IF_ERROR(CheckAlternation(m, "mistral"));
  const bool sys = m[0].role == "system";
  r->Bos();
  for (size_t i = sys ? 1 : 0; i < m.size(); ++i) {
    if (m[i].role == "user") {
      const std::string content =
          sys && i == 1 ? m[0].content + "\n\n" + m[i].content : m[i].content;
      r->Text("[INST] " + content + " [/INST]");
    } else {
      r->Text(m[i].content);
      r->Eos();
    }
  }
  return Status::Ok();
}

// '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n' per message;
// '<|im_start|>assistant\n'.
Status RenderChatml(const Tokenizer* tok, const std::vector<Message>& m, Rendering* r) {
  if (tok && tok->add_bos()) r->Bos();
  for (const Message& msg : m) {
    r->Marker("<|im_start|>");
    r->Text(msg.role + "\n" + msg.content);
    r->Marker("<|im_end|>");
    r->Text("\n");
  }
  r->Marker("<|im_start|>");
  r->Text("assistant\n");
  return Status::Ok();
}

// '<|' + role + '|>\n' + content + eos_token, each followed by "\n"; then '<|assistant|>\n'.
Status RenderZephyr(const Tokenizer* tok, const std::vector<Message>& m, Rendering* r) {
  if (tok && tok->add_bos()) r->Bos();
  for (const Message& msg : m) {
    r->Marker("<|" + msg.role + "|>");
    r->Text("\n" + msg.content);
    r->Eos();
    r->Text("\n");
  }
  r->Marker("<|assistant|>");
  r->Text("\n");
  return Status::Ok();
}

Status Render(const Tokenizer* tok, ChatTemplate t, const std::vector<Message>& messages,
              Rendering* r) {
  LLMQ_RETURN_IF_ERROR(CheckRoles(messages));
  switch (t) {
    case ChatTemplate::kLlama2:
      return RenderLlama2(messages, r);
    case ChatTemplate::kMistral:
      return RenderMistral(messages, r);
    case ChatTemplate::kChatml:
      return RenderChatml(tok, messages, r);
    case ChatTemplate::kZephyr:
      return RenderZephyr(tok, messages, r);
  }
  return Status::InvalidArgument("unknown chat template");
}

bool ReadText(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return static_cast<bool>(f) || f.eof();
}

}  // namespace

Status ChatTemplateByName(const std::string& name, ChatTemplate* out) {
  if (name == "llama-2" || name == "llama2") {
    *out = ChatTemplate::kLlama2;
  } else if (name == "mistral") {
    *out = ChatTemplate::kMistral;
  } else if (name == "chatml") {
    *out = ChatTemplate::kChatml;
  } else if (name == "zephyr") {
    *out = ChatTemplate::kZephyr;
  } else {
    return Status::InvalidArgument("unknown chat template '" + name +
                                   "' (known: llama-2, mistral, chatml, zephyr)");
  }
  return Status::Ok();
}

const char* ChatTemplateName(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama2:
      return "llama-2";
    case ChatTemplate::kMistral:
      return "mistral";
    case ChatTemplate::kChatml:
      return "chatml";
    case ChatTemplate::kZephyr:
      return "zephyr";
  }
  return "unknown";
}

namespace {

// The entry named `name` of tokenizer_config.json's list of chat templates, or "".
std::string ConfigListEntry(const nlohmann::json& j, const std::string& name) {
  const auto it = j.find("chat_template");
  if (it == j.end() || !it->is_array()) return "";
  for (const auto& e : *it) {
    if (!e.is_object()) continue;
    const auto n = e.find("name"), tmpl = e.find("template");
    if (n != e.end() && n->is_string() && *n == name && tmpl != e.end() && tmpl->is_string())
      return tmpl->get<std::string>();
  }
  return "";
}

}  // namespace

std::string ReadTemplateSource(const std::string& model_dir, std::string* origin) {
  std::string text;
  // transformers reads chat_template.jinja over the config's (newer versions save it there).
  const std::string file = (fs::path(model_dir) / "chat_template.jinja").string();
  if (ReadText(file, &text)) {
    *origin = file;
    return text;
  }
  const std::string config = (fs::path(model_dir) / "tokenizer_config.json").string();
  if (ReadText(config, &text)) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      const auto it = j.find("chat_template");
      if (it != j.end() && it->is_string()) {
        *origin = config + ":chat_template";
        return it->get<std::string>();
      }
      if (std::string d = ConfigListEntry(j, "default"); !d.empty()) {
        *origin = config + ":chat_template[default]";
        return d;
      }
    }
  }
  origin->clear();
  return "";
}

std::string ReadNamedTemplateSource(const std::string& model_dir, const std::string& name,
                                    std::string* origin) {
  origin->clear();
  std::string text;
  if (fs::exists(fs::path(model_dir) / "chat_template.jinja")) return "";
  const std::string config = (fs::path(model_dir) / "tokenizer_config.json").string();
  if (!ReadText(config, &text)) return "";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || ConfigListEntry(j, "default").empty()) return "";
  std::string entry = ConfigListEntry(j, name);
  if (!entry.empty()) *origin = config + ":chat_template[" + name + "]";
  return entry;
}

ChatTemplate DetectChatTemplate(const std::string& model_dir, bool* found) {
  std::string origin;
  return RecognizeTemplate(ReadTemplateSource(model_dir, &origin), found);
}

ChatTemplate RecognizeTemplate(const std::string& src, bool* found) {
  *found = true;
  if (src.find("<|im_start|>") != std::string::npos) return ChatTemplate::kChatml;
  if (src.find("<|assistant|>") != std::string::npos) return ChatTemplate::kZephyr;
  if (src.find("<<SYS>>") != std::string::npos) return ChatTemplate::kLlama2;
  if (src.find("[INST]") != std::string::npos) return ChatTemplate::kMistral;
  *found = false;
  return ChatTemplate::kLlama2;
}

Status RenderChat(ChatTemplate t, const std::vector<Message>& messages, bool add_bos,
                  std::string* text) {
  text->clear();
  Rendering r;
  // chatml/zephyr consult the tokenizer only for add_bos; emulate it without one.
  if (add_bos && (t == ChatTemplate::kChatml || t == ChatTemplate::kZephyr)) r.Bos();
  LLMQ_RETURN_IF_ERROR(Render(nullptr, t, messages, &r));
  for (const Part& p : r.parts()) {
    switch (p.kind) {
      case PartKind::kBos:
        *text += "<s>";
        break;
      case PartKind::kEos:
        *text += "</s>";
        break;
      default:
        *text += p.text;
    }
  }
  return Status::Ok();
}

Status EncodeChat(const Tokenizer& tok, ChatTemplate t, const std::vector<Message>& messages,
                  std::vector<int>* ids) {
  ids->clear();
  Rendering r;
  LLMQ_RETURN_IF_ERROR(Render(&tok, t, messages, &r));
  std::string segment;
  auto flush = [&] {
    if (segment.empty()) return;
    const std::vector<int> s = tok.EncodeNoBos(segment);
    ids->insert(ids->end(), s.begin(), s.end());
    segment.clear();
  };
  auto emit = [&](int id) {
    flush();
    ids->push_back(id);
  };
  for (const Part& p : r.parts()) {
    switch (p.kind) {
      case PartKind::kText:
        segment += p.text;
        break;
      case PartKind::kBos:
        if (tok.bos_id() >= 0) emit(tok.bos_id());  // a model without BOS gets none
        break;
      case PartKind::kEos:
        if (tok.eos_id() >= 0) emit(tok.eos_id());
        break;
      case PartKind::kMarker: {
        const int id = tok.PieceToId(p.text);
        if (id >= 0) {
          emit(id);
        } else {
          segment += p.text;
        }
        break;
      }
    }
  }
  flush();
  return Status::Ok();
}

}  // namespace llmq
