// A real `llmq serve` on a tiny generated model, for the end-to-end tests of the daemon: its
// state folder and config, its log, dropping files into its inbox and waiting for their outcome.
// Waits poll for a file or a log line (WaitFor), never for a span of time.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/text.h"
#include "tests/test_util.h"

namespace llmq::testing {

// One completions request line with its newline; `max_tokens` tokens (EOS ignored, so the work
// is known, unless `ignore_eos` is false).
inline std::string CompletionLine(const std::string& id, const std::string& prompt, int max_tokens,
                                  bool ignore_eos = true) {
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", max_tokens}};
  if (ignore_eos) body["ignore_eos"] = true;
  return nlohmann::json{
             {"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}}
             .dump() +
         "\n";
}

// A good completions line (2 tokens, EOS ignored: the work is known), with its newline.
inline std::string GoodLine(const std::string& id, int max_tokens = 2) {
  return CompletionLine(id, "Summarize: " + id, max_tokens);
}

// The tiny generated model (seed 4) the serve tests run on, written to `out`.
inline void MakeTinyModel(const std::string& out) {
  ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", out, "--seed", "4"}).exit_code, 0);
}

// A daemon's config: the model, an engine section when `engine` (indented YAML lines) is not
// empty, then the spool section (`spool_extra`: more indented YAML lines in it), then
// `after_spool` (more sections, as is). A test may append keys to the last section.
struct ServeConfig {
  std::string model = {}, state = {};
  double settle_seconds = 0.2, rescan_seconds = 1, drain_seconds = 5;
  std::string spool_extra = {}, engine = {}, after_spool = {};
};
inline void WriteServeConfig(const std::string& path, const ServeConfig& c) {
  std::ofstream(path) << "model:\n  path: " << c.model << "\n"
                      << (c.engine.empty() ? "" : "engine:\n" + c.engine)
                      << "spool:\n  state_dir: " << c.state
                      << "\n  settle_seconds: " << c.settle_seconds
                      << "\n  rescan_seconds: " << c.rescan_seconds
                      << "\n  drain_seconds: " << c.drain_seconds << "\n  commit_interval_ms: 10\n"
                      << c.spool_extra << c.after_spool;
}

// Writes `text` to `tmp`, then renames it to `to` (an inbox path: IN_MOVED_TO).
inline void WriteAndRename(const std::string& tmp, const std::string& to, const std::string& text) {
  std::ofstream(tmp, std::ios::binary) << text;
  std::filesystem::rename(tmp, to);
}

// Whether `pid` exited within `seconds` (polling every `poll_ms`); its exit status (128 + the
// signal when killed) in *status.
inline bool ExitedWithin(pid_t pid, double seconds, int* status, int poll_ms = 50) {
  return WaitFor(
      [&] {
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) != pid) return false;
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
      },
      seconds, poll_ms);
}

// Sends `sig` to *pid and waits for it to end; its exit status (128 + the signal when killed), or
// -1 when *pid is not running (-1). *pid becomes -1.
inline int EndProcess(pid_t* pid, int sig) {
  if (*pid < 0) return -1;
  kill(*pid, sig);
  const int status = WaitExit(*pid);
  *pid = -1;
  return status;
}

// The names in a folder, sorted.
inline std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A suite whose tests share one tiny model, made once for the suite.
class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* suite = ::testing::UnitTest::GetInstance()->current_test_suite()->name();
    model_ = TmpDir(std::string(suite) + "_model") + "/model";
    MakeTinyModel(model_);
  }
  inline static std::string model_;
};

// One `llmq serve` per test, on the suite's model: the test's folder, the daemon's state folder,
// config, log and pid. The daemon is killed when the test ends, on failure too.
class ServeCase : public TinyModelSuite {
 protected:
  void SetUp() override {
    dir_ = CurrentTestDir();
    state_ = dir_ + "/state";
    config_ = dir_ + "/llmq.yaml";
  }
  void TearDown() override { Kill(); }

  void Kill() {
    if (pid_ < 0) return;
    kill(pid_, SIGKILL);
    WaitExit(pid_);
    pid_ = -1;
  }
  std::string err_file() const { return dir_ + "/serve.err"; }
  std::string Log() const { return ReadText(err_file()); }
  std::string inbox(const std::string& n = "") const { return state_ + "/inbox/" + n; }
  std::string outbox(const std::string& n = "") const { return state_ + "/outbox/" + n; }

  // Writes `text` beside the inbox and renames it in (IN_MOVED_TO).
  void Drop(const std::string& name, const std::string& text) {
    WriteAndRename(dir_ + "/" + name + ".staging", inbox(name), text);
  }
  // Whether outbox/<stem>.summary.json came within `seconds`.
  bool Finalized(const std::string& stem, double seconds = 20) {
    return WaitFor([&] { return std::filesystem::exists(outbox(stem + ".summary.json")); },
                   seconds);
  }
  // The job's `llmq status --json` object; an empty object while it is unknown.
  nlohmann::json StatusOf(const std::string& job) {
    const auto r = RunLlmqWith({}, {"status", job, "--json", "--config", config_});
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    return r.exit_code == 0 && j.is_object() ? j : nlohmann::json::object();
  }

  std::string dir_, state_, config_;
  pid_t pid_ = -1;
};

// ServeCase with a short settle time and rescan period, a small KV cache, and files dropped
// through a staging folder of the test's choosing.
class ServeFixture : public ServeCase {
 protected:
  void SetUp() override {
    ServeCase::SetUp();
    staging_ = dir_;
    WriteConfig();
  }

  // The config: a short settle time and rescan period, and `spool_extra` (indented YAML lines)
  // in the spool section.
  void WriteConfig(const std::string& spool_extra = "") {
    WriteServeConfig(config_, {.model = model_,
                               .state = state_,
                               .spool_extra = spool_extra,
                               .after_spool = "engine:\n  kv_cache_memory: 64MiB\n"});
  }

  // Starts the daemon and waits until it serves. `env` ("NAME=value") is set for it alone.
  void Start(const std::vector<std::string>& env = {}) {
    for (const std::string& e : env) ::putenv(const_cast<char*>(Keep(e)));
    pid_ = SpawnLlmq({"serve", "--config", config_}, dir_ + "/serve.out", err_file());
    for (const std::string& e : env) ::unsetenv(e.substr(0, e.find('=')).c_str());
    ASSERT_TRUE(WaitFor([&] { return Log().find("serving") != std::string::npos; }, 30)) << Log();
  }
  // SIGTERM, then its exit status; -1 (after a SIGKILL) when it did not end within a minute.
  int Stop() {
    kill(pid_, SIGTERM);
    int rc = -1;
    if (!ExitedWithin(pid_, 60, &rc)) {
      kill(pid_, SIGKILL);
      WaitExit(pid_);
    }
    pid_ = -1;
    return rc;
  }
  bool Alive() const {
    int st = 0;
    return pid_ > 0 && waitpid(pid_, &st, WNOHANG) == 0;
  }
  // The daemon's peak resident memory (VmHWM), in KiB.
  int64_t HighWaterKb() const {
    std::ifstream st("/proc/" + std::to_string(pid_) + "/status");
    for (std::string l; std::getline(st, l);)
      if (l.rfind("VmHWM:", 0) == 0) return std::stoll(l.substr(6));
    return -1;
  }
  // Prints the daemon's peak RSS for a named case (the corpus's bounded-memory record).
  void PrintPeakRss(const std::string& what) const {
    std::printf("peak RSS %6.1f MiB  %s\n", HighWaterKb() / 1024.0, what.c_str());
  }
  // Whether one line of the log has every one of `parts`.
  bool LogLineHas(const std::vector<std::string>& parts) const {
    std::istringstream in(Log());
    for (std::string l; std::getline(in, l);) {
      bool all = true;
      for (const std::string& p : parts) all = all && l.find(p) != std::string::npos;
      if (all) return true;
    }
    return false;
  }
  std::string failed(const std::string& n = "") const { return state_ + "/failed/" + n; }
  std::string archive(const std::string& n = "") const { return state_ + "/archive/" + n; }

  // Written beside the inbox, renamed in (IN_MOVED_TO).
  void Drop(const std::string& name, const std::string& text) {
    const std::string tmp = Staged(text);
    ASSERT_EQ(::rename(tmp.c_str(), inbox(name).c_str()), 0) << std::strerror(errno);
  }
  // A file with `text` in staging_ (beside the inbox, not in it); its path.
  std::string Staged(const std::string& text) {
    const std::string tmp = staging_ + "/.staging-" + std::to_string(staged_++);
    std::ofstream(tmp, std::ios::binary) << text;
    return tmp;
  }
  bool Exists(const std::string& path) const {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
  }
  // Waits for failed/<name>.reason.txt and the log line that names it (written just after);
  // the reason's text ("" when it never came).
  std::string WaitRefused(const std::string& name, double seconds = 30) {
    const std::string reason = failed(name) + ".reason.txt";
    if (!WaitFor([&] { return Exists(reason); }, seconds)) return "";
    WaitFor([&] { return Log().find("failed/" + Escaped(name) + ": ") != std::string::npos; },
            seconds);
    return ReadText(reason);
  }
  // Waits for outbox/<stem>.summary.json; the custom_ids of <stem>.results.jsonl, each once per
  // line (empty when the job never finished).
  std::multiset<std::string> WaitResults(const std::string& stem, double seconds = 30) {
    std::multiset<std::string> ids;
    if (!WaitFor([&] { return Exists(outbox(stem + ".summary.json")); }, seconds)) return ids;
    for (const nlohmann::json& r : ReadJsonl(outbox(stem + ".results.jsonl")))
      ids.insert(r["custom_id"].get<std::string>());
    return ids;
  }
  std::string staging_ = dir_;  // where Drop writes a file before renaming it in (set by SetUp)
  int staged_ = 0;

 private:
  // putenv keeps the pointer: the strings live as long as the test.
  const char* Keep(const std::string& s) { return kept_.emplace_back(s).c_str(); }
  std::list<std::string> kept_;
};

}  // namespace llmq::testing
