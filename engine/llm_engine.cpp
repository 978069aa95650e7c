#include "engine/llm_engine.h"

#include <algorithm>
#include <functional>
#include <limits>

namespace llmq {

// The n samples of one request and what the request reports.
struct RequestState {
  Request req;
  std::vector<std::unique_ptr<Sequence>> seqs;  // [0] runs the prompt; the rest fork from it
  std::vector<Completion> completions;
  int finished = 0;
  bool forked = false;
  RequestMetrics m;
  Clock::time_point arrival;
  bool first_token_seen = false;
};

namespace {

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

int LlmEngine::MaxLen(int prompt, int max_tokens) const {
  return static_cast<int>(
      std::min<int64_t>(int64_t{prompt} + max_tokens, cfg_.max_position_embeddings));
}

int KvBlocksFor(const ModelConfig& cfg, int64_t kv_memory_bytes, int block_size) {
  const int64_t per_block = cfg.KvBytesPerToken(sizeof(float)) * block_size;
  // Slots (block * block_size + offset) are int32 in the flat batch.
  const int64_t max_blocks = std::numeric_limits<int32_t>::max() / block_size;
  return static_cast<int>(std::clamp<int64_t>(kv_memory_bytes / per_block, 1, max_blocks));
}

LlmEngine::LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
                     const EngineOptions& opt)
    : cfg_(cfg),
      backend_(backend),
      tok_(tokenizer),
      opt_(opt),
      blocks_(opt.num_blocks > 0 ? opt.num_blocks
                                 : KvBlocksFor(cfg, opt.kv_memory_bytes, opt.block_size),
              opt.block_size, opt.enable_prefix_cache),
      scheduler_(opt.scheduler, &blocks_),
      runner_(backend, cfg.vocab_size, opt.block_size) {
  backend_->AllocateKv(blocks_.num_blocks(), opt.block_size);
  eos_.assign(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
}

LlmEngine::~LlmEngine() = default;

bool LlmEngine::HasWork() const {
  return scheduler_.HasWork() || !window_.empty() || !rejected_.empty();
}

std::unique_ptr<Sequence> LlmEngine::NewSeq(RequestState* st, int index) {
  auto s = std::make_unique<Sequence>();
  s->seq_id = next_seq_id_++;
  s->owner = st;
  s->sample_index = index;
  s->params = &st->req.params;
  s->tokens = st->req.prompt_ids;
  s->num_prompt = static_cast<int>(st->req.prompt_ids.size());
  s->max_len = MaxLen(s->num_prompt, st->req.params.max_tokens);
  const uint64_t seed =
      st->req.params.seed ? *st->req.params.seed : std::hash<std::string>{}(st->req.id);
  s->rng = Rng(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index));
  if (tok_)
    s->detok = std::make_unique<IncrementalDecoder>(
        *tok_, std::vector<int>(st->req.prompt_ids.begin(), st->req.prompt_ids.end()));
  return s;
}

void LlmEngine::Add(Request req) {
  auto reject = [&](const std::string& why) {
    RequestOutput o;
    o.id = req.id;
    o.prompt_ids = req.prompt_ids;
    o.error = why;
    o.metrics.prompt_tokens = static_cast<int>(req.prompt_ids.size());
    rejected_.push_back(std::move(o));
  };
  const int n = static_cast<int>(req.prompt_ids.size());
  const int ctx = cfg_.max_position_embeddings;
  if (n == 0) return reject("prompt is empty");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= cfg_.vocab_size)
      return reject("prompt token id " + std::to_string(id) + " is outside the vocabulary");
  if (req.params.max_tokens < 1) return reject("max_tokens must be at least 1");
  if (req.n < 1) return reject("n must be at least 1");
  if (n >= ctx)
    return reject("prompt has " + std::to_string(n) + " tokens; the model's context is " +
                  std::to_string(ctx));
  const int max_len = MaxLen(n, req.params.max_tokens);
  if (BlockManager::BlocksFor(max_len, opt_.block_size) > blocks_.num_blocks())
    return reject("prompt + max_tokens (" + std::to_string(max_len) +
                  " tokens) exceed the KV cache (" +
                  std::to_string(blocks_.num_blocks() * opt_.block_size) + " tokens)");
  auto st = std::make_unique<RequestState>();
  st->req = std::move(req);
  st->arrival = Clock::now();
  st->completions.resize(st->req.n);
  st->m.prompt_tokens = n;
  st->seqs.push_back(NewSeq(st.get(), 0));
  window_.push_back(std::move(st));
}

void LlmEngine::PlanWindow() {
  if (window_.empty()) return;
  std::vector<uint32_t> order(window_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  const uint32_t base = static_cast<uint32_t>(planned_.size());
  if (opt_.enable_planner && window_.size() > 1) {
    std::vector<std::span<const int32_t>> prompts;
    prompts.reserve(window_.size());
    for (const auto& st : window_) prompts.emplace_back(st->req.prompt_ids);
    Plan plan = PlanPrefixes(prompts, opt_.block_size);
    order = std::move(plan.order);
    if (opt_.enable_prefix_cache)
      for (const PlanGroup& g : plan.groups)
        groups_.push_back({{g.begin + base, g.end + base, g.shared_tokens, g.parent}, {}, false, 0});
  }
  for (uint32_t i : order) {
    RequestState* st = window_[i].get();
    position_[st] = static_cast<uint32_t>(planned_.size());
    planned_.push_back(st);
    scheduler_.Add(st->seqs[0].get());
    live_.emplace(st, std::move(window_[i]));
  }
  window_.clear();
}

void LlmEngine::UpdatePins(const ScheduleResult& r) {
  for (Sequence* s : r.admitted) {
    auto it = position_.find(s->owner);
    if (it != position_.end()) next_to_admit_ = std::max(next_to_admit_, it->second + 1);
  }
  for (Group& grp : groups_) {
    if (grp.done || grp.g.begin >= next_to_admit_) continue;
    if (next_to_admit_ >= grp.g.end) {  // every member admitted: each holds its own references
      for (int32_t b : grp.pinned) blocks_.Unref(b);
      grp.pinned.clear();
      grp.done = true;
      continue;
    }
    if (!grp.pinned.empty()) continue;
    // Pin once a running member has computed the shared prefix.
    // Members that finished stay finished: skip them once, so a step never rescans them.
    grp.scan = std::max(grp.scan, grp.g.begin);
    while (grp.scan < next_to_admit_ && !planned_[grp.scan]) ++grp.scan;
    for (uint32_t p = grp.scan; p < next_to_admit_; ++p) {
      if (!planned_[p]) continue;  // finished
      const Sequence* s = planned_[p]->seqs[0].get();
      if (s->status != SeqStatus::kRunning ||
          s->num_registered * opt_.block_size < grp.g.shared_tokens)
        continue;
      const int nb = grp.g.shared_tokens / opt_.block_size;
      for (int i = 0; i < nb; ++i) {
        blocks_.Ref(s->block_table[i]);
        grp.pinned.push_back(s->block_table[i]);
      }
      break;
    }
  }
  std::erase_if(groups_, [](const Group& g) { return g.done; });
}

bool LlmEngine::ReleasePins() {
  bool any = false;
  for (Group& g : groups_) {
    for (int32_t b : g.pinned) blocks_.Unref(b), any = true;
    g.pinned.clear();
  }
  return any;
}

bool LlmEngine::Append(Sequence* s, int token) {
  const SamplingParams& p = *s->params;
  RequestState* st = s->owner;
  if (!st->first_token_seen) {
    st->first_token_seen = true;
    st->m.ttft_seconds = Seconds(Clock::now() - st->arrival);
  }
  s->tokens.push_back(token);
  const bool is_eos = !p.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  const bool is_stop_id =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  if (is_eos || is_stop_id) {
    s->finish_reason = "stop";
    return true;
  }
  if (s->detok) {
    const size_t before = s->text.size();
    s->text += s->detok->Add(token);
    if (!p.stop.empty()) {
      const size_t at = FindStop(s->text, before, p.stop);
      if (at != std::string::npos) {
        s->text.resize(at);
        s->finish_reason = "stop";
        s->stopped_by_string = true;
        return true;
      }
    }
  }
  if (static_cast<int>(s->tokens.size()) >= s->max_len) {
    s->finish_reason = "length";
    return true;
  }
  return false;
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
  st->m.completion_tokens += static_cast<int>(c.ids.size());
  if (++st->finished < st->req.n) return;
  RequestOutput o;
  o.id = st->req.id;
  o.prompt_ids = st->req.prompt_ids;
  o.completions = std::move(st->completions);
  o.metrics = st->m;
  o.metrics.total_seconds = Seconds(Clock::now() - st->arrival);
  done->push_back(std::move(o));
  if (auto it = position_.find(st); it != position_.end()) {
    planned_[it->second] = nullptr;
    position_.erase(it);
  }
  live_.erase(st);
}

void LlmEngine::Fork(Sequence* parent) {
  RequestState* st = parent->owner;
  st->forked = true;
  for (int k = 1; k < st->req.n; ++k) {
    std::unique_ptr<Sequence> child = NewSeq(st, k);
    child->tokens = parent->tokens;
    child->num_computed = parent->num_computed;
    child->ever_admitted = true;
    blocks_.Fork(*parent, child.get());
    scheduler_.AddRunning(child.get());
    st->seqs.push_back(std::move(child));
  }
}

std::vector<RequestOutput> LlmEngine::Step() {
  PlanWindow();
  std::vector<RequestOutput> done = std::move(rejected_);
  rejected_.clear();
  scheduler_.Schedule(&sched_);
  if (sched_.seqs.empty() && scheduler_.num_running() == 0 && scheduler_.num_waiting() > 0 &&
      ReleasePins())
    scheduler_.Schedule(&sched_);  // pins are an optimisation: never let them stall the queue
  const auto now = Clock::now();
  for (Sequence* s : sched_.preempted) ++s->owner->m.preemptions, ++stats_.preemptions;
  for (Sequence* s : sched_.admitted)
    if (!s->ever_admitted) {
      s->ever_admitted = true;
      s->owner->m.queue_seconds = Seconds(now - s->owner->arrival);
      s->owner->m.cached_prompt_tokens = s->num_computed;
    }
  UpdatePins(sched_);
  if (sched_.seqs.empty()) return done;
  ++stats_.steps;
  if (!sched_.copies.empty()) backend_->CopyBlocks(sched_.copies);
  std::vector<Sequence*> samplers;
  const std::vector<float>& logits = runner_.Run(sched_.seqs, &samplers);
  for (const ScheduledSeq& s : sched_.seqs) {
    Sequence* q = s.seq;
    // Forks start past the prompt, so this counts the first prefill and every recomputation.
    q->owner->m.computed_prompt_tokens +=
        std::max(0, std::min(q->num_computed + s.num_tokens, q->num_prompt) - q->num_computed);
    q->num_computed += s.num_tokens;
    blocks_.MarkComputed(q);
  }
  stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, blocks_.num_in_use());
  // Sampling is per row and independent: draw in parallel, then apply in order.
  std::vector<int32_t> drawn(samplers.size());
  const int64_t rows = static_cast<int64_t>(samplers.size());
#pragma omp parallel for schedule(static) if (rows * cfg_.vocab_size > (1 << 20))
  for (int64_t i = 0; i < rows; ++i) {
    Sequence* s = samplers[i];
    drawn[i] = SampleToken(&logits[i * cfg_.vocab_size], cfg_.vocab_size, *s->params, &s->rng);
  }
  for (size_t i = 0; i < samplers.size(); ++i) {
    Sequence* s = samplers[i];
    const float* row = &logits[i * cfg_.vocab_size];
    RequestState* st = s->owner;
    if (s->sample_index == 0 && st->req.n > 1 && !st->forked) {
      Fork(s);
      // Each fork samples its first token from the same logits with its own generator.
      for (int k = 1; k < st->req.n; ++k) {
        Sequence* c = st->seqs[k].get();
        if (Append(c, SampleToken(row, cfg_.vocab_size, *c->params, &c->rng))) FinishSeq(c, &done);
      }
    }
    if (Append(s, drawn[i])) FinishSeq(s, &done);
  }
  return done;
}

}  // namespace llmq
