// llmq: one binary, subcommands.
#include <cstdio>
#include <cstring>
#include <string>

#include "daemon/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: llmq <command> [options]\n"
    "commands:\n"
    "  generate    --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P]\n"
    "              [--top-k K] [--min-p P] [--seed S] [--stop STR] [--json]\n"
    "  run         IN.jsonl -o OUT.jsonl --model DIR [--config FILE] [--summary-json FILE]\n"
    "              [--errors FILE] [--chat-template NAME] [--no-prefix-cache] [--no-planner]\n"
    "              [--max-num-seqs N] [--max-num-batched-tokens N] [--kv-cache-memory BYTES]\n"
    "  plan        --model DIR [--memory BYTES] [--kv-dtype f32|bf16|f16] [--block-size N]\n"
    "  make-model  --shape tiny|bench-110m|bench-110m-gqa | --config FILE  --out DIR [--seed S]\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "generate") return llmq::cli::Generate(argc, argv);
  if (cmd == "run") return llmq::cli::Run(argc, argv);
  if (cmd == "plan") return llmq::cli::Plan(argc, argv);
  if (cmd == "make-model") return llmq::cli::MakeModel(argc, argv);
  std::fprintf(stderr, "llmq: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
