// llmq plan: how the memory divides between weights and KV cache, from the headers alone.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "daemon/args.h"
#include "daemon/commands.h"
#include "engine/model_config.h"
#include "engine/weights.h"

namespace llmq::cli {
namespace {

std::string Human(double bytes) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", bytes, u[i]);
  return buf;
}

}  // namespace

int Plan(int argc, char** argv) {
  Args args({"model", "memory", "kv-dtype", "block-size"}, {"json"});
  std::string err;
  long long block = 0;
  if (!args.Parse(argc, argv, 2, &err) || !args.Has("model") ||
      !args.GetInt("block-size", 16, &block, &err)) {
    std::fprintf(stderr, "llmq plan: %s\n", err.empty() ? "--model is required" : err.c_str());
    return 2;
  }
  const std::string kv_dtype = args.Get("kv-dtype", "f32");
  const int kv_bytes = kv_dtype == "f32" ? 4 : (kv_dtype == "bf16" || kv_dtype == "f16") ? 2 : 0;
  uint64_t memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (auto m = args.Get("memory")) memory = static_cast<uint64_t>(ParseByteSize(*m).value_or(0));
  if (kv_bytes == 0 || memory == 0 || block < 1) {
    std::fprintf(
        stderr,
        "llmq plan: need --kv-dtype f32|bf16|f16, --memory BYTES (e.g. 24G), --block-size >= 1\n");
    return 2;
  }
  const std::string dir = *args.Get("model");
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  Status st = LoadModelConfig(dir, &cfg);
  if (st.ok()) st = Weights::Load(dir, cfg, &w);  // maps and validates headers; reads no weights
  if (!st.ok()) {
    std::fprintf(stderr, "llmq plan: %s\n", st.message().c_str());
    return 1;
  }
  const uint64_t stored = w->total_bytes();
  const uint64_t params = static_cast<uint64_t>(cfg.NumParams());
  const uint64_t resident = params * sizeof(float);  // the CPU backend computes in fp32
  const int64_t kv_per_token = cfg.KvBytesPerToken(kv_bytes);
  const uint64_t kv_memory = memory > resident ? memory - resident : 0;
  const int64_t blocks = static_cast<int64_t>(kv_memory / (kv_per_token * block));
  const int64_t tokens = blocks * block;
  const int64_t seqs = tokens / cfg.max_position_embeddings;
  if (args.Has("json")) {
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
              static_cast<long long>(blocks), block, static_cast<long long>(tokens));
  std::printf("full-context seqs  %lld of %d tokens\n", static_cast<long long>(seqs),
              cfg.max_position_embeddings);
  return 0;
}

}  // namespace llmq::cli
