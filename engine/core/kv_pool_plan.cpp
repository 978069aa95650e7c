#include "engine/core/kv_pool_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "base/host_memory.h"

namespace llmq {

int KvBlocksFor(int64_t kv_bytes_per_token, int64_t kv_memory_bytes, int block_size) {
  const int64_t per_block = std::max<int64_t>(kv_bytes_per_token, 1) * block_size;
  // Slots (block * block_size + offset) are int32 in the flat batch.
  const int64_t max_blocks = std::numeric_limits<int32_t>::max() / block_size;
  return static_cast<int>(std::clamp<int64_t>(kv_memory_bytes / per_block, 1, max_blocks));
}

SchedulerOptions ResolveStepLimits(const SchedulerOptions& asked, const Backend& backend) {
  const StepLimits backends = backend.default_step_limits();
  SchedulerOptions s = asked;
  if (s.max_num_seqs == 0) s.max_num_seqs = backends.max_num_seqs;
  if (s.max_num_batched_tokens == 0) s.max_num_batched_tokens = backends.max_num_batched_tokens;
  return s;
}

Status PlanKvPool(const Backend& backend, const EngineOptions& opt, KvPoolPlan* out,
                  int max_context) {
  const SchedulerOptions step = ResolveStepLimits(opt.scheduler, backend);
  KvPoolPlan p;
  p.bytes_per_token = backend.kv_bytes_per_token();
  if (opt.num_blocks > 0) {
    p.num_blocks = opt.num_blocks;
    p.source = "engine.num_blocks";
    *out = p;
    return Status::Ok();
  }
  if (const std::optional<int64_t> budget = backend.KvBudgetBytes(
          opt.gpu_memory_utilization, step.max_num_batched_tokens, step.max_num_seqs)) {
    char util[32];
    std::snprintf(util, sizeof util, "%g", opt.gpu_memory_utilization);
    p.source = backend.name() + ": engine.gpu_memory_utilization " + util + " of the device";
    if (*budget < p.bytes_per_token * opt.block_size)
      return Status::InvalidArgument(
          "KV cache: " + p.source + " leaves " + std::to_string(*budget) +
          " bytes after the weights and activations, less than one block of " +
          std::to_string(opt.block_size) + " tokens (" +
          std::to_string(p.bytes_per_token * opt.block_size) +
          " bytes); raise engine.gpu_memory_utilization or use a smaller model");
    p.budget_bytes = *budget;
  } else if (opt.kv_memory_bytes > 0) {
    p.budget_bytes = opt.kv_memory_bytes;
    p.source = "engine.kv_cache_memory";
  } else {
    const HostMemory host = opt.host_memory.bytes > 0 ? opt.host_memory : ReadHostMemory();
    if (host.bytes <= 0)
      return Status::InvalidArgument(
          "KV cache: cannot tell how much memory this process may take (no MemAvailable in "
          "/proc/meminfo); set engine.kv_cache_memory");
    HostKvInputs in;
    in.memory = host.bytes;
    in.utilization = opt.gpu_memory_utilization;
    in.weight_bytes = static_cast<int64_t>(backend.weight_bytes());
    in.working_bytes = backend.StepWorkingBytes(step.max_num_batched_tokens, step.max_num_seqs);
    in.kv_bytes_per_token = p.bytes_per_token;
    in.max_num_seqs = step.max_num_seqs;
    in.max_context = max_context;
    char util[160];
    std::snprintf(util, sizeof util, "engine.gpu_memory_utilization %g of %s %.2f GiB",
                  opt.gpu_memory_utilization, host.source.c_str(),
                  static_cast<double>(host.bytes) / (int64_t{1} << 30));
    p.source = util;
    p.budget_bytes = HostKvBudget(in);
    if (p.budget_bytes < p.bytes_per_token * opt.block_size)
      return Status::InvalidArgument(
          "KV cache: " + p.source + " leaves " + std::to_string(p.budget_bytes) +
          " bytes after the weights and working memory, less than one block; set "
          "engine.kv_cache_memory or free memory");
  }
  p.num_blocks = KvBlocksFor(p.bytes_per_token, p.budget_bytes, opt.block_size);
  *out = p;
  return Status::Ok();
}

}  // namespace llmq
