// llmq generate: one prompt through the engine, for trying a model.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/backends/compute_resources.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "engine/structured/grammar_cache.h"

namespace llmq::cli {

namespace {

struct GenerateFlags {
  std::string model, prompt, messages, template_kwargs, chat_template, stop;
  std::string grammar_file, json_schema_file;  // structured outputs (one of them, or none)
  std::string backend = "auto", precision = "bf16", weight_dtype = "auto", kv_dtype = "auto";
  int max_tokens = 64;
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  int threads = 0;  // --threads; 0 = the default
  uint64_t seed = 0;
  bool json = false, ignore_eos = false;
  const CLI::Option* seed_opt = nullptr;
};

int Generate(const CLI::App* cmd, const GenerateFlags& f) {
  SamplingParams p;
  p.max_tokens = f.max_tokens;
  p.temperature = f.temperature;
  p.top_p = f.top_p;
  p.top_k = f.top_k;
  p.min_p = f.min_p;
  p.ignore_eos = f.ignore_eos;
  p.seed = *f.seed_opt ? f.seed : std::random_device{}();
  if (!f.stop.empty()) p.stop.push_back(f.stop);
  const std::string& dir = f.model;
  BackendChoice choice;
  ParseBackendKind(f.backend, &choice.kind);  // checked by CLI11
  ParsePrecision(f.precision, &choice.precision);
  ParseWeightDtype(f.weight_dtype, &choice.weight_dtype);  // checked by CLI11
  ParseKvDtype(f.kv_dtype, &choice.kv_dtype);              // checked by CLI11
  if (f.threads > 0) SetCpuThreads(f.threads);
  Model model;
  if (Status st = LoadModel(dir, choice, &model); !st.ok()) return Fail(cmd, st);
  Request req;
  req.id = "generate";
  std::vector<int> ids;
  if (!f.messages.empty()) {  // as a chat request's prompt: the model's chat format
    std::string rendered;
    if (Status st = EncodeMessagesFlag(dir, f.chat_template, f.messages, "", f.template_kwargs,
                                       *model.tokenizer, &rendered, &ids);
        !st.ok())
      return Fail(cmd, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
  } else {
    ids = model.tokenizer->Encode(f.prompt);
  }
  req.prompt_ids.assign(ids.begin(), ids.end());
  // Structured outputs, as a job line's guided_grammar / guided_json would ask.
  if (!f.grammar_file.empty() || !f.json_schema_file.empty()) {
    const std::string& file = f.grammar_file.empty() ? f.json_schema_file : f.grammar_file;
    std::ifstream in(file, std::ios::binary);
    if (!in) return Fail(cmd, file + ": cannot open");
    std::stringstream text;
    text << in.rdbuf();
    GrammarCache grammars(model.tokenizer.get());
    const Status st = f.grammar_file.empty() ? grammars.JsonSchema(text.str(), &req.grammar)
                                             : grammars.Ebnf(text.str(), &req.grammar);
    if (!st.ok()) return Fail(cmd, file + ": " + st.message());
  }
  // Generation stops at the context's end: a prompt near it gets what room is left.
  req.params = p;
  EngineOptions opt;
  opt.num_blocks = BlockManager::BlocksFor(model.cfg.max_position_embeddings, opt.block_size);
  std::unique_ptr<LlmEngine> engine;
  if (Status st =
          LlmEngine::Create(model.cfg, model.backend.get(), model.tokenizer.get(), opt, &engine);
      !st.ok())
    return Fail(cmd, st);
  const auto t0 = std::chrono::steady_clock::now();
  engine->Add(std::move(req));
  std::vector<RequestOutput> outs;
  while (engine->HasWork()) engine->Step(&outs).IgnoreError();  // a failure is the output's error
  const RequestOutput& out = outs.at(0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!out.ok()) return Fail(cmd, out.error);
  const Completion& c = out.completions.at(0);
  if (f.json) {
    nlohmann::json j{{"prompt_ids", ids},
                     {"completion_ids", c.ids},
                     {"text", c.text},
                     {"finish_reason", c.finish_reason},
                     {"backend", model.backend_description()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", c.text.c_str());
    std::fprintf(stderr,
                 "[%zu prompt + %zu completion tokens in %.2f s, finish_reason %s, backend %s]\n",
                 ids.size(), c.ids.size(), secs, c.finish_reason.c_str(),
                 model.backend_description().c_str());
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd =
      app->add_subcommand("generate", "Generate a completion for one prompt (try a model)");
  cmd->add_option("--model", f->model, "Model folder")->required();
  CLI::Option* prompt = cmd->add_option("--prompt", f->prompt, "Prompt text");
  CLI::Option* messages = cmd->add_option(
      "--messages", f->messages,
      "A conversation instead of --prompt, as a chat request's messages: '[{\"role\": \"user\", "
      "\"content\": \"Hi\"}]' (rendered by the model's chat template)");
  messages->excludes(prompt);
  cmd->add_option("--chat-template-kwargs", f->template_kwargs,
                  "With --messages: further variables for the template, as a chat request's "
                  "chat_template_kwargs: '{\"enable_thinking\": false}'")
      ->needs(messages);
  cmd->add_option("--chat-template", f->chat_template,
                  "With --messages: llama-2|mistral|chatml|zephyr (default: the model's own)");
  cmd->add_option("--max-tokens", f->max_tokens, "Most tokens to generate")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", f->temperature, "0 = greedy")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-p", f->top_p, "Nucleus sampling mass")
      ->check([](const std::string& v) -> std::string {
        const double x = std::atof(v.c_str());
        return x > 0 && x <= 1 ? "" : "must be in (0, 1]";
      });
  cmd->add_option("--top-k", f->top_k, "Keep the k most likely tokens; 0 = off")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-p", f->min_p, "Keep tokens with p >= min_p * p_max; 0 = off")
      ->check(CLI::Range(0.0f, 1.0f));
  f->seed_opt = cmd->add_option("--seed", f->seed, "Sampling seed (default: random)");
  cmd->add_option("--stop", f->stop, "Stop string");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "Keep generating past the end-of-sequence token");
  CLI::Option* grammar = cmd->add_option("--grammar", f->grammar_file,
                                         "A GBNF or Lark grammar file the output must follow (as a "
                                         "line's structured_outputs.grammar)");
  cmd->add_option("--json-schema", f->json_schema_file,
                  "A JSON Schema file the output must satisfy (as response_format json_schema)")
      ->excludes(grammar);
  cmd->add_flag("--json", f->json,
                "Print one JSON object: prompt_ids, completion_ids, text, finish_reason, backend");
  AddBackendFlags(cmd, &f->backend, &f->precision, &f->weight_dtype, &f->kv_dtype);
  AddThreadsFlag(cmd, &f->threads);
  cmd->callback([cmd, f, rc, prompt, messages] {
    if (prompt->count() + messages->count() != 1) {
      *rc = Fail(cmd, "one of --prompt or --messages is required", 2);
      return;
    }
    *rc = Generate(cmd, *f);
  });
}

}  // namespace llmq::cli
