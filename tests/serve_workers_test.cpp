// Many `llmq serve` workers on one queue (issue 27), on the real binary and a tiny model:
//   - two workers on one state folder (the one-worker-per-GPU case, an SQLite queue) share a
//     job: both compute part of it, every request has exactly one result, and the outbox files
//     equal one worker's run in every field but ids, `created` and `cached_tokens`; when the
//     worker that watches the inbox stops, the other takes the inbox over;
//   - kill -9 of a worker mid-job: its leases run out (queue.lease_seconds) and the other worker
//     finishes its requests; a worker restarted in its slot takes back at once what it held;
//   - four workers, each with its own state folder, on one PostgreSQL queue: one job dropped into
//     one inbox is spread over them and finalized exactly once.
// Waits poll for files and log lines (WaitFor), never for a span of time.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "jobs/store.h"
#include "tests/pg_server.h"
#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kRequests = 300;
constexpr int kBadLines = 1;  // WriteMixedJob: i % 401 == 17

// One `llmq serve` process: its config (state folder, queue), log and pid.
class Worker {
 public:
  // `url`: the PostgreSQL queue ("" for the state folder's queue.db).
  // `lease_seconds`: short where a test kills workers (their leases must run out soon), else
  // long enough that a loaded machine never lets one lapse (a request would run twice).
  Worker(const std::string& dir, const std::string& model, const std::string& state,
         const std::string& url, double lease_seconds = 10)
      : dir_(dir), state_(state) {
    fs::create_directories(dir);
    // One thread each, four sequences a step: a job takes many claims, and every worker gets some.
    WriteServeConfig(
        config(), {.model = model,
                   .state = state,
                   .settle_seconds = 0.05,
                   .rescan_seconds = 1,
                   .drain_seconds = 2,
                   .engine = "  max_num_seqs: 4\n  kv_cache_memory: 64MiB\n  cpu_threads: 1\n",
                   .after_spool = "queue:\n  lease_seconds: " + std::to_string(lease_seconds) +
                                  "\n" + (url.empty() ? std::string() : "  url: " + url + "\n")});
  }
  ~Worker() { End(SIGKILL); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  bool Start() {
    if (!log_.empty() || fs::exists(err())) log_ += ReadText(err()) + "--- restarted\n";
    fs::remove(err());
    pid_ = SpawnLlmq({"serve", "--config", config()}, dir_ + "/serve.out", err());
    return WaitFor([&] { return Logged("serving"); }, 60);
  }
  int Kill() { return End(SIGKILL); }
  int Stop() { return End(SIGTERM); }
  bool Logged(const std::string& text) const {
    return ReadText(err()).find(text) != std::string::npos;
  }
  std::string Logs() const { return log_ + ReadText(err()); }
  // The requests this worker finished, from its last line ("... N request(s) finished by this
  // worker"); -1 when it did not say (killed).
  int64_t Finished() const {
    static const std::regex re("([0-9]+) request\\(s\\) finished by this worker");
    std::smatch m;
    const std::string log = ReadText(err());
    return std::regex_search(log, m, re) ? std::stoll(m[1]) : -1;
  }
  std::string config() const { return dir_ + "/llmq.yaml"; }
  std::string outbox(const std::string& n) const { return state_ + "/outbox/" + n; }
  void Drop(const std::string& name, const std::string& text) const {
    WriteAndRename(dir_ + "/" + name + ".staging", state_ + "/inbox/" + name, text);
  }

 private:
  std::string err() const { return dir_ + "/serve.err"; }
  int End(int sig) { return EndProcess(&pid_, sig); }

  std::string dir_, state_, log_;
  pid_t pid_ = -1;
};

std::string AllLogs(const std::vector<Worker*>& ws) {
  std::string s;
  for (size_t i = 0; i < ws.size(); ++i)
    s += "=== worker " + std::to_string(i) + "\n" + ws[i]->Logs();
  return s;
}

class ServeWorkersTest : public TinyModelSuite {
 protected:
  static void SetUpTestSuite() {
    TinyModelSuite::SetUpTestSuite();
    dir_ = TmpDir("serve_workers");
    WriteMixedJob(dir_ + "/job.jsonl", kRequests);
    job_ = ReadText(dir_ + "/job.jsonl");
  }

  // One worker's run of the job (made once for the suite): the files every test compares with.
  static void Reference() {
    if (!ref_results_.empty()) return;
    Worker ref(dir_ + "/reference", model_, dir_ + "/reference/state", "");
    ASSERT_TRUE(ref.Start()) << ref.Logs();
    ref.Drop("job.jsonl", job_);
    ASSERT_TRUE(WaitFor([&] { return fs::exists(ref.outbox("job.summary.json")); }, 300))
        << ref.Logs();
    ASSERT_EQ(ref.Stop(), 0) << ref.Logs();
    ref_results_ = ReadJsonl(ref.outbox("job.results.jsonl"));
    ref_errors_ = ReadJsonl(ref.outbox("job.errors.jsonl"));
    ASSERT_EQ(ref_results_.size(), size_t{kRequests - kBadLines});
    ASSERT_EQ(ref_errors_.size(), size_t{kBadLines});
  }

  // The job's files in `outbox` (a prefix: "<folder>/job") equal the reference's, every request
  // once.
  static void ExpectReferenceOutput(const std::string& stem, const std::string& logs) {
    const auto results = ReadJsonl(stem + ".results.jsonl");
    const auto errors = ReadJsonl(stem + ".errors.jsonl");
    ASSERT_EQ(results.size(), ref_results_.size()) << logs;
    ASSERT_EQ(errors.size(), ref_errors_.size()) << logs;
    std::set<std::string> custom_ids;
    for (const auto* v : {&results, &errors})
      for (const json& o : *v)
        EXPECT_TRUE(custom_ids.insert(o["custom_id"].dump()).second) << "twice: " << o.dump();
    EXPECT_EQ(custom_ids.size(), size_t{kRequests});
    for (size_t i = 0; i < results.size(); ++i)
      ASSERT_EQ(Comparable(results[i]), Comparable(ref_results_[i])) << "results line " << i + 1;
    for (size_t i = 0; i < errors.size(); ++i)
      ASSERT_EQ(Comparable(errors[i]), Comparable(ref_errors_[i])) << "errors line " << i + 1;
  }

  // `llmq workers --json` on `w`'s queue.
  static json Workers(const Worker& w) {
    const RunResult r = RunLlmqWith({}, {"workers", "--json", "--config", w.config()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  // The job's counts in `w`'s queue: {completed + failed, total}; {-1, -1} before it is stored.
  static std::pair<int64_t, int64_t> Progress(const Worker& w) {
    const RunResult r = RunLlmqWith({}, {"list", "--json", "--config", w.config()});
    const json j = json::parse(r.out, nullptr, false);
    if (r.exit_code != 0 || !j.is_array() || j.empty()) return {-1, -1};
    const json& c = j[0]["request_counts"];
    return {c["completed"].get<int64_t>() + c["failed"].get<int64_t>(), c["total"].get<int64_t>()};
  }
  static bool Reached(const Worker& w, double share) {
    const auto [done, total] = Progress(w);
    return total > 0 && done >= share * static_cast<double>(total);
  }

  inline static std::string dir_, job_;
  inline static std::vector<json> ref_results_, ref_errors_;
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

  a.Drop("job.jsonl", job_);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(a.outbox("job.summary.json")); }, 300))
      << AllLogs(both);
  ExpectReferenceOutput(a.outbox("job"), AllLogs(both));

  const json ws = Workers(a);
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
  const json after = Workers(b);
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
  a.Drop("job.jsonl", job_);
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
  if (!finished_before) EXPECT_TRUE(a.Logged("its last run held are claimable again")) << a.Logs();
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
  std::vector<std::unique_ptr<Worker>> ws;
  std::vector<Worker*> all;
  for (int i = 0; i < 4; ++i) {
    const std::string d = dir + "/w" + std::to_string(i);
    ws.push_back(std::make_unique<Worker>(d, model_, d + "/state", db.url()));
    all.push_back(ws.back().get());
  }
  for (Worker* w : all) ASSERT_TRUE(w->Start()) << w->Logs();
  all[2]->Drop("job.jsonl", job_);
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
  ASSERT_TRUE(WaitFor(
      [&] {
        const RunResult r = RunLlmqWith({}, {"list", "--json", "--config", all[0]->config()});
        const json j = json::parse(r.out, nullptr, false);
        return j.is_array() && j.size() == 1 && j[0]["status"] == "completed";
      },
      60))
      << AllLogs(all);
  ExpectReferenceOutput(finalizer->outbox("job"), AllLogs(all));
  EXPECT_EQ(Workers(*all[0]).size(), 4u);
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
    if (w != finalizer) EXPECT_FALSE(fs::exists(w->outbox("job.summary.json")));
    sum += w->Finished();
    contributed += w->Finished() > 0;
  }
  EXPECT_EQ(sum, kRequests - kBadLines) << "a request computed twice\n" << AllLogs(all);
  EXPECT_GE(contributed, 2) << AllLogs(all);
}

}  // namespace
}  // namespace llmq::testing
