// EngineOptions: how an LlmEngine is built and runs (the KV pool's size, the prefix features, the
// scheduler's limits). Its own header so that what sizes the pool (kv_pool_plan.h) need not see
// the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/host_memory.h"
#include "base/time_source.h"
#include "engine/core/prefix_planner.h"
#include "engine/core/scheduler.h"

namespace llmq {

struct EngineOptions {
  int block_size = 16;
  int num_blocks = 0;  // 0: from the backend's budget, else kv_memory_bytes (PlanKvPool)
  // The CPU's KV pool (a GPU backend's budget comes first); 0: sized from host_memory.
  int64_t kv_memory_bytes = int64_t{1} << 30;
  // The share of the memory the backend may fill (weights, activations and the KV pool): of the
  // device for a GPU backend (Backend::KvBudgetBytes), of host_memory for the CPU backend's
  // default pool (HostKvBudget). 0 < u <= 1.
  double gpu_memory_utilization = 0.9;
  // The memory the process may take, read before the weights were loaded (ReadHostMemory), for
  // kv_memory_bytes 0; bytes 0: read when the engine is created.
  HostMemory host_memory;
  bool enable_prefix_cache = true;
  bool enable_planner = true;
  // Steps carry their prefix groups (StepBatch::prefix_groups), so that decode reads a group's
  // shared prefix blocks once per step rather than once per sequence. Outputs do not depend on it.
  bool shared_prefix_attention = true;
  // Time the steps' phases (LlmEngine::profile(); the backend's forward too): a few clock reads a
  // step.
  bool profile = false;
  // The step limits; each 0 (the default: auto) is the backend's (Backend::default_step_limits,
  // resolved by LlmEngine::Create).
  SchedulerOptions scheduler = {.max_num_batched_tokens = 0, .max_num_seqs = 0};
  // The window planner; null: PlanPrefixes. An error from it (or an order that is no permutation,
  // or std::bad_alloc while it plans) falls back to arrival order.
  std::function<StatusOr<Plan>(const std::vector<std::span<const int32_t>>&, int block_size)>
      planner;
  // The time the request metrics read (arrival, admission, each sampled token, the end); null:
  // TimeSource::Steady(). Tests pass a manual one (tests/manual_time.h), and then set
  // Request::arrival on it. Must outlive the engine.
  TimeSource* time = nullptr;
};

}  // namespace llmq
