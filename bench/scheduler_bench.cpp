// The engine's own cost per step, with the model taken out: scheduler + block manager + flat batch
// building for 256 running sequences in decode (target: <= 50 us a step), and a whole
// LlmEngine::Step with a backend that does nothing (greedy sampling over the vocabulary included).
//   scheduler_bench [--seqs 256] [--prompt 512] [--steps 2000]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/backends/backend.h"
#include "engine/core/llm_engine.h"
#include "engine/core/model_runner.h"
#include "engine/core/scheduler.h"

using namespace llmq;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A backend that computes nothing: logits are zeros except one favoured id per row.
class NullBackend : public Backend {
 public:
  explicit NullBackend(int vocab) : vocab_(vocab) {}
  std::string name() const override { return "null"; }
  Status AllocateKv(int, int) override { return Status::Ok(); }
  Status Forward(const StepBatch& b, float* logits) override {
    std::memset(logits, 0, sizeof(float) * b.logits_rows.size() * vocab_);
    for (size_t i = 0; i < b.logits_rows.size(); ++i) logits[i * vocab_ + 5 + i % 100] = 1.f;
    return Status::Ok();
  }
  Status CopyBlocks(const std::vector<std::pair<int, int>>&) override { return Status::Ok(); }
  uint64_t weight_bytes() const override { return 0; }
  int64_t kv_bytes_per_token() const override { return 0; }

 private:
  int vocab_;
};

}  // namespace

int main(int argc, char** argv) {
  int seqs = 256, prompt = 512, steps = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seqs"))
      seqs = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt"))
      prompt = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
  }
  const int bs = 16, max_len = prompt + steps + 8;
  const int blocks = seqs * BlockManager::BlocksFor(max_len, bs) + 16;

  // 1. Scheduler + block manager + batch building alone.
  BlockManager bm(blocks, bs);
  SchedulerOptions so;
  so.max_num_seqs = seqs;
  so.max_num_batched_tokens = seqs * prompt;
  Scheduler sched(so, &bm);
  NullBackend null_be(512);
  ModelRunner runner(&null_be, 512, bs);
  std::vector<std::unique_ptr<Sequence>> pool;
  for (int s = 0; s < seqs; ++s) {
    auto q = std::make_unique<Sequence>();
    q->seq_id = s;
    for (int t = 0; t < prompt; ++t) q->tokens.push_back(1 + (t * 7 + s) % 500);
    q->num_prompt = prompt;
    q->max_len = max_len;
    sched.Add(q.get());
    pool.push_back(std::move(q));
  }
  ScheduleResult r;
  StepBatch batch;
  std::vector<Sequence*> samplers;
  auto step = [&] {
    sched.Schedule(&r);
    runner.Build(r.seqs, &batch, &samplers);
    for (const ScheduledSeq& s : r.seqs) {
      s.seq->num_computed += s.num_tokens;
      bm.MarkComputed(s.seq);
    }
    for (Sequence* s : samplers) s->tokens.push_back(7);
  };
  step();  // the prefill step
  const double t0 = Now();
  for (int i = 0; i < steps; ++i) step();
  const double per_step_us = (Now() - t0) / steps * 1e6;

  // 2. A whole engine step with the null backend.
  std::vector<double> whole;
  for (int vocab : {512, 32000}) {
    ModelConfig cfg;
    cfg.num_layers = 1, cfg.num_kv_heads = 1, cfg.head_dim = 64, cfg.vocab_size = vocab;
    cfg.max_position_embeddings = max_len + 16;
    NullBackend be(vocab);
    EngineOptions eo;
    eo.num_blocks = blocks;
    eo.scheduler = so;
    std::unique_ptr<LlmEngine> engine;
    LLMQ_CHECK(LlmEngine::Create(cfg, &be, nullptr, eo, &engine).ok());
    std::vector<RequestOutput> out;
    for (int s = 0; s < seqs; ++s) {
      Request q;
      q.id = std::to_string(s);
      q.prompt_ids = pool[s]->tokens;
      q.prompt_ids.resize(prompt);
      q.params.temperature = 0;
      q.params.max_tokens = steps + 4;
      q.params.ignore_eos = true;
      engine->Add(q);
    }
    engine->Step(&out).IgnoreError();  // warm-up (a null backend: a step cannot fail)
    const int n = steps / 4;
    const double t1 = Now();
    for (int i = 0; i < n; ++i) out.clear(), engine->Step(&out);
    whole.push_back((Now() - t1) / n * 1e6);
  }
  std::printf("engine cost per decode step, %d running sequences, prompt %d, block %d (no model)\n",
              seqs, prompt, bs);
  std::printf("| %-52s | %9s | %6s |\n", "what", "us/step", "target");
  std::printf("|------------------------------------------------------|-----------|--------|\n");
  std::printf("| %-52s | %9.1f | %6s |\n", "scheduler + block manager + flat batch", per_step_us,
              "<= 50");
  std::printf("| %-52s | %9.1f | %6s |\n", "LlmEngine::Step, null backend, greedy, vocab 512",
              whole[0], "-");
  std::printf("| %-52s | %9.1f | %6s |\n", "LlmEngine::Step, null backend, greedy, vocab 32000",
              whole[1], "-");
  return 0;
}
