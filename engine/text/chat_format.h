// ChatFormat: how a model's conversations become prompt text and ids, chosen once at load time.
//
// - The model's own Jinja template (chat_template.jinja, else tokenizer_config.json's
//   "chat_template": a string, or the entry named "default" of a list), rendered by the project's
//   interpreter (engine/text/jinja.h) as transformers' apply_chat_template(messages,
//   tools=tools, add_generation_prompt=True) renders it, with bos_token / eos_token / unk_token /
//   pad_token from tokenizer_config.json, the conversation's tools (null when none) and documents
//   none; nothing else (Llama 3.1's date_string and tools_in_user_message keep the template's
//   defaults). A conversation with tools gets the config list's "tool_use" entry when it has one
//   beside "default" (as transformers picks it). The text is encoded as
//   tokenizer(text, add_special_tokens=False) encodes it: a tokenizer.json tokenizer matches its
//   added tokens (<|im_start|>, <|begin_of_text|>) in the text; for a sentencepiece tokenizer the
//   bos/eos token strings become their ids and each run of text between them is encoded alone
//   (as Hugging Face's slow tokenizer splits on its special tokens).
// - One of the four built-ins (engine/text/chat_template.h): when the operator names one
//   (model.chat_template / --chat-template), when the model has no template, and for a
//   sentencepiece model whose template is recognised as a built-in (their encoding, one segment
//   per run of text, is what the legacy Llama tokenizer gives and the references check).
//
// A template that does not parse, or uses a construct the interpreter lacks, fails Load naming the
// file, line and construct. Immutable once loaded; safe to use from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

namespace llmq {

namespace jinja {
class Template;
}

// A conversation as the chat template gets it: the messages (with their tool calls and tool
// results) and the tools on offer.
struct Conversation {
  std::vector<Message> messages;
  // Each tool's JSON object as written (key order kept), e.g. {"type": "function", "function":
  // {...}}; none: the template gets tools = null, as transformers passes tools=None.
  std::vector<std::string> tools;
  // Further variables for the template (vLLM's chat_template_kwargs: enable_thinking, date_string,
  // ...), a JSON object's text, key order kept; "" = none. Set beside the variables above, never
  // over them (the request layer refuses those names). The built-ins read none of them.
  std::string template_kwargs;
  // vLLM's add_generation_prompt (the assistant turn's opening after the messages) and
  // continue_final_message (the final message left open, to be continued: rendered without the
  // generation prompt, then cut right after its content, as transformers' apply_chat_template
  // cuts it). Never both. The built-ins take the defaults only.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

class ChatFormat {
 public:
  // `choice`: "" = the model's own (see above); else a built-in's name ("llama-2", "mistral",
  // "chatml", "zephyr"). `tok` is the model's tokenizer (Load keeps no reference to it).
  static Status Load(const std::string& model_dir, const std::string& choice, const Tokenizer& tok,
                     std::shared_ptr<const ChatFormat>* out);
  // A built-in, for a tokenizer whose add_bos() is `add_bos` (tests, benchmarks).
  static std::shared_ptr<const ChatFormat> Builtin(ChatTemplate t, bool add_bos);
  ~ChatFormat();

  // The prompt text with the generation prompt for the assistant's turn appended. Built-ins write
  // BOS/EOS as "<s>" / "</s>" (RenderChat). Errors name the field ("field 'messages[1].role':
  // ...") or, for a Jinja template, say what the template raised ("field 'messages': ..."). The
  // built-ins refuse tools ("field 'tools': ...") and tool messages and calls (naming the
  // message's field); a tool's or a call's JSON that does not parse is refused naming them too.
  Status Render(const Conversation& conversation, std::string* text) const;
  // Render, then encode (see above). Same errors as Render.
  Status Encode(const Tokenizer& tok, const Conversation& conversation,
                std::vector<int>* ids) const;
  // A conversation without tools.
  Status Render(const std::vector<Message>& messages, std::string* text) const;
  Status Encode(const Tokenizer& tok, const std::vector<Message>& messages,
                std::vector<int>* ids) const;

  // "llama-2", "chatml", ... or the template's origin ("/m/tokenizer_config.json:chat_template").
  const std::string& name() const { return name_; }
  // What identifies the format for a resumed run: the built-in's name, or the template's name and
  // a hash of its source and of the special token strings it is given.
  const std::string& identity() const { return identity_; }

 private:
  ChatFormat() = default;
  Status RenderJinja(const Conversation& conversation, std::string* text) const;
  // The built-ins take no tools.
  static Status CutAfterFinalMessage(const Conversation& conversation, std::string* text);
  Status CheckBuiltin(const Conversation& conversation) const;

  std::string name_, identity_;
  ChatTemplate builtin_ = ChatTemplate::kLlama2;  // when jinja_ is null
  bool add_bos_ = true;                           // the tokenizer's add_bos() (built-ins)
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const jinja::Template> jinja_tool_use_;  // for conversations with tools; or null
  std::string bos_text_, eos_text_;  // tokenizer_config.json's bos_token / eos_token ("": none)
  std::string specials_json_;        // {"bos_token": ..., ...} given to the template
};

}  // namespace llmq
