// llmq run: one OpenAI Batch file through the engine, embedded, no daemon.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "config/config.h"
#include "daemon/args.h"
#include "daemon/batch_runner.h"
#include "daemon/commands.h"
#include "engine/durable_file.h"

namespace llmq::cli {

int Run(int argc, char** argv) {
  Args args({"output", "model", "config", "summary-json", "errors", "chat-template", "max-num-seqs",
             "max-num-batched-tokens", "kv-cache-memory"},
            {"no-prefix-cache", "no-planner", "progress", "no-progress"});
  args.Alias("-o", "output");
  std::string err;
  if (!args.Parse(argc, argv, 2, &err) || args.positional().size() != 1 || !args.Has("output")) {
    if (err.empty())
      err =
          "usage: llmq run IN.jsonl -o OUT.jsonl --model DIR [--config FILE] [--summary-json FILE]";
    std::fprintf(stderr, "llmq run: %s\n", err.c_str());
    return 2;
  }
  LlmqConfig cfg;
  if (auto path = args.Get("config")) {
    if (Status st = LoadConfig(*path, &cfg); !st.ok()) {
      std::fprintf(stderr, "llmq run: %s\n", st.message().c_str());
      return 1;
    }
  }
  long long seqs = 0, tokens = 0;
  if (!args.GetInt("max-num-seqs", cfg.max_num_seqs, &seqs, &err) ||
      !args.GetInt("max-num-batched-tokens", cfg.max_num_batched_tokens, &tokens, &err) ||
      seqs < 1 || tokens < 1) {
    std::fprintf(stderr, "llmq run: %s\n", err.empty() ? "limits must be positive" : err.c_str());
    return 2;
  }
  const std::string model_dir = args.Get("model", cfg.model_dir);
  if (model_dir.empty()) {
    std::fprintf(stderr, "llmq run: --model DIR (or model.path in the config) is required\n");
    return 2;
  }
  BatchRunOptions opt;
  opt.input = args.positional()[0];
  opt.output = *args.Get("output");
  opt.errors = args.Get("errors", "");
  opt.model_name = std::filesystem::path(model_dir).filename().string();
  opt.engine.block_size = cfg.block_size;
  opt.engine.kv_memory_bytes = cfg.kv_cache_bytes;
  if (auto kv = args.Get("kv-cache-memory")) {
    const auto bytes = ParseByteSize(*kv);
    if (!bytes || *bytes <= 0) {
      std::fprintf(stderr, "llmq run: --kv-cache-memory must be a size such as 4GiB\n");
      return 2;
    }
    opt.engine.kv_memory_bytes = *bytes;
  }
  opt.engine.enable_prefix_cache = cfg.enable_prefix_caching && !args.Has("no-prefix-cache");
  opt.engine.enable_planner = cfg.enable_planner && !args.Has("no-planner");
  opt.engine.scheduler.max_num_seqs = static_cast<int>(seqs);
  opt.engine.scheduler.max_num_batched_tokens = static_cast<int>(tokens);
  opt.progress = args.Has("progress") || (isatty(STDERR_FILENO) && !args.Has("no-progress"));

  // Chat template: the flag, else the config, else what the model's files say, else llama-2.
  const std::string tmpl = args.Get("chat-template", cfg.chat_template);
  bool found = false;
  opt.chat_template = DetectChatTemplate(model_dir, &found);
  if (!tmpl.empty()) {
    if (Status st = ChatTemplateByName(tmpl, &opt.chat_template); !st.ok()) {
      std::fprintf(stderr, "llmq run: %s\n", st.message().c_str());
      return 2;
    }
  }
  Model model;
  if (Status st = LoadModel(model_dir, &model); !st.ok()) {
    std::fprintf(stderr, "llmq run: %s\n", st.message().c_str());
    return 1;
  }
  BatchSummary sum;
  if (Status st = RunBatchFile(model, opt, &sum); !st.ok()) {
    std::fprintf(stderr, "llmq run: %s\n", st.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "%s\n", sum.ToText().c_str());
  if (auto path = args.Get("summary-json")) {
    if (Status st = WriteFileDurably(*path, sum.ToJson() + "\n"); !st.ok()) {
      std::fprintf(stderr, "llmq run: %s\n", st.message().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace llmq::cli
