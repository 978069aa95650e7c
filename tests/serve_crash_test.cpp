// `llmq serve` under kill -9: a 2,000-request job (greedy and seeded sampling, chat and
// completions, n = 2, a few bad lines) dropped into inbox/, the daemon killed 20 times at moments
// spread from the first milliseconds after the drop (settling, ingest) through the run to its end
// (the last results, finalize), each kill followed by a restart. In the end every request has
// exactly one result and the outbox files equal an uninterrupted daemon's in every field but ids,
// `created` and `cached_tokens`; the file was accepted once (one job, archived once, never
// refused as a duplicate).
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "jobs/store.h"
#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kRequests = 2000;
constexpr int kBadLines = 5;  // WriteMixedJob: i % 401 == 17

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The names in a folder (dotfiles included: a leftover temporary is worth seeing).
std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.insert(it->path().filename().string());
  return out;
}

// One daemon's state folder and config, started and killed by the test.
class Daemon {
 public:
  Daemon(const std::string& dir, const std::string& model) : dir_(dir) {
    fs::create_directories(dir);
    // Short settle and commit times keep the rounds short; the rescan timer is not needed (every
    // start rescans inbox/).
    WriteServeConfig(config(), {.model = model,
                                .state = state(),
                                .settle_seconds = 0.05,
                                .rescan_seconds = 5,
                                .drain_seconds = 2});
  }
  ~Daemon() { Kill(); }

  // Starts `llmq serve` and waits until it says it is serving (model loaded, store open, inbox
  // watched). Returns false (and kills it) when it does not come up.
  bool Start() {
    ++starts_;
    // The last start's log holds "serving" too: read before the child truncates it, it would
    // pass for this start's (and a SIGTERM then finds no handler yet: exit 143).
    fs::remove(log("err"));
    pid_ = SpawnLlmq({"serve", "--config", config()}, log("out"), log("err"));
    if (WaitFor([&] { return ReadText(log("err")).find("serving") != std::string::npos; }, 30, 2))
      return true;
    Kill();
    return false;
  }
  // SIGKILL; the exit status (128 + 9 unless it died by itself).
  int Kill() { return End(SIGKILL); }
  // SIGTERM and wait; the exit status.
  int Stop() { return End(SIGTERM); }
  // Writes `text` beside the state folder and renames it into inbox/ (IN_MOVED_TO).
  void Drop(const std::string& name, const std::string& text) {
    WriteAndRename(dir_ + "/" + name + ".staging", state() + "/inbox/" + name, text);
  }
  bool Summarized(const std::string& stem) const {
    return fs::exists(state() + "/outbox/" + stem + ".summary.json");
  }
  // The jobs in the store (empty while there is no store).
  // One connection, kept: opening checks the whole file, too slow to poll with.
  std::vector<jobs::JobRecord> Jobs() {
    std::vector<jobs::JobRecord> all;
    if (!store_ && fs::exists(state() + "/queue.db") &&
        !jobs::Store::Open(state() + "/queue.db", &store_).ok())
      store_.reset();
    if (store_) (void)store_->ListJobs(&all);
    return all;
  }
  // Every start's log so far (each start appends to the one before).
  std::string Logs() const { return all_logs_ + ReadText(log("err")); }
  void KeepLog() {
    all_logs_ += "--- start " + std::to_string(starts_) + "\n" + ReadText(log("err"));
  }

  std::string state() const { return dir_ + "/state"; }
  std::string config() const { return dir_ + "/llmq.yaml"; }
  std::string log(const char* what) const { return dir_ + "/serve." + what; }

 private:
  int End(int sig) { return EndProcess(&pid_, sig); }

  std::string dir_;
  pid_t pid_ = -1;
  int starts_ = 0;
  std::unique_ptr<jobs::Store> store_;
  std::string all_logs_;
};

class ServeCrashTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TmpDir("serve_crash");
    model_ = dir_ + "/model";
    MakeTinyModel(model_);
    WriteMixedJob(dir_ + "/job.jsonl", kRequests);
    job_ = ReadText(dir_ + "/job.jsonl");
  }
  static std::string dir_, model_, job_;
};
std::string ServeCrashTest::dir_, ServeCrashTest::model_, ServeCrashTest::job_;

// What must be equal between two daemons' summaries of the same job (timings, cache figures and
// state paths legitimately differ).
json SummaryComparable(const json& s) {
  json o;
  for (const char* k : {"requests", "completed", "failed", "refused", "prompt_tokens",
                        "completion_tokens", "model"})
    o[k] = s[k];
  for (const char* k : {"input", "output", "errors"})
    o[k] = fs::path(s[k].get<std::string>()).filename().string();
  return o;
}

TEST_F(ServeCrashTest, KillNineAtRandomMomentsThenRestartGivesTheUninterruptedOutput) {
  // The uninterrupted run: drop to summary, the daemon already up.
  Daemon ref(dir_ + "/reference", model_);
  ASSERT_TRUE(ref.Start()) << ref.Logs();
  const auto t0 = Clock::now();
  ref.Drop("job.jsonl", job_);
  ASSERT_TRUE(WaitFor([&] { return ref.Summarized("job"); }, 120, 5)) << ref.Logs();
  const double run_seconds = Since(t0);
  ASSERT_EQ(ref.Stop(), 0) << ref.Logs();
  const std::string ref_out = ref.state() + "/outbox/job";
  const auto ref_results = ReadJsonl(ref_out + ".results.jsonl");
  const auto ref_errors = ReadJsonl(ref_out + ".errors.jsonl");
  ASSERT_EQ(ref_results.size(), size_t{kRequests - kBadLines});
  ASSERT_EQ(ref_errors.size(), size_t{kBadLines});
  const json ref_summary = json::parse(ReadText(ref_out + ".summary.json"));
  EXPECT_EQ(ref_summary["refused"], kBadLines) << ref_summary.dump(2);

  Daemon d(dir_ + "/killed", model_);
  std::mt19937 rng(20240611);
  auto uniform = [&](double a, double b) {
    return std::uniform_real_distribution<double>(a, b)(rng);
  };
  int64_t kept = 0;  // results committed so far: never fewer after a kill
  int interrupted = 0, before_job = 0, in_run = 0, in_finalize = 0, after_done = 0;
  std::string moments;
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(d.Start()) << d.Logs();
    const auto start = Clock::now();
    if (round == 0) d.Drop("job.jsonl", job_);
    // Where this round's kill lands:
    //   rounds 0-3: the first 150 ms after the drop / the restart (settling, ingest, the move to
    //     archive/, the first steps);
    //   rounds 4-15: at a random point of the twelfth of the job that is this round's slice;
    //   rounds 16-19: near the end: when at most a few dozen results are missing, or right after
    //     the last one is committed (finalize: results, errors, summary, the status).
    std::string how;
    if (round < 4) {
      const double at = round == 0 ? uniform(0.0, 0.06) : uniform(0.0, 0.15);
      std::this_thread::sleep_for(std::chrono::duration<double>(at));
      how = "at " + std::to_string(at);
    } else if (round < 16) {
      // A random point of a slice of the job (rounds 4..15 cover it up to ~92%), then a random
      // few milliseconds more: sleeping blindly would mostly hit restarts and re-prefills.
      const double part = (round - 4 + uniform(0, 1)) / 13;
      const double extra = uniform(0.0, 0.03);
      WaitFor(
          [&] {
            const auto all = d.Jobs();
            return !all.empty() && all[0].completed + all[0].failed >= part * all[0].total;
          },
          3 * run_seconds, 2);
      std::this_thread::sleep_for(std::chrono::duration<double>(extra));
      how = "at " + std::to_string(part) + " +" + std::to_string(extra);
    } else {
      const int64_t missing = round % 2 ? 0 : static_cast<int64_t>(uniform(1, 60));
      WaitFor(
          [&] {
            const auto all = d.Jobs();
            return !all.empty() && all[0].total - all[0].completed - all[0].failed <= missing;
          },
          3 * run_seconds, 2);
      const double extra = uniform(0.0, 0.02);
      std::this_thread::sleep_for(std::chrono::duration<double>(extra));
      how = "missing<=" + std::to_string(missing) + " +" + std::to_string(extra);
    }
    const bool done_before = d.Summarized("job");
    const int status = d.Kill();
    const double lived = Since(start);
    d.KeepLog();
    ASSERT_EQ(status, 128 + SIGKILL) << "round " << round << "\n" << d.Logs();

    const auto all = d.Jobs();
    ASSERT_LE(all.size(), 1u) << "round " << round << ": the file became two jobs\n" << d.Logs();
    const std::set<std::string> inbox = Names(d.state() + "/inbox");
    const std::set<std::string> archive = Names(d.state() + "/archive");
    EXPECT_TRUE(Names(d.state() + "/failed").empty()) << "round " << round << "\n" << d.Logs();
    EXPECT_EQ(inbox.count("job.jsonl") + archive.count("job.jsonl"), 1u)
        << "round " << round << ": the file is in inbox/ or in archive/, never both or neither";
    EXPECT_LE(archive.size(), 1u) << "round " << round;
    if (all.empty()) {
      ++before_job;
      EXPECT_EQ(inbox.count("job.jsonl"), 1u) << "round " << round;
    } else {
      const int64_t now = all[0].completed + all[0].failed;
      EXPECT_GE(now, kept) << "round " << round << ": committed results were lost\n" << d.Logs();
      kept = now;
      if (done_before || all[0].status == jobs::JobStatus::kCompleted)
        ++after_done;
      else if (now == all[0].total)
        ++in_finalize;
      else
        ++in_run;
    }
    ++interrupted;
    moments += " [" + std::to_string(round) + ": " + how + ", lived " + std::to_string(lived) +
               "s, " + std::to_string(kept) + " kept]";
  }
  RecordProperty("moments", moments);
  std::printf(
      "kills: %d before the job was stored, %d while running, %d after the last result "
      "(finalize), %d after the summary; reference run %.2fs\n%s\n",
      before_job, in_run, in_finalize, after_done, run_seconds, moments.c_str());
  EXPECT_GE(in_run, 8) << moments;

  // The last restart finishes the job.
  ASSERT_TRUE(d.Start()) << d.Logs();
  ASSERT_TRUE(WaitFor([&] { return d.Summarized("job"); }, 120, 5)) << d.Logs();
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto all = d.Jobs();
        return all.size() == 1 && all[0].status == jobs::JobStatus::kCompleted;
      },
      10, 5))
      << d.Logs();
  const int stopped = d.Stop();
  d.KeepLog();
  ASSERT_EQ(stopped, 0) << d.Logs();
  d.KeepLog();

  const std::string out = d.state() + "/outbox/job";
  const auto results = ReadJsonl(out + ".results.jsonl");
  const auto errors = ReadJsonl(out + ".errors.jsonl");
  ASSERT_EQ(results.size(), ref_results.size()) << d.Logs();
  ASSERT_EQ(errors.size(), ref_errors.size()) << d.Logs();
  std::set<std::string> custom_ids, ids;
  for (const auto* v : {&results, &errors})
    for (const json& o : *v) {
      EXPECT_TRUE(custom_ids.insert(o["custom_id"].dump()).second) << "twice: " << o.dump();
      EXPECT_TRUE(ids.insert(o["id"].get<std::string>()).second) << "id twice: " << o.dump();
    }
  EXPECT_EQ(custom_ids.size(), size_t{kRequests});
  for (size_t i = 0; i < results.size(); ++i)
    ASSERT_EQ(Comparable(results[i]), Comparable(ref_results[i])) << "results line " << i + 1;
  for (size_t i = 0; i < errors.size(); ++i)
    ASSERT_EQ(Comparable(errors[i]), Comparable(ref_errors[i])) << "errors line " << i + 1;
  const json summary = json::parse(ReadText(out + ".summary.json"));
  EXPECT_EQ(SummaryComparable(summary), SummaryComparable(ref_summary)) << summary.dump(2);

  // Accepted once: one job, completed with every line; the file archived once; nothing refused;
  // the outbox holds this job's three files and nothing else (no leftover temporaries).
  const auto list = RunLlmqWith({}, {"list", "--json", "--config", d.config()});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const json jobs = json::parse(list.out);
  ASSERT_EQ(jobs.size(), 1u) << list.out;
  EXPECT_EQ(jobs[0]["status"], "completed");
  EXPECT_EQ(
      jobs[0]["request_counts"],
      (json{{"total", kRequests}, {"completed", kRequests - kBadLines}, {"failed", kBadLines}}));
  EXPECT_TRUE(Names(d.state() + "/inbox").empty());
  EXPECT_EQ(Names(d.state() + "/archive"), std::set<std::string>{"job.jsonl"});
  EXPECT_EQ(ReadText(d.state() + "/archive/job.jsonl"), job_);
  EXPECT_TRUE(Names(d.state() + "/failed").empty());
  EXPECT_EQ(Names(d.state() + "/outbox"),
            (std::set<std::string>{"job.results.jsonl", "job.errors.jsonl", "job.report.html",
                                   "job.summary.json"}));
}

}  // namespace
}  // namespace llmq::testing
