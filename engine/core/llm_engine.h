// LlmEngine: add requests, step until done. One step = plan -> materialize -> schedule -> run ->
// postprocess (sample, detokenize, check stops, fork n > 1 samples, finish). Built to serve for
// months: Add and Cancel between steps at any time; bookkeeping is bounded by what is in flight.
//
// Offline planning: requests added since the last step form the pending window; with the planner
// on, the window is ordered by PlanPrefixes (depth-first over shared prompt prefixes) before it is
// queued (PlannedQueue; Sequences are created only for its head, as the scheduler can admit them),
// and each group's shared prefix blocks are pinned from the moment its first request has computed
// them until the group's last request is admitted. Not thread-safe: one thread drives it.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/backends/backend.h"
#include "engine/core/block_manager.h"
#include "engine/core/engine_options.h"
#include "engine/core/grammar_masks.h"
#include "engine/core/kv_pool_plan.h"
#include "engine/core/model_runner.h"
#include "engine/core/planned_queue.h"
#include "engine/core/scheduler.h"
#include "engine/core/sequence.h"
#include "engine/model/model_config.h"
#include "engine/text/tokenizer.h"

namespace llmq {

struct EngineStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t tokens_generated = 0;  // every sampled token, all samples (live progress)
  int peak_blocks_in_use = 0;
  // Structured outputs: requests added with a grammar; tokens taken because their row's mask
  // allowed only them; samples cut because a row allowed no token the model could pick (its
  // logits all -inf or NaN there: the text is a valid prefix, finish_reason "length").
  int64_t constrained_requests = 0;
  int64_t forced_tokens = 0;
  int64_t grammar_dead_ends = 0;
  // Lazy grammars (Request::grammar_trigger): samples whose trigger came, and those of them whose
  // bytes after it the grammar refused (they went on free).
  int64_t grammar_triggers = 0;
  int64_t grammar_triggers_refused = 0;
};

struct RequestState;

class LlmEngine {
 public:
  // Builds an engine and its KV pool (Backend::AllocateKv); `tokenizer` may be null (ids only: no
  // text, no stop strings). Step limits left 0 are the backend's (Backend::default_step_limits).
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
  // Calls fn(id, tokens) for every unfinished request that has sampled completion tokens: how
  // many so far, over its n samples (a progress report: the work in flight). O(unfinished).
  void ForEachInFlight(const std::function<void(const std::string&, int64_t)>& fn) const;

  // Requests by state; num_unfinished() = num_window() + num_queued() + num_running() + those
  // finished (refused, cancelled) but not yet reported.
  size_t num_window() const { return queue_.num_window(); }  // added, not yet planned
  // Planned, never admitted (incl. waiting).
  size_t num_queued() const { return queue_.num_queued(); }
  // Admitted (incl. preempted), unfinished.
  size_t num_running() const { return queue_.num_admitted(); }
  size_t num_unfinished() const { return requests_.size() + reports_.size(); }
  // Entries in the engine's own containers (queues, maps, groups): stays bounded by what is in
  // flight, however long the engine serves.
  size_t bookkeeping_size() const;

  const BlockManager& blocks() const { return blocks_; }
  int num_blocks() const { return blocks_.num_blocks(); }
  // The most sequences and tokens one step runs (SchedulerOptions, as resolved by Create).
  int max_num_seqs() const { return opt_.scheduler.max_num_seqs; }
  int max_num_batched_tokens() const { return opt_.scheduler.max_num_batched_tokens; }
  // Tokens one sequence can ever hold: the context, or the KV pool if smaller.
  int max_sequence_tokens() const {
    return std::min(cfg_.max_position_embeddings, blocks_.num_blocks() * blocks_.block_size());
  }
  const EngineStats& stats() const { return stats_; }
  // How long each constrained row's mask took (structured outputs).
  const LatencyHistogram& mask_times() const { return masks_.mask_times(); }
  // Where the steps' time went; all zero unless EngineOptions::profile.
  const StepProfile& profile() const { return profile_; }
  const KvPoolPlan& kv_pool() const { return kv_pool_; }
  // The block manager's invariants, and: every block's ref count equals the references of live
  // sequences' block tables plus the engine's pins. O(blocks + live requests); for tests. Internal
  // saying which on a violation.
  Status CheckInvariants() const;

 private:
  LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
            const EngineOptions& opt, const KvPoolPlan& pool);
  // Step's phases: Schedule -> Run -> Postprocess.
  // Plans the window into the queue, hands out the reports, materializes the queue's head and
  // schedules the step (sched_). Non-OK when the planner failed.
  Status Schedule(std::vector<RequestOutput>* out);
  void Materialize();    // Sequences for the queue's head, as many as could be admitted soon
  void ScheduleBatch();  // the scheduler's step, admission metrics, pins
  Status Run();          // copy-on-write copies and the forward pass
  // True when the backend samples on its device and every sampler's row needs nothing else
  // (RowSampling); then fills rows_, drawing each sampled row's u from its stream.
  bool SampleOnDevice();
  void Postprocess(std::vector<RequestOutput>* out);  // commit, sample, append, fork, finish
  void CommitComputed();  // the step's tokens are in the KV cache: counted, full blocks cached
  void AppendDrawn(std::vector<RequestOutput>* out);  // the ids the device sampled
  int Forced(size_t row, int drawn);  // the token row `row` takes: its forced one, or `drawn`
  void SampleAndAppend(std::vector<RequestOutput>* out);  // sampled here from the logits
  // Fails the step's requests; the status Step returns (the planner's failure too).
  Status FailStep(const Status& why, const Status& planned, std::vector<RequestOutput>* out);

  int MaxLen(int prompt, int max_tokens) const;  // prompt + max_tokens, capped at the context
  bool Append(Sequence* s, int token, TokenLogprobs* lp);  // true when s is finished
  // A lazy grammar's trigger looked for in `token`'s bytes (just appended); the matcher set up
  // from the trigger on when it comes.
  void WatchTrigger(Sequence* s, int token);
  void FinishSeq(Sequence* s, std::vector<RequestOutput>* done);
  // Ends a request: drops its sequences and bookkeeping, appends its output to *out.
  void Report(RequestState* st, std::string error, bool cancelled, std::vector<RequestOutput>* out);
  void Fork(Sequence* parent);  // the n - 1 other samples share its blocks
  std::unique_ptr<Sequence> NewSeq(RequestState* st, int index, const std::vector<int32_t>& prompt);

  ModelConfig cfg_;
  Backend* backend_;
  const Tokenizer* tok_;
  EngineOptions opt_;
  TimeSource* const time_;  // opt_.time, or the steady clock
  KvPoolPlan kv_pool_;
  BlockManager blocks_;
  Scheduler scheduler_;
  PlannedQueue queue_;  // the window, the planned queue with its holes, the groups' pins
  ModelRunner runner_;
  ScheduleResult sched_;
  std::vector<Sequence*> samplers_;
  std::vector<RowSampling> rows_;  // this step's rows when sampled on the device
  GrammarMasks masks_;             // this step's token masks, when a sampler is constrained
  bool masked_ = false;
  bool sampled_on_device_ = false;
  Clock::time_point step_time_;  // when this step's tokens were sampled
  EngineStats stats_;
  StepProfile profile_;
  int64_t next_seq_id_ = 0;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;  // unfinished, by id
  std::vector<RequestOutput> reports_;  // refused or cancelled, for the next Step
  std::vector<int32_t> eos_;
};

}  // namespace llmq
