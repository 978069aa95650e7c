// `llmq run` on its private queue: kill -9 at moments spread over the run and SIGINT / SIGTERM,
// each followed by rerunning the same command, end with the output of an uninterrupted run, every
// line exactly once, and no finished request computed again. The moments are what the run reports
// on stderr (its progress), never a time: nothing here sleeps or bounds the wall clock.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "jobs/store.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Results committed so far in a run's private store (0 when there is none yet).
int64_t CommittedResults(const std::string& state) {
  if (!fs::exists(fs::path(state) / "queue.db")) return 0;
  std::unique_ptr<jobs::Store> store;
  if (!jobs::Store::Open((fs::path(state) / "queue.db").string(), &store).ok()) return 0;
  std::vector<jobs::JobRecord> jobs;
  if (!store->ListJobs(&jobs).ok() || jobs.empty()) return 0;
  return jobs[0].completed + jobs[0].failed;
}

// The requests done in the first and in the latest progress report of `llmq run --progress`
// ("\r[###   ] 812/2000 requests | ..."); -1 before the first. A resumed run's first report shows
// what it resumed.
struct Reports {
  int64_t first = -1, last = -1;
};
Reports Progress(const std::string& err) {
  static const std::regex report(R"((\d+)/\d+ requests \|)");
  Reports r;
  for (std::sregex_iterator it(err.begin(), err.end(), report), end; it != end; ++it) {
    r.last = std::stoll((*it)[1]);
    if (r.first < 0) r.first = r.last;
  }
  return r;
}

// A run started in the background with its stderr on a pipe, killed and reaped if the test ends
// before it does (no stopped run is left behind). The test waits on what the run reports, never
// on time.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args, const std::string& out_file)
      : pid_(SpawnLlmqPiped(args, out_file, &err_fd_)) {}
  ~Child() {
    if (pid_ > 0 && kill(pid_, SIGKILL) == 0) waitpid(pid_, nullptr, 0);
    if (err_fd_ >= 0) close(err_fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Its stderr so far.
  const std::string& err() const { return err_; }
  // Reads its stderr until `seen(err())` holds: true; false when it ends first (end of file).
  bool WaitFor(const std::function<bool(const std::string&)>& seen) {
    while (!seen(err_))
      if (!ReadSome()) return false;
    return true;
  }
  // Stops it (SIGSTOP) and waits until it is stopped; false when it ended instead (then reaped).
  bool Stop() {
    kill(pid_, SIGSTOP);
    int status = 0;
    if (waitpid(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status)) return true;
    pid_ = 0;
    return false;
  }
  // Reads its stderr to the end (it must not block on a full pipe), then waits for it to exit.
  int Wait() {
    while (ReadSome()) {
    }
    const int status = WaitExit(pid_);
    pid_ = 0;
    return status;
  }

 private:
  bool ReadSome() {
    char buf[4096];
    for (;;) {
      const ssize_t n = read(err_fd_, buf, sizeof buf);
      if (n > 0) {
        err_.append(buf, static_cast<size_t>(n));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
  }

  int err_fd_ = -1;  // before pid_: spawning sets it
  pid_t pid_;
  std::string err_;
};

class RunResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TmpDir("run_resume");
    model_ = dir_ + "/model";
    ASSERT_EQ(RunLlmq({"make-model", "--shape", "tiny", "--out", model_, "--seed", "4"}).exit_code,
              0);
    WriteMixedJob(dir_ + "/in.jsonl", 2000);
    const auto r = RunLlmq({"run", dir_ + "/in.jsonl", "-o", dir_ + "/reference.jsonl", "--model",
                            model_, "--summary-json", dir_ + "/reference.summary.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    reference_ = ReadJsonl(dir_ + "/reference.jsonl");
    ASSERT_EQ(reference_.size(), 2000u);
  }
  // `llmq run` of the job into `out`; `progress`: with progress reports on stderr.
  std::vector<std::string> Args(const std::string& out, bool progress = false) const {
    return {"run",
            dir_ + "/in.jsonl",
            "-o",
            out,
            "--model",
            model_,
            "--summary-json",
            out + ".summary.json",
            progress ? "--progress" : "--no-progress"};
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
};
std::string RunResumeTest::dir_, RunResumeTest::model_;
std::vector<json> RunResumeTest::reference_;

TEST_F(RunResumeTest, KillNineAtMomentsSpreadOverTheRunThenRerunGivesTheUninterruptedOutput) {
  const std::string out = dir_ + "/killed.jsonl";
  const std::string state = dir_ + "/.killed.jsonl.llmq-run";
  const int64_t total = static_cast<int64_t>(reference_.size());
  // Moments spread over the whole run, each defined by what the run reports, not by time: its
  // first line (the model is loaded; the kill lands in ingest), a resumed run's first report (it
  // has just started feeding), the first report at or past 1/8 .. 7/8 of the requests that comes
  // mid-run, with progress since the run started and requests left (each rerun resumes, so the
  // counts go on from the last kill; when no such report comes, the run completes and the next
  // round starts afresh), the last report (every request done: the kill lands in closing the
  // committer or finalizing), and the summary (finalized: the kill lands while the state is
  // removed, or after the run completed).
  struct Moment {
    std::string name;
    std::function<bool(const std::string&)> seen;
  };
  const auto past = [total](int k) {
    return Moment{"progress " + std::to_string(k) + "/8", [=](const std::string& e) {
                    const Reports r = Progress(e);
                    return r.last >= total * k / 8 && r.last > r.first && r.last < total;
                  }};
  };
  std::vector<Moment> moments = {
      {"the first line", [](const std::string& e) { return e.find('\n') != std::string::npos; }},
      past(1),
      {"the first report", [](const std::string& e) { return Progress(e).first >= 0; }}};
  for (int k = 2; k <= 7; ++k) moments.push_back(past(k));
  moments.push_back(
      {"the last report", [=](const std::string& e) { return Progress(e).last == total; }});
  moments.push_back({"the summary", [](const std::string& e) {
                       return e.find("(completed ") != std::string::npos;
                     }});
  int64_t kept = 0;
  int interrupted = 0;
  for (const Moment& m : moments) {
    Child run(Args(out, true), out + ".stdout");
    ASSERT_GT(run.pid(), 0);
    if (run.WaitFor(m.seen)) kill(run.pid(), SIGKILL);
    const int status = run.Wait();
    // It finished before the kill (the output appears only once whole; the kill may have landed
    // while the state was being removed): the next round starts afresh.
    if (status == 0 || fs::exists(out)) {
      ExpectSameAsReference(out);
      fs::remove(out);
      kept = 0;
      continue;
    }
    ++interrupted;
    ASSERT_EQ(status, 128 + SIGKILL) << run.err();
    const int64_t now = CommittedResults(state);
    EXPECT_GE(now, kept) << "killed at " << m.name
                         << ": committed results were lost; its stderr: " << run.err();
    kept = now;
  }
  // A kill at a report of fewer than all requests lands while requests run: most of the rounds
  // on a machine where a run spans a few reports (at most 4 a second), never none.
  EXPECT_GE(interrupted, 3) << "the kills should often land while the run is going";
  const auto r = RunLlmqWith({}, Args(out));
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
  const auto r = RunLlmqWith({}, Args(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectSameAsReference(out);
  const json s = json::parse(ReadText(out + ".summary.json"));
  EXPECT_EQ(s["refused"], 5) << s.dump(2);
  EXPECT_EQ(s["resumed"], 0) << s.dump(2);
  EXPECT_EQ(s["finished_this_run"].get<int64_t>() + 5, s["requests"].get<int64_t>()) << s.dump(2);
  EXPECT_EQ(r.err.find("resuming"), std::string::npos) << r.err;
}

// The job's structured outputs (issue 24), which the kills above interrupt like the rest: every
// schema request's finished text is a document of its schema, every cut one a prefix of a JSON
// object; json_object requests give objects; the schemas that cannot be enforced are refused
// naming the keyword and its pointer. (tests/structured_outputs_diff_test.cpp checks documents
// against Ajv over random schemas.)
TEST_F(RunResumeTest, TheMixedJobsStructuredOutputsFollowTheirSchemas) {
  const json summary = json::parse(ReadText(dir_ + "/reference.summary.json"));
  int schema = 0, object = 0, finished = 0, refused = 0;
  for (const json& line : reference_) {
    const std::string id = line["custom_id"];
    if (id.rfind("doc-", 0) != 0) continue;
    const int i = std::stoi(id.substr(4));
    if (i % 401 == 17) {
      ++refused;
      ASSERT_EQ(line["response"]["status_code"], 400) << line.dump();
      EXPECT_EQ(line["response"]["body"]["error"]["param"], "response_format.json_schema.schema");
      EXPECT_NE(testing::ErrorMessage(line).find(
                    "field 'body.response_format.json_schema.schema': json_schema: keyword "
                    "\"uniqueItems\" at \"/items/uniqueItems\""),
                std::string::npos)
          << line.dump();
      continue;
    }
    if (i % 5 != 1 && i % 5 != 2) continue;
    const json& body = line["response"]["body"];
    for (const json& choice : body["choices"]) {
      const std::string text =
          choice.contains("message") ? choice["message"]["content"] : choice["text"];
      ASSERT_FALSE(text.empty()) << line.dump();
      EXPECT_EQ(text[0], '{') << text;
      if (choice["finish_reason"] != "stop") continue;
      ++finished;
      const json doc = json::parse(text, nullptr, false);
      ASSERT_TRUE(doc.is_object()) << text;
      if (i % 5 == 1) {
        ++schema;
        EXPECT_EQ(doc.size(), 2u) << text;
        EXPECT_TRUE(doc["label"] == "yes" || doc["label"] == "no" || doc["label"] == "unclear")
            << text;
        EXPECT_TRUE(doc["score"].is_number_integer() && doc["score"] >= 0 && doc["score"] <= 9)
            << text;
      } else {
        ++object;
      }
    }
  }
  std::printf("%d finished documents (%d of the schema, %d objects), %d refused schemas\n",
              finished, schema, object, refused);
  EXPECT_EQ(refused, 2);
  EXPECT_GT(schema, 0);
  EXPECT_GT(summary["structured_outputs"]["constrained_requests"].get<int64_t>(), 700)
      << summary.dump(2);
  EXPECT_EQ(summary["structured_outputs"]["schemas_compiled"], 3) << summary.dump(2);
}

TEST_F(RunResumeTest, SigintAndSigtermKeepFinishedResultsAndSayHowToResume) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string out = dir_ + "/signal" + std::to_string(sig) + ".jsonl";
    const std::string state = dir_ + "/.signal" + std::to_string(sig) + ".jsonl.llmq-run";
    // Interrupted once some requests are done and before all are, whatever the machine's load:
    // once it reports 50 requests done, it is stopped while its store is read, and the signal is
    // sent while it is stopped, so the count read is where it stands and it takes the signal as
    // soon as it continues. With a result still to commit it has not reached its check for a
    // signal (after its last commit): it is interrupted.
    Child run(Args(out, true), out + ".stdout");
    ASSERT_GT(run.pid(), 0);
    ASSERT_TRUE(run.WaitFor([](const std::string& e) { return Progress(e).last >= 50; }))
        << "the run ended before it reported 50 requests done: " << run.err();
    ASSERT_TRUE(run.Stop()) << "the run ended before it was stopped";
    const int64_t committed = CommittedResults(state);
    ASSERT_LT(committed, static_cast<int64_t>(reference_.size())) << "the run committed all";
    kill(run.pid(), sig);
    kill(run.pid(), SIGCONT);
    const int status = run.Wait();
    const std::string& err = run.err();
    EXPECT_EQ(status, sig == SIGINT ? 130 : 143) << err;
    EXPECT_NE(err.find("run the same command again"), std::string::npos) << err;
    EXPECT_NE(err.find(state), std::string::npos) << err;
    const int64_t kept = CommittedResults(state);
    EXPECT_GE(kept, committed);
    EXPECT_GE(kept, 50) << "what was done when it was stopped is committed on the way out";
    const auto r = RunLlmqWith({}, Args(out));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("resuming"), std::string::npos) << r.err;
    ExpectSameAsReference(out);
    const json s = json::parse(ReadText(out + ".summary.json"));
    EXPECT_EQ(s["resumed"].get<int64_t>() + 5, kept) << s.dump(2);
  }
}

}  // namespace
}  // namespace llmq::testing
