// Helpers shared by the test files: scratch folders, the shared models, running the real binary.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

// Writes `text` to dir/name (bytes as given) and returns that path.
inline std::string WriteFileIn(const std::string& dir, const std::string& name,
                               const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A fresh, empty scratch folder named after the running test.
inline std::string CurrentTestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return TmpDir(std::string(info->test_suite_name()) + "." + info->name());
}

// ../shared/models/<name>, whether it is there or not (to name what is missing).
inline std::string SharedModelDir(const std::string& name) {
  return (std::filesystem::path(LLMQ_SHARED_DIR) / "models" / name).string();
}

// ../shared/models/<name>, or "" when the shared folder is absent.
inline std::string SharedModel(const std::string& name) {
  const std::string p = SharedModelDir(name);
  return std::filesystem::exists(std::filesystem::path(p) / "config.json") ? p : "";
}

// Whether a test whose reference is missing fails instead of skipping: LLMQ_REQUIRE_REFERENCES=1
// (.ci/run sets it, so that CI cannot pass by skipping what it never ran). References are what a
// checkout is meant to have beside it: the shared models (../shared, read, never copied), node and
// the npm oracles (scripts/bootstrap), tokenizer and template files. A GPU, root or an instruction
// set are the machine's, not references: tests without them still skip.
inline bool RequireReferences() {
  const char* v = std::getenv("LLMQ_REQUIRE_REFERENCES");
  return v != nullptr && std::string_view(v) == "1";
}

// Ends the test function it is in because the reference `what` (a string naming it: a path, a
// tool, and how to get it) is missing: a skip, or a failure under LLMQ_REQUIRE_REFERENCES=1.
#define LLMQ_SKIP_OR_FAIL_MISSING(what)                                                   \
  do {                                                                                    \
    const std::string llmq_missing_ = (what);                                             \
    if (::llmq::testing::RequireReferences())                                             \
      GTEST_FAIL() << "missing reference (LLMQ_REQUIRE_REFERENCES=1): " << llmq_missing_; \
    else                                                                                  \
      GTEST_SKIP() << llmq_missing_;                                                      \
  } while (0)

// The file or folder `file` (a string or a std::filesystem::path), or LLMQ_SKIP_OR_FAIL_MISSING.
#define LLMQ_SKIP_WITHOUT_FILE(file)                                 \
  do {                                                               \
    const std::filesystem::path llmq_path_ = (file);                 \
    if (!std::filesystem::exists(llmq_path_))                        \
      LLMQ_SKIP_OR_FAIL_MISSING(llmq_path_.string() + " is absent"); \
  } while (0)

// `dir` is SharedModel(name): "" when ../shared/models/<name> is absent.
#define LLMQ_SKIP_WITHOUT_SHARED(dir, name)                                                    \
  do {                                                                                         \
    if ((dir).empty())                                                                         \
      LLMQ_SKIP_OR_FAIL_MISSING(::llmq::testing::SharedModelDir(name) +                        \
                                " is absent (tests read the shared models, never copy them)"); \
  } while (0)

// The llmq binary the tests run: the build's, or $LLMQ_TEST_BINARY (to run a test against another
// build, e.g. to show that a test fails on an older llmq).
inline const char* LlmqBinary() {
  static const char* b = [] {
    const char* env = std::getenv("LLMQ_TEST_BINARY");
    return env != nullptr && *env != '\0' ? env : LLMQ_BINARY;
  }();
  return b;
}

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
  cmd += (cmd.empty() ? "" : " ") + ShellQuote(LlmqBinary());
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

// In a forked child: becomes the real llmq binary with `args` (exit status 127 when it cannot).
[[noreturn]] inline void ExecLlmq(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(LlmqBinary()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(LlmqBinary(), argv.data());
  _exit(127);
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
  ExecLlmq(args);
}

// As SpawnLlmq, with stderr to a pipe whose read end is returned in `*err_fd` (close-on-exec;
// the caller reads it, to follow what the run reports as it goes, and closes it): end of file
// once the run has exited. -1 (and no process) when the pipe cannot be made.
inline pid_t SpawnLlmqPiped(const std::vector<std::string>& args, const std::string& out_file,
                            int* err_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid != 0) {
    close(fds[1]);
    if (pid < 0) close(fds[0]);
    *err_fd = pid < 0 ? -1 : fds[0];
    return pid;
  }
  // Descriptors, not freopen: that would flush the parent's buffered stdout a second time.
  const int o = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (o < 0 || dup2(o, STDOUT_FILENO) < 0 || dup2(fds[1], STDERR_FILENO) < 0) _exit(127);
  ExecLlmq(args);  // (dup2 clears close-on-exec on the copies)
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

// Output lines by their custom_id.
inline std::map<std::string, nlohmann::json> ByCustomId(const std::vector<nlohmann::json>& lines) {
  std::map<std::string, nlohmann::json> by_id;
  for (const nlohmann::json& o : lines) by_id[o["custom_id"].get<std::string>()] = o;
  return by_id;
}

// Polls `done` every `poll_ms` until it holds or `seconds` have passed; its last answer.
inline bool WaitFor(const std::function<bool()>& done, double seconds, int poll_ms = 50) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return done();
}

// Whether an output line reports a failure: a line refused as OpenAI's API refuses a request (its
// HTTP 400 response) or a failure outside HTTP (top-level "error").
inline bool IsErrorLine(const nlohmann::json& o) {
  const auto e = o.find("error"), r = o.find("response");
  return (e != o.end() && !e->is_null()) ||
         (r != o.end() && r->is_object() && r->value("status_code", 0) != 200);
}

// The message of an error output line (response.body.error.message of a refused line,
// error.message of a failure outside HTTP); "" for a successful line.
inline std::string ErrorMessage(const nlohmann::json& o) {
  const auto e = o.find("error"), r = o.find("response");
  if (e != o.end() && e->is_object()) return e->at("message").get<std::string>();
  if (r != o.end() && r->is_object() && r->value("status_code", 0) != 200)
    return r->at("body").at("error").at("message").get<std::string>();
  return "";
}

// An output line without what legitimately differs between two runs of the same job: ids, the
// creation time and how much of the prompt happened to be cached.
inline nlohmann::json Comparable(nlohmann::json o) {
  o.erase("id");
  if (o["response"].is_object()) {
    nlohmann::json& r = o["response"];
    r.erase("request_id");
    if (r["status_code"] != 200) return o;  // a refused line's body: its error
    r["body"].erase("id");
    r["body"].erase("created");
    r["body"]["usage"]["prompt_tokens_details"].erase("cached_tokens");
  }
  return o;
}

// `count` requests behind shared instructions: greedy and seeded sampling, chat and completions,
// some with n = 2; a fifth with a JSON schema and a fifth with response_format json_object
// (structured outputs); a few bad lines, among them schemas that cannot be enforced.
inline void WriteMixedJob(const std::string& path, int count) {
  std::ofstream in(path);
  const std::string rules = "Summarize the document in one sentence and keep names as written. ";
  for (int i = 0; i < count; ++i) {
    nlohmann::json body{{"max_tokens", 4 + i % 5}, {"temperature", i % 2 ? 0.8 : 0.0}};
    if (i % 401 == 17) {
      if (i % 802 == 17) {
        in << "{\"custom_id\": \"bad-" << i << "\", \"method\": \"POST\"}\n";
        continue;
      }
      // A schema that cannot be enforced: refused, naming the keyword and its pointer.
      body["response_format"] = {
          {"type", "json_schema"},
          {"json_schema",
           {{"name", "tags"},
            {"schema", {{"type", "array"}, {"items", {{"type", "string"}, {"uniqueItems", 1}}}}}}}};
    }
    if (i % 2) body["seed"] = 1000 + i;
    if (i % 7 == 3) body["n"] = 2;
    // Structured outputs (issue 24): a schema, any JSON object, beside unconstrained requests.
    if (i % 5 == 1) {
      // Room for the whitespace a model with random weights strews between the tokens (bounded:
      // engine/structured/json_schema.h): half of them may finish their document.
      body["max_tokens"] = i % 10 == 1 ? 40 : 12 + i % 7;
      body["response_format"] = {
          {"type", "json_schema"},
          {"json_schema",
           {{"name", "doc"},
            {"schema",
             {{"type", "object"},
              {"properties",
               {{"label", {{"enum", {"yes", "no", "unclear"}}}},
                {"score", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}},
              {"required", {"label", "score"}},
              {"additionalProperties", false}}}}}};
    } else if (i % 5 == 2) {
      body["max_tokens"] = 10;
      body["response_format"] = {{"type", "json_object"}};
    }
    if (i % 3 == 0) {
      body["prompt"] = rules + "Document " + std::to_string(i * 7919 % 10007) + ".";
    } else {
      body["messages"] = {{{"role", "system"}, {"content", rules}},
                          {{"role", "user"}, {"content", "Document " + std::to_string(i)}}};
    }
    in << nlohmann::json{{"custom_id", "doc-" + std::to_string(i)},
                         {"method", "POST"},
                         {"url", i % 3 == 0 ? "/v1/completions" : "/v1/chat/completions"},
                         {"body", body}}
              .dump()
       << "\n";
  }
}

inline RunResult RunLlmq(std::initializer_list<std::string> args) {
  return RunLlmqWith({}, std::vector<std::string>(args));
}

}  // namespace llmq::testing
