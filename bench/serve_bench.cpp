// The daemon against `llmq run` on the same 2,000-request job (queue_bench's compare job: shared
// instruction + distinct note, greedy and seeded-sampling lines, max_tokens 4..8, tiny model):
//   daemon: `llmq serve` started once (model loaded, inbox watched); per round the job is renamed
//           into inbox/ and timed until outbox/<job>.summary.json appears (the group window a
//           renamed-in file waits, ingest, run, finalize);
//   run:    `llmq run IN -o OUT` timed as a whole process (model load, ingest, run, output).
// Rounds alternate which goes first; each round has its own job text (distinct notes), the same
// for both, so the daemon's prefix cache carries nothing but the shared instruction from one round
// to the next. Medians, and the ratio daemon / run against the target <= 1.05x.
//   serve_bench [--rounds 5] [--requests 2000] [--settle SECONDS (spool.settle_seconds, 1)]
//               [--group-window MS (spool.group_window_ms, 50)] [--dir bench-models/serve-bench]
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "bench/bench_util.h"
#include "engine/tools/model_maker.h"

namespace fs = std::filesystem;
using namespace llmq::bench;

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (!freopen(log.c_str(), "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(127);
  std::vector<char*> argv{const_cast<char*>(LLMQ_BINARY)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(LLMQ_BINARY, argv.data());
  _exit(127);
}

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Polls `done` every millisecond for up to `seconds`.
bool WaitFor(const std::function<bool()>& done, double seconds) {
  const auto t0 = Clock::now();
  while (Since(t0) < seconds) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

// Waits up to `seconds` for `path` to appear, blocked in inotify (on its folder) rather than
// polling: on two cores a poller waking every millisecond takes CPU from the daemon's engine
// (whose OpenMP threads then wait on each other), while `llmq run` is waited for in waitpid.
bool WaitForFile(const std::string& path, double seconds) {
  const int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0 || inotify_add_watch(fd, fs::path(path).parent_path().c_str(),
                                  IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE) < 0)
    Die("inotify on " + path + ": " + std::strerror(errno));
  const auto t0 = Clock::now();
  alignas(inotify_event) char buf[4096];
  bool found = fs::exists(path);
  while (!found && Since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0 && ::read(fd, buf, sizeof buf) < 0 && errno != EINTR)
      Die(std::string("inotify read: ") + std::strerror(errno));
    found = fs::exists(path);
  }
  ::close(fd);
  return found;
}

size_t Lines(const std::string& path) {
  const std::string t = ReadText(path);
  return static_cast<size_t>(std::count(t.begin(), t.end(), '\n'));
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, requests = 2000, group_window_ms = 50;
  double settle = 1;
  std::string dir = "bench-models/serve-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (a == "--requests")
      requests = std::atoi(argv[i + 1]);
    else if (a == "--settle")
      settle = std::atof(argv[i + 1]);
    else if (a == "--group-window")
      group_window_ms = std::atoi(argv[i + 1]);
    else if (a == "--dir")
      dir = argv[i + 1];
    else
      Die("unknown flag " + a);
  }
  dir = fs::absolute(dir).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = dir + "/model", state = dir + "/state", config = dir + "/llmq.yaml";
  llmq::ModelConfig mcfg;
  llmq::DType dtype;
  Check(llmq::ShapeConfig("tiny", &mcfg, &dtype), "ShapeConfig");
  Check(llmq::MakeModel(mcfg, dtype, 1, model), "MakeModel");
  // The defaults but the paths and the spool's waits (defaults too unless given): a renamed-in
  // file waits the group window before ingest, the settle time only when written to after it.
  std::ofstream(config) << "model:\n  path: " << model << "\nspool:\n  state_dir: " << state
                        << "\n  settle_seconds: " << settle
                        << "\n  group_window_ms: " << group_window_ms << "\n";

  const pid_t daemon = Spawn({"serve", "--config", config}, dir + "/serve.log");
  if (!WaitFor([&] { return ReadText(dir + "/serve.log").find("serving") != std::string::npos; },
               60))
    Die("llmq serve did not start: " + ReadText(dir + "/serve.log"));

  std::vector<double> served, ran;
  for (int r = 0; r < rounds; ++r) {
    const std::string name = "job" + std::to_string(r);
    const std::string in = dir + "/" + name + ".jsonl";
    WriteCompareJob(in, requests, 100 + static_cast<uint64_t>(r));
    auto run_daemon = [&] {
      const std::string staged = dir + "/." + name + ".staged";
      fs::copy_file(in, staged);
      const std::string summary = state + "/outbox/" + name + ".summary.json";
      const auto t0 = Clock::now();
      fs::rename(staged, state + "/inbox/" + name + ".jsonl");
      if (!WaitForFile(summary, 600))
        Die("no summary from the daemon: " + ReadText(dir + "/serve.log"));
      served.push_back(Since(t0));
      if (Lines(state + "/outbox/" + name + ".results.jsonl") != static_cast<size_t>(requests))
        Die("the daemon's results of " + name + " are short");
    };
    auto run_once = [&] {
      const std::string out = dir + "/" + name + ".out.jsonl";
      const auto t0 = Clock::now();
      const pid_t pid = Spawn({"run", in, "-o", out, "--config", config, "--no-progress"},
                              dir + "/" + name + ".run.log");
      if (Wait(pid) != 0) Die("llmq run failed: " + ReadText(dir + "/" + name + ".run.log"));
      ran.push_back(Since(t0));
      if (Lines(out) != static_cast<size_t>(requests)) Die("llmq run's output is short");
    };
    if (r % 2 == 0) {
      run_daemon();
      run_once();
    } else {
      run_once();
      run_daemon();
    }
    std::fprintf(stderr, "round %d: daemon %.3f s, run %.3f s\n", r + 1, served.back(), ran.back());
  }
  kill(daemon, SIGTERM);
  if (Wait(daemon) != 0) Die("llmq serve did not exit cleanly: " + ReadText(dir + "/serve.log"));

  const double sm = Median(served), rm = Median(ran);
  std::printf("%s\n", Stamp().c_str());
  std::printf(
      "serve vs run: %d requests (tiny model), %d rounds alternating, settle_seconds %g, "
      "group_window_ms %d\n",
      requests, rounds, settle, group_window_ms);
  std::printf("| %-58s | %9s | %9s | %9s |\n", "measure", "median s", "min s", "max s");
  std::printf("|%s|%s|%s|%s|\n", std::string(60, '-').c_str(), std::string(11, '-').c_str(),
              std::string(11, '-').c_str(), std::string(11, '-').c_str());
  auto row = [](const char* name, const std::vector<double>& v) {
    std::printf("| %-58s | %9.3f | %9.3f | %9.3f |\n", name, Median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  };
  row("daemon: rename into inbox/ -> summary file (model loaded)", served);
  row("llmq run: whole process (model load, ingest, run, output)", ran);
  std::printf("ratio daemon / run (medians): %.3fx (target <= 1.05x): %s\n", sm / rm,
              sm / rm <= 1.05 ? "met" : "NOT met");
  return 0;
}
