// Issue 27, done-when 4: scaling over workers, from one run. The nested prefix workload (one
// 100-token system prompt > 4 task templates of 300 tokens > a distinct 20-60-token document each;
// --requests in all; token-id prompts, 16 greedy output tokens each) dropped into `llmq serve`:
// first one worker, then two workers on one state folder (the one-worker-per-GPU case, the
// SQLite queue), or with --pg-url each with a folder of its own on one PostgreSQL queue; every
// worker one CPU thread (engine.cpu_threads: 1). Each run is timed from the drop to the job's
// summary in an outbox, on the real binary. Printed: wall time, its ratio to one worker's (target
// <= 0.55 with two workers on this 2-core machine), the prompt tokens computed over all workers
// against the unique tokens of the workload's prefix tree (target <= 1.05: each shared prefix
// computed about once, though the job is spread over workers), and each worker's share of the
// requests. Benchmarks are not timed tests: this prints, it asserts nothing.
//   workers_bench [--requests 2000] [--dir /tmp/llmq-workers-bench] [--pg-url URL]
//                 [--workers 1,2] [--llmq PATH]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/workloads.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using llmq::bench::Clock;
using llmq::bench::Die;
using llmq::bench::Flags;
using llmq::bench::Since;

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// `llmq ARGS...` with stdout and stderr to `log`; its pid.
pid_t Spawn(const std::string& llmq, const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    if (f == nullptr || dup2(fileno(stderr), 1) < 0) _exit(126);
    std::vector<char*> argv{const_cast<char*>(llmq.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(llmq.c_str(), argv.data());
    _exit(127);
  }
  if (pid < 0) Die("fork failed");
  return pid;
}

// Waits (polling) until `done()`; dies naming `what` after `seconds`.
template <class F>
void WaitUntil(const F& done, double seconds, const std::string& what) {
  const auto t0 = Clock::now();
  while (!done()) {
    if (Since(t0) > seconds) Die("timed out waiting for " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A model with enough work per token that the queue's overhead does not hide the scaling: a
// Llama of hidden 512, 6 layers, a 2,048-token vocabulary (about 21M parameters), random weights.
void MakeModel(const std::string& llmq, const std::string& dir) {
  if (fs::exists(dir + "/model/model.safetensors")) return;
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << json{
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", 512},
      {"intermediate_size", 1408},
      {"num_hidden_layers", 6},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 4},
      {"head_dim", 64},
      {"vocab_size", 2048},
      {"max_position_embeddings", 2048},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"tie_word_embeddings", false},
      {"hidden_act", "silu"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "float32"}}.dump();
  const pid_t pid = Spawn(
      llmq,
      {"make-model", "--config", dir + "/config.json", "--out", dir + "/model", "--seed", "4"},
      dir + "/make-model.log");
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Die("llmq make-model failed: " + ReadText(dir + "/make-model.log"));
}

struct Run {
  int workers = 0;
  double seconds = 0;
  int64_t computed = 0, prompt = 0;
  std::vector<int64_t> finished;  // per worker
};

Run RunWorkers(const std::string& llmq, const std::string& dir, const std::string& model,
               const std::string& job, int workers, const std::string& pg_url) {
  const std::string root = dir + "/w" + std::to_string(workers);
  fs::remove_all(root);
  if (!pg_url.empty()) {
    // A fresh queue: the jobs of an earlier run go (the schema stays).
    const int rc = std::system(("psql -q '" + pg_url +
                                "' -c 'TRUNCATE jobs, requests, results, workers CASCADE' "
                                ">/dev/null 2>&1")
                                   .c_str());
    if (rc != 0) std::fprintf(stderr, "(could not truncate the queue: psql exit %d)\n", rc);
  }
  std::vector<pid_t> pids;
  std::vector<std::string> logs, outboxes;
  std::string inbox;
  for (int w = 0; w < workers; ++w) {
    // One folder for all (SQLite) or one each (PostgreSQL).
    const std::string state = root + (pg_url.empty() ? "/state" : "/state" + std::to_string(w));
    const std::string config = root + "/llmq" + std::to_string(w) + ".yaml";
    fs::create_directories(root);
    std::ofstream(config) << "model:\n  path: " << model << "\nengine:\n  cpu_threads: 1\n"
                          << "  max_num_seqs: 64\n  kv_cache_memory: 1GiB\nspool:\n  state_dir: "
                          << state << "\n  settle_seconds: 0.05\n"
                          << (pg_url.empty() ? "" : "queue:\n  url: " + pg_url + "\n");
    logs.push_back(root + "/serve" + std::to_string(w) + ".log");
    pids.push_back(Spawn(llmq, {"serve", "--config", config}, logs.back()));
    WaitUntil([&] { return ReadText(logs.back()).find("serving") != std::string::npos; }, 120,
              "worker " + std::to_string(w) + " to serve (" + logs.back() + ")");
    outboxes.push_back(state + "/outbox");
    if (w == 0) inbox = state + "/inbox";
  }
  const std::string staged = root + "/job.jsonl";
  fs::copy_file(job, staged);
  const auto t0 = Clock::now();
  fs::rename(staged, inbox + "/job.jsonl");
  std::string summary;
  WaitUntil(
      [&] {
        for (const std::string& o : outboxes)
          if (fs::exists(o + "/job.summary.json")) summary = o + "/job.summary.json";
        return !summary.empty();
      },
      7200, "the job's summary");
  Run r;
  r.workers = workers;
  r.seconds = Since(t0);
  const json s = json::parse(ReadText(summary));
  r.computed = s["computed_prompt_tokens"];
  r.prompt = s["prompt_tokens"];
  for (size_t w = 0; w < pids.size(); ++w) {
    kill(pids[w], SIGTERM);
    int status = 0;
    waitpid(pids[w], &status, 0);
    static const std::regex re("([0-9]+) request\\(s\\) finished by this worker");
    std::smatch m;
    const std::string log = ReadText(logs[w]);
    r.finished.push_back(std::regex_search(log, m, re) ? std::stoll(m[1]) : -1);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 2000;
  std::string dir = "/tmp/llmq-workers-bench", pg_url, llmq = LLMQ_BINARY;
  std::vector<int> counts = {1, 2};
  Flags(argc, argv,
        "usage: workers_bench [--requests 2000] [--workers 1,2] [--dir /tmp/llmq-workers-bench] "
        "[--pg-url URL] [--llmq BINARY]")
      .Get("--requests", &requests)
      .Get("--dir", &dir)
      .Get("--pg-url", &pg_url)
      .Get("--llmq", &llmq)
      .Get("--workers", &counts)
      .Done();
  MakeModel(llmq, dir);
  const int templates = 4;
  const llmq::bench::Prompts prompts = llmq::bench::Nested(
      templates, (requests + templates - 1) / templates, 100, 300, 20, 60, 2048, 27);
  const std::string job = dir + "/job.jsonl";
  {
    std::ofstream in(job);
    for (int i = 0; i < requests; ++i)
      in << json{{"custom_id", "doc-" + std::to_string(i)},
                 {"method", "POST"},
                 {"url", "/v1/completions"},
                 {"body",
                  {{"prompt", prompts[i]},
                   {"max_tokens", 16},
                   {"temperature", 0},
                   {"ignore_eos", true}}}}
                .dump()
         << "\n";
  }
  const llmq::bench::Prompts used(prompts.begin(), prompts.begin() + requests);
  const int64_t unique = llmq::bench::UniqueTokens(used);

  std::vector<Run> runs;
  for (int n : counts) runs.push_back(RunWorkers(llmq, dir, dir + "/model", job, n, pg_url));

  std::printf("\n## llmq serve workers (%s)\n\n", llmq::bench::Stamp().c_str());
  std::printf(
      "%d requests, nested prefixes (1 x 100-token system > %d x 300-token templates > 20-60-token "
      "documents), 16 output tokens each; a 21M-parameter Llama (hidden 512, 6 layers), random "
      "weights; each worker 1 CPU thread, max_num_seqs 64; queue: %s\n\n",
      requests, templates,
      pg_url.empty() ? "SQLite, the workers on one state folder" : "PostgreSQL, a folder each");
  std::printf(
      "| workers | wall s | / 1 worker | prompt tokens | computed | computed / unique | "
      "requests per worker |\n|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    std::string share;
    for (int64_t f : r.finished) share += (share.empty() ? "" : " + ") + std::to_string(f);
    std::printf("| %d | %.2f | %.3f | %lld | %lld | %.3f | %s |\n", r.workers, r.seconds,
                r.seconds / runs[0].seconds, static_cast<long long>(r.prompt),
                static_cast<long long>(r.computed), static_cast<double>(r.computed) / unique,
                share.c_str());
  }
  std::printf(
      "\nunique prompt tokens (the prefix tree's): %lld; targets: wall with 2 workers <= "
      "0.55 x 1 worker's, computed / unique <= 1.05\n",
      static_cast<long long>(unique));
  return 0;
}
