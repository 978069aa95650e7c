#include "engine/core/llm_engine.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <stdexcept>

#include "engine/sampling/penalties.h"
#include "kernels/cpu/thread_pool.h"

namespace llmq {

// The n samples of one request and what the request reports; where it stands in the queue (its
// phase: each unfinished request is counted in exactly one of num_window(), num_queued(),
// num_running()) is the PlannedQueue::Entry it extends.
struct RequestState : PlannedQueue::Entry {
  Request req;  // prompt_ids move into seqs[0] when it is created (the prompt is stored once)
  std::vector<std::unique_ptr<Sequence>> seqs;  // [0] runs the prompt; the rest fork from it
  std::vector<Completion> completions;
  int finished = 0;
  bool forked = false;
  RequestMetrics m;
  Clock::time_point arrival, admitted;
  bool first_token_seen = false;
  double itl_sum = 0;  // per-sample mean gaps, summed over the samples that have one
  int itl_samples = 0;
  std::string error;  // a sample failed (its grammar's mask was given up): the request's error
};

namespace {

using Phase = PlannedQueue::Entry::Phase;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Sequences the scheduler's waiting queue holds beyond what one step could admit, so that the
// admission loop never stops because the engine has not created the next Sequence yet.
constexpr size_t kSpareWaiting = 4;

// Serial cost of drawing a token, per logit of the row: a few passes over the row at the rate one
// core reads, weighed by the CPU pool against its barrier.
constexpr double kSampleNsPerLogit = 4 * 4 * kernels::kNsPerStreamedByte;

}  // namespace

int LlmEngine::MaxLen(int prompt, int max_tokens) const {
  return static_cast<int>(
      std::min<int64_t>(int64_t{prompt} + max_tokens, cfg_.max_position_embeddings));
}

LlmEngine::LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
                     const EngineOptions& opt, const KvPoolPlan& pool)
    : cfg_(cfg),
      backend_(backend),
      tok_(tokenizer),
      opt_(opt),
      time_(opt.time != nullptr ? opt.time : TimeSource::Steady()),
      kv_pool_(pool),
      blocks_(pool.num_blocks, opt.block_size, opt.enable_prefix_cache),
      scheduler_(opt.scheduler, &blocks_),
      queue_(&blocks_, opt.enable_planner, opt.planner),
      runner_(backend, cfg.vocab_size, opt.block_size, opt.shared_prefix_attention),
      masks_(cfg.vocab_size,
             std::vector<int32_t>(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end())) {
  eos_.assign(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
}

Status LlmEngine::Create(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
                         const EngineOptions& asked, std::unique_ptr<LlmEngine>* out) {
  EngineOptions opt = asked;
  opt.scheduler = ResolveStepLimits(asked.scheduler, *backend);  // the limits left 0 (auto)
  if (opt.block_size < 1) return Status::InvalidArgument("block_size must be at least 1");
  if (opt.scheduler.max_num_seqs < 1 || opt.scheduler.max_num_batched_tokens < 1)
    return Status::InvalidArgument(
        "max_num_seqs and max_num_batched_tokens must be at least 1 (or 0: the backend's)");
  if (!(opt.gpu_memory_utilization > 0 && opt.gpu_memory_utilization <= 1))
    return Status::InvalidArgument("gpu_memory_utilization must be in (0, 1]");
  KvPoolPlan pool;
  LLMQ_RETURN_IF_ERROR(PlanKvPool(*backend, opt, &pool, cfg.max_position_embeddings));
  std::unique_ptr<LlmEngine> e(new LlmEngine(cfg, backend, tokenizer, opt, pool));
  backend->set_profile(opt.profile ? &e->profile_ : nullptr);
  e->masks_.set_profile(opt.profile ? &e->profile_.masks_s : nullptr);
  if (Status st = backend->AllocateKv(e->blocks_.num_blocks(), opt.block_size); !st.ok())
    return Status::Internal("KV cache of " + std::to_string(e->blocks_.num_blocks()) +
                            " blocks: " + st.message());
  *out = std::move(e);
  return Status::Ok();
}

LlmEngine::~LlmEngine() {
  if (opt_.profile) backend_->set_profile(nullptr);  // the backend may outlive the engine
}

void LlmEngine::ForEachInFlight(const std::function<void(const std::string&, int64_t)>& fn) const {
  for (const auto& [id, st] : requests_) {
    int64_t tokens = st->m.completion_tokens;  // of the samples already finished
    for (const std::unique_ptr<Sequence>& s : st->seqs)
      if (s != nullptr && s->status != SeqStatus::kFinished)
        tokens += static_cast<int64_t>(s->tokens.size()) - s->num_prompt;
    if (tokens > 0) fn(id, tokens);
  }
}

size_t LlmEngine::bookkeeping_size() const {
  return requests_.size() + reports_.size() + queue_.bookkeeping_size() + scheduler_.num_waiting() +
         scheduler_.num_running();
}

std::unique_ptr<Sequence> LlmEngine::NewSeq(RequestState* st, int index,
                                            const std::vector<int32_t>& prompt) {
  auto s = std::make_unique<Sequence>();
  s->seq_id = next_seq_id_++;
  s->owner = st;
  s->sample_index = index;
  s->params = &st->req.params;
  s->num_prompt = st->m.prompt_tokens;
  s->max_len = MaxLen(s->num_prompt, st->req.params.max_tokens);
  const uint64_t seed = st->req.params.seed ? *st->req.params.seed : DefaultSeed("", st->req.id);
  s->rng = Rng(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index));
  if (tok_)
    s->detok = std::make_unique<IncrementalDecoder>(
        *tok_, std::vector<int>(prompt.begin(), prompt.begin() + s->num_prompt));
  if (st->req.grammar && st->req.grammar_trigger.empty()) {
    s->matcher = std::make_unique<Matcher>(st->req.grammar);
    s->grammar_from_token = 0;
  }
  s->trigger_waiting = st->req.grammar && !st->req.grammar_trigger.empty();
  s->trigger_armed = st->req.grammar_trigger_after.empty();
  return s;
}

void LlmEngine::Add(Request req) {
  const int n = static_cast<int>(req.prompt_ids.size());
  auto reject = [&](const std::string& why) {
    RequestOutput o;
    o.id = req.id;
    o.error = why;
    o.metrics.prompt_tokens = n;
    reports_.push_back(std::move(o));
  };
  const int ctx = cfg_.max_position_embeddings;
  if (n == 0) return reject("prompt is empty");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= cfg_.vocab_size)
      return reject("prompt token id " + std::to_string(id) + " is outside the vocabulary");
  if (req.params.max_tokens < 1) return reject("max_tokens must be at least 1");
  if (req.n < 1) return reject("n must be at least 1");
  if (!(req.params.repetition_penalty > 0.0f))
    return reject("repetition_penalty must be greater than 0");
  if (n >= ctx)
    return reject("prompt has " + std::to_string(n) + " tokens; the model's context is " +
                  std::to_string(ctx));
  const int max_len = MaxLen(n, req.params.max_tokens);
  if (BlockManager::BlocksFor(max_len, opt_.block_size) > blocks_.num_blocks())
    return reject("prompt + max_tokens (" + std::to_string(max_len) +
                  " tokens) exceed the KV cache (" +
                  std::to_string(blocks_.num_blocks() * opt_.block_size) + " tokens)");
  if (requests_.count(req.id)) return reject("request id '" + req.id + "' is already unfinished");
  if (!req.grammar_trigger.empty() && !req.grammar) return reject("a trigger without a grammar");
  if (!req.grammar_trigger_after.empty() &&
      (req.grammar_trigger.empty() || req.grammar_trigger_at_start))
    return reject("grammar_trigger_after needs a trigger that is not at the start");
  if (req.grammar) {
    if (tok_ == nullptr) return reject("a grammar needs the engine's tokenizer");
    if (req.params.min_tokens > 0)
      return reject("min_tokens cannot be combined with a grammar (the document's end decides)");
    ++stats_.constrained_requests;
  }
  auto st = std::make_unique<RequestState>();
  st->req = std::move(req);
  st->arrival = st->req.arrival.value_or(time_->Now());
  st->completions.resize(st->req.n);
  st->m.prompt_tokens = n;
  st->prompt = st->req.prompt_ids;
  st->segment = st->req.plan_segment;
  queue_.Add(st.get());
  const std::string id = st->req.id;
  requests_.emplace(id, std::move(st));
}

bool LlmEngine::Cancel(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  Report(it->second.get(), "cancelled", true, &reports_);
  return true;
}

bool LlmEngine::IsAdmitted(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it != requests_.end() && it->second->phase == Phase::kAdmitted;
}

void LlmEngine::Materialize() {
  // Admission takes the scheduler's waiting queue front to back and stops at the sequence cap, so
  // holding cap - running (+ spares) Sequences there admits exactly what holding all would.
  // Preempted sequences are already at its front; new ones join behind them in planned order.
  const size_t cap = static_cast<size_t>(opt_.scheduler.max_num_seqs);
  const size_t running = scheduler_.num_running();
  const size_t want = (running < cap ? cap - running : 0) + kSpareWaiting;
  while (scheduler_.num_waiting() < want) {
    auto* st = static_cast<RequestState*>(queue_.Materialize());
    if (!st) break;
    std::unique_ptr<Sequence> s = NewSeq(st, 0, st->req.prompt_ids);
    s->tokens = std::move(st->req.prompt_ids);
    st->req.prompt_ids = {};
    st->prompt = {};
    st->lead = s.get();
    scheduler_.Add(s.get());
    st->seqs.push_back(std::move(s));
  }
}

Status LlmEngine::Schedule(std::vector<RequestOutput>* out) {
  ScopedTimer t(opt_.profile ? &profile_.schedule_s : nullptr);
  Status planned = queue_.PlanWindow();
  std::move(reports_.begin(), reports_.end(), std::back_inserter(*out));
  reports_.clear();
  Materialize();
  ScheduleBatch();
  return planned;
}

void LlmEngine::ScheduleBatch() {
  scheduler_.Schedule(&sched_);
  if (sched_.seqs.empty() && scheduler_.num_running() == 0 && scheduler_.num_waiting() > 0 &&
      queue_.ReleasePins())
    scheduler_.Schedule(&sched_);  // pins are an optimisation: never let them stall the queue
  const auto now = time_->Now();
  for (Sequence* s : sched_.preempted) {
    ++s->owner->m.preemptions;
    ++stats_.preemptions;
  }
  for (Sequence* s : sched_.admitted) {
    if (s->ever_admitted) continue;
    s->ever_admitted = true;
    RequestState* st = s->owner;
    queue_.Admitted(st);
    st->admitted = now;
    st->m.queue_seconds = Seconds(now - st->arrival);
    st->m.cached_prompt_tokens = s->num_computed;
  }
  queue_.UpdatePins();
}

bool LlmEngine::Append(Sequence* s, int token, TokenLogprobs* lp) {
  const SamplingParams& p = *s->params;
  RequestState* st = s->owner;
  if (!st->first_token_seen) {
    st->first_token_seen = true;
    st->m.ttft_seconds = Seconds(step_time_ - st->admitted);
  }
  if (s->num_completion() > 0) s->token_gaps_seconds += Seconds(step_time_ - s->last_token_at);
  s->last_token_at = step_time_;
  const bool is_eos_id = std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  if (s->matcher && s->matcher->exhausted()) {
    // The mask was given up (CompiledGrammar::mask_fuel): the request fails, on every run alike,
    // rather than stall the batch on masks of a second each.
    s->owner->error =
        "grammar: a mask took more than " + std::to_string(s->matcher->grammar()->mask_fuel()) +
        " steps of the parser (at completion token " + std::to_string(s->num_completion()) +
        "); a rule nested inside itself, as ws ::= ([ \\t\\n] ws [ \\t\\n]?)?, walks "
        "every token of the vocabulary it could continue with";
    s->finish_reason = "error";
    return true;
  }
  if (s->matcher) {
    // The mask allowed only tokens the matcher accepts, and EOS where the document may end; a row
    // whose logits were all -inf or NaN there gives a token that may be neither: the sample ends
    // before it (its text a valid prefix), as if cut by its length.
    const bool ok = is_eos_id ? s->matcher->CanEnd() : s->matcher->Consume(tok_->TokenBytes(token));
    if (!ok) {
      ++stats_.grammar_dead_ends;
      s->finish_reason = "length";
      return true;
    }
  }
  ++stats_.tokens_generated;
  s->tokens.push_back(token);
  if (p.logprobs >= 0 && lp) {
    s->logprobs.push_back(std::move(*lp));
    s->text_begin.push_back(static_cast<int32_t>(s->text.size()));
  }
  if (s->trigger_waiting && !is_eos_id) WatchTrigger(s, token);
  // Before min_tokens nothing stops a sequence but its length (vLLM's stop checker).
  const bool may_stop = s->num_completion() >= p.min_tokens;
  // A constrained sample's EOS ends its complete document, ignore_eos or not.
  const bool is_eos = (!p.ignore_eos || s->matcher) && is_eos_id;
  const bool is_stop_id =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  if (may_stop && (is_eos || is_stop_id)) {
    s->finish_reason = "stop";
    return true;
  }
  if (s->detok) {
    const size_t before = s->text.size();
    s->text += s->detok->Add(token);
    if (!p.stop.empty() && may_stop) {
      const size_t at = FindStop(s->text, before, p.stop);
      if (at != std::string::npos) {
        s->text.resize(at);
        s->finish_reason = "stop";
        s->stopped_by_string = true;
        return true;
      }
    }
  }
  if (s->matcher && s->matcher->IsTerminated()) {  // complete, and nothing can follow
    s->finish_reason = "stop";
    return true;
  }
  if (static_cast<int>(s->tokens.size()) >= s->max_len) {
    s->finish_reason = "length";
    return true;
  }
  return false;
}

namespace {

// Looks for `after` in the bytes held; keeps only those it may still begin in, or, once it came,
// only the bytes after it (where the trigger is then looked for). Whether it came.
bool Arm(Sequence* s, const std::string& after) {
  const size_t at = s->trigger_bytes.find(after);
  size_t drop = 0;
  if (at != std::string::npos) {
    drop = at + after.size();
    s->trigger_armed = true;
  } else if (s->trigger_bytes.size() >= after.size()) {
    drop = s->trigger_bytes.size() - (after.size() - 1);
  }
  s->trigger_bytes.erase(0, drop);
  s->trigger_base += drop;
  return s->trigger_armed;
}

}  // namespace

void LlmEngine::WatchTrigger(Sequence* s, int token) {
  const Request& req = s->owner->req;
  const std::string& trigger = req.grammar_trigger;
  s->trigger_bytes += tok_->TokenBytes(token);
  if (!s->trigger_armed && !Arm(s, req.grammar_trigger_after)) return;
  size_t at = std::string::npos;
  if (req.grammar_trigger_at_start) {
    const size_t n = std::min(s->trigger_bytes.size(), trigger.size());
    if (s->trigger_bytes.compare(0, n, trigger, 0, n) != 0) {  // never: the sample stays free
      s->trigger_waiting = false;
      s->trigger_bytes.clear();
      return;
    }
    if (n == trigger.size()) at = 0;
  } else {
    at = s->trigger_bytes.find(trigger);
    if (at == std::string::npos && s->trigger_bytes.size() >= trigger.size()) {
      // Keep only the bytes a trigger may still begin in.
      const size_t drop = s->trigger_bytes.size() - (trigger.size() - 1);
      s->trigger_bytes.erase(0, drop);
      s->trigger_base += drop;
    }
  }
  if (at == std::string::npos) return;
  s->trigger_waiting = false;
  ++stats_.grammar_triggers;
  auto m = std::make_unique<Matcher>(req.grammar);
  if (!m->Consume(std::string_view(s->trigger_bytes).substr(at))) {
    ++stats_.grammar_triggers_refused;
    s->trigger_bytes.clear();
    return;
  }
  // The token that holds the trigger's first byte, and where in its bytes.
  const size_t first = s->trigger_base + at;
  size_t pos = 0;
  for (size_t i = static_cast<size_t>(s->num_prompt); i < s->tokens.size(); ++i) {
    const size_t len = tok_->TokenBytes(s->tokens[i]).size();
    if (pos + len > first) {
      s->grammar_from_token = static_cast<int>(i) - s->num_prompt;
      s->grammar_from_byte = static_cast<int>(first - pos);
      break;
    }
    pos += len;
  }
  s->matcher = std::move(m);
  s->trigger_bytes.clear();
  s->trigger_bytes.shrink_to_fit();
}

void LlmEngine::FinishSeq(Sequence* s, std::vector<RequestOutput>* done) {
  // Release text held back for an incomplete character; a matched stop string already cut it.
  if (s->detok && !s->stopped_by_string) s->text += s->detok->Flush();
  scheduler_.Finish(s);
  RequestState* st = s->owner;
  Completion& c = st->completions[s->sample_index];
  c.ids.assign(s->tokens.begin() + s->num_prompt, s->tokens.end());
  c.text = std::move(s->text);
  c.finish_reason = s->finish_reason;
  c.logprobs = std::move(s->logprobs);
  c.grammar_from_token = s->grammar_from_token;
  c.grammar_from_byte = s->grammar_from_byte;
  c.text_begin = std::move(s->text_begin);
  // A stop string cut the text after some of them began.
  for (int32_t& b : c.text_begin) b = std::min(b, static_cast<int32_t>(c.text.size()));
  st->m.completion_tokens += static_cast<int>(c.ids.size());
  if (c.ids.size() >= 2) {
    st->itl_sum += s->token_gaps_seconds / static_cast<double>(c.ids.size() - 1);
    ++st->itl_samples;
  }
  if (++st->finished < st->req.n) return;
  Report(st, st->error, false, done);
}

void LlmEngine::Report(RequestState* st, std::string error, bool cancelled,
                       std::vector<RequestOutput>* out) {
  for (const auto& s : st->seqs) scheduler_.Remove(s.get());  // no-op for finished ones
  RequestOutput o;
  o.id = st->req.id;
  o.error = std::move(error);
  o.cancelled = cancelled;
  if (o.ok()) o.completions = std::move(st->completions);
  o.metrics = st->m;
  o.metrics.itl_seconds = st->itl_samples ? st->itl_sum / st->itl_samples : 0;
  o.metrics.total_seconds = Seconds(time_->Now() - st->arrival);
  queue_.Remove(st);
  requests_.erase(o.id);  // destroys st
  out->push_back(std::move(o));
}

void LlmEngine::Fork(Sequence* parent) {
  RequestState* st = parent->owner;
  st->forked = true;
  for (int k = 1; k < st->req.n; ++k) {
    std::unique_ptr<Sequence> child = NewSeq(st, k, parent->tokens);
    child->tokens = parent->tokens;
    child->num_computed = parent->num_computed;
    child->ever_admitted = true;
    if (parent->matcher) child->matcher = std::make_unique<Matcher>(*parent->matcher);
    child->trigger_waiting = parent->trigger_waiting;
    child->trigger_armed = parent->trigger_armed;
    child->trigger_bytes = parent->trigger_bytes;
    child->trigger_base = parent->trigger_base;
    child->grammar_from_token = parent->grammar_from_token;
    child->grammar_from_byte = parent->grammar_from_byte;
    blocks_.Fork(*parent, child.get());
    scheduler_.AddRunning(child.get());
    st->seqs.push_back(std::move(child));
  }
}

Status LlmEngine::Run() {
  ScopedTimer t(opt_.profile ? &profile_.forward_s : nullptr);
  ++stats_.steps;
  profile_.steps += opt_.profile;
  // The copies (copy-on-write of shared partial blocks, partial prefix reuse) come first: the
  // forward pass reads the copied tokens. Their sources are held only until the copies ran, and
  // are let go whatever happened (a failed step fails its requests, not the pool's accounting).
  Status st;
  try {
    st = sched_.copies.empty() ? Status::Ok() : backend_->CopyBlocks(sched_.copies);
  } catch (const std::exception& e) {  // a backend that throws fails like one that says so
    st = Status::Internal(e.what());
  }
  blocks_.CopiesDone();
  if (!st.ok()) return st;
  try {
    runner_.Prepare(sched_.seqs, &samplers_);
    masked_ = masks_.Prepare(samplers_);
    sampled_on_device_ = SampleOnDevice();
    StepMasks* masks = masked_ ? &masks_ : nullptr;
    LLMQ_RETURN_IF_ERROR(sampled_on_device_ ? runner_.ForwardSample(rows_, masks)
                                            : runner_.Forward(masks));
    // Masks a backend did not compute during its forward pass (the CPU's): the host's, after it.
    if (masked_) masks_.ComputeRows();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Internal(e.what());
  }
}

bool LlmEngine::SampleOnDevice() {
  if (!backend_->samples_on_device() || samplers_.empty()) return false;
  if (masked_ && !backend_->applies_masks()) return false;
  for (const Sequence* s : samplers_) {
    const SamplingParams& p = *s->params;
    const RequestState* st = s->owner;
    const int generated = static_cast<int>(s->tokens.size()) - s->num_prompt;
    // Logprobs and penalties need the row on the host; so does a first token that n > 1 samples
    // draw from the same logits (Postprocess forks them).
    if (p.logprobs >= 0 || HasPenalties(p, generated) ||
        (s->sample_index == 0 && st->req.n > 1 && !st->forked))
      return false;
  }
  rows_.resize(samplers_.size());
  for (size_t i = 0; i < samplers_.size(); ++i) {
    Sequence* s = samplers_[i];
    const SamplingParams& p = *s->params;
    // The stream advances exactly as SampleToken's would (one draw per sampled token). A step
    // that then fails fails these requests, so a draw is never spent twice.
    rows_[i] = ToRowSampling(p, IsGreedy(p) ? 0.0 : s->rng.NextDouble());
  }
  return true;
}

Status LlmEngine::FailStep(const Status& why, const Status& planned,
                           std::vector<RequestOutput>* out) {
  // Nothing of this step is marked computed, so none of its blocks enters the prefix cache;
  // Report releases them (and forgets what they had in flight). Requests outside the step keep
  // their blocks and their state.
  std::vector<RequestState*> failed;
  for (const ScheduledSeq& s : sched_.seqs)
    if (std::find(failed.begin(), failed.end(), s.seq->owner) == failed.end())
      failed.push_back(s.seq->owner);
  for (RequestState* st : failed) Report(st, "backend: " + why.message(), false, out);
  return Status::Internal("backend: " + why.message() +
                          (planned.ok() ? "" : "; " + planned.message()));
}

void LlmEngine::Postprocess(std::vector<RequestOutput>* out) {
  ScopedTimer t(opt_.profile ? &profile_.sample_s : nullptr);
  step_time_ = time_->Now();
  CommitComputed();
  if (sampled_on_device_)
    AppendDrawn(out);
  else
    SampleAndAppend(out);
}

void LlmEngine::CommitComputed() {
  for (const ScheduledSeq& s : sched_.seqs) {
    Sequence* q = s.seq;
    // Forks start past the prompt, so this counts the first prefill and every recomputation.
    q->owner->m.computed_prompt_tokens +=
        std::max(0, std::min(q->num_computed + s.num_tokens, q->num_prompt) - q->num_computed);
    q->num_computed += s.num_tokens;
    blocks_.MarkComputed(q);
  }
  stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, blocks_.num_in_use());
}

int LlmEngine::Forced(size_t row, int drawn) {
  // A row that allows one token gives that token whatever was drawn (the draw is spent as for any
  // token, so a sample's stream does not depend on where its rows were forced). Only logits that
  // were all -inf or NaN make the draw differ.
  if (!masked_ || masks_.forced(row) < 0) return drawn;
  ++stats_.forced_tokens;
  return masks_.forced(row);
}

void LlmEngine::AppendDrawn(std::vector<RequestOutput>* out) {
  // Rows sampled on the device arrive as ids (no logprobs, no forks pending: SampleOnDevice).
  const std::vector<int32_t>& ids = runner_.ids();
  for (size_t i = 0; i < samplers_.size(); ++i)
    if (Append(samplers_[i], Forced(i, ids[i]), nullptr)) FinishSeq(samplers_[i], out);
}

void LlmEngine::SampleAndAppend(std::vector<RequestOutput>* out) {
  const std::span<const float> logits = runner_.logits();
  // Sampling is per row and independent: draw in parallel, then apply in order.
  const int64_t rows = static_cast<int64_t>(samplers_.size());
  std::vector<int32_t> drawn(rows);
  std::vector<TokenLogprobs> lps(rows);
  // A constrained row is drawn under its mask (unconstrained rows: none).
  auto mask = [&](size_t i) {
    return masked_ && samplers_[i]->matcher != nullptr ? masks_.row(i) : nullptr;
  };
  auto sample = [&](Sequence* s, const float* row, const uint32_t* m, TokenLogprobs* lp) {
    const std::span<const int32_t> all(s->tokens);
    const TokenHistory h{all.first(s->num_prompt), all.subspan(s->num_prompt)};
    return SampleNext(row, cfg_.vocab_size, *s->params, eos_, h, &s->rng, lp, m);
  };
  // A row's draw reads its vocab_size logits a few times (max, softmax, the top-p/top-k cut).
  kernels::ParallelFor(rows, cfg_.vocab_size * kSampleNsPerLogit, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      drawn[i] = sample(samplers_[i], &logits[i * cfg_.vocab_size], mask(i), &lps[i]);
  });
  for (size_t i = 0; i < samplers_.size(); ++i) {
    Sequence* s = samplers_[i];
    const float* row = &logits[i * cfg_.vocab_size];
    RequestState* st = s->owner;
    if (s->sample_index == 0 && st->req.n > 1 && !st->forked) {
      Fork(s);
      // Each fork samples its first token from the same logits with its own generator.
      for (int k = 1; k < st->req.n; ++k) {
        Sequence* c = st->seqs[k].get();
        TokenLogprobs lp;
        const int token = sample(c, row, mask(i), &lp);
        if (Append(c, Forced(i, token), &lp)) FinishSeq(c, out);
      }
    }
    if (Append(s, Forced(i, drawn[i]), &lps[i])) FinishSeq(s, out);
  }
}

// nano-vllm's step: schedule, run, postprocess.
Status LlmEngine::Step(std::vector<RequestOutput>* out) {
  const Status planned = Schedule(out);
  if (sched_.seqs.empty()) return planned;
  if (Status ran = Run(); !ran.ok()) return FailStep(ran, planned, out);
  Postprocess(out);
  return planned;
}

Status LlmEngine::CheckInvariants() const {
  LLMQ_RETURN_IF_ERROR(blocks_.CheckInvariants());
  LLMQ_RETURN_IF_ERROR(queue_.CheckInvariants());
  auto fail = [](std::string m) { return Status::Internal(std::move(m)); };
  // Run lets go of every copy's source, whether the step succeeded or not.
  if (blocks_.num_copy_holds() != 0)
    return fail(std::to_string(blocks_.num_copy_holds()) + " copy sources still held after a step");
  // Every reference on a block is accounted for: one per appearance in a live sequence's block
  // table (forks share their parent's), plus one per pin. A leak or a double release shows here.
  std::vector<int> refs(blocks_.num_blocks(), 0);
  size_t window = 0, queued = 0, running = 0;
  for (const auto& [id, st] : requests_) {
    window += st->phase == Phase::kWindow;
    queued += st->phase == Phase::kQueued;
    running += st->phase == Phase::kAdmitted;
    if (st->phase != Phase::kWindow && queue_.At(st->position) != st.get() &&
        st->position >= queue_.first_held())
      return fail("request " + id + " is not at its planned position");
    for (const auto& s : st->seqs) {
      if (s->status != SeqStatus::kRunning && !s->block_table.empty())
        return fail("request " + id + ": a sequence that is not running holds blocks");
      for (int32_t b : s->block_table) ++refs[b];
    }
  }
  queue_.CountPins(&refs);
  for (int b = 0; b < blocks_.num_blocks(); ++b)
    if (refs[b] != blocks_.ref_count(b))
      return fail("block " + std::to_string(b) + " has ref count " +
                  std::to_string(blocks_.ref_count(b)) + " but " + std::to_string(refs[b]) +
                  " references");
  if (window != queue_.num_window() || queued != queue_.num_queued() ||
      running != queue_.num_admitted())
    return fail("request counts disagree with the requests' phases");
  return Status::Ok();
}

}  // namespace llmq
