// CPU benchmark on the bench-110m shape: prefill tokens/s (prompt 128, 512) and decode tokens/s
// (batch 1, 8, 32), through the real engine (scheduler, runner, backend, sampler), against
// llama.cpp's figures for the same shape (F32, 2 threads) measured on this machine kind.
//   cpu_bench [--model DIR] [--shape bench-110m|bench-110m-gqa] [--decode-steps N]
// Without --model, writes the random-weight shape once into ./bench-models/<shape>.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/cpu_backend.h"
#include "engine/llm_engine.h"
#include "engine/model_maker.h"
#include "kernels/cpu/thread_pool.h"

using namespace llmq;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds to run `batch` requests of `prompt` random tokens to `max_tokens` each.
double RunOnce(const ModelConfig& cfg, Backend* be, int batch, int prompt, int max_tokens) {
  EngineOptions opt;
  opt.num_blocks = batch * BlockManager::BlocksFor(prompt + max_tokens, 16) + 1;
  opt.scheduler.max_num_batched_tokens = 4096;
  std::unique_ptr<LlmEngine> engine;
  LLMQ_CHECK(LlmEngine::Create(cfg, be, nullptr, opt, &engine).ok());
  Rng rng(prompt * 31 + batch);
  for (int b = 0; b < batch; ++b) {
    Request r;
    r.id = std::to_string(b);
    r.prompt_ids.push_back(1);
    while (static_cast<int>(r.prompt_ids.size()) < prompt)
      r.prompt_ids.push_back(3 + static_cast<int>(rng.NextU64() % (cfg.vocab_size - 3)));
    r.params.max_tokens = max_tokens;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    engine->Add(r);
  }
  const double t0 = Now();
  std::vector<RequestOutput> out;
  while (engine->HasWork()) out.clear(), engine->Step(&out);
  return Now() - t0;
}

// Streaming read bandwidth of this machine right now (GB/s), all threads: decode at batch 1 is
// bound by it, and it varies with what else the host runs, so it is measured in the same run.
double ReadBandwidth() {
  const size_t n = size_t{1} << 28;  // 1 GiB of floats
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = Now();
    float total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (size_t i = 0; i < n; i += 16) {
      float s = 0;
      for (int j = 0; j < 16; ++j) s += buf[i + j];
      total += s;
    }
    const double secs = Now() - t0;
    if (total != static_cast<float>(n)) std::fprintf(stderr, "(sum %f)\n", total);
    best = std::max(best, n * sizeof(float) / secs / 1e9);
  }
  return best;
}

double Best(int reps, const std::function<double()>& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) best = std::min(best, f());
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, shape = "bench-110m";
  int decode_steps = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--shape"))
      shape = argv[i + 1];
    else if (!std::strcmp(argv[i], "--decode-steps"))
      decode_steps = std::atoi(argv[i + 1]);
  }
  ModelConfig cfg;
  DType dtype;
  if (model.empty()) {
    model = "bench-models/" + shape;
    if (!ShapeConfig(shape, &cfg, &dtype).ok())
      return std::fprintf(stderr, "unknown shape %s\n", shape.c_str()), 2;
    if (!std::filesystem::exists(model + "/model.safetensors")) {
      std::fprintf(stderr, "writing %s ...\n", model.c_str());
      if (Status st = WriteRandomModel(cfg, dtype, 1, model); !st.ok())
        return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
    }
  }
  if (Status st = LoadModelConfig(model, &cfg); !st.ok())
    return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  std::unique_ptr<Weights> w;
  if (Status st = Weights::Load(model, cfg, &w); !st.ok())
    return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  CpuBackend be(cfg, *w);

  std::printf(
      "llmq CPU benchmark: %s (%d layers, hidden %d, kv heads %d, vocab %d, fp32), %d threads "
      "(pool barrier %.1f us)\n",
      model.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_kv_heads, cfg.vocab_size,
      kernels::CpuThreads(), kernels::CpuPool().barrier_ns() / 1000);
  const double bw = ReadBandwidth();
  // Bytes a decode step streams: every packed weight but the embedding (a row is gathered).
  const double step_bytes = static_cast<double>(be.weight_bytes()) -
                            static_cast<double>(cfg.vocab_size) * cfg.hidden_size * sizeof(float);
  std::printf(
      "memory read bandwidth now: %.1f GB/s; a decode step streams %.0f MB of weights, so "
      "batch 1 is bound at %.1f tokens/s\n",
      bw, step_bytes / 1e6, bw * 1e9 / step_bytes);
  std::printf("| %-8s | %5s | %6s | %10s | %17s | %6s |\n", "phase", "batch", "prompt", "tokens/s",
              "llama.cpp target", "ratio");
  std::printf("|----------|-------|--------|------------|-------------------|--------|\n");
  RunOnce(cfg, &be, 1, 64, 2);  // warm up threads and pages
  struct Prefill {
    int prompt;
    double target;
  };
  for (Prefill p : {Prefill{128, 0}, Prefill{512, 850}}) {
    const double s = Best(3, [&] { return RunOnce(cfg, &be, 1, p.prompt, 1); });
    const double tps = p.prompt / s;
    if (p.target > 0)
      std::printf("| %-8s | %5d | %6d | %10.1f | %17.0f | %6.2f |\n", "prefill", 1, p.prompt, tps,
                  p.target, tps / p.target);
    else
      std::printf("| %-8s | %5d | %6d | %10.1f | %17s | %6s |\n", "prefill", 1, p.prompt, tps, "-",
                  "-");
  }
  struct Decode {
    int batch;
    double target;
  };
  for (Decode d : {Decode{1, 95}, Decode{8, 290}, Decode{32, 420}}) {
    const int prompt = 128;
    const double base = Best(3, [&] { return RunOnce(cfg, &be, d.batch, prompt, 1); });
    const double full =
        Best(3, [&] { return RunOnce(cfg, &be, d.batch, prompt, 1 + decode_steps); });
    const double tps = d.batch * decode_steps / std::max(full - base, 1e-9);
    std::printf("| %-8s | %5d | %6d | %10.1f | %17.0f | %6.2f |\n", "decode", d.batch, prompt, tps,
                d.target, tps / d.target);
  }
  return 0;
}
