// llmq plan: how the memory divides between weights and KV cache, from the headers alone.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/host_memory.h"
#include "config/config.h"
#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/backends/backend_choice.h"
#include "engine/backends/compute_resources.h"
#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

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
  std::string model, memory;
  std::string backend = "auto", precision = "bf16", weight_dtype = "auto", kv_dtype = "auto";
  double gpu_memory_utilization = LlmqConfig{}.gpu_memory_utilization;
  int block_size = 16;
  int threads = 0;  // --threads; 0 = the default
  bool json = false;
};

// The backend `f` plans for, and what it says of it: "cpu", "cuda (bf16)", "cpu (auto: ...)".
// A cuda plan needs no device when --memory says how much the GPU has.
Status PlanBackend(const PlanFlags& f, BackendKind* kind, std::string* described) {
  BackendKind want = BackendKind::kAuto;
  ParseBackendKind(f.backend, &want);  // checked by CLI11
  std::string why;
  if (want == BackendKind::kCuda && !f.memory.empty()) {
    *kind = BackendKind::kCuda;
  } else {
    StatusOr<ResolvedBackend> resolved = ResolveBackend(want);
    if (!resolved.ok())
      return Status::Unsupported(resolved.status().message() +
                                 " (give --memory to plan for a GPU elsewhere)");
    *kind = resolved->kind;
    why = std::move(resolved->why);
  }
  *described = BackendKindName(*kind);
  if (*kind == BackendKind::kCuda) *described += " (" + f.precision + ")";
  if (!why.empty()) *described += " (auto: " + why + ")";
  return Status::Ok();
}

// The memory to plan for: --memory, else the GPU's (cuda) or what this process may take (cpu:
// ReadHostMemory); *source says which.
Status PlanMemory(const PlanFlags& f, BackendKind kind, uint64_t* memory, std::string* source) {
  if (!f.memory.empty()) {
    const auto m = ParseByteSize(f.memory);
    if (!m || *m <= 0)
      return Status::InvalidArgument("--memory: must be a positive size such as 24G, got '" +
                                     f.memory + "'");
    *memory = static_cast<uint64_t>(*m);
    *source = "--memory " + f.memory;
    return Status::Ok();
  }
  if (kind == BackendKind::kCpu) {  // what llmq run / serve read before loading the weights
    const HostMemory host = ReadHostMemory();
    if (host.bytes <= 0)
      return Status::Unsupported(
          "cannot tell how much memory this process may take: give --memory");
    *memory = static_cast<uint64_t>(host.bytes);
    *source = "the memory this process may take (" + host.source + ")";
    return Status::Ok();
  }
  std::string name;
  if (Status st = GpuMemory(memory, &name); !st.ok())
    return Status::Unsupported(st.message() + ": give --memory");
  *source = "the memory of GPU 0 (" + name + ")";
  return Status::Ok();
}

int Plan(const CLI::App* cmd, const PlanFlags& f) {
  BackendKind kind = BackendKind::kCpu;
  std::string backend;
  if (Status st = PlanBackend(f, &kind, &backend); !st.ok()) return Fail(cmd, st);
  const bool gpu = kind == BackendKind::kCuda;
  // The GPU backend keeps weights and K/V at --precision; the CPU backend its K/V at --kv-dtype
  // (auto: f32) and its matrices at --weight-dtype.
  // fp8: bf16 but for the projections' weights (one byte each, a float scale per channel).
  const int elt = gpu && f.precision != "fp32" ? 2 : 4;
  KvDtype kv = KvDtype::kAuto;
  ParseKvDtype(f.kv_dtype, &kv);  // checked by CLI11
  const KvDtype follows_precision = elt == 2 ? KvDtype::kBf16 : KvDtype::kF32;
  if (kv == KvDtype::kAuto) kv = follows_precision;
  if (gpu && kv != follows_precision)
    return Fail(cmd, "--kv-dtype " + f.kv_dtype +
                         ": the cuda backend's KV cache follows --precision " + f.precision);
  const std::string kv_dtype = KvDtypeName(kv);
  const int kv_bytes = kv == KvDtype::kF32 ? 4 : 2;
  const int64_t block = f.block_size;
  uint64_t memory = 0;
  std::string memory_source;
  if (Status st = PlanMemory(f, kind, &memory, &memory_source); !st.ok())
    return Fail(cmd, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
  const std::string& dir = f.model;
  ModelConfig cfg;
  std::unique_ptr<Weights> w;
  Status st = LoadModelConfig(dir, &cfg);
  if (st.ok()) st = Weights::Load(dir, cfg, &w);  // maps and validates headers; reads no weights
  if (!st.ok()) return Fail(cmd, st);
  const uint64_t stored = w->total_bytes();
  const uint64_t params = static_cast<uint64_t>(cfg.NumParams());
  WeightDtype asked = WeightDtype::kAuto;
  ParseWeightDtype(f.weight_dtype, &asked);  // checked by CLI11
  if (gpu && asked != WeightDtype::kAuto)
    return Fail(cmd, "--weight-dtype " + f.weight_dtype +
                         ": the CPU backend's; the cuda backend's weights follow --precision");
  const kernels::WeightType type = CpuBackend::ResolveWeightType(asked, cfg, *w);
  const int64_t kv_per_token = cfg.KvBytesPerToken(kv_bytes);
  if (f.threads > 0) SetCpuThreads(f.threads);  // the attention scratch is per thread
  // The KV memory the weights leave: gpu_memory_utilization of the memory, less the weights; on
  // the GPU its backend also keeps an activation reserve, not counted here; on the CPU the
  // engine's own HostKvBudget, at the default step limits, so that this is the pool llmq run /
  // serve build when kv_cache_memory is auto.
  auto kv_memory_for = [&](uint64_t resident) -> uint64_t {
    if (gpu) {
      const uint64_t usable =
          static_cast<uint64_t>(static_cast<double>(memory) * f.gpu_memory_utilization);
      return usable > resident ? usable - resident : 0;
    }
    const StepLimits defaults = kCpuStepLimits;  // the CPU backend's, as `llmq serve` takes them
    HostKvInputs in;
    in.memory = static_cast<int64_t>(memory);
    in.utilization = f.gpu_memory_utilization;
    in.weight_bytes = static_cast<int64_t>(resident);
    in.working_bytes =
        CpuBackend::WorkingBytesFor(cfg, defaults.max_num_batched_tokens, defaults.max_num_seqs);
    in.kv_bytes_per_token = kv_per_token;
    in.max_num_seqs = defaults.max_num_seqs;
    in.max_context = cfg.max_position_embeddings;
    return static_cast<uint64_t>(HostKvBudget(in));
  };
  // The CPU backend's packed copy (CpuBackend::weight_bytes()), else the parameters at elt.
  // fp8: 2 bytes down to 1 for each projection weight, 4 more for each channel's scale.
  const int64_t fp8_delta =
      f.precision == "fp8" ? 4 * cfg.ProjectionRows() - cfg.ProjectionParams() : 0;
  const uint64_t resident =
      gpu ? static_cast<uint64_t>(static_cast<int64_t>(params * elt) + fp8_delta)
          : CpuBackend::WeightBytesFor(cfg, type);
  const uint64_t kv_memory = kv_memory_for(resident);
  char util[32];
  std::snprintf(util, sizeof util, "%g", f.gpu_memory_utilization);
  const std::string budget_source =
      "gpu_memory_utilization " + std::string(util) + " x " + memory_source +
      " - resident weights" +
      (gpu ? " (the backend's activation reserve comes off too)"
           : " - working memory, at most 2 x max_num_seqs full-context sequences");
  // Slots (block * block_size + offset) are int32 in the flat batch, as KvBlocksFor clamps; the
  // CPU's count is the engine's own (KvBlocksFor, at least one block).
  auto blocks_for = [&](uint64_t kv) {
    return gpu ? std::min<int64_t>(static_cast<int64_t>(kv / (kv_per_token * block)),
                                   std::numeric_limits<int32_t>::max() / block)
               : KvBlocksFor(kv_per_token, static_cast<int64_t>(kv), static_cast<int>(block));
  };
  const int64_t blocks = blocks_for(kv_memory);
  const int64_t tokens = blocks * block;
  // The CPU backend's choices side by side: each weight type's bytes and the KV room it leaves.
  struct Choice {
    kernels::WeightType type;
    uint64_t resident, kv_memory;
    int64_t kv_tokens;
  };
  std::vector<Choice> choices;
  if (!gpu)
    for (kernels::WeightType t :
         {kernels::WeightType::kF32, kernels::WeightType::kBf16, kernels::WeightType::kInt8}) {
      const uint64_t r = CpuBackend::WeightBytesFor(cfg, t), kv = kv_memory_for(r);
      choices.push_back({t, r, kv, blocks_for(kv) * block});
    }
  const int64_t seqs = tokens / cfg.max_position_embeddings;
  const std::string threads = DescribeCpuThreads(f.threads, "--threads");
  if (f.json) {
    nlohmann::json j{{"backend", backend},
                     {"parameters", params},
                     {"weights_bytes_stored", stored},
                     {"weights_bytes_resident", resident},
                     {"weight_dtype", gpu ? f.precision : kernels::WeightTypeName(type)},
                     {"kv_bytes_per_token", kv_per_token},
                     {"kv_dtype", kv_dtype},
                     {"memory_bytes", memory},
                     {"kv_cache_bytes", kv_memory},
                     {"kv_budget_source", budget_source},
                     {"block_size", block},
                     {"kv_blocks", blocks},
                     {"kv_tokens", tokens},
                     {"max_position_embeddings", cfg.max_position_embeddings},
                     {"full_context_sequences", seqs},
                     {"cpu_threads", f.threads > 0 ? f.threads : CpuThreads()},
                     {"cpu_threads_source", threads}};
    for (const Choice& c : choices)
      j["weight_choices"].push_back({{"weight_dtype", kernels::WeightTypeName(c.type)},
                                     {"weights_bytes_resident", c.resident},
                                     {"kv_cache_bytes", c.kv_memory},
                                     {"kv_tokens", c.kv_tokens}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "model              %s (%s, %d layers, hidden %d, %d heads / %d kv heads, head_dim %d)\n",
      dir.c_str(), cfg.architecture.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_heads,
      cfg.num_kv_heads, cfg.head_dim);
  std::printf("backend            %s\n", backend.c_str());
  std::printf("cpu threads        %s\n", threads.c_str());
  std::printf("parameters         %llu\n", static_cast<unsigned long long>(params));
  std::printf("weights            %s stored, %s resident (%s%s)\n", Human(stored).c_str(),
              Human(resident).c_str(), gpu ? f.precision.c_str() : kernels::WeightTypeName(type),
              gpu ? "" : " matrices and embedding, fp32 norms");
  std::printf(
      "kv bytes per token %lld  (2 x %d layers x %d kv heads x %d head_dim x %d bytes %s)\n",
      static_cast<long long>(kv_per_token), cfg.num_layers, cfg.num_kv_heads, cfg.head_dim,
      kv_bytes, kv_dtype.c_str());
  std::printf("memory             %s, of which KV cache %s\n", Human(memory).c_str(),
              Human(kv_memory).c_str());
  std::printf("kv budget from     %s\n", budget_source.c_str());
  std::printf("kv cache           %lld blocks of %lld = %lld tokens\n",
              static_cast<long long>(blocks), static_cast<long long>(block),
              static_cast<long long>(tokens));
  std::printf("full-context seqs  %lld of %d tokens\n", static_cast<long long>(seqs),
              cfg.max_position_embeddings);
  for (const Choice& c : choices)
    std::printf("--weight-dtype %-4s weights %s resident, KV cache %s = %lld tokens\n",
                kernels::WeightTypeName(c.type), Human(c.resident).c_str(),
                Human(c.kv_memory).c_str(), static_cast<long long>(c.kv_tokens));
  if (!gpu)
    std::printf(
        "(llmq run / serve build this pool when engine.kv_cache_memory is auto, the default)\n");
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app->add_subcommand(
      "plan",
      "How memory divides between weights and KV cache on a backend (reads only the headers)");
  cmd->add_option("--model", f->model, "Model folder")->required();
  cmd->add_option("--memory", f->memory, "Memory to plan for, e.g. 24G (default: this machine's)");
  AddBackendFlags(cmd, &f->backend, &f->precision, &f->weight_dtype, &f->kv_dtype);
  AddGpuMemoryFlag(cmd, &f->gpu_memory_utilization);
  AddThreadsFlag(cmd, &f->threads);
  cmd->add_option("--block-size", f->block_size, "Tokens per KV block")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->callback([cmd, f, rc] { *rc = Plan(cmd, *f); });
}

}  // namespace llmq::cli
