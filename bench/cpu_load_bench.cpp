// The CPU backend beside a competing load (issue 12): the same `llmq run` job, quiet and with
// busy-looping processes this program starts itself on half the usable cores, then on all of them,
// alternating (quiet, half, all) for --rounds rounds. Prints each round, then the median and
// maximum of each condition against its ideal:
//   half busy: quiet median x cores / free cores (the job keeps the free cores' share);
//   all busy:  quiet median x (cores + busy) / cores (time-sharing: the job's threads get their
//              fair share of cores shared with as many spinning processes).
//   cpu_load_bench [--model DIR] [--requests 600] [--rounds 5] [--max-tokens 16]
//                  [--llmq PATH] [--dir bench-models/cpu-load] [-- extra llmq run flags]
// Set OMP_WAIT_POLICY / OMP_NUM_THREADS in the environment to compare OpenMP builds: it is passed
// on to llmq.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cpu/cpu_count.h"
#include "kernels/cpu/thread_pool.h"

using namespace llmq::bench;

namespace {

// `n` processes that spin until killed.
std::vector<pid_t> StartBusy(int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) Die("fork failed");
    if (pid == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    pids.push_back(pid);
  }
  return pids;
}

void StopBusy(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

// Runs args (args[0] a path) with stdout and stderr to `log`; the wall time in seconds.
double RunJob(const std::vector<std::string>& args, const std::string& log) {
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const double wall = Since(t0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Die("llmq run failed (status " + std::to_string(status) + "), see " + log);
  return wall;
}

void WriteJob(const std::string& path, int requests, int max_tokens) {
  std::ofstream out(path, std::ios::binary);
  llmq::Rng rng(12);
  for (int i = 0; i < requests; ++i)
    out << Line("r" + std::to_string(i), "/v1/completions",
                {{"model", "stories"},
                 {"prompt", "Once upon a time " + Words(rng, 40)},
                 {"max_tokens", max_tokens},
                 {"temperature", 0}})
               .dump()
        << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "../shared/models/stories260K", llmq = LLMQ_BINARY;
  std::string dir = "bench-models/cpu-load";
  int requests = 600, rounds = 5, max_tokens = 16;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      extra.assign(argv + i + 1, argv + argc);
      break;
    }
    if (i + 1 >= argc) Die("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--model")
      model = v;
    else if (a == "--requests")
      requests = std::atoi(v.c_str());
    else if (a == "--rounds")
      rounds = std::atoi(v.c_str());
    else if (a == "--max-tokens")
      max_tokens = std::atoi(v.c_str());
    else if (a == "--llmq")
      llmq = v;
    else if (a == "--dir")
      dir = v;
    else
      Die("unknown flag " + a);
  }
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/job.jsonl", out = dir + "/out.jsonl";
  WriteJob(in, requests, max_tokens);
  // An empty config: the defaults, whatever /etc/llmq/llmq.yaml or $LLMQ_CONFIG say on this host.
  const std::string config = dir + "/empty.yaml";
  std::ofstream(config) << "# defaults\n";
  std::vector<std::string> args = {llmq,      "run",           in,         "-o",
                                   out,       "--no-progress", "--state",  dir + "/state",
                                   "--model", model,           "--config", config};
  args.insert(args.end(), extra.begin(), extra.end());

  const int cores = llmq::kernels::UsableCpus();
  struct Condition {
    const char* name;
    int busy;
    std::vector<double> secs;
  };
  std::vector<Condition> conds = {
      {"quiet", 0, {}}, {"half busy", std::max(1, cores / 2), {}}, {"all busy", cores, {}}};
  std::printf("%s\n", Stamp().c_str());
  std::printf("cpu_load_bench: %s, %d requests x %d tokens, %s, %d usable cores (%s)%s%s\n",
              model.c_str(), requests, max_tokens, llmq.c_str(), cores,
              llmq::kernels::DescribeCpuBudget(llmq::kernels::ReadCpuBudget()).c_str(),
              std::getenv("OMP_WAIT_POLICY") ? ", OMP_WAIT_POLICY=" : "",
              std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "");
  std::printf("a CPU pool region's barrier, measured here: %.1f us\n",
              llmq::kernels::CpuPool().barrier_ns() / 1000);
  RunJob(args, dir + "/warmup.log");  // page cache, first-run costs
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d:", r + 1);
    for (Condition& c : conds) {
      const std::vector<pid_t> busy = StartBusy(c.busy);
      const double s = RunJob(args, dir + "/run.log");
      StopBusy(busy);
      c.secs.push_back(s);
      std::printf("  %s %.2f s", c.name, s);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  const double quiet = Median(conds[0].secs);
  std::printf("| %-9s | %4s | %8s | %8s | %8s | %12s | %9s |\n", "condition", "busy", "median s",
              "max s", "ideal s", "median/ideal", "max/ideal");
  std::printf("|-----------|------|----------|----------|----------|--------------|-----------|\n");
  for (const Condition& c : conds) {
    double ideal = quiet;
    if (c.busy > 0 && c.busy < cores) ideal = quiet * cores / (cores - c.busy);
    if (c.busy >= cores) ideal = quiet * (cores + c.busy) / cores;
    const double med = Median(c.secs), mx = *std::max_element(c.secs.begin(), c.secs.end());
    std::printf("| %-9s | %4d | %8.2f | %8.2f | %8.2f | %12.2f | %9.2f |\n", c.name, c.busy, med,
                mx, ideal, med / ideal, mx / ideal);
  }
  return 0;
}
