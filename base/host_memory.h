// HostMemory: how much memory this process may still take on this host, for sizing the CPU
// backend's KV pool by default (the GPU backend asks its device instead): /proc/meminfo's
// MemAvailable, or the room left under the cgroup v2 limits (memory.max - memory.current of the
// process's cgroup and of each one above it) when that is lower (a container or a systemd
// MemoryMax= sees its own limit, not the host's RAM). The parsers are pure functions of the files'
// text, tested on made-up text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llmq {

struct HostMemory {
  int64_t bytes = 0;   // 0: unknown
  std::string source;  // "MemAvailable" or "cgroup memory.max - memory.current"
};

// MemAvailable of /proc/meminfo's text, in bytes ("MemAvailable:  123 kB"); nullopt if absent.
std::optional<int64_t> ParseMemAvailable(std::string_view meminfo);
// memory.max - memory.current of a cgroup v2 (0 when usage is over the limit); nullopt when the
// limit is "max" (none) or either text is not a number.
std::optional<int64_t> CgroupRoom(std::string_view memory_max, std::string_view memory_current);
// The cgroup v2 path of /proc/self/cgroup's text ("0::/system.slice/llmq.service"); "" if none.
std::string CgroupV2Path(std::string_view proc_self_cgroup);
// The least room (CgroupRoom) of the cgroup v2 at `path` and of every cgroup above it, read from
// the files under `root` (/sys/fs/cgroup): a MemoryMax= on the parent slice binds the service as
// much as its own. nullopt when no level has a limit.
std::optional<int64_t> CgroupTreeRoom(const std::string& root, const std::string& path);
// The lower of the amounts known; bytes 0 when neither is.
HostMemory LowerOf(std::optional<int64_t> mem_available, std::optional<int64_t> cgroup_room);

// Reads the files of this host. $LLMQ_TEST_MEMINFO, when set, names a file read instead of
// /proc/meminfo, and the cgroup is then not consulted (tests give `llmq plan` and `llmq run` the
// same made-up memory).
HostMemory ReadHostMemory();

// What the CPU backend's default KV pool is sized from.
struct HostKvInputs {
  int64_t memory = 0;         // HostMemory::bytes, read before the weights were loaded
  double utilization = 0.9;   // engine.gpu_memory_utilization: the share of `memory` llmq may fill
  int64_t weight_bytes = 0;   // the backend's packed weights
  int64_t working_bytes = 0;  // the largest step's activations, logits and scratch
  int64_t kv_bytes_per_token = 0;
  int max_num_seqs = 0;  // with max_context: the cap below (0: no cap)
  int max_context = 0;
};
// memory x utilization - weights - working memory, never negative, and at most the KV of
// 2 x max_num_seqs sequences at full context (a pool beyond that would only keep more evicted
// prefixes, and its per-block bookkeeping is not free). Both `llmq plan` and the engine
// (PlanKvPool) size the CPU's pool here.
int64_t HostKvBudget(const HostKvInputs& in);

}  // namespace llmq
