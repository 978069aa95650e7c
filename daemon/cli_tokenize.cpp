// llmq tokenize: the ids a model's tokenizer gives a text, as Hugging Face's encode(text) does (the
// post-processor's special tokens added unless --no-special-tokens), or a conversation rendered by
// the model's chat format and encoded as a chat request's prompt is (--messages, with --tools on
// offer). Loads the
// tokenizer and the chat template only.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/text/tokenizer.h"

namespace llmq::cli {
namespace {

struct TokenizeFlags {
  std::string model, text, file, messages, tools, template_kwargs, chat_template;
  bool no_special = false, json = false;
};

int Tokenize(const CLI::App* cmd, const TokenizeFlags& f) {
  std::string text = f.text;
  if (!f.file.empty()) {
    std::ifstream in(f.file, std::ios::binary);
    if (!in) return Fail(cmd, f.file + ": cannot open");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) return Fail(cmd, f.file + ": read error");
  }
  std::unique_ptr<Tokenizer> tok;
  const Status st = Tokenizer::Load(f.model, &tok);
  if (!st.ok()) return Fail(cmd, st);
  std::vector<int> ids;
  std::string rendered;
  if (!f.messages.empty()) {
    if (Status s = EncodeMessagesFlag(f.model, f.chat_template, f.messages, f.tools,
                                      f.template_kwargs, *tok, &rendered, &ids);
        !s.ok())
      return Fail(cmd, s, s.code() == Status::Code::kInvalidArgument ? 2 : 1);
  } else {
    ids = f.no_special ? tok->EncodeNoBos(text) : tok->Encode(text);
  }
  if (f.json) {
    nlohmann::json j{{"ids", ids}};
    if (!f.messages.empty()) j["rendered"] = rendered;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (int id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void AddTokenizeCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app->add_subcommand("tokenize",
                                      "Print the ids of a text (as Hugging Face's encode(text)) or "
                                      "of a conversation rendered by the "
                                      "model's chat template; loads no weights");
  cmd->add_option("--model", f->model, "Model folder (tokenizer.json or tokenizer.model)")
      ->required();
  CLI::Option* text = cmd->add_option("--text", f->text, "The text");
  CLI::Option* file = cmd->add_option("--file", f->file, "A file whose whole content is the text");
  CLI::Option* messages = cmd->add_option(
      "--messages", f->messages,
      "A conversation, as a chat request's messages: '[{\"role\": \"user\", \"content\": "
      "\"Hi\"}]'; rendered with the generation prompt, encoded with no special token added");
  cmd->add_option("--tools", f->tools,
                  "With --messages: the tools on offer, as a chat request's tools: '[{\"type\": "
                  "\"function\", \"function\": {\"name\": \"f\"}}]' (given to the template)")
      ->needs(messages);
  cmd->add_option("--chat-template-kwargs", f->template_kwargs,
                  "With --messages: further variables for the template, as a chat request's "
                  "chat_template_kwargs: '{\"enable_thinking\": false}'")
      ->needs(messages);
  cmd->add_option("--chat-template", f->chat_template,
                  "llama-2|mistral|chatml|zephyr (default: the model's own template)");
  text->excludes(file);
  messages->excludes(text)->excludes(file);
  cmd->add_flag("--no-special-tokens", f->no_special,
                "Add no special token (no BOS from the post-processor)");
  cmd->add_flag("--json", f->json,
                "Print {\"ids\": [...]} (with --messages, \"rendered\": the rendered text too)");
  cmd->callback([cmd, f, rc, text, file, messages] {
    if (text->count() + file->count() + messages->count() != 1) {
      *rc = Fail(cmd, "one of --text, --file or --messages is required", 2);
      return;
    }
    *rc = Tokenize(cmd, *f);
  });
}

}  // namespace llmq::cli
