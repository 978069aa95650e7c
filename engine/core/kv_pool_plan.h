// The KV pool's size: how many blocks an engine builds on a backend, and where their byte budget
// comes from (an explicit count, the device's free memory, engine.kv_cache_memory, or the host's
// memory left after the weights and a step's working memory). LlmEngine::Create sizes its pool
// here; `llmq plan` says the same without loading a model onto the device.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/backends/backend.h"
#include "engine/core/engine_options.h"

namespace llmq {

// The KV pool an engine builds on `backend`: its blocks and where the byte budget came from.
struct KvPoolPlan {
  int num_blocks = 0;
  int64_t bytes_per_token = 0;  // backend.kv_bytes_per_token()
  int64_t budget_bytes = 0;     // 0 when num_blocks was given
  // "engine.num_blocks", "engine.kv_cache_memory" or "<backend>: gpu_memory_utilization 0.9 of
  // the device"
  std::string source;
};
// `asked` with each step limit left 0 (auto) replaced by the backend's
// (Backend::default_step_limits). Negative values are kept (LlmEngine::Create refuses them).
SchedulerOptions ResolveStepLimits(const SchedulerOptions& asked, const Backend& backend);

// EngineOptions::num_blocks when set; else the backend's KvBudgetBytes(gpu_memory_utilization,
// the step limits) when it has one (InvalidArgument when that leaves no room for one block: the
// weights fill the device); else kv_memory_bytes when > 0; else HostKvBudget of the host memory,
// the backend's weight_bytes() and StepWorkingBytes (InvalidArgument when that leaves no room for
// one block), capped by `max_context` (the model's; 0: no cap). The step limits are
// opt.scheduler's, resolved (ResolveStepLimits).
Status PlanKvPool(const Backend& backend, const EngineOptions& opt, KvPoolPlan* out,
                  int max_context = 0);
// Blocks of `block_size` tokens that `kv_memory_bytes` buys at `kv_bytes_per_token`
// (Backend::kv_bytes_per_token), at least 1, at most what int32 slots address.
int KvBlocksFor(int64_t kv_bytes_per_token, int64_t kv_memory_bytes, int block_size);

}  // namespace llmq
