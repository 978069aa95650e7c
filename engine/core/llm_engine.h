// LlmEngine: add requests, step until done. One step = plan -> materialize -> schedule -> run ->
// postprocess (sample, detokenize, check stops, fork n > 1 samples, finish). Built to serve for
// months: Add and Cancel between steps at any time; bookkeeping is bounded by what is in flight.
//
// Offline planning: requests added since the last step form the pending window; with the planner
// on, the window is ordered by PlanPrefixes (depth-first over shared prompt prefixes) before it is
// queued (the engine keeps the queue; Sequences are created only for its head, as the scheduler can
// admit them), and each group's shared prefix blocks are pinned from the moment its first request
// has computed them until the group's last request is admitted. Not thread-safe: one thread drives
// it.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/host_memory.h"
#include "base/status.h"
#include "engine/backends/backend.h"
#include "engine/core/block_manager.h"
#include "engine/core/model_runner.h"
#include "engine/core/prefix_planner.h"
#include "engine/core/scheduler.h"
#include "engine/core/sequence.h"
#include "engine/model/model_config.h"
#include "engine/text/tokenizer.h"

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
  SchedulerOptions scheduler;
  // The window planner; null: PlanPrefixes. An exception from it falls back to arrival order.
  std::function<Plan(const std::vector<std::span<const int32_t>>&, int block_size)> planner;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t tokens_generated = 0;  // every sampled token, all samples (live progress)
  int peak_blocks_in_use = 0;
};

// The KV pool an engine builds on `backend`: its blocks and where the byte budget came from.
struct KvPoolPlan {
  int num_blocks = 0;
  int64_t bytes_per_token = 0;  // backend.kv_bytes_per_token()
  int64_t budget_bytes = 0;     // 0 when num_blocks was given
  // "engine.num_blocks", "engine.kv_cache_memory" or "<backend>: gpu_memory_utilization 0.9 of
  // the device"
  std::string source;
};
// EngineOptions::num_blocks when set; else the backend's KvBudgetBytes(gpu_memory_utilization)
// when it has one (InvalidArgument when that leaves no room for one block: the weights fill the
// device); else kv_memory_bytes when > 0; else HostKvBudget of the host memory, the backend's
// weight_bytes() and StepWorkingBytes (InvalidArgument when that leaves no room for one block),
// capped by `max_context` (the model's; 0: no cap).
Status PlanKvPool(const Backend& backend, const EngineOptions& opt, KvPoolPlan* out,
                  int max_context = 0);

struct RequestState;

class LlmEngine {
 public:
  // Builds an engine and its KV pool (Backend::AllocateKv); `tokenizer` may be null (ids only: no
  // text, no stop strings).
  static Status Create(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
                       const EngineOptions& opt, std::unique_ptr<LlmEngine>* out);
  ~LlmEngine();
  LlmEngine(const LlmEngine&) = delete;
  LlmEngine& operator=(const LlmEngine&) = delete;

  // Queues a request; allowed at any time between steps. One that can never run (empty, too long
  // for the context or the KV pool, bad parameters, an id already unfinished) is reported with
  // `error` set on the next Step().
  void Add(Request req);
  // Runs one step and appends the requests that finished in it (and those refused or cancelled
  // since the last step) to *out. Non-OK when the backend failed (every request that had a
  // sequence in the step is appended with error "backend: ...", the others go on) or when the
  // planner failed (its window runs in arrival order without pins).
  Status Step(std::vector<RequestOutput>* out);
  // Cancels an unfinished request in whatever state it is; it is reported on the next Step() with
  // cancelled = true and error "cancelled". False for an unknown or already finished id.
  bool Cancel(const std::string& request_id);
  bool HasWork() const { return num_unfinished() > 0; }
  // True while the request has been admitted (running or preempted) and is unfinished; false when
  // it is still in the window or the queue, finished, or unknown (a drain cancels those).
  bool IsAdmitted(const std::string& request_id) const;

  // Requests by state; num_unfinished() = num_window() + num_queued() + num_running() + those
  // finished (refused, cancelled) but not yet reported.
  size_t num_window() const { return window_.size(); }  // added, not yet planned
  size_t num_queued() const { return num_queued_; }     // planned, never admitted (incl. waiting)
  size_t num_running() const { return num_running_; }   // admitted (incl. preempted), unfinished
  size_t num_unfinished() const { return requests_.size() + reports_.size(); }
  // Entries in the engine's own containers (queues, maps, groups): stays bounded by what is in
  // flight, however long the engine serves.
  size_t bookkeeping_size() const;

  const BlockManager& blocks() const { return blocks_; }
  int num_blocks() const { return blocks_.num_blocks(); }
  // Tokens one sequence can ever hold: the context, or the KV pool if smaller.
  int max_sequence_tokens() const {
    return std::min(cfg_.max_position_embeddings, blocks_.num_blocks() * blocks_.block_size());
  }
  const EngineStats& stats() const { return stats_; }
  // Where the steps' time went; all zero unless EngineOptions::profile.
  const StepProfile& profile() const { return profile_; }
  const KvPoolPlan& kv_pool() const { return kv_pool_; }
  // The block manager's invariants, and: every block's ref count equals the references of live
  // sequences' block tables plus the engine's pins. O(blocks + live requests); for tests.
  bool CheckInvariants(std::string* why) const;

 private:
  LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
            const EngineOptions& opt, const KvPoolPlan& pool);
  // Step's phases.
  Status PlanWindow();  // window_ -> planned_ (the queue), groups_
  void Materialize();   // Sequences for the queue's head, as many as could be admitted soon
  void Schedule();      // the scheduler's step, admission metrics, pins
  Status Run();         // copy-on-write copies and the forward pass
  // True when the backend samples on its device and every sampler's row needs nothing else
  // (RowSampling); then fills rows_, drawing each sampled row's u from its stream.
  bool SampleOnDevice();
  void Postprocess(std::vector<RequestOutput>* out);  // sample, append, fork, finish
  void FailStep(const Status& why, std::vector<RequestOutput>* out);

  void UpdatePins();
  bool ReleasePins();                            // true when any block was pinned
  int MaxLen(int prompt, int max_tokens) const;  // prompt + max_tokens, capped at the context
  bool Append(Sequence* s, int token, TokenLogprobs* lp);  // true when s is finished
  void FinishSeq(Sequence* s, std::vector<RequestOutput>* done);
  // Ends a request: drops its sequences and bookkeeping, appends its output to *out.
  void Report(RequestState* st, std::string error, bool cancelled, std::vector<RequestOutput>* out);
  void Fork(Sequence* parent);  // the n - 1 other samples share its blocks
  std::unique_ptr<Sequence> NewSeq(RequestState* st, int index, const std::vector<int32_t>& prompt);
  RequestState* At(uint64_t position) const;  // planned_ entry, null once gone

  ModelConfig cfg_;
  Backend* backend_;
  const Tokenizer* tok_;
  EngineOptions opt_;
  KvPoolPlan kv_pool_;
  BlockManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  ScheduleResult sched_;
  std::vector<Sequence*> samplers_;
  std::vector<RowSampling> rows_;  // this step's rows when sampled on the device
  bool sampled_on_device_ = false;
  Clock::time_point step_time_;  // when this step's tokens were sampled
  EngineStats stats_;
  StepProfile profile_;
  int64_t next_seq_id_ = 0;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;  // unfinished, by id
  std::vector<RequestState*> window_;   // added, not yet planned
  std::vector<RequestOutput> reports_;  // refused or cancelled, for the next Step
  size_t num_queued_ = 0, num_running_ = 0;
  std::vector<int32_t> eos_;

  // The queue in planned order. Positions count every request ever planned; planned_[i] is
  // position planned_base_ + i, null once the request finished or was cancelled. Positions below
  // materialized_ have Sequences (handed to the scheduler); the rest only their Request.
  std::deque<RequestState*> planned_;
  uint64_t planned_base_ = 0;
  uint64_t materialized_ = 0;
  uint64_t next_to_admit_ = 0;  // every position before it was admitted or is gone

  // Pinning: each group's shared prefix blocks, held from when a running member has computed them
  // until every member was admitted (or is gone). In non-decreasing `begin` order.
  struct Group {
    uint64_t begin, end;  // positions of its members
    int32_t shared_tokens;
    std::vector<int32_t> pinned;  // blocks the engine holds a reference on
    bool done = false;
    uint64_t scan = 0;  // members before this position have all finished
  };
  std::deque<Group> groups_;
};

// Blocks of `block_size` tokens that `kv_memory_bytes` buys at `kv_bytes_per_token`
// (Backend::kv_bytes_per_token), at least 1, at most what int32 slots address.
int KvBlocksFor(int64_t kv_bytes_per_token, int64_t kv_memory_bytes, int block_size);

}  // namespace llmq
