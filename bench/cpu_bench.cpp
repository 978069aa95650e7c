// CPU benchmark on the bench-110m shape (or --model): prefill tokens/s (prompt 128, 512) and decode
// tokens/s (batch 1, 8, 32), through the real engine (scheduler, runner, backend, sampler), for
// each weight type asked (engine.weight_dtype) with the KV cache at --kv-dtype. Each figure is
// tokens over ONE timed region of one run (prefill: the steps until every request has its first
// token; decode: the steps after), best of 3 runs; no figure is a difference of two timings. Batch
// 1 decode is also shown against its bandwidth bound (the bytes a step streams / the read bandwidth
// measured in the same run).
// llama.cpp's figures are printed only when measured in the same run: with --llama-dir (a build
// holding llama-bench and llama-batched-bench) and --gguf PREFIX (PREFIX-F32.gguf, -BF16.gguf and
// -Q8_0.gguf beside llmq's f32, bf16 and int8; bench/hf_to_gguf.py and llama-quantize make them),
// llama-bench gives prefill and batch-1 decode, llama-batched-bench decode of 32 sequences.
//   cpu_bench [--model DIR] [--shape bench-110m|bench-110m-gqa] [--decode-steps N]
//             [--weight-dtype f32,bf16,int8] [--kv-dtype f32|bf16]
//             [--llama-dir DIR --gguf PREFIX] [--rounds N] [--attention-only]
// --rounds N: the whole table N times (each round llama.cpp then llmq for each type, as one run
// does), each round's table printed, then a table of the medians over the rounds (each side's
// median, and the median of the rounds' ratios): on a VM whose neighbours come and go, a figure
// from one round can move by 30%.
// Without --model, writes the random-weight shape once into ./bench-models/<shape>.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/tools/model_maker.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
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

// The output of `cmd` (empty when it failed).
std::string Output(const std::string& cmd) {
  std::string text;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    if (pclose(p) != 0) text.clear();
  }
  return text;
}

// llama.cpp on the same weights in this run: tokens/s by (n_prompt, n_gen, sequences), from
// llama-bench (prefill 128 and 512, decode of one sequence) and llama-batched-bench (decode of 32
// sequences after 128-token prompts each); empty when it did not run.
using LlamaFigures = std::map<std::tuple<int, int, int>, double>;
LlamaFigures LlamaCpp(const std::string& dir, const std::string& gguf, int threads,
                      int decode_steps) {
  LlamaFigures tps;
  if (dir.empty()) return tps;
  const std::string t = std::to_string(threads), n = std::to_string(decode_steps);
  const std::string bench = "'" + dir + "/llama-bench' -m '" + gguf + "' -t " + t +
                            " -p 128,512 -n " + n + " -r 3 -o json 2>/dev/null";
  const std::string batched = "'" + dir + "/llama-batched-bench' -m '" + gguf + "' -t " + t +
                              " -tb " + t + " -c " + std::to_string(32 * (128 + decode_steps)) +
                              " -b 2048 -ub 512 -npp 128 -ntg " + n +
                              " -npl 32 --output-format jsonl 2>&1";  // its JSON lines go to stderr
  try {
    for (const auto& r : nlohmann::json::parse(Output(bench)))
      tps[{r.at("n_prompt").get<int>(), r.at("n_gen").get<int>(), 1}] =
          r.at("avg_ts").get<double>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama-bench (%s) gave no results: %s\n", bench.c_str(), e.what());
  }
  const std::string lines = Output(batched);
  size_t at = 0;
  for (size_t end; (end = lines.find('\n', at)) != std::string::npos; at = end + 1) {
    if (lines.compare(at, 1, "{") != 0) continue;
    try {
      const auto r = nlohmann::json::parse(lines.substr(at, end - at));
      tps[{r.at("pp").get<int>(), r.at("tg").get<int>(), r.at("pl").get<int>()}] =
          r.at("speed_tg").get<double>();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "llama-batched-bench line not read: %s\n", e.what());
    }
  }
  if (tps.find({128, decode_steps, 32}) == tps.end())
    std::fprintf(stderr, "llama-batched-bench (%s) gave no results\n", batched.c_str());
  return tps;
}

// Sums of n uint64 (n a multiple of 32) with the widest loads of each kernel path: the read
// probe runs at the width the kernels read at. (A sum compiled for the baseline ISA, 16-byte
// loads, measured 4.6 GB/s on a 2-core AVX2 EPYC whose decode streamed 14.7 GB/s: the probe, not
// the memory, was the bound.)
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint64_t* p, size_t n) {
  __m256i a[8];
  for (__m256i& x : a) x = _mm256_setzero_si256();
  for (size_t i = 0; i < n; i += 32)
    for (int l = 0; l < 8; ++l)
      a[l] = _mm256_add_epi64(a[l],
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4 * l)));
  alignas(32) uint64_t lanes[4];
  uint64_t total = 0;
  for (const __m256i& x : a) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), x);
    total += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  return total;
}
__attribute__((target("avx512f"))) uint64_t SumAvx512(const uint64_t* p, size_t n) {
  __m512i a[4];
  for (__m512i& x : a) x = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 32)
    for (int l = 0; l < 4; ++l) a[l] = _mm512_add_epi64(a[l], _mm512_loadu_si512(p + i + 8 * l));
  alignas(64) uint64_t lanes[8];
  uint64_t total = 0;
  for (const __m512i& x : a) {
    _mm512_store_si512(lanes, x);
    for (uint64_t v : lanes) total += v;
  }
  return total;
}
uint64_t SumScalar(const uint64_t* p, size_t n) {
  uint64_t a[8] = {};
  for (size_t i = 0; i < n; i += 8)
    for (int l = 0; l < 8; ++l) a[l] += p[i + l];
  uint64_t total = 0;
  for (uint64_t x : a) total += x;
  return total;
}

// Streaming read bandwidth of this machine right now (GB/s), all threads, at the active kernel
// path's load width (kernels::ActiveGemmIsa: LLMQ_GEMM_ISA=avx2 measures an AVX2 machine's
// probe here): decode at batch 1 is bound by it, and it varies with what else the host runs, so it
// is measured in the same run. Many independent accumulators per thread (one sum's dependency
// chain would bound it by add latency, not by memory).
double ReadBandwidth() {
  const size_t n = size_t{1} << 27;  // 1 GiB of uint64
  std::vector<uint64_t> buf(n, 1);
  const kernels::GemmIsa isa = kernels::ActiveGemmIsa();
  const auto sum = isa == kernels::GemmIsa::kAvx512 ? SumAvx512
                   : isa == kernels::GemmIsa::kAvx2 ? SumAvx2
                                                    : SumScalar;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = Now();
    uint64_t total = 0;
    const size_t chunk = size_t{1} << 16;  // uint64s a task sums
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (size_t i = 0; i < n; i += chunk) total += sum(buf.data() + i, chunk);
    const double secs = Now() - t0;
    if (total != n) std::fprintf(stderr, "(sum %llu)\n", static_cast<unsigned long long>(total));
    best = std::max(best, n * sizeof(uint64_t) / secs / 1e9);
  }
  return best;
}

// A random KV cache of `num_blocks` blocks of the bench-110m shape (12 kv heads of 64) in `dtype`
// (a bf16 one holds the fp32 values rounded, as the engine writes them).
struct BenchKv {
  std::vector<float> k, v;
  std::vector<uint16_t> k16, v16;
  kernels::PagedKv view;
  BenchKv(int num_blocks, int block_size, int heads, int head_dim, KvDtype dtype, uint64_t seed) {
    k.resize(static_cast<size_t>(num_blocks) * heads * block_size * head_dim);
    v.resize(k.size());
    Rng rng(seed);
    for (float& x : k) x = static_cast<float>(rng.NextDouble() - 0.5);
    for (float& x : v) x = static_cast<float>(rng.NextDouble() - 0.5);
    view = kernels::PagedKv{k.data(), v.data(), block_size, heads, head_dim, num_blocks};
    if (dtype == KvDtype::kBf16) {
      for (float x : k) k16.push_back(kernels::FloatToBf16(x));
      for (float x : v) v16.push_back(kernels::FloatToBf16(x));
      view.k = view.v = nullptr;
      view.k16 = k16.data();
      view.v16 = v16.data();
    }
  }
};

// The attention benches' step: `seqs` sequences of the bench-110m shape (12 kv heads of 64), each
// `prefix` shared tokens then `own` of its own, whose last `rows` tokens are the step's queries;
// `batch` has the prefix group when `grouped` (and the prefix has whole blocks).
struct SharedPrefixStep {
  static constexpr int kBs = 16, kHeads = 12, kD = 64;
  BenchKv cache;
  std::vector<int32_t> tables, query_start{0}, positions;
  std::vector<float> q, out;
  kernels::SharedPrefix group;
  kernels::AttentionBatch batch;
  SharedPrefixStep(int seqs, int prefix, int own, int rows, KvDtype dtype, uint64_t seed)
      : cache(BlocksFor(seqs, prefix, own), kBs, kHeads, kD, dtype, seed) {
    const int shared = prefix / kBs, own_blocks = OwnBlocks(prefix, own);
    for (int s = 0; s < seqs; ++s) {
      for (int b = 0; b < shared + own_blocks; ++b)
        tables.push_back(b < shared ? b : shared + s * own_blocks + (b - shared));
      for (int r = 0; r < rows; ++r) positions.push_back(prefix + own - rows + r);
      query_start.push_back((s + 1) * rows);
    }
    Rng rng(seed + 1);
    q.resize(positions.size() * kHeads * kD);
    out.resize(q.size());
    for (float& x : q) x = static_cast<float>(rng.NextDouble() - 0.5);
    group = {0, seqs, shared};
    batch.num_seqs = seqs;
    batch.query_start = query_start.data();
    batch.positions = positions.data();
    batch.block_tables = tables.data();
    batch.max_blocks = shared + own_blocks;
  }
  void Grouped(bool on) {
    batch.groups = on && group.num_blocks > 0 ? &group : nullptr;
    batch.num_groups = batch.groups ? 1 : 0;
  }
  void Run() {
    kernels::PagedAttention(batch, cache.view, q.data(), kHeads * kD, kHeads, 0.125f, out.data());
  }
  static int OwnBlocks(int prefix, int own) { return (prefix % kBs + own + kBs - 1) / kBs; }
  static int BlocksFor(int seqs, int prefix, int own) {
    return prefix / kBs + seqs * OwnBlocks(prefix, own);
  }
};

// Decode attention of one layer of the bench-110m shape (12 kv heads of 64) for `seqs` sequences
// that share a `prefix`-token prefix (own tokens: `own`), with the prefix groups and without
// (kernels::PagedAttention's shared-prefix attention): milliseconds, the best of 20 calls each,
// the two taken in turn so that a changing load hits both alike.
void AttentionTable(int seqs, int prefix, int own, KvDtype dtype) {
  SharedPrefixStep step(seqs, prefix, own, 1, dtype, 5);
  double best[2] = {1e30, 1e30};
  for (int rep = 0; rep < 20; ++rep)
    for (int grouped = 0; grouped < 2; ++grouped) {
      step.Grouped(grouped);
      const double t0 = Now();
      step.Run();
      best[grouped] = std::min(best[grouped], Now() - t0);
    }
  std::printf("| %4d | %6d | %4d | %12.3f | %12.3f | %6.2fx |\n", seqs, prefix, own, best[0] * 1e3,
              best[1] * 1e3, best[0] / best[1]);
}

// Prefill attention of one layer of the bench-110m shape: `seqs` sequences, each a `rows`-row
// chunk at positions prefix .. prefix+rows-1 behind the same `prefix` tokens (the documents of the
// issue-13 job over their shared instructions; more than one sequence: one prefix group, as the
// engine's step passes them), on each kernel the CPU has: ms (best of 5) and GFLOP/s, counting
// 4 * head_dim flops per query-key pair and head (scores and values, one FMA each per dim).
void PrefillAttentionTable(int seqs, int rows, int prefix, KvDtype dtype) {
  SharedPrefixStep step(seqs, prefix, rows, rows, dtype, 7);
  step.Grouped(seqs > 1);
  constexpr int kHeads = SharedPrefixStep::kHeads, kD = SharedPrefixStep::kD;
  double pairs = 0;
  for (int p : step.positions) pairs += p + 1;
  const double flops = pairs * kHeads * 4.0 * kD;
  for (kernels::GemmIsa isa :
       {kernels::GemmIsa::kAvx512, kernels::GemmIsa::kAvx2, kernels::GemmIsa::kScalar}) {
    if (!kernels::SetGemmIsaForTesting(isa)) continue;
    if (isa == kernels::GemmIsa::kScalar && seqs > 1) continue;  // minutes, and nothing to learn
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = Now();
      step.Run();
      best = std::min(best, Now() - t0);
    }
    std::printf("| %4d | %4d | %6d | %-7s | %9.2f | %8.1f |\n", seqs, rows, prefix,
                kernels::GemmIsaName(isa), best * 1e3, flops / best / 1e9);
  }
  kernels::SetGemmIsaForTesting(kernels::GemmIsa::kAuto);
}

}  // namespace

int main(int argc, char** argv) {
  // Each row as it is measured, also into a file (a run with llama.cpp beside it takes minutes).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string model, shape = "bench-110m", llama_dir, gguf, weight_dtypes = "f32";
  KvDtype kv = KvDtype::kF32;
  int decode_steps = 64, rounds = 1;
  bool attention_only = false;
  // Flags and options in any order (--attention-only takes no value).
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--attention-only")) {
      attention_only = true;
      continue;
    }
    if (i + 1 >= argc) break;
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--shape"))
      shape = argv[i + 1];
    else if (!std::strcmp(argv[i], "--decode-steps"))
      decode_steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--llama-dir"))
      llama_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--gguf"))
      gguf = argv[i + 1];
    else if (!std::strcmp(argv[i], "--rounds"))
      rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--weight-dtype"))
      weight_dtypes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--kv-dtype") && !ParseKvDtype(argv[i + 1], &kv))
      return std::fprintf(stderr, "--kv-dtype: f32 or bf16\n"), 2;
    ++i;  // the option's value
  }
  std::vector<kernels::WeightType> types;
  for (size_t at = 0; at <= weight_dtypes.size();) {
    size_t end = weight_dtypes.find(',', at);
    if (end == std::string::npos) end = weight_dtypes.size();
    const std::string name = weight_dtypes.substr(at, end - at);
    WeightDtype d = WeightDtype::kAuto;
    if (!ParseWeightDtype(name, &d) || d == WeightDtype::kAuto)
      return std::fprintf(stderr, "--weight-dtype: f32, bf16 or int8, got '%s'\n", name.c_str()), 2;
    types.push_back(d == WeightDtype::kF32    ? kernels::WeightType::kF32
                    : d == WeightDtype::kBf16 ? kernels::WeightType::kBf16
                                              : kernels::WeightType::kInt8);
    at = end + 1;
  }
  if (!llama_dir.empty() && gguf.empty())
    return std::fprintf(stderr, "--llama-dir needs --gguf PREFIX\n"), 2;
  if (attention_only) {
    std::printf(
        "decode attention, one layer (12 kv heads x 64), sequences sharing a prefix, %s KV cache, "
        "%d threads: ms, best of 20\n"
        "| seqs | prefix |  own | plain ms     | shared ms    | ratio   |\n"
        "|------|--------|------|--------------|--------------|---------|\n",
        KvDtypeName(kv), kernels::CpuThreads());
    for (int seqs : {8, 64})
      // own 16: nearly all keys shared (the group's tiles); 1200: nearly all a row's own (one
      // pair at a time, bound by reading the cache); 200: the real job's documents.
      for (int own : {16, 200, 1200}) AttentionTable(seqs, 1000, own, kv);
    std::printf(
        "\nprefill attention, one layer (12 kv heads x 64), a chunk of each sequence after a "
        "shared prefix (one prefix group), %s KV cache, %d threads: ms, best of 5\n"
        "| seqs | rows | prefix | kernel  |        ms |  GFLOP/s |\n"
        "|------|------|--------|---------|-----------|----------|\n",
        KvDtypeName(kv), kernels::CpuThreads());
    PrefillAttentionTable(1, 200, 1000, kv);
    PrefillAttentionTable(8, 200, 1000, kv);
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
  std::printf(
      "llmq CPU benchmark: %s (%d layers, hidden %d, kv heads %d, vocab %d), KV cache %s, %d "
      "threads (pool barrier %.1f us), kernels %s%s\n",
      model.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_kv_heads, cfg.vocab_size,
      KvDtypeName(kv), kernels::CpuThreads(), kernels::CpuPool().barrier_ns() / 1000,
      kernels::GemmIsaName(kernels::ActiveGemmIsa()),
      std::getenv("LLMQ_GEMM_ISA") ? " (LLMQ_GEMM_ISA)" : "");
  struct Bound {
    const char* type;
    double mb, bound, got;
  };
  struct Row {  // one printed row: llama.cpp's figure is 0 when it has none
    const char* type;
    const char* phase;
    int batch, prompt;
    double ours, theirs;
  };
  auto print_head = [] {
    std::printf("| %-7s | %-8s | %5s | %6s | %10s | %10s | %6s |\n", "weights", "phase", "batch",
                "prompt", "tokens/s", "llama.cpp", "ratio");
    std::printf("|---------|----------|-------|--------|------------|------------|--------|\n");
  };
  auto print_row = [](const Row& r, double ratio) {
    if (r.theirs > 0)
      std::printf("| %-7s | %-8s | %5d | %6d | %10.1f | %10.1f | %6.2f |\n", r.type, r.phase,
                  r.batch, r.prompt, r.ours, r.theirs, ratio);
    else
      std::printf("| %-7s | %-8s | %5d | %6d | %10.1f | %10s | %6s |\n", r.type, r.phase, r.batch,
                  r.prompt, r.ours, "-", "-");
  };
  auto print_bounds = [](double bw, const std::vector<Bound>& bounds) {
    std::printf("\nbatch-1 decode against the bandwidth bound (%.1f GB/s):\n", bw);
    std::printf("| weights | MB per step | bound tok/s | tokens/s | bound / got |\n");
    std::printf("|---------|------------:|------------:|---------:|------------:|\n");
    for (const Bound& b : bounds)
      std::printf("| %-7s | %11.0f | %11.1f | %8.1f | %11.2f |\n", b.type, b.mb, b.bound, b.got,
                  b.bound / b.got);
  };
  std::vector<std::vector<Row>> all_rows(rounds);
  std::vector<std::vector<Bound>> all_bounds(rounds);
  std::vector<double> all_bw(rounds);
  for (int round = 0; round < rounds; ++round) {
    if (rounds > 1) std::printf("\nround %d of %d\n", round + 1, rounds);
    const double bw = all_bw[round] = ReadBandwidth();
    std::printf("memory read bandwidth now: %.1f GB/s\n", bw);
    print_head();
    std::vector<Row>& rows = all_rows[round];
    std::vector<Bound>& bounds = all_bounds[round];
    for (kernels::WeightType type : types) {
      CpuBackend be(cfg, *w, type, kv);
      // Bytes a decode step streams: every packed weight but the embedding (a row is gathered).
      const double embed_bytes =
          CpuBackend::SharesHeadAsEmbedding(cfg, type)
              ? 0.0
              : static_cast<double>(kernels::PackedWeight::BytesFor(
                    cfg.vocab_size, cfg.hidden_size, CpuBackend::EmbeddingType(type)));
      const double step_bytes = static_cast<double>(be.weight_bytes()) - embed_bytes;
      // llama.cpp first, so that both run on the same machine state.
      const char* suffix = type == kernels::WeightType::kF32    ? "-F32.gguf"
                           : type == kernels::WeightType::kBf16 ? "-BF16.gguf"
                                                                : "-Q8_0.gguf";
      const LlamaFigures llama =
          LlamaCpp(llama_dir, gguf + suffix, kernels::CpuThreads(), decode_steps);
      auto row = [&](const char* phase, int batch, int prompt, double ours,
                     std::tuple<int, int, int> theirs) {
        const auto it = llama.find(theirs);
        rows.push_back({kernels::WeightTypeName(type), phase, batch, prompt, ours,
                        it != llama.end() ? it->second : 0.0});
        print_row(rows.back(), rows.back().theirs > 0 ? ours / rows.back().theirs : 0.0);
      };
      RunOnce(cfg, &be, 1, 64, 2);  // warm up threads and pages
      for (int prompt : {128, 512}) {
        const double s = Best(
            3, [&] { return RunOnce(cfg, &be, 1, prompt, 1); }, &Timing::prefill_s);
        row("prefill", 1, prompt, prompt / s, {prompt, 0, 1});
      }
      for (int batch : {1, 8, 32}) {
        const int prompt = 128;
        const double s = Best(
            3, [&] { return RunOnce(cfg, &be, batch, prompt, 1 + decode_steps); },
            &Timing::decode_s);
        const double tps = static_cast<double>(batch) * decode_steps / s;
        // llama-bench decodes one sequence from an empty context; llama-batched-bench 32 after
        // 128-token prompts, as here.
        row("decode", batch, prompt, tps,
            batch == 1 ? std::tuple{0, decode_steps, 1} : std::tuple{prompt, decode_steps, batch});
        if (batch == 1)
          bounds.push_back(
              {kernels::WeightTypeName(type), step_bytes / 1e6, bw * 1e9 / step_bytes, tps});
      }
    }
    print_bounds(bw, bounds);
  }
  if (rounds > 1) {
    // Each figure the median of its rounds; the ratio the median of the rounds' ratios (each
    // round's two sides measured minutes apart, so a round's ratio shares its machine state).
    std::printf("\nmedians over %d rounds (ratio: the median of the rounds' ratios)\n", rounds);
    print_head();
    for (size_t i = 0; i < all_rows[0].size(); ++i) {
      std::vector<double> ours, theirs, ratios;
      for (const auto& rows : all_rows) {
        ours.push_back(rows[i].ours);
        theirs.push_back(rows[i].theirs);
        if (rows[i].theirs > 0) ratios.push_back(rows[i].ours / rows[i].theirs);
      }
      Row r = all_rows[0][i];
      r.ours = bench::Median(ours);
      r.theirs = ratios.empty() ? 0.0 : bench::Median(theirs);
      print_row(r, ratios.empty() ? 0.0 : bench::Median(ratios));
    }
    std::vector<Bound> bounds = all_bounds[0];
    for (size_t i = 0; i < bounds.size(); ++i) {
      std::vector<double> bound, got;
      for (const auto& b : all_bounds) bound.push_back(b[i].bound), got.push_back(b[i].got);
      bounds[i].bound = bench::Median(bound), bounds[i].got = bench::Median(got);
    }
    print_bounds(bench::Median(all_bw), bounds);
  }
  return 0;
}
