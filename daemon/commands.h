// The llmq subcommands. Each Add*Command registers one subcommand, its flags and its action on the
// root app; the action stores the process exit status in *rc: 0 success, 1 failure (a clear
// message on stderr), 2 bad command line; `run` also 130 / 143 when interrupted by SIGINT /
// SIGTERM.
#pragma once

#include <CLI/CLI.hpp>

namespace llmq::cli {

void AddGenerateCommand(CLI::App* app, int* rc);   // llmq generate --model DIR --prompt TEXT
void AddPlanCommand(CLI::App* app, int* rc);       // llmq plan --model DIR [--memory BYTES]
void AddMakeModelCommand(CLI::App* app, int* rc);  // llmq make-model --shape NAME --out DIR
void AddTokenizeCommand(CLI::App* app, int* rc);   // llmq tokenize --model DIR --text T
void AddRunCommand(CLI::App* app, int* rc);        // llmq run IN.jsonl -o OUT.jsonl
void AddServeCommand(CLI::App* app, int* rc);      // llmq serve [--state DIR]: the daemon
void AddSchemaCommand(CLI::App* app, int* rc);     // llmq schema check --model DIR FILE...
void AddGrammarCommand(CLI::App* app, int* rc);    // llmq grammar check --model DIR FILE
// llmq submit FILE... [--wait], status [JOB] [--json], list [--json], cancel JOB
void AddQueueCommands(CLI::App* app, int* rc);
// llmq queue init|migrate --url URL: a queue's tables, made or migrated (daemon/cli_queue.cpp)
void AddQueueAdminCommand(CLI::App* app, int* rc);

}  // namespace llmq::cli
