// llmq run: one OpenAI Batch file through the engine, embedded, no daemon.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "daemon/batch_runner.h"
#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/durable_file.h"

namespace llmq::cli {
namespace {

struct RunFlags {
  EngineFlags engine;
  std::string input, output, errors, summary_json;
  bool progress = false, no_progress = false;
};

int Run(const CLI::App* cmd, const RunFlags& f) {
  LlmqConfig cfg;
  if (Status st = ResolveEngineConfig(f.engine, &cfg); !st.ok())
    return Fail(cmd, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
  BatchRunOptions opt;
  opt.input = f.input;
  opt.output = f.output;
  opt.errors = f.errors;
  opt.model_name = std::filesystem::path(cfg.model_dir).filename().string();
  opt.engine = EngineOptionsFrom(cfg);
  opt.progress = f.progress || (isatty(STDERR_FILENO) && !f.no_progress);

  // Chat template: the flag, else the config, else what the model's files say, else llama-2.
  bool found = false;
  opt.chat_template = DetectChatTemplate(cfg.model_dir, &found);
  if (!cfg.chat_template.empty()) {
    if (Status st = ChatTemplateByName(cfg.chat_template, &opt.chat_template); !st.ok())
      return Fail(cmd, st, 2);
  }
  Model model;
  if (Status st = LoadModel(cfg.model_dir, &model); !st.ok()) return Fail(cmd, st);
  BatchSummary sum;
  if (Status st = RunBatchFile(model, opt, &sum); !st.ok()) return Fail(cmd, st);
  std::fprintf(stderr, "%s\n", sum.ToText().c_str());
  if (!f.summary_json.empty()) {
    if (Status st = WriteFileDurably(f.summary_json, sum.ToJson() + "\n"); !st.ok())
      return Fail(cmd, st);
  }
  return 0;
}

}  // namespace

void AddRunCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app->add_subcommand(
      "run", "Run one OpenAI Batch JSONL file to completion, embedded (no daemon)");
  cmd->add_option("input", f->input, "OpenAI Batch JSONL file")->required();
  cmd->add_option("-o,--output", f->output, "One output line per input line, in input order")
      ->required();
  cmd->add_option("--errors", f->errors,
                  "Write error lines here instead of in place (OpenAI's split)");
  cmd->add_option("--summary-json", f->summary_json, "Write the run's summary as JSON here");
  AddEngineFlags(cmd, &f->engine);
  cmd->add_flag("--progress", f->progress, "Show progress on stderr (default: when a terminal)");
  cmd->add_flag("--no-progress", f->no_progress, "Never show progress");
  cmd->callback([cmd, f, rc] { *rc = Run(cmd, *f); });
}

}  // namespace llmq::cli
