// The status page of a real `llmq serve` (issue 29): GET / on metrics.http_port shows the queue
// as `llmq status --json` does, GET /reports/<job id> the job's report from outbox/ and nothing
// else; in headless Chromium the page follows a running job by itself (done-when 3).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "jobs/store.h"
#include "tests/browser.h"
#include "tests/report_check.h"
#include "tests/serve_fixture.h"
#include "tests/status_page_check.h"
#include "tests/test_sockets.h"

namespace llmq::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kDay = 1767225600;  // 2026-01-01T00:00:00Z (the daemon runs with TZ=UTC)

class StatusPageServeTest : public ServeFixture {
 protected:
  void SetUp() override {
    ServeFixture::SetUp();
    // The browser's oracle wipes CurrentTestDir(): the daemon gets a folder of its own.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = TmpDir(std::string(info->test_suite_name()) + "." + info->name() + ".serve");
    state_ = dir_ + "/state";
    config_ = dir_ + "/llmq.yaml";
    staging_ = dir_;
    port_ = FreePort();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    unsetenv("TZ");
    ServeFixture::TearDown();
  }

  // The config: the page and the metrics rendered every 0.2 s, `engine` and `serve` (indented YAML
  // lines) in their sections.
  void WriteTestConfig(const std::string& engine, const std::string& serve) {
    std::ofstream(config_) << "model:\n  path: " << model_ << "\nspool:\n  state_dir: " << state_
                           << "\n  settle_seconds: 0.2\n  rescan_seconds: 1\n  drain_seconds: 0\n"
                              "  commit_interval_ms: 10\nmetrics:\n  interval_seconds: 0.2\n"
                              "  http_port: "
                           << port_ << "\nengine:\n  kv_cache_memory: 64MiB\n"
                           << engine << "serve:\n"
                           << serve;
  }

  std::string Get(const std::string& target) {
    return Http(port_, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  }
  std::string Page() { return BodyOf(Get("/")); }
  std::string Url(const std::string& target) const {
    return "http://127.0.0.1:" + std::to_string(port_) + target;
  }

  // The job's committed results (completed + failed), read from queue.db; -1 while unknown.
  int64_t Done(const std::string& name) {
    if (!queue_ && !jobs::Store::Open(state_ + "/queue.db", &queue_).ok()) return -1;
    std::vector<jobs::JobRecord> all;
    if (!queue_->ListJobs(&all).ok()) return -1;
    for (const jobs::JobRecord& j : all)
      if (j.name == name) return j.completed + j.failed;
    return -1;
  }

  int port_ = 0;
  std::unique_ptr<jobs::Store> queue_;
};

// "3/40 done (...)": 3.
int64_t DoneIn(const std::string& progress_text) {
  return std::strtoll(progress_text.c_str(), nullptr, 10);
}

// A job of `n` completions of `tokens` tokens each (EOS ignored: the work is known).
std::string Job(int n, int tokens) {
  std::string text;
  for (int i = 0; i < n; ++i)
    text += CompletionLine(
        "r" + std::to_string(i),
        "Summarize document " + std::to_string(i) + " of the night for the morning", tokens);
  return text;
}

TEST_F(StatusPageServeTest, ShowsTheQueueAsLlmqStatusDoesAndServesItsReports) {
  WriteTestConfig("", "  run_windows: []\n");
  Start();
  Drop(
      "night.jsonl",
      Job(6, 4) +
          R"({"custom_id": "bad", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": -1}})"
          "\n");
  ASSERT_TRUE(Finalized("night", 60)) << Log();
  const json status = StatusOf("night.jsonl");
  ASSERT_TRUE(status.contains("id")) << status << Log();
  const std::string id = status["id"].get<std::string>(), k = "job." + id + ".";

  // Once the page shows the finished job, its numbers are llmq status'.
  std::string page;
  ASSERT_TRUE(WaitFor(
      [&] {
        page = Page();
        return page.find("<a href=\"/reports/" + id + "\">report</a>") != std::string::npos;
      },
      30))
      << page;
  ExpectSoundStatusPage(page);
  const auto n = ReportNumbers(page);
  EXPECT_EQ(n.at(k + "total"), 7);
  EXPECT_EQ(n.at(k + "total"), status["request_counts"]["total"].get<double>());
  EXPECT_EQ(n.at(k + "completed"), status["request_counts"]["completed"].get<double>());
  EXPECT_EQ(n.at(k + "failed"), status["request_counts"]["failed"].get<double>());
  EXPECT_EQ(n.at(k + "failed"), 1);
  EXPECT_DOUBLE_EQ(n.at(k + "tokens_per_second"), status["tokens_per_second"].get<double>());
  EXPECT_DOUBLE_EQ(n.at(k + "cache_hit_rate"), status["cache_hit_rate"].get<double>());
  EXPECT_DOUBLE_EQ(n.at(k + "eta_seconds"), 0);
  EXPECT_EQ(n.at("daemon.tokens_generated"), 6 * 4) << "this daemon generated the job's tokens";
  EXPECT_NE(page.find("<section id=\"finished\">"), std::string::npos);

  const std::string response = Get("/");
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response.substr(0, 300);
  EXPECT_NE(response.find("\r\nContent-Type: text/html; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(response.find("\r\nContent-Security-Policy: default-src 'none'"), std::string::npos);

  // The report, byte for byte as FinalizeJob wrote it.
  const std::string report = Get("/reports/" + id);
  EXPECT_EQ(report.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << report.substr(0, 300);
  EXPECT_EQ(BodyOf(report), ReadText(outbox("night.report.html")));
  EXPECT_EQ(report.find("script-src"), std::string::npos) << "a report runs no script";

  // Nothing else: no path, no other name, no other method.
  for (const std::string& bad :
       {std::string("/reports/batch_0123456789abcdef"), std::string("/reports/../queue.db"),
        std::string("/reports/%2e%2e%2fqueue.db"), std::string("/reports/"),
        std::string("/reports/" + id + "/x"), std::string("/reports"), std::string("/queue.db"),
        std::string("/outbox/night.report.html")})
    EXPECT_EQ(Get(bad).rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << bad;
  EXPECT_EQ(Http(port_, "POST /reports/" + id + " HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Http(port_, "POST / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  // The report swapped for a link to the queue: refused, never followed.
  fs::rename(outbox("night.report.html"), dir_ + "/kept.html");
  fs::create_symlink(state_ + "/queue.db", outbox("night.report.html"));
  const std::string linked = Get("/reports/" + id);
  EXPECT_EQ(linked.rfind("HTTP/1.1 500", 0), 0u) << linked.substr(0, 300);
  EXPECT_EQ(linked.find("SQLite format"), std::string::npos);
  fs::remove(outbox("night.report.html"));
  const std::string gone = Get("/reports/" + id);
  EXPECT_EQ(gone.rfind("HTTP/1.1 404", 0), 0u) << gone.substr(0, 300);
  EXPECT_NE(gone.find("llmq report " + id), std::string::npos) << gone;
  EXPECT_EQ(Stop(), 0) << Log();
}

// Done-when 3: "the status page shows a running job's progress changing between two screenshots
// taken 5 s apart in headless Chromium". The page refreshes itself every metrics.interval_seconds
// (5 s by default), the pace at which the daemon renders it: by default, two screenshots 5 s apart
// show the progress a job made in between. Here the interval is 0.2 s and no wait is timed: the
// job is held mid-way by a run window that closes on a step-driven clock (LLMQ_TEST_CLOCK, 1 s per
// engine step), Chromium takes the first screenshot of the page showing the held progress, the
// test then lifts the window (SIGHUP with no windows), and the browser waits until the page's own
// refresh changes the job's progress text before taking the second.
TEST_F(StatusPageServeTest, ChromiumSeesARunningJobsProgressChange) {
  if (const std::string missing = MissingBrowser(); !missing.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(missing);
  // One request at a time (about 17 steps each): the 120 s of window left at the start hold a
  // few of the 40.
  WriteTestConfig("  max_num_seqs: 1\n", "  run_windows: [\"00:00-01:00\"]\n");
  char clock[160];
  std::snprintf(
      clock, sizeof clock, "%.3f@%.3fx1,step=1,file=%s/clock", kDay + 3480,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      dir_.c_str());
  setenv("TZ", "UTC", 1);
  Start({std::string("LLMQ_TEST_CLOCK=") + clock});
  Drop("long.jsonl", Job(40, 16));
  ASSERT_TRUE(WaitFor(
      [&] {
        return LogLineHas({"outside the run windows", "drain"});
      },
      120))
      << Log();
  const std::string id = StatusOf("long.jsonl")["id"].get<std::string>();
  // Held: the page shows what the queue holds, part of the job.
  int64_t held = -1;
  std::string page;
  ASSERT_TRUE(WaitFor(
      [&] {
        page = Page();
        held = Done("long.jsonl");
        const auto n = ReportNumbers(page);
        const auto shown = n.find("job." + id + ".done");
        return shown != n.end() && shown->second == held;
      },
      30))
      << page;
  ASSERT_GT(held, 0) << Log();
  ASSERT_LT(held, 40) << Log();

  const std::string shot1 = dir_ + "/status-1.png", shot2 = dir_ + "/status-2.png";
  json p;
  ASSERT_TRUE(WatchPage(
      {Url("/"), shot1, true}, "#progress-" + id, shot2,
      [&](const std::string& first) {
        EXPECT_EQ(DoneIn(first), held) << first;
        WriteTestConfig("  max_num_seqs: 1\n", "  run_windows: []\n");
        kill(pid_, SIGHUP);  // the window lifted: the job goes on
      },
      &p));
  const std::string first = p["watch"]["first"], second = p["watch"]["second"];
  EXPECT_EQ(DoneIn(first), held);
  EXPECT_GT(DoneIn(second), held) << first << " -> " << second;
  EXPECT_EQ(p["console_errors"], json::array()) << p["console_errors"];
  EXPECT_EQ(p["page_errors"], json::array()) << p["page_errors"];
  for (const json& u : p["requests"])
    EXPECT_EQ(u.get<std::string>().rfind(Url("/"), 0), 0u) << "asked for " << u;
  EXPECT_GE(p["requests"].size(), 2u) << "the page fetched itself again";
  ASSERT_TRUE(fs::exists(shot1));
  ASSERT_TRUE(fs::exists(shot2));
  EXPECT_NE(ReadText(shot1), ReadText(shot2)) << "two screenshots of the same page";
  EXPECT_NE(p["text"].get<std::string>().find("long.jsonl"), std::string::npos);

  // Finished: the report it links to draws every plot in Chromium, over the same port; and the
  // page reads the same without JavaScript.
  ASSERT_EQ(WaitResults("long", 120).size(), 40u) << Log();
  ASSERT_TRUE(
      WaitFor([&] { return Page().find("href=\"/reports/" + id) != std::string::npos; }, 30));
  json pages;
  ASSERT_TRUE(LoadPages(
      {{Url("/reports/" + id), dir_ + "/report.png", true}, {Url("/"), "", false}}, &pages));
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pages[0]["console_errors"], json::array()) << pages[0]["console_errors"];
  EXPECT_EQ(pages[0]["svgs"], 7);
  EXPECT_EQ(pages[0]["drawn_svgs"], 7) << "a plot the browser draws nothing of";
  EXPECT_EQ(pages[0]["requests"], json::array({Url("/reports/" + id)}));
  EXPECT_NE(pages[1]["text"].get<std::string>().find("40/40 done"), std::string::npos)
      << pages[1]["text"];
  EXPECT_EQ(Stop(), 0) << Log();
}

}  // namespace
}  // namespace llmq::testing
