// Helpers shared by the test files: scratch folders, the shared models, running the real binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace llmq::testing {

// This process's scratch root: ctest runs each test in its own process, in parallel, so every
// process gets its own folder, removed when the process ends.
inline const std::filesystem::path& TmpRoot() {
  struct Root {
    std::filesystem::path path =
        std::filesystem::path(LLMQ_TEST_TMP) / ("p" + std::to_string(getpid()));
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Root root;
  return root.path;
}

// A fresh, empty scratch folder unique to `name` in this process.
inline std::string TmpDir(const std::string& name) {
  const std::filesystem::path p = TmpRoot() / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// A fresh, empty scratch folder named after the running test.
inline std::string CurrentTestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return TmpDir(std::string(info->test_suite_name()) + "." + info->name());
}

// ../shared/models/<name>, or "" when the shared folder is absent.
inline std::string SharedModel(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(LLMQ_SHARED_DIR) / "models" / name;
  return std::filesystem::exists(p / "config.json") ? p.string() : "";
}

#define LLMQ_SKIP_WITHOUT_SHARED(dir, name)      \
  if ((dir).empty())                             \
  GTEST_SKIP() << "../shared/models/" name       \
                  " is absent; skipping (tests " \
                  "read the shared models, never copy them)"

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs the real llmq binary with `args` (each shell-quoted here), with the environment variables
// `env` ("NAME=value") added, and `stdin_file` as its standard input when set.
inline RunResult RunLlmqWith(const std::vector<std::string>& env,
                             const std::vector<std::string>& args,
                             const std::string& stdin_file = "") {
  static int counter = 0;
  std::filesystem::create_directories(TmpRoot());
  const std::string err_file = (TmpRoot() / ("stderr." + std::to_string(counter++))).string();
  std::string cmd = env.empty() ? "" : "env";
  for (const std::string& e : env) cmd += " " + ShellQuote(e);
  cmd += (cmd.empty() ? "" : " ") + ShellQuote(LLMQ_BINARY);
  for (const std::string& a : args) cmd += " " + ShellQuote(a);
  if (!stdin_file.empty()) cmd += " <" + ShellQuote(stdin_file);
  cmd += " 2>" + ShellQuote(err_file);
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = fopen(err_file.c_str(), "r")) {
    while ((n = fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
    fclose(e);
  }
  std::filesystem::remove(err_file);
  return r;
}

// Starts the real llmq binary with `args` in the background, stdout and stderr to the given files;
// returns its pid (the caller waits for it, or kills it).
inline pid_t SpawnLlmq(const std::vector<std::string>& args, const std::string& out_file,
                       const std::string& err_file) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  FILE* o = freopen(out_file.c_str(), "w", stdout);
  FILE* e = freopen(err_file.c_str(), "w", stderr);
  if (!o || !e) _exit(127);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(LLMQ_BINARY));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(LLMQ_BINARY, argv.data());
  _exit(127);
}

// Waits for `pid`; returns its exit status, or 128 + the signal that ended it.
inline int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A whole file as text ("" when it cannot be read).
inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A JSONL file's lines, parsed (throws on a line that is not JSON).
inline std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Polls `done` every 50 ms for up to `seconds`; whether it became true.
inline bool WaitFor(const std::function<bool()>& done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

inline RunResult RunLlmq(std::initializer_list<std::string> args) {
  return RunLlmqWith({}, std::vector<std::string>(args));
}

}  // namespace llmq::testing
