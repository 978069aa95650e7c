// The engine's own cost per step, with the model taken out: scheduler + block manager + flat batch
// building for 256 running sequences in decode (target: <= 50 us a step), and a whole
// LlmEngine::Step with a backend that does nothing (greedy sampling over the vocabulary included).
// Then the host's share of the GPU real job (scripts/gpu/real_job.py: 2,000 requests behind one
// 1,000-token prefix + 200-token documents, 128 output tokens, steps of up to 1,024 sequences and
// 8,192 tokens, the Llama 3 tokenizer's detokenizer) on a backend that samples "on the device" in
// no time: what the device would wait for between steps, by phase (the H200 run of 2026-12-04:
// schedule 0.04 s, sample 1.17 s, forward less the device 0.24 s).
//   scheduler_bench [--seqs 256] [--prompt 512] [--steps 2000] [--real-job-only]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/backends/backend.h"
#include "engine/core/llm_engine.h"
#include "engine/core/model_runner.h"
#include "engine/core/scheduler.h"
#include "engine/text/tokenizer.h"

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

// A backend that samples on the device in no time: each row's id is the next of a fixed list.
class DeviceSamplingNullBackend : public NullBackend {
 public:
  DeviceSamplingNullBackend(int vocab, std::vector<int32_t> ids)
      : NullBackend(vocab), ids_(std::move(ids)) {}
  bool samples_on_device() const override { return true; }
  Status ForwardSample(const StepBatch& b, const RowSampling*, int32_t* ids) override {
    for (size_t i = 0; i < b.logits_rows.size(); ++i) ids[i] = ids_[next_++ % ids_.size()];
    return Status::Ok();
  }

 private:
  std::vector<int32_t> ids_;
  size_t next_ = 0;
};

// The real job's host side (see the header); prints the engine's profile per phase.
void RealJobHostShare() {
  std::unique_ptr<Tokenizer> tok;
  const std::string dir = std::string(LLMQ_SHARED_DIR) + "/models/tiny-llama32";
  if (Status st = Tokenizer::Load(dir, &tok); !st.ok()) {
    std::printf("real job: no tokenizer (%s)\n", st.ToString().c_str());
    return;
  }
  const int requests = 2000, prefix = 1000, doc = 200, max_tokens = 128, vocab = 128256;
  // Output ids: the tokens of English text, so the detokenizer does a real job's work.
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "The report, filed on 12 March, lists 4 findings: costs rose 7% and delays grew. ";
  std::vector<int32_t> out_ids;
  for (int id : tok->EncodeNoBos(text)) out_ids.push_back(id);
  ModelConfig cfg;
  cfg.num_layers = 32, cfg.num_kv_heads = 8, cfg.head_dim = 128, cfg.vocab_size = vocab;
  cfg.max_position_embeddings = 8192;
  DeviceSamplingNullBackend be(vocab, out_ids);
  EngineOptions eo;
  eo.num_blocks = 54754;  // the H200 run's pool
  eo.scheduler.max_num_seqs = 1024;
  eo.scheduler.max_num_batched_tokens = 8192;
  eo.profile = true;
  std::unique_ptr<LlmEngine> engine;
  LLMQ_CHECK(LlmEngine::Create(cfg, &be, tok.get(), eo, &engine).ok());
  uint64_t x = 5;
  auto rnd = [&] { return x = x * 6364136223846793005ull + 1442695040888963407ull, x >> 33; };
  std::vector<int> shared(prefix);
  for (int& t : shared) t = 3 + static_cast<int>(rnd() % (vocab - 3));
  for (int r = 0; r < requests; ++r) {
    Request q;
    q.id = std::to_string(r);
    q.prompt_ids = shared;
    for (int i = 0; i < doc; ++i) q.prompt_ids.push_back(3 + static_cast<int>(rnd() % (vocab - 3)));
    q.params.temperature = 0;
    q.params.max_tokens = max_tokens;
    q.params.ignore_eos = true;
    engine->Add(q);
  }
  std::vector<RequestOutput> out;
  size_t done = 0;
  const double t0 = Now();
  while (engine->HasWork()) {
    out.clear();
    LLMQ_CHECK(engine->Step(&out).ok());
    done += out.size();
  }
  const double wall = Now() - t0;
  const StepProfile& p = engine->profile();
  std::printf("\nreal job's host side: %d requests (%zu done), %lld steps, %.2f s\n", requests,
              done, static_cast<long long>(p.steps), wall);
  std::printf("| %-10s | %9s | %11s |\n", "phase", "s", "us per step");
  std::printf("|------------|-----------|-------------|\n");
  for (const auto& [name, sec] : std::vector<std::pair<std::string, double>>{
           {"schedule", p.schedule_s}, {"forward", p.forward_s}, {"sample", p.sample_s}})
    std::printf("| %-10s | %9.3f | %11.1f |\n", name.c_str(), sec, sec / p.steps * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  int seqs = 256, prompt = 512, steps = 2000;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--real-job-only")) {
      RealJobHostShare();
      return 0;
    }
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
  RealJobHostShare();
  return 0;
}
