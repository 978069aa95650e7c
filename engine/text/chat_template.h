// Chat templates: built-in llama-2, mistral, chatml, zephyr (engine/text/chat_format.h chooses
// between them and the model's own Jinja template).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/text/tokenizer.h"

namespace llmq {

enum class ChatTemplate { kLlama2, kMistral, kChatml, kZephyr };

// One message of a conversation. The built-ins take system, user and assistant text; the tool
// fields are for a model's own Jinja template (engine/text/chat_format.h), and the built-ins refuse
// them naming the field.
struct Message {
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
  std::string tool_call_id = {};  // role "tool": the call it answers ("" none)
  std::string name = {};          // the message's name ("" none)
  std::string tool_calls = {};    // JSON array text as the template gets it ("" none)
  // An assistant's thought, given to a Jinja template as `reasoning` and `reasoning_content` (as
  // vLLM gives it); unset: neither key. The built-ins ignore it.
  std::optional<std::string> reasoning = {};
};

Status ChatTemplateByName(const std::string& name, ChatTemplate* out);  // "llama-2", "mistral", ...
const char* ChatTemplateName(ChatTemplate t);

// The Jinja source of the model's chat template: `model_dir`/chat_template.jinja, else
// tokenizer_config.json's "chat_template" (a string, or the entry named "default" of a list of
// {"name", "template"}). "" when the files name none; `*origin` names where it was found
// ("/m/tokenizer_config.json:chat_template") for messages.
std::string ReadTemplateSource(const std::string& model_dir, std::string* origin);
// The entry named `name` ("tool_use") of tokenizer_config.json's list of chat templates, when the
// model's template (ReadTemplateSource) is that list's "default" (not chat_template.jinja); ""
// otherwise. `*origin`: "/m/tokenizer_config.json:chat_template[tool_use]".
std::string ReadNamedTemplateSource(const std::string& model_dir, const std::string& name,
                                    std::string* origin);

// Recognises which built-in the model's template (ReadTemplateSource) is; `*found` false (and
// kLlama2 returned) when the files name none or an unknown one. (engine/text/chat_format.h renders
// the model's own template; this is what a sentencepiece model with a built-in's template uses.)
ChatTemplate DetectChatTemplate(const std::string& model_dir, bool* found);
// The same for a template's source already read.
ChatTemplate RecognizeTemplate(const std::string& source, bool* found);

// Renders `messages` as text, as Hugging Face's apply_chat_template(tokenize=False) does: BOS and
// EOS written "<s>" and "</s>", markers as their text. For display, logs and tests; the engine
// uses EncodeChat. `add_bos` stands for the tokenizer's add_bos() (chatml and zephyr only; see
// EncodeChat). Same errors as EncodeChat.
Status RenderChat(ChatTemplate t, const std::vector<Message>& messages, bool add_bos,
                  std::string* text);

// Renders `messages` with the generation prompt for the assistant's turn appended and encodes it:
// BOS/EOS where the template puts them are the tokenizer's control ids (never the text "<s>"),
// special markers such as <|im_start|> are single ids when the vocabulary has them, else text.
// Errors name the message index and field (unknown role, system message not first, ...).
//
// Each run of text between two ids is encoded alone with EncodeNoBos, so it gets sentencepiece's
// dummy-prefix space ("▁[INST]" after <s>), as HF's legacy Llama tokenizer and Meta's reference
// code do. Message content is always text (never turned into control ids). BOS: llama-2 and
// mistral write it as their templates do; chatml and zephyr (whose templates write none) get one
// when tok.add_bos(). llama-2 and mistral need user/assistant turns alternating after an optional
// system message and ending with user; chatml and zephyr take any order after the system message.
Status EncodeChat(const Tokenizer& tok, ChatTemplate t, const std::vector<Message>& messages,
                  std::vector<int>* ids);

}  // namespace llmq
