// `llmq run` on the shared-instructions workload (512 requests: one 1,000-token instruction prefix
// + a distinct 100-300-token document each, 32 output tokens, shuffled), with the prefix features
// (prefix cache + planner) on and off: wall time, tokens/s and the ratio, from the real binary.
// Then the sampler's cost per decode step at batch 256 (greedy; with logprobs; with penalties and
// logit_bias; both), beside a whole engine step's on the CPU backend (forward included), and
// alone over the model's vocabulary and over Llama 3's (128,256).
//   run_bench [--requests 512] [--config model-config.json] [--sampler-only]
//   (default: a tiny 2048-context model)
#include <omp.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/workloads.h"
#include "engine/cpu_backend.h"
#include "engine/llm_engine.h"
#include "engine/model_maker.h"
#include "engine/weights.h"

using json = nlohmann::json;

namespace {

json RunLlmq(const std::string& args, const std::string& summary) {
  const std::string cmd = std::string(LLMQ_BINARY) + " run " + args +
                          " --no-progress --summary-json " + summary + " 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::fprintf(stderr, "failed (%d): %s\n", rc, cmd.c_str());
    std::exit(1);
  }
  std::ifstream f(summary);
  return json::parse(f);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The sampler's settings the table compares.
struct SamplerCase {
  const char* name;
  llmq::SamplingParams p;
};

std::vector<SamplerCase> SamplerCases() {
  llmq::SamplingParams greedy;
  greedy.temperature = 0;
  llmq::SamplingParams lp = greedy;
  lp.logprobs = 5;
  llmq::SamplingParams pen = greedy;
  pen.presence_penalty = 0.5f;
  pen.frequency_penalty = 0.5f;
  pen.repetition_penalty = 1.2f;
  pen.logit_bias = {{7, 5.0f}, {11, -100.0f}};
  llmq::SamplingParams both = pen;
  both.logprobs = 5;
  llmq::SamplingParams top20 = both;
  top20.logprobs = 20;
  llmq::SamplingParams sampled = both;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  return {{"greedy", greedy},
          {"+ logprobs 5", lp},
          {"+ penalties", pen},
          {"+ logprobs 5 + penalties", both},
          {"+ top_logprobs 20 + penalties", top20},
          {"T 0.8, top-p 0.9, both", sampled}};
}

// Seconds per call of SampleNext over `rows` rows of a `vocab` vocabulary (one thread; each row
// with a 1,000-token history), the best of `reps`.
double SamplerSeconds(const llmq::SamplingParams& p, int rows, int vocab, int reps) {
  llmq::Rng rng(1);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (float& x : logits) x = static_cast<float>(rng.NextDouble() * 20 - 10);
  std::vector<int32_t> history(1000);
  for (int32_t& t : history) t = static_cast<int32_t>(rng.NextU64() % vocab);
  const std::vector<int32_t> eos = {2};
  const llmq::TokenHistory h{std::span<const int32_t>(history).first(800),
                             std::span<const int32_t>(history).subspan(800)};
  double best = 1e300;
  int64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    for (int i = 0; i < rows; ++i) {
      llmq::TokenLogprobs lp;
      sink +=
          llmq::SampleNext(&logits[static_cast<size_t>(i) * vocab], vocab, p, eos, h, &rng, &lp);
    }
    best = std::min(best, Now() - t0);
  }
  if (sink == -1) std::printf("\n");
  return best;
}

// Milliseconds per decode step (the fastest of 12) of the engine on the CPU backend with `batch`
// sequences in decode, every request sampled under `p` (the forward, the engine's bookkeeping and
// the sampler).
double EngineStepMs(const llmq::ModelConfig& cfg, const llmq::Weights& w,
                    const llmq::SamplingParams& p, int batch) {
  llmq::CpuBackend be(cfg, w);
  llmq::EngineOptions opt;
  opt.num_blocks = batch * 8 + 16;
  opt.scheduler.max_num_seqs = batch;
  opt.scheduler.max_num_batched_tokens = batch * 64;
  std::unique_ptr<llmq::LlmEngine> engine;
  if (!llmq::LlmEngine::Create(cfg, &be, nullptr, opt, &engine).ok()) return -1;
  llmq::Rng rng(3);
  for (int i = 0; i < batch; ++i) {
    llmq::Request r;
    r.id = std::to_string(i);
    for (int j = 0; j < 64; ++j) r.prompt_ids.push_back(3 + static_cast<int>(rng.NextU64() % 400));
    r.params = p;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    engine->Add(r);
  }
  std::vector<llmq::RequestOutput> done;
  while (engine->stats().tokens_generated < batch) (void)engine->Step(&done);
  double best = 1e300;  // the fastest of 12 decode steps: the machine may be shared
  for (int i = 0; i < 12; ++i) {
    const double t0 = Now();
    (void)engine->Step(&done);
    best = std::min(best, Now() - t0);
  }
  return best * 1e3;
}

// The sampler's cost per decode step at batch 256, beside the whole step's (forward included).
void SamplerTable(const llmq::ModelConfig& cfg, const std::string& model) {
  constexpr int kBatch = 256, kLlama3Vocab = 128256;
  std::unique_ptr<llmq::Weights> w;
  if (llmq::Status st = llmq::Weights::Load(model, cfg, &w); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return;
  }
  std::printf(
      "\nsampler per decode step at batch %d (one thread; engine step = CPU forward + engine + "
      "sampler, %d threads)\n",
      kBatch, omp_get_max_threads());
  std::printf("| %-30s | %16s | %20s | %22s |\n", "sampling", "engine step ms",
              "sampler ms (vocab)", "sampler ms (vocab 128256)");
  std::printf(
      "|--------------------------------|------------------|----------------------|------"
      "--------------------|\n");
  for (const SamplerCase& c : SamplerCases()) {
    const double step = EngineStepMs(cfg, *w, c.p, kBatch);
    const double small = SamplerSeconds(c.p, kBatch, cfg.vocab_size, 5) * 1e3;
    const double large = SamplerSeconds(c.p, kBatch, kLlama3Vocab, 2) * 1e3;
    std::printf("| %-30s | %16.2f | %13.3f (%5d) | %24.2f |\n", c.name, step, small, cfg.vocab_size,
                large);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 512;
  std::string config;
  bool sampler_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sampler-only")) {
      sampler_only = true;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--requests")) {
      requests = std::atoi(argv[++i]);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--config")) {
      config = argv[++i];
    }
  }
  const std::string dir = "bench-models/run-bench";
  std::filesystem::create_directories(dir);
  llmq::ModelConfig cfg;
  llmq::DType dtype;
  llmq::ShapeConfig("tiny", &cfg, &dtype);
  cfg.max_position_embeddings = 2048;
  if (!config.empty()) {
    std::ifstream f(config);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    if (llmq::Status st = llmq::ParseModelConfig(text, config, &cfg); !st.ok())
      return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  }
  const std::string model = dir + "/model";
  if (llmq::Status st = llmq::MakeModel(cfg, dtype, 1, model); !st.ok())
    return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  if (sampler_only) {
    SamplerTable(cfg, model);
    return 0;
  }

  const auto prompts =
      llmq::bench::SharedInstructions(requests, 1000, 100, 300, cfg.vocab_size, 42);
  const int64_t unique = llmq::bench::UniqueTokens(prompts);
  int64_t total = 0;
  {
    std::ofstream in(dir + "/in.jsonl");
    for (size_t i = 0; i < prompts.size(); ++i) {
      total += prompts[i].size();
      // Token-id prompts keep the sharing exact; BOS is already the first id.
      in << json{{"custom_id", "doc-" + std::to_string(i)},
                 {"method", "POST"},
                 {"url", "/v1/completions"},
                 {"body",
                  {{"model", "bench"},
                   {"prompt", prompts[i]},
                   {"max_tokens", 32},
                   {"temperature", 0},
                   {"ignore_eos", true}}}}
                .dump()
         << "\n";
    }
  }
  const std::string common = dir + "/in.jsonl --model " + model + " --kv-cache-memory 2GiB";
  const json on = RunLlmq(common + " -o " + dir + "/on.jsonl", dir + "/on.json");
  const json off = RunLlmq(common + " -o " + dir + "/off.jsonl --no-prefix-cache --no-planner",
                           dir + "/off.json");

  std::printf(
      "llmq run, shared instructions: %d requests, %lld prompt tokens (%lld unique), 32 output "
      "tokens each\n",
      requests, static_cast<long long>(total), static_cast<long long>(unique));
  std::printf("| %-16s | %10s | %15s | %9s | %13s | %13s |\n", "prefix features", "computed",
              "computed/unique", "wall s", "output tok/s", "total tok/s");
  std::printf(
      "|------------------|------------|-----------------|-----------|---------------|-------------"
      "--|\n");
  for (const auto& [name, s] : {std::pair<const char*, const json&>{"on", on}, {"off", off}}) {
    const double wall = s["wall_seconds"];
    const int64_t computed = s["computed_prompt_tokens"];
    const int64_t out_tokens = s["completion_tokens"];
    std::printf("| %-16s | %10lld | %15.3f | %9.2f | %13.1f | %13.1f |\n", name,
                static_cast<long long>(computed), static_cast<double>(computed) / unique, wall,
                out_tokens / wall, (total + out_tokens) / wall);
  }
  std::printf("speed-up with prefix features: %.2fx\n",
              off["wall_seconds"].get<double>() / on["wall_seconds"].get<double>());
  SamplerTable(cfg, model);
  return 0;
}
