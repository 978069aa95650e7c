// llmq plan: how the memory divides between weights and KV cache, from the headers alone.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/model_config.h"
#include "engine/weights.h"

namespace llmq::cli {
namespace {

std::string Human(double bytes) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) {
    bytes /= 1024;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", bytes, u[i]);
  return buf;
}

}  // namespace

namespace {

struct PlanFlags {
  std::string model, memory, kv_dtype = "f32";
  int block_size = 16;
  bool json = false;
};

int Plan(const CLI::App* cmd, const PlanFlags& f) {
  const int kv_bytes = f.kv_dtype == "f32" ? 4 : 2;
  const int64_t block = f.block_size;
  uint64_t memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (!f.memory.empty()) {
    const auto m = ParseByteSize(f.memory);
    if (!m || *m <= 0)
      return Fail(cmd, "--memory: must be a positive size such as 24G, got '" + f.memory + "'", 2);
    memory = static_cast<uint64_t>(*m);
  }
  const std::string& dir = f.model;
  const std::string& kv_dtype = f.kv_dtype;
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  Status st = LoadModelConfig(dir, &cfg);
  if (st.ok()) st = Weights::Load(dir, cfg, &w);  // maps and validates headers; reads no weights
  if (!st.ok()) return Fail(cmd, st);
  const uint64_t stored = w->total_bytes();
  const uint64_t params = static_cast<uint64_t>(cfg.NumParams());
  const uint64_t resident = params * sizeof(float);  // the CPU backend computes in fp32
  const int64_t kv_per_token = cfg.KvBytesPerToken(kv_bytes);
  const uint64_t kv_memory = memory > resident ? memory - resident : 0;
  const int64_t blocks = static_cast<int64_t>(kv_memory / (kv_per_token * block));
  const int64_t tokens = blocks * block;
  const int64_t seqs = tokens / cfg.max_position_embeddings;
  if (f.json) {
    nlohmann::json j{{"parameters", params},
                     {"weights_bytes_stored", stored},
                     {"weights_bytes_resident", resident},
                     {"kv_bytes_per_token", kv_per_token},
                     {"memory_bytes", memory},
                     {"kv_cache_bytes", kv_memory},
                     {"block_size", block},
                     {"kv_blocks", blocks},
                     {"kv_tokens", tokens},
                     {"max_position_embeddings", cfg.max_position_embeddings},
                     {"full_context_sequences", seqs}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "model              %s (%s, %d layers, hidden %d, %d heads / %d kv heads, head_dim %d)\n",
      dir.c_str(), cfg.architecture.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_heads,
      cfg.num_kv_heads, cfg.head_dim);
  std::printf("parameters         %llu\n", static_cast<unsigned long long>(params));
  std::printf("weights            %s stored, %s resident (fp32, CPU backend)\n",
              Human(stored).c_str(), Human(resident).c_str());
  std::printf(
      "kv bytes per token %lld  (2 x %d layers x %d kv heads x %d head_dim x %d bytes %s)\n",
      static_cast<long long>(kv_per_token), cfg.num_layers, cfg.num_kv_heads, cfg.head_dim,
      kv_bytes, kv_dtype.c_str());
  std::printf("memory             %s, of which KV cache %s\n", Human(memory).c_str(),
              Human(kv_memory).c_str());
  std::printf("kv cache           %lld blocks of %lld = %lld tokens\n",
              static_cast<long long>(blocks), static_cast<long long>(block),
              static_cast<long long>(tokens));
  std::printf("full-context seqs  %lld of %d tokens\n", static_cast<long long>(seqs),
              cfg.max_position_embeddings);
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app->add_subcommand(
      "plan", "How memory divides between weights and KV cache (reads only the headers)");
  cmd->add_option("--model", f->model, "Model folder")->required();
  cmd->add_option("--memory", f->memory, "Memory to plan for, e.g. 24G (default: this machine's)");
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV-cache element type")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_option("--block-size", f->block_size, "Tokens per KV block")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->callback([cmd, f, rc] { *rc = Plan(cmd, *f); });
}

}  // namespace llmq::cli
