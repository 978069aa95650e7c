// llmq: one binary, subcommands (CLI11: generated --help for each, defaults shown, --version).
#include <CLI/CLI.hpp>

#include "daemon/commands.h"

#ifndef LLMQ_VERSION
#define LLMQ_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{"llmq: offline LLM batch inference (OpenAI Batch JSONL in, results out)", "llmq"};
  app.set_version_flag("--version", "llmq " LLMQ_VERSION);
  app.set_help_all_flag("--help-all", "Print every command with its flags and exit");
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  int rc = 0;
  llmq::cli::AddRunCommand(&app, &rc);
  llmq::cli::AddServeCommand(&app, &rc);
  llmq::cli::AddQueueCommands(&app, &rc);
  llmq::cli::AddQueueAdminCommand(&app, &rc);
  llmq::cli::AddGenerateCommand(&app, &rc);
  llmq::cli::AddPlanCommand(&app, &rc);
  llmq::cli::AddMakeModelCommand(&app, &rc);
  llmq::cli::AddTokenizeCommand(&app, &rc);
  llmq::cli::AddSchemaCommand(&app, &rc);
  llmq::cli::AddGrammarCommand(&app, &rc);
  app.footer("Run 'llmq COMMAND --help' for a command's flags.");  // the root's help only
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version exit 0; a bad command line prints why and exits 2.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return rc;
}
