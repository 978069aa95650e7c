#include "engine/llm_engine.h"

#include <algorithm>
#include <functional>

namespace llmq {

int KvBlocksFor(const ModelConfig& cfg, int64_t kv_memory_bytes, int block_size) {
  const int64_t per_block = cfg.KvBytesPerToken(sizeof(float)) * block_size;
  return static_cast<int>(std::max<int64_t>(1, kv_memory_bytes / per_block));
}

LlmEngine::LlmEngine(const ModelConfig& cfg, Backend* backend, const Tokenizer* tokenizer,
                     const EngineOptions& opt)
    : cfg_(cfg),
      backend_(backend),
      tok_(tokenizer),
      opt_(opt),
      blocks_(opt.num_blocks > 0 ? opt.num_blocks
                                 : KvBlocksFor(cfg, opt.kv_memory_bytes, opt.block_size),
              opt.block_size),
      scheduler_(opt.scheduler, &blocks_),
      runner_(backend, cfg.vocab_size, opt.block_size) {
  backend_->AllocateKv(blocks_.num_blocks(), opt.block_size);
  eos_.assign(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
}

void LlmEngine::Add(Request req) {
  auto reject = [&](const std::string& why) {
    RequestOutput o;
    o.id = req.id;
    o.prompt_ids = req.prompt_ids;
    o.finish_reason = "error";
    o.error = why;
    rejected_.push_back(std::move(o));
  };
  const int n = static_cast<int>(req.prompt_ids.size());
  const int ctx = cfg_.max_position_embeddings;
  if (n == 0) return reject("prompt is empty");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= cfg_.vocab_size)
      return reject("prompt token id " + std::to_string(id) + " is outside the vocabulary");
  if (req.params.max_tokens < 1) return reject("max_tokens must be at least 1");
  if (n >= ctx)
    return reject("prompt has " + std::to_string(n) + " tokens; the model's context is " +
                  std::to_string(ctx));
  auto s = std::make_unique<Sequence>();
  s->max_len = std::min(n + req.params.max_tokens, ctx);
  if (BlockManager::BlocksFor(s->max_len, opt_.block_size) > blocks_.num_blocks())
    return reject("prompt + max_tokens (" + std::to_string(s->max_len) +
                  " tokens) exceed the KV cache (" +
                  std::to_string(blocks_.num_blocks() * opt_.block_size) + " tokens)");
  s->tokens = req.prompt_ids;
  s->num_prompt = n;
  s->rng = Rng(req.params.seed ? *req.params.seed : std::hash<std::string>{}(req.id));
  if (tok_)
    s->detok = std::make_unique<IncrementalDecoder>(
        *tok_, std::vector<int>(req.prompt_ids.begin(), req.prompt_ids.end()));
  s->arrival = Clock::now();
  s->req = std::move(req);
  scheduler_.Add(s.get());
  live_.push_back(std::move(s));
}

bool LlmEngine::Append(Sequence* s, int token) {
  const SamplingParams& p = s->req.params;
  if (s->num_completion() == 0) s->first_token = Clock::now();
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

RequestOutput LlmEngine::Finish(Sequence* s) {
  // Release text held back for an incomplete character; a matched stop string already cut it.
  if (s->detok && !s->stopped_by_string) s->text += s->detok->Flush();
  RequestOutput o;
  o.id = s->req.id;
  o.prompt_ids = s->req.prompt_ids;
  o.completion_ids.assign(s->tokens.begin() + s->num_prompt, s->tokens.end());
  o.text = std::move(s->text);
  o.finish_reason = s->finish_reason;
  const auto now = Clock::now();
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  o.ttft_seconds = secs(s->first_token - s->arrival);
  o.total_seconds = secs(now - s->arrival);
  scheduler_.Finish(s);
  return o;
}

std::vector<RequestOutput> LlmEngine::Step() {
  std::vector<RequestOutput> done = std::move(rejected_);
  rejected_.clear();
  const std::vector<ScheduledSeq> step = scheduler_.Schedule();
  if (step.empty()) return done;
  std::vector<Sequence*> samplers;
  const std::vector<float>& logits = runner_.Run(step, &samplers);
  for (const ScheduledSeq& s : step) s.seq->num_computed += s.num_tokens;
  for (size_t i = 0; i < samplers.size(); ++i) {
    Sequence* s = samplers[i];
    const int token =
        SampleToken(&logits[i * cfg_.vocab_size], cfg_.vocab_size, s->req.params, &s->rng);
    if (Append(s, token)) done.push_back(Finish(s));
  }
  std::erase_if(live_, [](const auto& s) { return s->status == SeqStatus::kFinished; });
  return done;
}

}  // namespace llmq
