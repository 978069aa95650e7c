// `llmq run` on its private queue: kill -9 at random moments and SIGINT / SIGTERM, each followed by
// rerunning the same command, end with the output of an uninterrupted run, every line exactly
// once, and no finished request computed again.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "jobs/store.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using testing::Comparable;
using testing::ReadJsonl;
using testing::ReadText;
using testing::RunLlmq;
using testing::WriteMixedJob;

// Results committed so far in a run's private store (0 when there is none yet).
int64_t CommittedResults(const std::string& state) {
  if (!fs::exists(fs::path(state) / "queue.db")) return 0;
  std::unique_ptr<jobs::Store> store;
  if (!jobs::Store::Open((fs::path(state) / "queue.db").string(), &store).ok()) return 0;
  std::vector<jobs::JobRecord> jobs;
  if (!store->ListJobs(&jobs).ok() || jobs.empty()) return 0;
  return jobs[0].completed + jobs[0].failed;
}

// A run started in the background, killed and reaped if the test ends before it does (no stopped
// run is left behind).
struct Child {
  pid_t pid;
  ~Child() {
    if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
  }
  // Stops it (SIGSTOP) and waits until it is stopped; false when it ended instead (then reaped).
  bool Stop() {
    kill(pid, SIGSTOP);
    int status = 0;
    if (waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status)) return true;
    pid = 0;
    return false;
  }
  int Wait() {
    const int status = testing::WaitExit(pid);
    pid = 0;
    return status;
  }
};

class RunResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::TmpDir("run_resume");
    model_ = dir_ + "/model";
    ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"}).exit_code,
              0);
    WriteMixedJob(dir_ + "/in.jsonl", 2000);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = RunLlmq({"run", dir_ + "/in.jsonl", "-o", dir_ + "/reference.jsonl", "--model",
                            model_, "--summary-json", dir_ + "/reference.summary.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    reference_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reference_ = ReadJsonl(dir_ + "/reference.jsonl");
    ASSERT_EQ(reference_.size(), 2000u);
  }
  std::vector<std::string> Args(const std::string& out) const {
    return {"run",
            dir_ + "/in.jsonl",
            "-o",
            out,
            "--model",
            model_,
            "--summary-json",
            out + ".summary.json",
            "--no-progress"};
  }
  void ExpectSameAsReference(const std::string& out) {
    const auto got = ReadJsonl(out);
    ASSERT_EQ(got.size(), reference_.size());
    std::set<std::string> ids;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(ids.insert(got[i]["id"].get<std::string>()).second) << "duplicate id";
      ASSERT_EQ(Comparable(got[i]), Comparable(reference_[i])) << "line " << i + 1;
    }
  }
  static std::string dir_, model_;
  static std::vector<json> reference_;
  static double reference_seconds_;
};
std::string RunResumeTest::dir_, RunResumeTest::model_;
std::vector<json> RunResumeTest::reference_;
double RunResumeTest::reference_seconds_ = 0;

TEST_F(RunResumeTest, KillNineAtRandomMomentsThenRerunGivesTheUninterruptedOutput) {
  const std::string out = dir_ + "/killed.jsonl";
  const std::string state = dir_ + "/.killed.jsonl.llmq-run";
  std::mt19937 rng(12345);
  // Moments spread over the whole run, from the first milliseconds (ingest) to past its end
  // (finalize): a kill may also land after the run completed.
  std::uniform_real_distribution<double> when(0.0, 1.1 * reference_seconds_);
  int64_t kept = 0;
  int interrupted = 0;
  for (int round = 0; round < 10; ++round) {
    const double at = round == 0 ? 0.02 : when(rng);
    const pid_t pid = testing::SpawnLlmq(Args(out), out + ".stdout", out + ".stderr");
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    kill(pid, SIGKILL);
    const int status = testing::WaitExit(pid);
    // It finished before the kill (the output appears only once whole; the kill may have landed
    // while the state was being removed): the next round starts afresh.
    if (status == 0 || fs::exists(out)) {
      ExpectSameAsReference(out);
      fs::remove(out);
      kept = 0;
      continue;
    }
    ++interrupted;
    ASSERT_EQ(status, 128 + SIGKILL) << ReadText(out + ".stderr");
    const int64_t now = CommittedResults(state);
    EXPECT_GE(now, kept) << "round " << round << " (killed at " << at
                         << " s): committed results were lost; its stderr: "
                         << ReadText(out + ".stderr");
    kept = now;
  }
  // A rerun after a kill only finishes the rest, so later kills often land after it completed:
  // a handful of the 10 rounds interrupt a run (4 to 8 seen), never none.
  EXPECT_GE(interrupted, 3) << "the kills should often land while the run is going";
  const auto r = testing::RunLlmqWith({}, Args(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectSameAsReference(out);
  const json s = json::parse(ReadText(out + ".summary.json"));
  // Everything finished before the last rerun was kept, and only the rest was computed.
  EXPECT_EQ(s["refused"], 5) << s.dump(2);  // bad lines, refused at validation
  EXPECT_EQ(s["resumed"].get<int64_t>() + s["finished_this_run"].get<int64_t>() + 5,
            s["requests"].get<int64_t>())
      << s.dump(2);
  EXPECT_GE(s["resumed"].get<int64_t>() + 5, kept) << s.dump(2);
  EXPECT_FALSE(fs::exists(state)) << "the state is removed once the run completes";
}

TEST_F(RunResumeTest, AFreshRunResumesNothingAndCountsItsRefusedLines) {
  const std::string out = dir_ + "/fresh.jsonl";
  const auto r = testing::RunLlmqWith({}, Args(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectSameAsReference(out);
  const json s = json::parse(ReadText(out + ".summary.json"));
  EXPECT_EQ(s["refused"], 5) << s.dump(2);
  EXPECT_EQ(s["resumed"], 0) << s.dump(2);
  EXPECT_EQ(s["finished_this_run"].get<int64_t>() + 5, s["requests"].get<int64_t>()) << s.dump(2);
  EXPECT_EQ(r.err.find("resuming"), std::string::npos) << r.err;
}

TEST_F(RunResumeTest, SigintAndSigtermKeepFinishedResultsAndSayHowToResume) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string out = dir_ + "/signal" + std::to_string(sig) + ".jsonl";
    const std::string state = dir_ + "/.signal" + std::to_string(sig) + ".jsonl.llmq-run";
    // Interrupted once some results are committed and before all are, whatever the machine's
    // load. Until the queue holds the job (with its 5 refused lines) the run goes freely: a read
    // waits while it creates the queue. Then it goes forward only in 10-ms slices and is stopped
    // while its store is read, and the signal is sent while it is stopped, so the count read is
    // where it stands and it takes the signal as soon as it continues. With a result still to
    // commit it has not reached its check for a signal (after its last commit): it is interrupted.
    Child run{testing::SpawnLlmq(Args(out), out + ".stdout", out + ".stderr")};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int64_t committed = 0;
    while (CommittedResults(state) == 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no queue in 60 s";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(run.Stop()) << "the run ended before it was stopped";
    while ((committed = CommittedResults(state)) < 50) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no 50 results committed in 60 s";
      kill(run.pid, SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ASSERT_TRUE(run.Stop()) << "the run ended within one slice: " << ReadText(out + ".stderr");
    }
    ASSERT_LT(committed, static_cast<int64_t>(reference_.size())) << "the run committed all";
    kill(run.pid, sig);
    kill(run.pid, SIGCONT);
    const int status = run.Wait();
    const std::string err = ReadText(out + ".stderr");
    EXPECT_EQ(status, sig == SIGINT ? 130 : 143) << err;
    EXPECT_NE(err.find("run the same command again"), std::string::npos) << err;
    EXPECT_NE(err.find(state), std::string::npos) << err;
    const int64_t kept = CommittedResults(state);
    EXPECT_GE(kept, committed);
    const auto r = testing::RunLlmqWith({}, Args(out));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("resuming"), std::string::npos) << r.err;
    ExpectSameAsReference(out);
    const json s = json::parse(ReadText(out + ".summary.json"));
    EXPECT_EQ(s["resumed"].get<int64_t>() + 5, kept) << s.dump(2);
  }
}

}  // namespace
}  // namespace llmq
