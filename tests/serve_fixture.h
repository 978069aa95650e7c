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

// A good completions line (2 tokens, EOS ignored: the work is known), with its newline.
inline std::string GoodLine(const std::string& id, int max_tokens = 2) {
  return nlohmann::json{
             {"custom_id", id},
             {"method", "POST"},
             {"url", "/v1/completions"},
             {"body",
              {{"prompt", "Summarize: " + id}, {"max_tokens", max_tokens}, {"ignore_eos", true}}}}
             .dump() +
         "\n";
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

class ServeFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = CurrentTestDir();
    staging_ = dir_;
    model_ = dir_ + "/model";
    ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"}).exit_code,
              0);
    state_ = dir_ + "/state";
    config_ = dir_ + "/llmq.yaml";
    WriteConfig();
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      WaitExit(pid_);
    }
  }

  // The config: a short settle time and rescan period, and `spool_extra` (indented YAML lines)
  // in the spool section.
  void WriteConfig(const std::string& spool_extra = "") {
    std::ofstream(config_) << "model:\n  path: " << model_ << "\nspool:\n  state_dir: " << state_
                           << "\n  settle_seconds: 0.2\n  rescan_seconds: 1\n  drain_seconds: 5\n"
                              "  commit_interval_ms: 10\n"
                           << spool_extra << "engine:\n  kv_cache_memory: 64MiB\n";
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
    const bool ended = WaitFor(
        [&] {
          int st = 0;
          if (waitpid(pid_, &st, WNOHANG) != pid_) return false;
          rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
          return true;
        },
        60);
    if (!ended) {
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
  std::string Log() const { return ReadText(err_file()); }
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
  std::string err_file() const { return dir_ + "/serve.err"; }
  std::string inbox(const std::string& n = "") const { return state_ + "/inbox/" + n; }
  std::string outbox(const std::string& n = "") const { return state_ + "/outbox/" + n; }
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
  std::string dir_, model_, state_, config_;
  std::string staging_ = dir_;  // where Drop writes a file before renaming it in (set by SetUp)
  pid_t pid_ = -1;
  int staged_ = 0;

 private:
  // putenv keeps the pointer: the strings live as long as the test.
  const char* Keep(const std::string& s) { return kept_.emplace_back(s).c_str(); }
  std::list<std::string> kept_;
};

}  // namespace llmq::testing
