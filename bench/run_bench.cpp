// `llmq run` on the shared-instructions workload (512 requests: one 1,000-token instruction prefix
// + a distinct 100-300-token document each, 32 output tokens, shuffled), at default settings, with
// the prefix features on (prefix cache + planner + shared-prefix attention), without shared-prefix
// attention, and off: computed / unique prompt tokens, preemptions, wall time, tokens/s and peak
// RSS (the child's, from wait4), from the real binary, and where each run's time went (`llmq run
// --profile`). --before PATH runs another llmq build (e.g. main's) on the same job first, side
// by side; --no-off skips the (slow) run without prefix features.
// Then the nested workload (one 200-token system prompt > 4 task templates of 800 tokens > a
// distinct 100-300-token document each; --requests requests in all) and the nested workload with
// short documents (one 100-token system prompt > 4 templates of 300 > 30 documents of 1-20 tokens
// each: most prompts end inside the block where their template ends, the case where requests
// admitted together used to compute their shared prefix's last tokens each) at default settings,
// the same columns. Each run's peak RSS is also given against packed weights
// (CpuBackend::WeightBytesFor)
// + the KV pool memory the run touched (the summary's kv_blocks_touched: distinct blocks that
// ever held content, x bytes per block).
// Then the sampler's cost per decode step at batch 256 (greedy; with logprobs; with penalties and
// logit_bias; both), beside a whole engine step's on the CPU backend (forward included), and
// alone over the model's vocabulary and over Llama 3's (128,256).
// With --dtypes, only the shared-instructions job (--requests of them), once per number format
// (issue 26): f32, then bf16 and int8 weights (engine.weight_dtype), each with an f32 and a bf16 KV
// cache (engine.kv_dtype): wall time, tokens/s, peak RSS against the packed weights of that type
// and the KV touched at that type's bytes, and how many requests' outputs equal f32's.
// With --job-only, writes the model and the shared-instructions job (--requests of them) into
// bench-models/run-bench/{model,in.jsonl}, prints their paths and runs nothing (the job the
// harness bench/real_job_vs_llama_server.py sends to llmq and to llama-server alike).
//   run_bench [--requests 512] [--shape NAME | --config model-config.json] [--before PATH]
//             [--no-off] [--no-sampler] [--sampler-only] [--dtypes] [--job-only]
//   (default: a tiny 2048-context model)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/workloads.h"
#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/model/weights.h"
#include "engine/tools/model_maker.h"
#include "kernels/cpu/thread_pool.h"

using json = nlohmann::json;

namespace {

// Runs `binary` run ARGS as a child of its own; its summary JSON, with "peak_rss_bytes" (the
// child's ru_maxrss) added.
json RunLlmq(const std::string& binary, const std::string& args, const std::string& summary) {
  const std::string cmd = "exec " + binary + " run " + args + " --no-progress --summary-json " +
                          summary + " 2>/dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "failed (%d): %s\n", status, cmd.c_str());
    std::exit(1);
  }
  std::ifstream f(summary);
  json j = json::parse(f);
  j["peak_rss_bytes"] = int64_t{ru.ru_maxrss} * 1024;
  return j;
}

// Writes `prompts` as a /v1/completions job (token-id prompts keep the sharing exact; BOS is
// already the first id), 32 greedy output tokens each, to `path`; their total tokens.
int64_t WriteJob(const llmq::bench::Prompts& prompts, const std::string& path) {
  std::ofstream in(path);
  int64_t total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    total += prompts[i].size();
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
  return total;
}

struct Variant {
  std::string name, binary, flags;
};

// The table of a workload's runs: computed / unique prompt tokens, preemptions, wall time,
// tokens/s, peak RSS and peak RSS / (packed weights + KV touched). A run whose summary lacks
// kv_blocks_touched (an older llmq) is measured against `fallback_blocks` (the same job's count
// from this build), marked *.
void PrintRuns(const std::vector<Variant>& variants, const std::vector<json>& runs, int64_t total,
               int64_t unique, uint64_t weight_bytes, int64_t block_bytes,
               int64_t fallback_blocks) {
  std::printf("| %-17s | %8s | %9s | %7s | %8s | %9s | %9s | %8s | %9s | %11s |\n", "variant",
              "computed", "comp/uniq", "preempt", "wall s", "out tok/s", "total t/s", "peak RSS",
              "KV blocks", "RSS/(W+KV)");
  std::printf(
      "|-------------------|----------|-----------|---------|----------|-----------|-----------|--"
      "--------|-----------|-------------|\n");
  for (size_t v = 0; v < variants.size(); ++v) {
    const json& s = runs[v];
    const double wall = s["wall_seconds"];
    const int64_t computed = s["computed_prompt_tokens"];
    const int64_t out_tokens = s["completion_tokens"];
    const std::string pre =
        s.contains("preemptions") ? std::to_string(s["preemptions"].get<int64_t>()) : "-";
    const bool own = s.contains("kv_blocks_touched");
    const int64_t blocks = own ? s["kv_blocks_touched"].get<int64_t>() : fallback_blocks;
    const int64_t rss = s["peak_rss_bytes"];
    std::printf(
        "| %-17s | %8lld | %9.3f | %7s | %8.2f | %9.1f | %9.1f | %5.2f GB | %8lld%s | %10.3fx |\n",
        variants[v].name.c_str(), static_cast<long long>(computed),
        static_cast<double>(computed) / unique, pre.c_str(), wall, out_tokens / wall,
        (total + out_tokens) / wall, rss / 1e9, static_cast<long long>(blocks), own ? " " : "*",
        static_cast<double>(rss) / (static_cast<double>(weight_bytes) + blocks * block_bytes));
  }
  std::printf(
      "(RSS/(W+KV): peak RSS / (packed weights %.3f GB + KV blocks touched x %.1f KiB); * = this "
      "build's count for the same job)\n",
      weight_bytes / 1e9, block_bytes / 1024.0);
}

// The first run of this build (not --before) in `runs`; its kv_blocks_touched (0 if none).
int64_t OwnBlocks(const std::vector<json>& runs) {
  for (const json& r : runs)
    if (r.contains("kv_blocks_touched")) return r["kv_blocks_touched"].get<int64_t>();
  return 0;
}

// Runs the nested job `prompts` (`title` and `shape` say what it is; `name` names its files and
// its variants) at default settings with this build and with --before's (when given), and prints
// its table.
void NestedRuns(const llmq::bench::Prompts& prompts, const std::string& name,
                const std::string& title, const std::string& shape, const std::string& dir,
                const std::string& model, const std::string& before, uint64_t weight_bytes,
                int64_t block_bytes) {
  const int64_t unique = llmq::bench::UniqueTokens(prompts);
  const int64_t total = WriteJob(prompts, dir + "/" + name + ".jsonl");
  std::vector<Variant> variants;
  if (!before.empty()) variants.push_back({name + ", before", before, ""});
  variants.push_back({name + ", on", LLMQ_BINARY, ""});
  std::vector<json> runs;
  for (size_t v = 0; v < variants.size(); ++v) {
    const std::string out = dir + "/" + name + std::to_string(v);
    runs.push_back(RunLlmq(
        variants[v].binary,
        dir + "/" + name + ".jsonl --model " + model + " -o " + out + ".jsonl " + variants[v].flags,
        out + ".json"));
  }
  std::printf(
      "\nllmq run, %s: %zu requests (%s), %lld prompt tokens (%lld unique), 32 output tokens each, "
      "default settings\n",
      title.c_str(), prompts.size(), shape.c_str(), static_cast<long long>(total),
      static_cast<long long>(unique));
  PrintRuns(variants, runs, total, unique, weight_bytes, block_bytes, OwnBlocks(runs));
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The completions of a run's output file, by custom_id.
std::map<std::string, std::string> Completions(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line);
    out[j["custom_id"]] = j["response"]["body"]["choices"][0]["text"].dump();
  }
  return out;
}

// The --dtypes table: the job `in` (total / unique prompt tokens) run once per weight and KV type.
void DtypeRuns(const llmq::ModelConfig& cfg, const std::string& dir, const std::string& model,
               const std::string& in, int64_t total, int64_t unique) {
  using llmq::kernels::WeightType;
  struct Format {
    WeightType weights;
    llmq::KvDtype kv;
  };
  const std::vector<Format> formats = {
      {WeightType::kF32, llmq::KvDtype::kF32},  {WeightType::kF32, llmq::KvDtype::kBf16},
      {WeightType::kBf16, llmq::KvDtype::kF32}, {WeightType::kBf16, llmq::KvDtype::kBf16},
      {WeightType::kInt8, llmq::KvDtype::kF32}, {WeightType::kInt8, llmq::KvDtype::kBf16}};
  std::printf(
      "llmq run, shared instructions by number format: %lld prompt tokens (%lld unique), 32 output "
      "tokens each, default settings\n",
      static_cast<long long>(total), static_cast<long long>(unique));
  std::printf("| %-7s | %-4s | %8s | %9s | %9s | %8s | %9s | %9s | %10s | %9s |\n", "weights", "KV",
              "wall s", "out tok/s", "total t/s", "peak RSS", "weights", "KV blocks", "RSS/(W+KV)",
              "same as f32");
  std::printf(
      "|---------|------|----------|-----------|-----------|----------|-----------|-----------|"
      "------------|-------------|\n");
  std::map<std::string, std::string> reference;
  for (size_t i = 0; i < formats.size(); ++i) {
    const Format& f = formats[i];
    const std::string out = dir + "/dtype" + std::to_string(i);
    const json s = RunLlmq(LLMQ_BINARY,
                           in + " --model " + model + " -o " + out + ".jsonl --weight-dtype " +
                               llmq::kernels::WeightTypeName(f.weights) + " --kv-dtype " +
                               llmq::KvDtypeName(f.kv),
                           out + ".json");
    const auto got = Completions(out + ".jsonl");
    if (i == 0) reference = got;
    int same = 0;
    for (const auto& [id, text] : got) same += reference.count(id) && reference.at(id) == text;
    const double wall = s["wall_seconds"];
    const int64_t out_tokens = s["completion_tokens"], rss = s["peak_rss_bytes"];
    const int64_t blocks = s["kv_blocks_touched"];
    const uint64_t weights = llmq::CpuBackend::WeightBytesFor(cfg, f.weights);
    const int64_t block_bytes = cfg.KvBytesPerToken(llmq::CpuBackend::KvElementBytes(f.kv)) *
                                llmq::EngineOptions{}.block_size;
    std::printf(
        "| %-7s | %-4s | %8.2f | %9.1f | %9.1f | %5.2f GB | %6.3f GB | %9lld | %9.3fx | %5d / "
        "%-5zu "
        "|\n",
        llmq::kernels::WeightTypeName(f.weights), llmq::KvDtypeName(f.kv), wall, out_tokens / wall,
        (total + out_tokens) / wall, rss / 1e9, weights / 1e9, static_cast<long long>(blocks),
        static_cast<double>(rss) / (static_cast<double>(weights) + blocks * block_bytes), same,
        got.size());
  }
  std::printf(
      "(RSS/(W+KV): peak RSS / (packed weights of that type + KV blocks touched x that KV type's "
      "block bytes); same as f32: requests whose completion text equals the f32 run's)\n");
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
      kBatch, llmq::kernels::CpuThreads());
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
  std::string config, before;
  bool sampler_only = false, no_off = false, no_sampler = false, dtypes = false, job_only = false;
  std::string shape;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sampler-only")) {
      sampler_only = true;
    } else if (!std::strcmp(argv[i], "--no-off")) {
      no_off = true;
    } else if (!std::strcmp(argv[i], "--no-sampler")) {
      no_sampler = true;
    } else if (!std::strcmp(argv[i], "--dtypes")) {
      dtypes = true;
    } else if (!std::strcmp(argv[i], "--job-only")) {
      job_only = true;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--shape")) {
      shape = argv[++i];
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--before")) {
      before = argv[++i];
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
  if (!shape.empty()) {
    if (llmq::Status st = llmq::ShapeConfig(shape, &cfg, &dtype); !st.ok())
      return std::fprintf(stderr, "%s\n", st.message().c_str()), 2;
    cfg.max_position_embeddings = std::max(cfg.max_position_embeddings, 2048);
  } else {
    llmq::ShapeConfig("tiny", &cfg, &dtype).IgnoreError();  // a built-in shape
    cfg.max_position_embeddings = 2048;
  }
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
  const int64_t total = WriteJob(prompts, dir + "/in.jsonl");
  if (job_only) {
    std::printf("model %s\njob %s/in.jsonl (%d requests, %lld prompt tokens, %lld unique)\n",
                model.c_str(), dir.c_str(), requests, static_cast<long long>(total),
                static_cast<long long>(unique));
    return 0;
  }
  // Default settings: the KV pool sized from the memory the process may take.
  const std::string common = dir + "/in.jsonl --model " + model;
  if (dtypes) {
    DtypeRuns(cfg, dir, model, dir + "/in.jsonl", total, unique);
    return 0;
  }
  std::vector<Variant> variants;
  if (!before.empty()) variants.push_back({"before (--before)", before, ""});
  variants.push_back({"on", LLMQ_BINARY, "--profile"});
  variants.push_back({"no shared attn", LLMQ_BINARY, "--profile --no-shared-prefix-attention"});
  if (!no_off) variants.push_back({"off", LLMQ_BINARY, "--profile --no-prefix-cache --no-planner"});
  std::vector<json> runs;
  for (size_t v = 0; v < variants.size(); ++v) {
    const std::string out = dir + "/run" + std::to_string(v);
    runs.push_back(RunLlmq(variants[v].binary,
                           common + " -o " + out + ".jsonl " + variants[v].flags, out + ".json"));
  }
  const uint64_t weight_bytes = llmq::CpuBackend::WeightBytesFor(cfg);
  const int64_t block_bytes = cfg.KvBytesPerToken(sizeof(float)) * llmq::EngineOptions{}.block_size;

  std::printf(
      "llmq run, shared instructions: %d requests, %lld prompt tokens (%lld unique), 32 output "
      "tokens each, default settings\n",
      requests, static_cast<long long>(total), static_cast<long long>(unique));
  PrintRuns(variants, runs, total, unique, weight_bytes, block_bytes, OwnBlocks(runs));
  // Where the time went (seconds; the rest of the wall time is start-up, ingest, the queue and
  // the results' files).
  std::printf("\nprofile (s)\n| %-17s |", "variant");
  const std::vector<std::string> phases = {
      "schedule", "forward", "prefill_gemm", "decode_gemm", "attention", "other_forward", "sample"};
  for (const std::string& k : phases) std::printf(" %13s |", k.c_str());
  std::printf(" %13s |\n|-------------------|", "outside steps");
  for (size_t i = 0; i <= phases.size(); ++i) std::printf("---------------|");
  std::printf("\n");
  for (size_t v = 0; v < variants.size(); ++v) {
    const json& s = runs[v];
    if (!s.contains("profile_seconds")) continue;
    std::printf("| %-17s |", variants[v].name.c_str());
    double in_steps = 0;
    for (const std::string& k : phases) {
      const double x = s["profile_seconds"].value(k, 0.0);
      if (k == "schedule" || k == "forward" || k == "sample") in_steps += x;
      std::printf(" %13.2f |", x);
    }
    std::printf(" %13.2f |\n", s["wall_seconds"].get<double>() - in_steps);
  }
  const json& on = runs[before.empty() ? 0 : 1];
  if (!before.empty())
    std::printf("wall time on / before: %.3f\n",
                on["wall_seconds"].get<double>() / runs[0]["wall_seconds"].get<double>());
  if (!no_off)
    std::printf("speed-up with prefix features: %.2fx\n",
                runs.back()["wall_seconds"].get<double>() / on["wall_seconds"].get<double>());

  // The nested workloads: 4 templates under one system prompt, --requests documents in all; and
  // 4 x 30 short documents.
  constexpr int kTemplates = 4;
  NestedRuns(llmq::bench::Nested(kTemplates, std::max(1, requests / kTemplates), 200, 800, 100, 300,
                                 cfg.vocab_size, 43),
             "nested", "nested",
             "1 system prompt of 200 tokens > 4 templates of 800 > a document of 100-300 each", dir,
             model, before, weight_bytes, block_bytes);
  NestedRuns(llmq::bench::Nested(kTemplates, 30, 100, 300, 1, 20, cfg.vocab_size, 44), "short",
             "nested, short documents",
             "1 system prompt of 100 tokens > 4 templates of 300 > 30 documents of 1-20 each", dir,
             model, before, weight_bytes, block_bytes);
  if (no_sampler) return 0;
  SamplerTable(cfg, model);
  return 0;
}
