// CPU benchmark on the bench-110m shape: prefill tokens/s (prompt 128, 512) and decode tokens/s
// (batch 1, 8, 32), through the real engine (scheduler, runner, backend, sampler). Each figure is
// tokens over ONE timed region of one run (prefill: the steps until every request has its first
// token; decode: the steps after), best of 3 runs; no figure is a difference of two timings.
// llama.cpp's figures are printed only when measured in the same run (--llama-bench).
//   cpu_bench [--model DIR] [--shape bench-110m|bench-110m-gqa] [--decode-steps N]
//             [--llama-bench PATH/llama-bench --llama-model MODEL.gguf] [--attention-only]
// Without --model, writes the random-weight shape once into ./bench-models/<shape>.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/tools/model_maker.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

using namespace llmq;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double prefill_s = 0;  // from the first step until every request has its first token
  double decode_s = 0;   // the steps after: batch x (max_tokens - 1) tokens
};

// Runs `batch` requests of `prompt` random tokens to `max_tokens` each, timing its two phases.
Timing RunOnce(const ModelConfig& cfg, Backend* be, int batch, int prompt, int max_tokens) {
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
  std::vector<RequestOutput> out;
  const double t0 = Now();
  while (engine->HasWork() && engine->stats().tokens_generated < batch)
    out.clear(), engine->Step(&out);
  const double t1 = Now();
  int64_t failed = 0;
  std::string error;
  while (engine->HasWork()) {
    out.clear();
    engine->Step(&out).IgnoreError();  // a failure is the outputs' error, counted below
    for (const RequestOutput& o : out)
      if (!o.ok()) ++failed, error = o.error;
  }
  if (failed || engine->stats().tokens_generated != int64_t{batch} * max_tokens) {
    std::fflush(stdout);
    std::fprintf(stderr, "%lld requests failed (%s); %lld tokens, not %lld\n",
                 static_cast<long long>(failed), error.c_str(),
                 static_cast<long long>(engine->stats().tokens_generated),
                 static_cast<long long>(int64_t{batch} * max_tokens));
    std::exit(1);
  }
  return {t1 - t0, Now() - t1};
}

// The best (shortest) of `reps` runs' `phase` time.
double Best(int reps, const std::function<Timing()>& run, double Timing::*phase) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) best = std::min(best, run().*phase);
  return best;
}

// llama.cpp's llama-bench on the same shape in this run: tokens/s by (n_prompt, n_gen), from its
// JSON output; empty when it did not run.
std::map<std::pair<int, int>, double> LlamaBench(const std::string& bin, const std::string& gguf,
                                                 int threads, int decode_steps) {
  std::map<std::pair<int, int>, double> tps;
  if (bin.empty()) return tps;
  const std::string cmd = "'" + bin + "' -m '" + gguf + "' -t " + std::to_string(threads) +
                          " -p 128,512 -n " + std::to_string(decode_steps) + " -r 3 -o json";
  std::string text;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    if (pclose(p) != 0) text.clear();
  }
  try {
    for (const auto& r : nlohmann::json::parse(text))
      tps[{r.at("n_prompt").get<int>(), r.at("n_gen").get<int>()}] = r.at("avg_ts").get<double>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama-bench (%s) gave no results: %s\n", cmd.c_str(), e.what());
  }
  return tps;
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

// Decode attention of one layer of the bench-110m shape (12 kv heads of 64) for `seqs` sequences
// that share a `prefix`-token prefix (own tokens: `own`), with the prefix groups and without
// (kernels::PagedAttention's shared-prefix attention): milliseconds, the best of 20 calls each,
// the two taken in turn so that a changing load hits both alike.
void AttentionTable(int seqs, int prefix, int own) {
  constexpr int kBs = 16, kHeads = 12, kD = 64;
  const int shared = prefix / kBs, own_blocks = (prefix % kBs + own + kBs - 1) / kBs;
  const int per_seq = shared + own_blocks, num_blocks = shared + seqs * own_blocks;
  std::vector<float> k(static_cast<size_t>(num_blocks) * kHeads * kBs * kD), v(k.size());
  Rng rng(5);
  for (float& x : k) x = static_cast<float>(rng.NextDouble() - 0.5);
  for (float& x : v) x = static_cast<float>(rng.NextDouble() - 0.5);
  kernels::PagedKv kv{k.data(), v.data(), kBs, kHeads, kD};
  std::vector<int32_t> tables, query_start{0}, positions;
  for (int s = 0; s < seqs; ++s) {
    for (int b = 0; b < per_seq; ++b)
      tables.push_back(b < shared ? b : shared + s * own_blocks + (b - shared));
    positions.push_back(prefix + own - 1);
    query_start.push_back(s + 1);
  }
  std::vector<float> q(static_cast<size_t>(seqs) * kHeads * kD), out(q.size());
  for (float& x : q) x = static_cast<float>(rng.NextDouble() - 0.5);
  const kernels::SharedPrefix group{0, seqs, shared};
  kernels::AttentionBatch ab;
  ab.num_seqs = seqs;
  ab.query_start = query_start.data();
  ab.positions = positions.data();
  ab.block_tables = tables.data();
  ab.max_blocks = per_seq;
  double best[2] = {1e30, 1e30};
  for (int rep = 0; rep < 20; ++rep)
    for (int grouped = 0; grouped < 2; ++grouped) {
      ab.groups = grouped ? &group : nullptr;
      ab.num_groups = grouped;
      const double t0 = Now();
      kernels::PagedAttention(ab, kv, q.data(), kHeads * kD, kHeads, 0.125f, out.data());
      best[grouped] = std::min(best[grouped], Now() - t0);
    }
  std::printf("| %4d | %6d | %4d | %12.3f | %12.3f | %6.2fx |\n", seqs, prefix, own, best[0] * 1e3,
              best[1] * 1e3, best[0] / best[1]);
}

// Prefill attention of one layer of the bench-110m shape: a `rows`-row chunk of one sequence at
// positions prefix .. prefix+rows-1 (the documents of the issue-13 job over their shared
// instructions), on each kernel the CPU has: ms (best of 5) and GFLOP/s, counting 4 * head_dim
// flops per query-key pair and head (scores and values, one FMA each per dim).
void PrefillAttentionTable(int rows, int prefix) {
  constexpr int kBs = 16, kHeads = 12, kD = 64;
  const int ctx = prefix + rows, num_blocks = (ctx + kBs - 1) / kBs;
  std::vector<float> k(static_cast<size_t>(num_blocks) * kHeads * kBs * kD), v(k.size());
  Rng rng(7);
  for (float& x : k) x = static_cast<float>(rng.NextDouble() - 0.5);
  for (float& x : v) x = static_cast<float>(rng.NextDouble() - 0.5);
  kernels::PagedKv kv{k.data(), v.data(), kBs, kHeads, kD};
  std::vector<int32_t> table(num_blocks), query_start{0, rows}, positions(rows);
  for (int b = 0; b < num_blocks; ++b) table[b] = b;
  for (int r = 0; r < rows; ++r) positions[r] = prefix + r;
  std::vector<float> q(static_cast<size_t>(rows) * kHeads * kD), out(q.size());
  for (float& x : q) x = static_cast<float>(rng.NextDouble() - 0.5);
  kernels::AttentionBatch ab;
  ab.num_seqs = 1;
  ab.query_start = query_start.data();
  ab.positions = positions.data();
  ab.block_tables = table.data();
  ab.max_blocks = num_blocks;
  double pairs = 0;
  for (int p : positions) pairs += p + 1;
  const double flops = pairs * kHeads * 4.0 * kD;
  for (kernels::GemmIsa isa :
       {kernels::GemmIsa::kAvx512, kernels::GemmIsa::kAvx2, kernels::GemmIsa::kScalar}) {
    if (!kernels::SetGemmIsaForTesting(isa)) continue;
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = Now();
      kernels::PagedAttention(ab, kv, q.data(), kHeads * kD, kHeads, 0.125f, out.data());
      best = std::min(best, Now() - t0);
    }
    std::printf("| %4d | %6d | %-7s | %9.2f | %8.1f |\n", rows, prefix, kernels::GemmIsaName(isa),
                best * 1e3, flops / best / 1e9);
  }
  kernels::SetGemmIsaForTesting(kernels::GemmIsa::kAuto);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, shape = "bench-110m", llama_bench, llama_model;
  int decode_steps = 64;
  bool attention_only = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--attention-only")) attention_only = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--shape"))
      shape = argv[i + 1];
    else if (!std::strcmp(argv[i], "--decode-steps"))
      decode_steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--llama-bench"))
      llama_bench = argv[i + 1];
    else if (!std::strcmp(argv[i], "--llama-model"))
      llama_model = argv[i + 1];
  }
  if (attention_only) {
    std::printf(
        "decode attention, one layer (12 kv heads x 64), sequences sharing a prefix, %d threads: "
        "ms, best of 20\n| seqs | prefix |  own | plain ms     | shared ms    | ratio   |\n"
        "|------|--------|------|--------------|--------------|---------|\n",
        kernels::CpuThreads());
    for (int seqs : {8, 64})
      for (int prefix : {1000}) AttentionTable(seqs, prefix, 200);
    std::printf(
        "\nprefill attention, one layer (12 kv heads x 64), one chunk after a prefix, %d threads: "
        "ms, best of 5\n| rows | prefix | kernel  |        ms |  GFLOP/s |\n"
        "|------|--------|---------|-----------|----------|\n",
        kernels::CpuThreads());
    PrefillAttentionTable(200, 1000);
    return 0;
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
  // llama.cpp first, so that both run on the same machine state.
  const auto llama = LlamaBench(llama_bench, llama_model, kernels::CpuThreads(), decode_steps);
  auto cell = [&](int n_prompt, int n_gen, double ours) {
    char buf[64] = "-";
    const auto it = llama.find({n_prompt, n_gen});
    if (it != llama.end())
      std::snprintf(buf, sizeof buf, "%10.1f | %6.2f", it->second, ours / it->second);
    else
      std::snprintf(buf, sizeof buf, "%10s | %6s", "-", "-");
    return std::string(buf);
  };
  std::printf("| %-8s | %5s | %6s | %10s | %10s | %6s |\n", "phase", "batch", "prompt", "tokens/s",
              "llama.cpp", "ratio");
  std::printf("|----------|-------|--------|------------|------------|--------|\n");
  RunOnce(cfg, &be, 1, 64, 2);  // warm up threads and pages
  for (int prompt : {128, 512}) {
    const double s = Best(
        3, [&] { return RunOnce(cfg, &be, 1, prompt, 1); }, &Timing::prefill_s);
    const double tps = prompt / s;
    std::printf("| %-8s | %5d | %6d | %10.1f | %s |\n", "prefill", 1, prompt, tps,
                cell(prompt, 0, tps).c_str());
  }
  for (int batch : {1, 8, 32}) {
    const int prompt = 128;
    const double s = Best(
        3, [&] { return RunOnce(cfg, &be, batch, prompt, 1 + decode_steps); }, &Timing::decode_s);
    const double tps = static_cast<double>(batch) * decode_steps / s;
    // llama-bench decodes one sequence (from an empty context): comparable at batch 1 only.
    std::printf("| %-8s | %5d | %6d | %10.1f | %s |\n", "decode", batch, prompt, tps,
                batch == 1 ? cell(0, decode_steps, tps).c_str() : cell(-1, -1, 0).c_str());
  }
  return 0;
}
