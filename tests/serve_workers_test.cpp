// Many `llmq serve` workers on one queue (issue 27), on the real binary and a tiny model:
//   - two workers on one state folder (the one-worker-per-GPU case, an SQLite queue) share a
//     job: both compute part of it, every request has exactly one result, and the outbox files
//     equal one worker's run in every field but ids, `created` and `cached_tokens`; when the
//     worker that watches the inbox stops, the other takes the inbox over;
//   - kill -9 of a worker mid-job: its leases run out (queue.lease_seconds) and the other worker
//     finishes its requests; a worker restarted in its slot takes back at once what it held;
//   - four workers, each with its own state folder, on one PostgreSQL queue: one job of 4,000
//     requests (issue 27 done-when 1) dropped into one inbox is spread over them and finalized
//     exactly once;
//   - models: workers serving different models each run only the jobs naming theirs; a job
//     naming a model no worker serves waits, llmq status says so, and a worker serving it runs it.
// Waits poll for files and log lines (WaitFor), never for a span of time.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "jobs/store.h"
#include "tests/pg_server.h"
#include "tests/serve_fixture.h"
#include "tests/serve_workers.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kRequests = 4000;  // issue 27 done-when 1: a 4,000-request job
constexpr int kBadLines = 8;     // WriteMixedJob: i % 401 == 17, less two whose schema is replaced

class ServeWorkersTest : public WorkerSuite<kRequests, kBadLines> {
 protected:
  static void ExpectReferenceOutput(const std::string& stem, const std::string& logs) {
    ref_.Expect(stem, logs);
  }
  static const std::string& job() { return ref_.job(); }
};

TEST_F(ServeWorkersTest, TwoWorkersOnOneStateFolderShareAJobAndTheInbox) {
  Reference();
  if (HasFatalFailure()) return;
  const std::string dir = CurrentTestDir(), state = dir + "/state";
  Worker a(dir + "/a", model_, state, ""), b(dir + "/b", model_, state, "");
  const std::vector<Worker*> both = {&a, &b};
  ASSERT_TRUE(a.Start()) << a.Logs();
  ASSERT_TRUE(b.Start()) << b.Logs();
  EXPECT_TRUE(b.Logged("another worker watches this folder's inbox")) << b.Logs();
  EXPECT_FALSE(a.Logged("another worker watches")) << a.Logs();

  a.Drop("job.jsonl", job());
  ASSERT_TRUE(WaitFor([&] { return fs::exists(a.outbox("job.summary.json")); }, 300))
      << AllLogs(both);
  ExpectReferenceOutput(a.outbox("job"), AllLogs(both));

  const json ws = WorkersJson(a);
  ASSERT_TRUE(ws.is_array() && ws.size() == 2) << ws.dump(2);
  std::set<std::string> slots;
  for (const json& w : ws) {
    const std::string id = w["id"];
    slots.insert(id.substr(id.rfind('#')));
    EXPECT_NE(w["state"], "lost") << w.dump();
    EXPECT_NE(id.find(":" + state + "#"), std::string::npos) << id;
  }
  EXPECT_EQ(slots, (std::set<std::string>{"#0", "#1"}));

  // The inbox's watcher stops: the other worker watches it from now on.
  ASSERT_EQ(a.Stop(), 0) << a.Logs();
  ASSERT_TRUE(WaitFor([&] { return b.Logged("watches it from now on"); }, 30)) << b.Logs();
  b.Drop("more.jsonl", GoodLine("m1") + GoodLine("m2"));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(b.outbox("more.summary.json")); }, 60)) << b.Logs();
  EXPECT_EQ(ReadJsonl(b.outbox("more.results.jsonl")).size(), 2u);
  ASSERT_EQ(b.Stop(), 0) << b.Logs();

  // Both computed part of the job (B also the two lines of `more`).
  const int64_t fa = a.Finished(), fb = b.Finished();
  EXPECT_GT(fa, 0) << AllLogs(both);
  EXPECT_GT(fb, 2) << AllLogs(both);
  EXPECT_EQ(fa + fb, kRequests + 2 - kBadLines) << "a request computed twice\n" << AllLogs(both);
  const json after = WorkersJson(b);
  for (const json& w : after) EXPECT_EQ(w["state"], "stopped") << w.dump();
}

TEST_F(ServeWorkersTest, AKilledWorkersRequestsGoToTheOtherAndARestartTakesItsOwnBack) {
  Reference();
  if (HasFatalFailure()) return;
  const std::string dir = CurrentTestDir(), state = dir + "/state";
  Worker a(dir + "/a", model_, state, "", 1), b(dir + "/b", model_, state, "", 1);
  const std::vector<Worker*> both = {&a, &b};
  ASSERT_TRUE(a.Start()) << a.Logs();
  ASSERT_TRUE(b.Start()) << b.Logs();
  a.Drop("job.jsonl", job());
  // B dies holding leases; A runs on alone and takes them once they run out.
  ASSERT_TRUE(WaitFor([&] { return Reached(a, 0.25); }, 300)) << AllLogs(both);
  ASSERT_EQ(b.Kill(), 128 + SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return Reached(a, 0.5); }, 300)) << AllLogs(both);
  ASSERT_TRUE(b.Start()) << b.Logs();
  // A dies and comes back at once in its slot: what it held is claimable again at its start.
  ASSERT_TRUE(WaitFor([&] { return Reached(a, 0.7); }, 300)) << AllLogs(both);
  const bool finished_before = Reached(a, 1.0);
  ASSERT_EQ(a.Kill(), 128 + SIGKILL);
  ASSERT_TRUE(a.Start()) << a.Logs();
  // (Whether A held leases at the kill is a matter of timing: B may have claimed them once they ran
  // out. WorkerTest.ARestartInItsSlotTakesBackWhatItsLastRunHeld shows the release itself.)
  static_cast<void>(finished_before);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(a.outbox("job.summary.json")); }, 300))
      << AllLogs(both);
  ExpectReferenceOutput(a.outbox("job"), AllLogs(both));
  ASSERT_EQ(a.Stop(), 0) << a.Logs();
  ASSERT_EQ(b.Stop(), 0) << b.Logs();
}

TEST_F(ServeWorkersTest, FourWorkersOnOnePostgresQueueRunAJobOnceAndFinalizeItOnce) {
  PgTestDatabase db;
  LLMQ_SKIP_WITHOUT_POSTGRES(db);
  Reference();
  if (HasFatalFailure()) return;
  const std::string dir = CurrentTestDir();
  std::vector<Worker*> all;
  const auto ws = OwnFolderWorkers(4, dir, model_, db.url(), 10, &all);
  for (Worker* w : all) ASSERT_TRUE(w->Start()) << w->Logs();
  all[2]->Drop("job.jsonl", job());
  // Finalized by exactly one of them, into its own outbox.
  Worker* finalizer = nullptr;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (Worker* w : all)
          if (fs::exists(w->outbox("job.summary.json"))) finalizer = w;
        return finalizer != nullptr;
      },
      300))
      << AllLogs(all);
  ASSERT_TRUE(WaitFor([&] { return JobCompleted(*all[0]); }, 60)) << AllLogs(all);
  ExpectReferenceOutput(finalizer->outbox("job"), AllLogs(all));
  EXPECT_EQ(WorkersJson(*all[0]).size(), 4u);
  // From any worker's host: the same files, read from the queue (llmq results).
  Worker* other = finalizer == all[0] ? all[1] : all[0];
  const RunResult r = RunLlmqWith(
      {}, {"results", "job.jsonl", "-o", dir + "/fetched", "--config", other->config()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* ext : {".results.jsonl", ".errors.jsonl"})
    EXPECT_EQ(ReadText(dir + "/fetched/job" + ext),
              ReadText(finalizer->outbox(std::string("job") + ext)))
        << ext;
  int64_t sum = 0;
  int contributed = 0;
  for (Worker* w : all) {
    ASSERT_EQ(w->Stop(), 0) << w->Logs();
    if (w != finalizer) {
      EXPECT_FALSE(fs::exists(w->outbox("job.summary.json")));
    }
    sum += w->Finished();
    contributed += w->Finished() > 0;
  }
  EXPECT_EQ(sum, kRequests - kBadLines) << "a request computed twice\n" << AllLogs(all);
  EXPECT_GE(contributed, 2) << AllLogs(all);
}

// `n` good lines "<prefix>0".. naming `model` in body.model.
std::string LinesOfModel(const std::string& prefix, const std::string& model, int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    json line = json::parse(GoodLine(prefix + std::to_string(i)));
    line["body"]["model"] = model;
    text += line.dump() + "\n";
  }
  return text;
}

TEST_F(ServeWorkersTest, WorkersRunOnlyTheirModelsJobsAndAJobNoWorkerServesWaits) {
  const std::string dir = CurrentTestDir(), state = dir + "/state";
  Worker a(dir + "/a", model_, state, ""), b(dir + "/b", model_, state, "");
  const std::vector<Worker*> both = {&a, &b};
  a.ServeAlso({"--served-model-name", "alpha"});
  b.ServeAlso({"--served-model-name", "beta", "gamma"});
  ASSERT_TRUE(a.Start()) << a.Logs();
  EXPECT_TRUE(a.Logged("jobs naming no model or alpha")) << a.Logs();
  a.Drop("alpha.jsonl", LinesOfModel("a", "alpha", 6));
  a.Drop("beta.jsonl", LinesOfModel("b", "beta", 4));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(a.outbox("alpha.summary.json")); }, 120)) << a.Logs();
  // beta's job waits, and llmq status says why.
  json beta;
  ASSERT_TRUE(WaitFor(
      [&] {
        const RunResult r =
            RunLlmqWith({}, {"status", "beta.jsonl", "--json", "--config", a.config()});
        beta = json::parse(r.out, nullptr, false);
        return r.exit_code == 0 && beta.is_object() && beta.contains("waiting");
      },
      60))
      << beta.dump(2) << a.Logs();
  EXPECT_EQ(beta["status"], "in_progress");
  EXPECT_EQ(beta["model"], "beta");
  EXPECT_EQ(beta["request_counts"]["completed"], 0) << "alpha's worker ran none of beta's";
  EXPECT_EQ(beta["waiting"],
            "no worker serves model beta: start one with --served-model-name beta");
  const RunResult text = RunLlmqWith({}, {"status", "--config", a.config()});
  EXPECT_NE(text.out.find("model beta  beta.jsonl  waiting: no worker serves model beta"),
            std::string::npos)
      << text.out;

  // A worker serving beta starts: it runs beta's job, and only that.
  ASSERT_TRUE(b.Start()) << b.Logs();
  ASSERT_TRUE(WaitFor([&] { return fs::exists(a.outbox("beta.summary.json")); }, 120))
      << AllLogs(both);
  EXPECT_EQ(ReadJsonl(a.outbox("beta.results.jsonl")).size(), 4u);
  EXPECT_EQ(ReadJsonl(a.outbox("alpha.results.jsonl")).size(), 6u);
  const json ws = WorkersJson(a);
  ASSERT_TRUE(ws.is_array() && ws.size() == 2) << ws.dump(2);
  std::set<std::string> served;
  for (const json& w : ws) served.insert(w["served_models"].dump());
  EXPECT_EQ(served, (std::set<std::string>{R"(["alpha"])", R"(["beta","gamma"])"}));
  ASSERT_EQ(a.Stop(), 0) << a.Logs();
  ASSERT_EQ(b.Stop(), 0) << b.Logs();
  EXPECT_EQ(a.Finished(), 6) << AllLogs(both);
  EXPECT_EQ(b.Finished(), 4) << AllLogs(both);
}

}  // namespace
}  // namespace llmq::testing
