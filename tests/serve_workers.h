// Many `llmq serve` workers on one queue (issue 27), for the end-to-end tests of workers: one
// worker process (its config, state folder, queue, log and pid), a job's progress and the
// workers as `llmq list` / `llmq workers` show them, and a single worker's run of a job that the
// many-worker runs are compared with.
// Waits poll for files, log lines and counts (WaitFor), never for a span of time.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq::testing {

// One `llmq serve` process: its config (state folder, queue), log and pid.
class Worker {
 public:
  // `url`: the PostgreSQL queue ("" for the state folder's queue.db).
  // `lease_seconds`: short where a test kills workers (their leases must run out soon), else
  // long enough that a loaded machine never lets one lapse (a request would run twice).
  Worker(const std::string& dir, const std::string& model, const std::string& state,
         const std::string& url, double lease_seconds = 10)
      : dir_(dir), state_(state) {
    std::filesystem::create_directories(dir);
    // One thread each, four sequences a step: a job takes many claims, and every worker gets some.
    WriteServeConfig(
        config(), {.model = model,
                   .state = state,
                   .settle_seconds = 0.05,
                   .rescan_seconds = 1,
                   .drain_seconds = 2,
                   .engine = "  max_num_seqs: 4\n  kv_cache_memory: 64MiB\n  cpu_threads: 1\n",
                   .after_spool = "queue:\n  lease_seconds: " + std::to_string(lease_seconds) +
                                  "\n" + (url.empty() ? std::string() : "  url: " + url + "\n")});
  }
  ~Worker() { End(SIGKILL); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts it and waits until it says it is serving.
  bool Start() {
    Spawn();
    return WaitFor([&] { return Logged("serving"); }, 60);
  }
  // Starts it, not waiting (the log of its run before is kept: Logs).
  void Spawn() {
    if (!log_.empty() || std::filesystem::exists(err()))
      log_ += ReadText(err()) + "--- restarted\n";
    std::filesystem::remove(err());
    std::vector<std::string> args = {"serve", "--config", config()};
    args.insert(args.end(), serve_args_.begin(), serve_args_.end());
    pid_ = SpawnLlmq(args, dir_ + "/serve.out", err());
  }
  // More arguments of `llmq serve` for its next starts.
  void ServeAlso(std::vector<std::string> args) { serve_args_ = std::move(args); }
  int Kill() { return End(SIGKILL); }
  int Stop() { return End(SIGTERM); }
  // Whether the process runs still (false once it exited by itself, or was ended).
  bool Alive() {
    if (pid_ <= 0) return false;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) != pid_) return true;
    pid_ = -1;
    return false;
  }
  bool Logged(const std::string& text) const {
    return ReadText(err()).find(text) != std::string::npos;
  }
  std::string Logs() const { return log_ + ReadText(err()); }
  // The requests this worker finished, from its last line ("... N request(s) finished by this
  // worker"); -1 when it did not say (killed).
  int64_t Finished() const {
    static const std::regex re("([0-9]+) request\\(s\\) finished by this worker");
    std::smatch m;
    const std::string log = ReadText(err());
    return std::regex_search(log, m, re) ? std::stoll(m[1]) : -1;
  }
  std::string config() const { return dir_ + "/llmq.yaml"; }
  const std::string& state() const { return state_; }
  std::string outbox(const std::string& n) const { return state_ + "/outbox/" + n; }
  void Drop(const std::string& name, const std::string& text) const {
    WriteAndRename(dir_ + "/" + name + ".staging", state_ + "/inbox/" + name, text);
  }

 private:
  std::string err() const { return dir_ + "/serve.err"; }
  int End(int sig) { return EndProcess(&pid_, sig); }

  std::string dir_, state_, log_;
  std::vector<std::string> serve_args_;
  pid_t pid_ = -1;
};

// `n` workers on the queue at `url`, each with a state folder of its own (<dir>/w<i>/state), not
// started; *all: the same, as pointers.
inline std::vector<std::unique_ptr<Worker>> OwnFolderWorkers(int n, const std::string& dir,
                                                             const std::string& model,
                                                             const std::string& url,
                                                             double lease_seconds,
                                                             std::vector<Worker*>* all) {
  std::vector<std::unique_ptr<Worker>> ws;
  for (int i = 0; i < n; ++i) {
    const std::string d = dir + "/w" + std::to_string(i);
    ws.push_back(std::make_unique<Worker>(d, model, d + "/state", url, lease_seconds));
    all->push_back(ws.back().get());
  }
  return ws;
}

inline std::string AllLogs(const std::vector<Worker*>& ws) {
  std::string s;
  for (size_t i = 0; i < ws.size(); ++i)
    s += "=== worker " + std::to_string(i) + "\n" + ws[i]->Logs();
  return s;
}

// `llmq workers --json` on `w`'s queue.
inline nlohmann::json WorkersJson(const Worker& w) {
  const RunResult r = RunLlmqWith({}, {"workers", "--json", "--config", w.config()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

// The first job's counts in `w`'s queue: {completed + failed, total}; {-1, -1} before it is
// stored (or while the queue does not answer).
inline std::pair<int64_t, int64_t> Progress(const Worker& w) {
  const RunResult r = RunLlmqWith({}, {"list", "--json", "--config", w.config()});
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (r.exit_code != 0 || !j.is_array() || j.empty()) return {-1, -1};
  const nlohmann::json& c = j[0]["request_counts"];
  return {c["completed"].get<int64_t>() + c["failed"].get<int64_t>(), c["total"].get<int64_t>()};
}
// Whether the queue's one job shows as completed (finalized) in `llmq list`.
inline bool JobCompleted(const Worker& w) {
  const RunResult r = RunLlmqWith({}, {"list", "--json", "--config", w.config()});
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_array() && j.size() == 1 && j[0]["status"] == "completed";
}
inline bool Reached(const Worker& w, double share) {
  const auto [done, total] = Progress(w);
  return total > 0 && done >= share * static_cast<double>(total);
}

// One worker's run of a job (WriteMixedJob, `requests` lines of which `bad_lines` are refused):
// the files the many-worker runs must equal.
class ReferenceRun {
 public:
  // `max_tokens_factor`: the max_tokens of the requests without a response_format are so many
  // times WriteMixedJob's (a longer run of the same mix).
  ReferenceRun(int requests, int bad_lines, int max_tokens_factor = 1)
      : requests_(requests), bad_lines_(bad_lines), max_tokens_factor_(max_tokens_factor) {}

  const std::string& job() const { return job_; }
  int requests() const { return requests_; }
  int bad_lines() const { return bad_lines_; }
  // The outbox's names after the reference run.
  const std::vector<std::string>& outbox_names() const { return outbox_names_; }

  // Writes the job into `dir` and runs it on one worker (once: later calls return at once).
  void Make(const std::string& dir, const std::string& model) {
    if (!results_.empty()) return;
    WriteMixedJob(dir + "/job.jsonl", requests_);
    job_ = ReadText(dir + "/job.jsonl");
    if (max_tokens_factor_ > 1) {
      std::string longer;
      for (nlohmann::json line : ReadJsonl(dir + "/job.jsonl")) {
        nlohmann::json& body = line["body"];
        if (body.is_object() && body.contains("max_tokens") && !body.contains("response_format"))
          body["max_tokens"] = body["max_tokens"].get<int>() * max_tokens_factor_;
        longer += line.dump() + "\n";
      }
      job_ = longer;
    }
    Worker ref(dir + "/reference", model, dir + "/reference/state", "");
    ASSERT_TRUE(ref.Start()) << ref.Logs();
    ref.Drop("job.jsonl", job_);
    ASSERT_TRUE(
        WaitFor([&] { return std::filesystem::exists(ref.outbox("job.summary.json")); }, 300))
        << ref.Logs();
    ASSERT_EQ(ref.Stop(), 0) << ref.Logs();
    results_ = ReadJsonl(ref.outbox("job.results.jsonl"));
    errors_ = ReadJsonl(ref.outbox("job.errors.jsonl"));
    outbox_names_ = Names(ref.state() + "/outbox");
    ASSERT_EQ(results_.size(), size_t(requests_ - bad_lines_));
    ASSERT_EQ(errors_.size(), size_t(bad_lines_));
  }

  // The job's files at `stem` ("<outbox>/job") equal the reference's, every request once.
  void Expect(const std::string& stem, const std::string& logs) const {
    const auto results = ReadJsonl(stem + ".results.jsonl");
    const auto errors = ReadJsonl(stem + ".errors.jsonl");
    ASSERT_EQ(results.size(), results_.size()) << logs;
    ASSERT_EQ(errors.size(), errors_.size()) << logs;
    std::set<std::string> custom_ids;
    for (const auto* v : {&results, &errors})
      for (const nlohmann::json& o : *v)
        EXPECT_TRUE(custom_ids.insert(o["custom_id"].dump()).second) << "twice: " << o.dump();
    EXPECT_EQ(custom_ids.size(), size_t(requests_));
    for (size_t i = 0; i < results.size(); ++i)
      ASSERT_EQ(Comparable(results[i]), Comparable(results_[i])) << "results line " << i + 1;
    for (size_t i = 0; i < errors.size(); ++i)
      ASSERT_EQ(Comparable(errors[i]), Comparable(errors_[i])) << "errors line " << i + 1;
  }

 private:
  int requests_, bad_lines_, max_tokens_factor_;
  std::string job_;
  std::vector<nlohmann::json> results_, errors_;
  std::vector<std::string> outbox_names_;
};

// A suite of worker tests over one job of `requests` lines (`bad_lines` of them refused;
// `max_tokens_factor`: ReferenceRun's): the
// tiny model, a folder of the suite's, and the single worker's run (made once, by the first test
// that calls Reference).
template <int requests, int bad_lines, int max_tokens_factor = 1>
class WorkerSuite : public TinyModelSuite {
 protected:
  static void SetUpTestSuite() {
    TinyModelSuite::SetUpTestSuite();
    dir_ = TmpDir(std::string(::testing::UnitTest::GetInstance()->current_test_suite()->name()) +
                  "_jobs");
  }
  static void Reference() { ref_.Make(dir_, model_); }

  inline static std::string dir_;
  inline static ReferenceRun ref_{requests, bad_lines, max_tokens_factor};
};

}  // namespace llmq::testing
