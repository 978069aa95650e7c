// A Jinja interpreter for Hugging Face chat templates (tokenizer_config.json's "chat_template",
// chat_template.jinja): the subset real templates use, with the options transformers'
// apply_chat_template sets (trim_blocks, lstrip_blocks, loopcontrols, an immutable sandbox,
// tojson with ensure_ascii=False, raise_exception, strftime_now).
//
// Everything the interpreter does not support (a filter, test, method or tag) is refused by Parse,
// naming the template, the line and the construct; Render fails only on what depends on the
// context (raise_exception, undefined values used, type errors) and on the limits that keep a
// hostile template from exhausting the process (output size, loop iterations, nesting depth).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace llmq::jinja {

struct Program;  // the parsed template (jinja_ast.h)

class Template {
 public:
  // Parses `source`. `origin` names the template in every error, e.g.
  // "/m/tokenizer_config.json:chat_template". Errors read "<origin>:<line>: <what>", e.g.
  // "<origin>:12: unsupported filter 'wordcount'", "<origin>:3: expected 'endfor', found end of
  // template".
  static Status Parse(std::string_view source, const std::string& origin,
                      std::unique_ptr<Template>* out);

  // Renders with `context`, a JSON object (messages, add_generation_prompt, bos_token, tools...).
  // raise_exception('msg') gives InvalidArgument("<origin>: the template raised: msg"); other
  // errors name the origin and line. Thread-safe: rendering never changes the Template.
  //
  // nlohmann::json objects keep their keys sorted, so `tools | tojson` lists keys sorted; Python
  // keeps the order they were written in. RenderOrdered takes an ordered_json for that order.
  Status Render(const nlohmann::json& context, std::string* out) const;
  Status RenderOrdered(const nlohmann::ordered_json& context, std::string* out) const;

  ~Template();

 private:
  Template() = default;
  std::string origin_;
  std::unique_ptr<Program> program_;
};

}  // namespace llmq::jinja
