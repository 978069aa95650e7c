// `llmq run` on the shared-instructions workload (512 requests: one 1,000-token instruction prefix
// + a distinct 100-300-token document each, 32 output tokens, shuffled), with the prefix features
// (prefix cache + planner) on and off: wall time, tokens/s and the ratio, from the real binary.
//   run_bench [--requests 512] [--config model-config.json]   (default: a tiny 2048-context model)
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/workloads.h"
#include "engine/model_maker.h"

using json = nlohmann::json;

namespace {

json RunLlmq(const std::string& args, const std::string& summary) {
  const std::string cmd = std::string(LLMQ_BINARY) + " run " + args +
                          " --no-progress --summary-json " + summary + " 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::fprintf(stderr, "failed (%d): %s\n", rc, cmd.c_str());
    std::exit(1);
  }
  std::ifstream f(summary);
  return json::parse(f);
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 512;
  std::string config;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--requests"))
      requests = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--config"))
      config = argv[i + 1];
  }
  const std::string dir = "bench-models/run-bench";
  std::filesystem::create_directories(dir);
  llmq::ModelConfig cfg;
  llmq::DType dtype;
  llmq::ShapeConfig("tiny", &cfg, &dtype);
  cfg.max_position_embeddings = 2048;
  if (!config.empty()) {
    std::ifstream f(config);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    if (llmq::Status st = llmq::ParseModelConfig(text, config, &cfg); !st.ok())
      return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  }
  const std::string model = dir + "/model";
  if (llmq::Status st = llmq::MakeModel(cfg, dtype, 1, model); !st.ok())
    return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;

  const auto prompts =
      llmq::bench::SharedInstructions(requests, 1000, 100, 300, cfg.vocab_size, 42);
  const int64_t unique = llmq::bench::UniqueTokens(prompts);
  int64_t total = 0;
  {
    std::ofstream in(dir + "/in.jsonl");
    for (size_t i = 0; i < prompts.size(); ++i) {
      total += prompts[i].size();
      // Token-id prompts keep the sharing exact; BOS is already the first id.
      in << json{{"custom_id", "doc-" + std::to_string(i)},
                 {"method", "POST"},
                 {"url", "/v1/completions"},
                 {"body",
                  {{"model", "bench"},
                   {"prompt", prompts[i]},
                   {"max_tokens", 32},
                   {"temperature", 0},
                   {"ignore_eos", true}}}}
                .dump()
         << "\n";
    }
  }
  const std::string common = dir + "/in.jsonl --model " + model + " --kv-cache-memory 2GiB";
  const json on = RunLlmq(common + " -o " + dir + "/on.jsonl", dir + "/on.json");
  const json off = RunLlmq(common + " -o " + dir + "/off.jsonl --no-prefix-cache --no-planner",
                           dir + "/off.json");

  std::printf(
      "llmq run, shared instructions: %d requests, %lld prompt tokens (%lld unique), 32 output "
      "tokens each\n",
      requests, static_cast<long long>(total), static_cast<long long>(unique));
  std::printf("| %-16s | %10s | %15s | %9s | %13s | %13s |\n", "prefix features", "computed",
              "computed/unique", "wall s", "output tok/s", "total tok/s");
  std::printf(
      "|------------------|------------|-----------------|-----------|---------------|-------------"
      "--|\n");
  for (const auto& [name, s] : {std::pair<const char*, const json&>{"on", on}, {"off", off}}) {
    const double wall = s["wall_seconds"];
    const int64_t computed = s["computed_prompt_tokens"];
    const int64_t out_tokens = s["completion_tokens"];
    std::printf("| %-16s | %10lld | %15.3f | %9.2f | %13.1f | %13.1f |\n", name,
                static_cast<long long>(computed), static_cast<double>(computed) / unique, wall,
                out_tokens / wall, (total + out_tokens) / wall);
  }
  std::printf("speed-up with prefix features: %.2fx\n",
              off["wall_seconds"].get<double>() / on["wall_seconds"].get<double>());
  return 0;
}
