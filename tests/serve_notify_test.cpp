// `llmq serve` and systemd's notify protocol (issue 8, done-when 2), on the real binary: the test
// owns the NOTIFY_SOCKET (an abstract AF_UNIX datagram socket) and gives WATCHDOG_USEC, and checks
// READY=1 after start-up, STATUS= updates while a job runs, WATCHDOG=1 at least every half
// interval, RELOADING=1 (with MONOTONIC_USEC) then READY=1 on SIGHUP, STOPPING=1 on SIGTERM; and
// that a stalled engine step (LLMQ_TEST_STALL_STEP_MS, a test-only hook) stops the pings. Also the
// Prometheus metrics file (done-when 5): valid by the format's rules, counters as `llmq status`.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/run_windows.h"
#include "tests/serve_fixture.h"
#include "tests/test_sockets.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kWatchdogUsec = 1000000;

std::string Job(int count, int max_tokens) {
  std::string s;
  for (int i = 0; i < count; ++i)
    s += CompletionLine("r" + std::to_string(i), "Count to " + std::to_string(i), max_tokens);
  return s;
}

class ServeNotifyTest : public ServeCase {
 protected:
  void SetUp() override {
    ServeCase::SetUp();
    WriteServeConfig(config_, {.model = model_, .state = state_, .engine = "  max_num_seqs: 4\n"});
    ASSERT_TRUE(sock_.bound());
  }

  // Starts `llmq serve` with NOTIFY_SOCKET and WATCHDOG_USEC (and `extra` NAME=VALUE) set.
  void Start(const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"NOTIFY_SOCKET", sock_.address()}, {"WATCHDOG_USEC", std::to_string(kWatchdogUsec)}};
    env.insert(env.end(), extra.begin(), extra.end());
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    pid_ = SpawnLlmq({"serve", "--config", config_}, dir_ + "/serve.out", err_file());
    for (const auto& [k, v] : env) unsetenv(k.c_str());
  }

  int Stop() {
    kill(pid_, SIGTERM);
    const int rc = WaitExit(pid_);
    pid_ = -1;
    return rc;
  }

  NotifySocket sock_;
};

TEST_F(ServeNotifyTest, ReadyStatusWatchdogReloadAndStopping) {
  Start();
  const int ready = sock_.WaitFor("READY=1", 0, 30);
  ASSERT_GE(ready, 0) << ReadText(err_file());
  // Ready only once the spool is scanned and served.
  EXPECT_NE(ReadText(err_file()).find("serving"), std::string::npos);

  const size_t before_job = sock_.size();
  // Big enough to run for a few seconds: STATUS= is sent at most once a second.
  Drop("a.jsonl", Job(2048, 64));
  // STATUS= lines while the job runs: more than one, with the job's progress.
  std::set<std::string> statuses;
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const auto& m : sock_.messages())
          if (m.text.rfind("STATUS=1 job(s), ", 0) == 0) statuses.insert(m.text);
        return statuses.size() >= 2;
      },
      60))
      << "distinct STATUS= lines while the job ran: " << statuses.size();
  EXPECT_GE(sock_.Find("/2048 requests done", before_job), 0);
  ASSERT_TRUE(Finalized("a", 300)) << ReadText(err_file());

  // SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1.
  const size_t before_hup = sock_.size();
  kill(pid_, SIGHUP);
  const int reloading = sock_.WaitFor("RELOADING=1", before_hup, 10);
  ASSERT_GE(reloading, 0);
  EXPECT_NE(sock_.messages()[reloading].text.find("\nMONOTONIC_USEC="), std::string::npos);
  const int back = sock_.WaitFor("READY=1", reloading + 1, 10);
  ASSERT_GE(back, 0);

  // WATCHDOG=1 while the job ran, and idle after the reload (how often, and when not:
  // tests/watchdog_test.cpp).
  EXPECT_GT(sock_.Count("WATCHDOG=1", ready, static_cast<int>(before_hup)), 0);
  EXPECT_TRUE(WaitFor([&] { return sock_.Count("WATCHDOG=1", back) >= 2; }, 10));
  const size_t before_stop = sock_.size();

  EXPECT_EQ(Stop(), 0) << ReadText(err_file());
  EXPECT_GE(sock_.Find("STOPPING=1", before_stop), 0);
}

// A stalled engine step stops the pings: ServeWatchdogTest (serve_state_test.cpp) and
// tests/watchdog_test.cpp.

// --- The metrics textfile (issue 8, done-when 5): a small parser of the Prometheus text format's
// rules, and the counters against `llmq status --json`.

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family -> type
  std::vector<Sample> samples;
  std::string error;  // the first rule broken; empty when valid

  double Get(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const Sample& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    return -1;
  }
};

bool ValidName(const std::string& s, bool colon) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && !(colon && c == ':'))
      return false;
  return true;
}

bool ParseValue(const std::string& s, double* v) {
  if (s == "+Inf" || s == "-Inf" || s == "NaN") {
    *v = s == "NaN" ? NAN : (s[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// The family a sample belongs to: its name less a histogram's suffix when that family is one.
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      if (auto it = types.find(base); it != types.end() && it->second == "histogram") return base;
    }
  }
  return name;
}

Exposition ParseExposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  std::set<std::string> done;  // families whose samples have ended (samples must be contiguous)
  std::string current;
  int n = 0;
  auto fail = [&](const std::string& why) {
    if (e.error.empty()) e.error = "line " + std::to_string(n) + ": " + why + ": " + line;
  };
  if (text.empty() || text.back() != '\n') e.error = "does not end with a newline";
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream w(line.substr(1));
      std::string kw, name, rest;
      w >> kw >> name;
      std::getline(w >> std::ws, rest);
      if (kw == "TYPE") {
        if (!ValidName(name, true)) fail("bad metric name");
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped")
          fail("bad type");
        if (e.types.count(name)) fail("second TYPE line");
        if (done.count(name) || current == name) fail("TYPE after the family's samples");
        e.types[name] = rest;
      } else if (kw == "HELP") {
        if (!ValidName(name, true)) fail("bad metric name");
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!ValidName(s.name, true)) fail("bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          fail("bad label");
          break;
        }
        const std::string key = line.substr(i, eq - i);
        if (!ValidName(key, false) || key.rfind("__", 0) == 0) fail("bad label name");
        std::string val;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          val += line[j];
        }
        if (j >= line.size()) {
          fail("unterminated label value");
          break;
        }
        if (s.labels.count(key)) fail("duplicate label");
        s.labels[key] = val;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) fail("unterminated labels");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') fail("no value");
    std::istringstream w(line.substr(std::min(i, line.size())));
    std::string value, timestamp, extra;
    w >> value >> timestamp >> extra;
    if (!ParseValue(value, &s.value)) fail("bad value");
    if (!extra.empty()) fail("trailing text");
    const std::string family = FamilyOf(s.name, e.types);
    if (!e.types.count(family)) fail("sample before its TYPE line");
    if (family != current) {
      if (done.count(family)) fail("the family's samples are not together");
      if (!current.empty()) done.insert(current);
      current = family;
    }
    const std::string type = e.types.count(family) ? e.types.at(family) : "";
    if (type == "counter" && (s.name.size() < 6 || s.name.substr(s.name.size() - 6) != "_total"))
      fail("a counter's name must end in _total");
    if (type == "counter" && !(s.value >= 0)) fail("negative counter");
    e.samples.push_back(std::move(s));
  }
  // Histograms: buckets ascending in le, cumulative, the last le="+Inf" equal to _count.
  for (const auto& [family, type] : e.types) {
    if (type != "histogram") continue;
    double last_le = -INFINITY, last_count = 0, inf = -1;
    int buckets = 0;
    for (const Sample& s : e.samples) {
      if (s.name != family + "_bucket") continue;
      ++buckets;
      double le = 0;
      if (!s.labels.count("le") || !ParseValue(s.labels.at("le"), &le)) {
        e.error += " " + family + ": a bucket without le";
        continue;
      }
      if (le <= last_le) e.error += " " + family + ": le not ascending";
      if (s.value < last_count) e.error += " " + family + ": buckets not cumulative";
      last_le = le;
      last_count = s.value;
      if (std::isinf(le)) inf = s.value;
    }
    if (buckets == 0 || !std::isinf(last_le)) e.error += " " + family + ": no +Inf bucket last";
    if (inf != e.Get(family + "_count")) e.error += " " + family + ": +Inf != _count";
    if (e.Get(family + "_sum") < 0) e.error += " " + family + ": no _sum";
  }
  return e;
}

TEST(PrometheusParserTest, RejectsWhatTheFormatForbids) {
  EXPECT_EQ(ParseExposition("# TYPE a_total counter\na_total 1\n").error, "");
  EXPECT_NE(ParseExposition("a_total 1\n").error, "");                            // no TYPE
  EXPECT_NE(ParseExposition("# TYPE a counter\na 1\n").error, "");                // no _total
  EXPECT_NE(ParseExposition("# TYPE a gauge\na{x=1} 1\n").error, "");             // unquoted
  EXPECT_NE(ParseExposition("# TYPE a gauge\na 1\n# TYPE a gauge\n").error, "");  // TYPE twice
  EXPECT_NE(ParseExposition("# TYPE 1a gauge\n1a 1\n").error, "");                // bad name
  EXPECT_NE(ParseExposition("# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                            "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n")
                .error,
            "");  // not cumulative
  EXPECT_NE(ParseExposition("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n").error,
            "");  // no +Inf
}

TEST_F(ServeNotifyTest, TheMetricsFileIsValidAndAgreesWithStatus) {
  std::ofstream(config_, std::ios::app) << "metrics:\n  interval_seconds: 0.3\n";
  Start();
  ASSERT_GE(sock_.WaitFor("READY=1", 0, 30), 0) << ReadText(err_file());
  const std::string prom = state_ + "/metrics/llmq.prom";
  // Written while serving, not only at exit.
  ASSERT_TRUE(WaitFor([&] { return fs::exists(prom); }, 10));
  EXPECT_EQ(ParseExposition(ReadText(prom)).error, "");
  // One bad line (a failed request) and one prompt twice (a cache hit).
  std::string job = Job(6, 8) + "{\"custom_id\": \"bad\"}\n";
  Drop("m.jsonl", job);
  ASSERT_TRUE(Finalized("m", 60)) << ReadText(err_file());
  EXPECT_EQ(Stop(), 0) << ReadText(err_file());  // the last write is at exit

  const std::string text = ReadText(prom);
  const Exposition e = ParseExposition(text);
  ASSERT_EQ(e.error, "") << text;
  const auto r = RunLlmqWith({}, {"status", "--json", "--config", config_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json jobs = json::parse(r.out);
  ASSERT_EQ(jobs.size(), 1u) << r.out;
  const json& j = jobs[0];
  EXPECT_EQ(e.Get("llmq_requests_total", {{"status", "completed"}}),
            j["request_counts"]["completed"].get<double>());
  EXPECT_EQ(e.Get("llmq_requests_total", {{"status", "failed"}}),
            j["request_counts"]["failed"].get<double>());
  EXPECT_EQ(j["request_counts"]["completed"].get<int>(), 6);
  EXPECT_EQ(e.Get("llmq_completion_tokens_total"), j["completion_tokens"].get<double>());
  EXPECT_NEAR(e.Get("llmq_cache_hit_ratio"), j["cache_hit_rate"].get<double>(), 1e-6);
  EXPECT_EQ(e.Get("llmq_jobs", {{"status", "completed"}}), 1);
  EXPECT_EQ(e.Get("llmq_queue_depth"), 0);
  EXPECT_EQ(e.Get("llmq_prompt_tokens_total"),
            e.Get("llmq_cached_prompt_tokens_total") + e.Get("llmq_computed_prompt_tokens_total"));
  EXPECT_GT(e.Get("llmq_prompt_tokens_total"), 0);
  EXPECT_EQ(e.Get("llmq_time_to_first_token_seconds_count"), 6);
  EXPECT_GT(e.Get("llmq_step_duration_seconds_count"), 0);
  for (const char* state : {"used", "free", "cached"})
    EXPECT_GE(e.Get("llmq_kv_blocks", {{"state", state}}), 0) << state;
  EXPECT_EQ(e.types.at("llmq_step_duration_seconds"), "histogram");
}

// --- Metrics over HTTP (metrics.http_port): a plain socket client.

TEST_F(ServeNotifyTest, MetricsOverHttpAreTheTextfilesExposition) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::ofstream(config_, std::ios::app)
      << "metrics:\n  interval_seconds: 0.3\n  http_port: " << port << "\n";
  Start();
  ASSERT_GE(sock_.WaitFor("READY=1", 0, 30), 0) << ReadText(err_file());
  Drop("m.jsonl", Job(6, 8));
  ASSERT_TRUE(Finalized("m", 60)) << ReadText(err_file());

  // A client that sends nothing (and one that sends half a request) holds nobody up.
  const int idle = Connect(port), half = Connect(port);
  ASSERT_GE(idle, 0);
  ASSERT_GE(half, 0);
  ASSERT_EQ(send(half, "GET /metr", 9, MSG_NOSIGNAL), 9);

  // Idle, two renders are the same: once they count the job, the body is the textfile, byte for
  // byte.
  const std::string prom = state_ + "/metrics/llmq.prom";
  std::string response;
  EXPECT_TRUE(WaitFor(
      [&] {
        response = Http(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        return BodyOf(response) == ReadText(prom) &&
               ParseExposition(BodyOf(response))
                       .Get("llmq_requests_total", {{"status", "completed"}}) == 6;
      },
      10))
      << response;
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("\r\nContent-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(response.find("\r\nContent-Length: " + std::to_string(BodyOf(response).size())),
            std::string::npos);
  const Exposition e = ParseExposition(BodyOf(response));
  EXPECT_EQ(e.error, "");
  EXPECT_EQ(e.Get("llmq_requests_total", {{"status", "completed"}}), 6);
  // A query string is ignored; HTTP/1.0 is answered too.
  EXPECT_EQ(BodyOf(Http(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n")), ReadText(prom));

  // Other paths, other methods, not HTTP, too long.
  EXPECT_EQ(Http(port, "GET /x HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_EQ(Http(port, "GET /metricsx HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  response = Http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(response.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("\r\nAllow: GET\r\n"), std::string::npos) << response;
  EXPECT_EQ(Http(port, "HEAD /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Http(port, "hello\r\n\r\n").rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u);
  response = Http(port, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_EQ(response.rfind("HTTP/1.1 431", 0), 0u) << response.substr(0, 100);

  // The silent ones are closed after the timeout (5 s), with nothing sent.
  EXPECT_EQ(ReadAll(idle), "");
  EXPECT_EQ(ReadAll(half), "");
  close(idle);
  close(half);
  EXPECT_EQ(Stop(), 0) << ReadText(err_file());
  EXPECT_NE(Http(port, "GET /metrics HTTP/1.1\r\n\r\n").find("<cannot connect>"),
            std::string::npos);
}

TEST_F(ServeNotifyTest, MetricsHttpPortInUseIsRefusedAtStart) {
  const HeldPort held;  // a listening socket holds the port
  const int port = held.port();
  ASSERT_GT(port, 0);
  std::ofstream(config_, std::ios::app) << "metrics:\n  http_port: " << port << "\n";
  const auto r = RunLlmqWith({}, {"serve", "--config", config_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("metrics.http_port: cannot listen on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("serving"), std::string::npos) << r.err;
  // Before the model is loaded (issue 23, row 6): with a model that cannot load, the port is
  // still what is refused.
  const auto early =
      RunLlmqWith({}, {"serve", "--config", config_, "--model", dir_ + "/no-such-model"});
  EXPECT_EQ(early.exit_code, 1);
  EXPECT_NE(early.err.find("metrics.http_port: cannot listen"), std::string::npos) << early.err;
  EXPECT_EQ(early.err.find("no-such-model"), std::string::npos) << early.err;
}

// --- Run windows (issue 8, done-when 4): windows a few seconds long, in local time.

std::string Hms(int s) {
  s = (s % kSecondsPerDay + kSecondsPerDay) % kSecondsPerDay;
  char b[16];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return b;
}

TEST_F(ServeNotifyTest, RequestsStartOnlyInsideRunWindowsAndAJobSpansTwo) {
  // Windows [t0+4, t0+7) and [t0+11, t0+90) (seconds of the local day). drain_seconds 0: at the
  // first window's end the running requests are abandoned at once, and must run again (once) in
  // the second.
  std::string config = ReadText(config_);
  config.replace(config.find("drain_seconds: 5"), 16, "drain_seconds: 0");
  std::ofstream(config_) << config;
  const std::time_t t0 = std::time(nullptr);
  const int day = LocalSecondOfDay(t0);
  std::ofstream(config_, std::ios::app)
      << "serve:\n  run_windows: [\"" << Hms(day + 4) << "-" << Hms(day + 7) << "\", \""
      << Hms(day + 11) << "-" << Hms(day + 90) << "\"]\n";
  const auto at = [&](double seconds) {  // sleeps until t0 + seconds (wall clock)
    std::this_thread::sleep_until(std::chrono::system_clock::from_time_t(t0) +
                                  std::chrono::milliseconds(static_cast<int>(seconds * 1000)));
  };
  const auto done = [&]() -> int64_t {
    const auto r = RunLlmqWith({}, {"status", "--json", "--config", config_});
    const json j = json::parse(r.out, nullptr, false);
    if (!j.is_array() || j.empty()) return -1;
    return j[0]["request_counts"]["completed"].get<int64_t>() +
           j[0]["request_counts"]["failed"].get<int64_t>();
  };
  Start();
  ASSERT_GE(sock_.WaitFor("READY=1", 0, 30), 0) << ReadText(err_file());
  // Enough work to outlast the first window's 3 s on a fast machine (2,048 requests no longer
  // did once the CPU backend got faster), little enough to end in the second's 79 s on a slow one.
  constexpr int kRequests = 8192;
  Drop("w.jsonl", Job(kRequests, 64));
  at(3.5);
  EXPECT_EQ(done(), 0) << "accepted before the first window, but nothing started";
  at(8);  // the first window has closed, what was running abandoned
  const int64_t first = done();
  EXPECT_GT(first, 0) << ReadText(err_file());
  EXPECT_LT(first, kRequests) << "the job is meant to span two windows";
  at(10.5);
  EXPECT_EQ(done(), first) << "nothing starts between the windows";
  ASSERT_TRUE(Finalized("w", 120)) << ReadText(err_file());
  // Every request answered once, none twice, none an error.
  std::set<std::string> ids;
  int lines = 0;
  for (const json& r : ReadJsonl(state_ + "/outbox/w.results.jsonl")) {
    ++lines;
    ids.insert(r["custom_id"].get<std::string>());
    EXPECT_TRUE(r["error"].is_null()) << r.dump();
  }
  EXPECT_EQ(lines, kRequests);
  EXPECT_EQ(ids.size(), static_cast<size_t>(kRequests));
  EXPECT_NE(ReadText(err_file()).find("outside the run windows"), std::string::npos);
  EXPECT_EQ(Stop(), 0) << ReadText(err_file());
}

// Issue 8: `llmq status` shows the run windows the daemon has in effect and where now stands
// against them; SIGHUP reloads serve.run_windows, and the new windows take effect at once.
TEST_F(ServeNotifyTest, StatusShowsTheRunWindowsAndSighupReloadsThem) {
  const std::string base = ReadText(config_);
  const auto set_windows = [&](int from, int to) {  // seconds after now, local time
    const std::time_t t0 = std::time(nullptr);
    const int day = LocalSecondOfDay(t0);
    std::ofstream(config_) << base << "serve:\n  run_windows: [\"" << Hms(day + from) << "-"
                           << Hms(day + to) << "\"]\n";
    return t0;
  };
  const auto status = [&](const std::vector<std::string>& args) {
    std::vector<std::string> a = {"status", "--config", config_};
    a.insert(a.end(), args.begin(), args.end());
    const auto r = RunLlmqWith({}, a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const auto job = [&](const std::string& name) {  // {} while the job is not in the queue
    const auto r = RunLlmqWith({}, {"status", "--config", config_, "--json", name});
    const json j = json::parse(r.out, nullptr, false);
    return r.exit_code == 0 && j.is_object() ? j : json::object();
  };

  // A window that opens in an hour: the job is accepted and waits.
  std::time_t t0 = set_windows(3600, 7200);
  Start();
  ASSERT_GE(sock_.WaitFor("READY=1", 0, 30), 0) << ReadText(err_file());
  Drop("a.jsonl", Job(4, 8));
  ASSERT_TRUE(WaitFor([&] { return job("a.jsonl").contains("run_windows"); }, 10))
      << ReadText(err_file());
  json w = job("a.jsonl")["run_windows"];
  EXPECT_EQ(w["source"], "serve") << w;
  EXPECT_EQ(w["open"], false) << w;
  const int day = LocalSecondOfDay(t0);
  EXPECT_EQ(w["windows"], json::array({FormatRunWindow(
                              {(day + 3600) % kSecondsPerDay, (day + 7200) % kSecondsPerDay})}));
  EXPECT_EQ(w["next_open"], LocalIso8601(t0 + 3600)) << w;
  EXPECT_EQ(w["next_close"], LocalIso8601(t0 + 7200)) << w;
  std::string text = status({});
  EXPECT_NE(text.find("(local time, in effect in llmq serve): outside a window now; next opens "),
            std::string::npos)
      << text;
  EXPECT_TRUE(text.find("(in 59m)") != std::string::npos ||
              text.find("(in 1h00m)") != std::string::npos)
      << text;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(job("a.jsonl")["request_counts"]["completed"], 0) << "nothing starts outside";

  // The config now has a window open until ten minutes from now: after SIGHUP the job runs.
  t0 = set_windows(-60, 600);
  kill(pid_, SIGHUP);
  ASSERT_TRUE(Finalized("a", 60)) << ReadText(err_file());
  EXPECT_EQ(job("a.jsonl")["request_counts"]["completed"], 4);
  w = job("a.jsonl")["run_windows"];
  EXPECT_EQ(w["open"], true) << w;
  EXPECT_EQ(w["next_close"], LocalIso8601(t0 + 600)) << w;
  text = status({});
  EXPECT_NE(text.find("inside a window now, until "), std::string::npos) << text;

  // Reloaded to a window that is closed now: a new job waits at once.
  set_windows(3600, 7200);
  kill(pid_, SIGHUP);
  ASSERT_TRUE(WaitFor([&] { return job("a.jsonl")["run_windows"]["open"] == false; }, 10));
  Drop("b.jsonl", Job(4, 8));
  ASSERT_TRUE(WaitFor([&] { return !job("b.jsonl").empty(); }, 10)) << ReadText(err_file());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(job("b.jsonl")["request_counts"]["completed"], 0) << ReadText(err_file());
  EXPECT_EQ(Stop(), 0) << ReadText(err_file());

  // Stopped: the config's windows, said to be so.
  EXPECT_FALSE(fs::exists(state_ + "/serve.json"));
  text = status({});
  EXPECT_NE(text.find("(local time, from the config; llmq serve is not running): outside"),
            std::string::npos)
      << text;
  EXPECT_EQ(job("b.jsonl")["run_windows"]["source"], "config");
}

// Issue 8: EXTEND_TIMEOUT_USEC= before and during a long model load (LLMQ_TEST_SLOW_LOAD_MS),
// and at once on SIGTERM, then every second while a drain lasts (held up by a 3 s engine step,
// LLMQ_TEST_STALL_STEP_MS).
TEST_F(ServeNotifyTest, ExtendTimeoutDuringALongLoadAndALongDrain) {
  const std::string kLoad = "EXTEND_TIMEOUT_USEC=30000000";  // 30 s, renewed every second
  Start({{"LLMQ_TEST_SLOW_LOAD_MS", "2500"}, {"LLMQ_TEST_STALL_STEP_MS", "3000"}});
  const int ready = sock_.WaitFor("READY=1", 0, 30);
  ASSERT_GE(ready, 0) << ReadText(err_file());
  std::vector<NotifySocket::Message> m = sock_.messages();
  ASSERT_GT(ready, 0);
  EXPECT_EQ(m[0].text, kLoad) << "the first message, before the load";
  int during_load = 0;
  for (int i = 0; i < ready; ++i) during_load += m[i].text == kLoad;
  EXPECT_GE(during_load, 3) << "at the start of the 2.5 s load, then every second";

  Drop("a.jsonl", Job(4, 8));
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadText(err_file()).find("TEST: the engine thread stalls") != std::string::npos;
      },
      30))
      << ReadText(err_file());  // inside the stalled step: the drain lasts
  const size_t before = sock_.size();
  kill(pid_, SIGTERM);
  EXPECT_EQ(WaitExit(pid_), 0) << ReadText(err_file());
  pid_ = -1;
  sock_.Barrier();  // every datagram it sent is read
  m = sock_.messages();
  const int stopping = sock_.Find("STOPPING=1", before);
  ASSERT_GE(stopping, 0);
  const int first = sock_.Find("EXTEND_TIMEOUT_USEC=", stopping);
  ASSERT_GE(first, 0);
  EXPECT_EQ(first, stopping + 1) << "sent with STOPPING=1, not a second later";
  // Started: nothing extended the timeout while it served.
  EXPECT_EQ(sock_.Find("EXTEND_TIMEOUT_USEC=", ready), first);
  // The drain time left (at most drain_seconds, 5) plus 30 s.
  const int64_t usec = std::stoll(m[first].text.substr(m[first].text.find('=') + 1));
  EXPECT_GT(usec, 30000000);
  EXPECT_LE(usec, 35000000);
  int while_stopping = 0;
  for (size_t i = stopping; i < m.size(); ++i)
    while_stopping += m[i].text.rfind("EXTEND_TIMEOUT_USEC=", 0) == 0;
  EXPECT_GE(while_stopping, 3) << "at SIGTERM, then every second of the 2.5 s drain";
  EXPECT_NE(ReadText(err_file()).find("draining"), std::string::npos);
}

TEST_F(ServeNotifyTest, ABadRunWindowIsRefusedAtStart) {
  std::ofstream(config_, std::ios::app) << "serve:\n  run_windows: [\"22:00-6:00\"]\n";
  const auto r = RunLlmqWith({}, {"serve", "--config", config_});
  EXPECT_EQ(r.exit_code, 2);
  // The config's loader names the file, the line (the last) and the key.
  const std::string text = ReadText(config_);
  const auto last_line = std::count(text.begin(), text.end(), '\n');
  EXPECT_NE(r.err.find(config_ + ":" + std::to_string(last_line) +
                       ": serve.run_windows: run window '22:00-6:00': expected HH:MM-HH:MM"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace llmq::testing
