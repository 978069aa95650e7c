// Tests for the worker and lease methods of jobs/store (schemas 5 and 6: issue 27, and models),
// on both engines (StoreLeaseTest/Sqlite.*, StoreLeaseTest/Postgres.*: an SQLite file per test, a
// database per test on a real PostgreSQL server). Two Store objects on one queue stand for two
// workers. Time is controlled through the leases themselves: a lease of 0 seconds has expired by
// the next call, one of an hour runs through the test (no sleeps, no wall-clock bounds).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "jobs/store.h"
#include "tests/store_util.h"
#include "tests/test_util.h"

namespace llmq::jobs {
namespace {

WorkerInfo Worker(const std::string& id, const std::string& state = "running") {
  WorkerInfo w;
  w.id = id;
  w.host = "host-of-" + id;
  w.device = "cuda:0";
  w.model = "llama";
  w.state = state;
  return w;
}

template <class Queue>
class StoreLeaseTest : public StoreTest<Queue> {
 protected:
  // Job a.jsonl of two requests in plan groups `groups`, and worker w1 holding its first claim
  // (*held), on a connection closed again: what a migration test migrates.
  int64_t JobWithAClaim(const std::vector<int64_t>& groups, Claim* held) {
    auto s = this->Open();
    const int64_t a = IngestGroups(s.get(), "a.jsonl", {1, 2}, groups);
    EXPECT_TRUE(s->RegisterWorker(Worker("w1")).ok());
    EXPECT_TRUE(s->ClaimNextGroup("w1", 3600, 100, held).ok());
    return a;
  }
  // Takes the queue back to schema `version` with `back` (its SQL), then opens it: Open migrates
  // it to the latest, having found `version`. Null (a failure recorded) when it cannot.
  std::unique_ptr<Store> MigratedFrom(const std::string& back, int version) {
    this->RawExec(back + "UPDATE meta SET value = '" + std::to_string(version) +
                  "' WHERE key = 'schema_version'");
    int found = -1;
    std::unique_ptr<Store> s;
    Store::OpenOptions o;
    o.found_version = &found;
    const Status st = Store::Open(this->Location(), &s, o);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(found, version);
    EXPECT_EQ(this->RawQuery("SELECT value FROM meta WHERE key = 'schema_version'"),
              std::to_string(Store::SchemaVersion()));
    return st.ok() ? std::move(s) : nullptr;
  }
};
TYPED_TEST_SUITE(StoreLeaseTest, Engines, EngineName);

// The finished outputs of a job, in line order.
std::vector<std::string> Outputs(Store* s, int64_t job) {
  std::vector<std::string> out;
  const Status st =
      s->ForEachResult(job, [&](int64_t, bool, std::string_view o, const ResultMetrics&) {
        out.emplace_back(o);
        return Status::Ok();
      });
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

// A store of schema 4 (workers and request leases, no worker state, no finalize leases) migrates
// to 5 keeping its workers and its leases.
TYPED_TEST(StoreLeaseTest, MigrationToSchemaFiveKeepsWorkersAndLeases) {
  Claim held;
  const int64_t a = this->JobWithAClaim({10, 10}, &held);
  ASSERT_EQ(held.requests.size(), 2u);
  const std::unique_ptr<Store> s = this->MigratedFrom(kBackToSchemaFour, 4);
  ASSERT_NE(s, nullptr);
  std::vector<WorkerInfo> workers;
  ASSERT_TRUE(s->ListWorkers(&workers).ok());
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].id, "w1");
  EXPECT_EQ(workers[0].model, "llama");
  EXPECT_EQ(workers[0].state, "") << "a worker of schema 4 has said nothing yet";
  EXPECT_EQ(workers[0].current_job, "");
  EXPECT_EQ(workers[0].tokens_per_second, 0);
  // The lease taken under schema 4 still holds, and its results are accepted.
  Claim none;
  ASSERT_TRUE(s->ClaimNextGroup("w2", 3600, 100, &none).ok());
  EXPECT_TRUE(none.requests.empty());
  int64_t added = 0;
  ASSERT_TRUE(s->CommitLeasedResults("w1", {Leased(held.requests[0], "x")}, &added).ok());
  EXPECT_EQ(added, 1);
  // No job has a finalize lease yet.
  bool got = false;
  ASSERT_TRUE(s->ClaimJobFinalize("w2", a, 3600, &got).ok());
  EXPECT_TRUE(got);
}

// Inserts job `name` of `model` with one request (line 1, rank `rank`) in a transaction it
// begins and leaves open: the caller finishes the ingest, or not, and commits.
JobRecord InsertOneRequestJob(Store* s, const std::string& name, const std::string& model,
                              int64_t rank) {
  EXPECT_TRUE(s->Begin().ok());
  JobRecord job;
  job.name = name;
  job.sha256 = "sha-of-" + name;
  job.model = model;
  EXPECT_TRUE(s->InsertJob(&job).ok());
  NewRequest r;
  r.line = 1;
  r.custom_id = "x";
  r.body = "{}";
  r.plan_rank = rank;
  EXPECT_TRUE(s->InsertRequest(job.id, r).ok());
  return job;
}

// The job of a claim's requests (0 when it is empty).
int64_t JobOf(const Claim& c) {
  return c.requests.empty() ? 0 : c.requests.front().job;
}

// Schema 6: a worker serving models claims only the groups of jobs naming one of them, or none;
// one serving any model (no filter) claims every job's in rank order.
TYPED_TEST(StoreLeaseTest, AWorkerClaimsOnlyTheGroupsOfTheModelsItServes) {
  auto s = this->Open();
  // b's job holds the lowest ranks: a worker that does not serve b must step past it.
  const int64_t b = IngestGroups(s.get(), "b.jsonl", {1, 2, 3}, {1, 1, 3}, "model-b");
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {10, 11}, {10, 10}, "model-a");
  const int64_t none = IngestGroups(s.get(), "n.jsonl", {20}, {20});
  JobRecord job;
  ASSERT_TRUE(s->GetJob(a, &job).ok());
  EXPECT_EQ(job.model, "model-a");
  ASSERT_TRUE(s->GetJob(none, &job).ok());
  EXPECT_EQ(job.model, "");

  const std::vector<std::string> serves_a = {"model-a", "model-x"};
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("wa", 3600, 100, serves_a, &c).ok());
  EXPECT_EQ(JobOf(c), a);
  EXPECT_EQ(c.plan_group, 10);
  EXPECT_EQ(c.requests.size(), 2u);
  ASSERT_TRUE(s->ClaimNextGroup("wa", 3600, 100, serves_a, &c).ok());
  EXPECT_EQ(JobOf(c), none) << "a job naming no model is anyone's";
  ASSERT_TRUE(s->ClaimNextGroup("wa", 3600, 100, serves_a, &c).ok());
  EXPECT_TRUE(c.requests.empty()) << "b's groups are never model-a's worker's";

  // Another worker, on another connection, serving b: b's groups, in rank order.
  auto s2 = this->Open();
  ASSERT_TRUE(s2->ClaimNextGroup("wb", 3600, 100, {"model-b"}, &c).ok());
  EXPECT_EQ(JobOf(c), b);
  EXPECT_EQ(c.plan_group, 1);
  EXPECT_EQ(Lines(c), (std::vector<int64_t>{1, 2}));
  // A lease that runs out is claimable again by a worker serving the model (0 seconds: expired
  // by the next call), and only by one.
  ASSERT_TRUE(s2->ClaimNextGroup("wb", 0, 100, {"model-b"}, &c).ok());
  EXPECT_EQ(c.plan_group, 3);
  ASSERT_TRUE(s->ClaimNextGroup("wa", 3600, 100, serves_a, &c).ok());
  EXPECT_TRUE(c.requests.empty());
  ASSERT_TRUE(s->ClaimNextGroup("wb2", 3600, 100, {"model-b"}, &c).ok());
  EXPECT_EQ(c.plan_group, 3);
  ASSERT_TRUE(s2->ClaimNextGroup("wb", 3600, 100, {"model-b"}, &c).ok());
  EXPECT_TRUE(c.requests.empty());
}

// Files ingested together are planned together: a plan group may span jobs of two models. A
// worker serving one leases only its model's rows of the group; one serving any, all of them.
TYPED_TEST(StoreLeaseTest, AGroupSpanningJobsOfTwoModelsIsLeasedOnlyWhereServed) {
  auto s = this->Open();
  const int64_t b = IngestGroups(s.get(), "b.jsonl", {1, 3}, {1, 1}, "model-b");
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {2, 4}, {1, 1}, "model-a");
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("wa", 3600, 100, {"model-a"}, &c).ok());
  EXPECT_EQ(c.plan_group, 1);
  ASSERT_EQ(c.requests.size(), 2u);
  for (const PendingRequest& p : c.requests) EXPECT_EQ(p.job, a);
  ASSERT_TRUE(s->ClaimNextGroup("wa", 3600, 100, {"model-a"}, &c).ok());
  EXPECT_TRUE(c.requests.empty());
  ASSERT_TRUE(s->ClaimNextGroup("any", 3600, 100, &c).ok());
  ASSERT_EQ(c.requests.size(), 2u) << "b's rows of the group, for a worker serving any model";
  for (const PendingRequest& p : c.requests) EXPECT_EQ(p.job, b);
}

TYPED_TEST(StoreLeaseTest, AWorkerServingAnyModelClaimsEveryJobInRankOrder) {
  auto s = this->Open();
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {5}, {5}, "model-a");
  const int64_t b = IngestGroups(s.get(), "b.jsonl", {1}, {1}, "model-b");
  const int64_t none = IngestGroups(s.get(), "n.jsonl", {3}, {3});
  std::vector<int64_t> order;
  for (int i = 0; i < 4; ++i) {
    Claim c;
    ASSERT_TRUE(s->ClaimNextGroup("any", 3600, 100, &c).ok());
    if (c.requests.empty()) break;
    order.push_back(JobOf(c));
  }
  EXPECT_EQ(order, (std::vector<int64_t>{b, none, a}));
}

TYPED_TEST(StoreLeaseTest, AServedModelsFilterSkipsCancelledAndUnfinishedIngests) {
  auto s = this->Open();
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {1}, {1}, "m");
  const int64_t a2 = IngestGroups(s.get(), "a2.jsonl", {2}, {2}, "m");
  ASSERT_TRUE(s->RequestCancel(a).ok());
  // An ingest still open (validating) is not claimable.
  InsertOneRequestJob(s.get(), "open.jsonl", "m", 0);
  ASSERT_TRUE(s->Commit().ok());
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w", 3600, 100, {"m"}, &c).ok());
  EXPECT_EQ(JobOf(c), a2);
  ASSERT_TRUE(s->ClaimNextGroup("w", 3600, 100, {"m"}, &c).ok());
  EXPECT_TRUE(c.requests.empty());
}

// FinishIngest with the ingester's totals records the job's model (IngestTotals::model).
TYPED_TEST(StoreLeaseTest, FinishIngestRecordsTheModel) {
  auto s = this->Open();
  JobRecord job = InsertOneRequestJob(s.get(), "j.jsonl", "", 1);
  Store::IngestTotals t;
  t.total = 1;
  t.max_rank = 1;
  t.model = "qwen";
  ASSERT_TRUE(s->FinishIngest(job.id, JobStatus::kInProgress, &t).ok());
  ASSERT_TRUE(s->Commit().ok());
  ASSERT_TRUE(s->GetJob(job.id, &job).ok());
  EXPECT_EQ(job.model, "qwen");
  std::vector<JobRecord> all;
  ASSERT_TRUE(s->ListJobs(&all).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].model, "qwen");
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w", 3600, 100, {"llama"}, &c).ok());
  EXPECT_TRUE(c.requests.empty());
  ASSERT_TRUE(s->ClaimNextGroup("w", 3600, 100, {"llama", "qwen"}, &c).ok());
  EXPECT_EQ(c.requests.size(), 1u);
}

TYPED_TEST(StoreLeaseTest, AWorkersServedModelsAreKept) {
  auto s = this->Open();
  WorkerInfo w = Worker("w1");
  w.served_models = {"llama", "qwen \"7b\""};
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  std::vector<WorkerInfo> all;
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].served_models, w.served_models);
  w.served_models.clear();
  ASSERT_TRUE(s->UpdateWorker(w).ok());
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  EXPECT_TRUE(all[0].served_models.empty());
  w.served_models = {""};
  const Status st = s->RegisterWorker(w);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("served model name"), std::string::npos) << st.message();
}

// A store of schema 5 migrates to 6: its jobs name no model (any worker takes them) and its
// workers serve any; its leases hold.
TYPED_TEST(StoreLeaseTest, MigrationToSchemaSixLeavesOldJobsToEveryWorker) {
  Claim held;
  const int64_t a = this->JobWithAClaim({1, 2}, &held);
  ASSERT_EQ(held.requests.size(), 1u);
  const std::unique_ptr<Store> s = this->MigratedFrom(kBackToSchemaFive, 5);
  ASSERT_NE(s, nullptr);
  JobRecord job;
  ASSERT_TRUE(s->GetJob(a, &job).ok());
  EXPECT_EQ(job.model, "");
  std::vector<WorkerInfo> workers;
  ASSERT_TRUE(s->ListWorkers(&workers).ok());
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_TRUE(workers[0].served_models.empty());
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w2", 3600, 100, {"any-model"}, &c).ok());
  EXPECT_EQ(Lines(c), std::vector<int64_t>{2}) << "the old job is claimable; w1's lease holds";
  int64_t added = 0;
  ASSERT_TRUE(s->CommitLeasedResults("w1", {Leased(held.requests[0], "x")}, &added).ok());
  EXPECT_EQ(added, 1);
}

TYPED_TEST(StoreLeaseTest, WorkersSayWhatTheyDoAndAnUpdateLeavesTheirLeases) {
  auto s = this->Open();
  WorkerInfo w = Worker("gpu-1/0", "starting");
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  std::vector<WorkerInfo> all;
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, "starting");
  EXPECT_EQ(all[0].current_job, "");
  const double started = all[0].started_at;

  const int64_t a = IngestGroups(s.get(), "a.jsonl", {1}, {10});
  JobRecord job;
  ASSERT_TRUE(s->GetJob(a, &job).ok());
  w.state = "running";
  w.current_job = job.public_id;
  w.tokens_per_second = 1234.5;
  w.host = "gpu-1";
  w.model = "qwen";
  ASSERT_TRUE(s->UpdateWorker(w).ok());
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, "running");
  EXPECT_EQ(all[0].current_job, job.public_id);
  EXPECT_EQ(all[0].tokens_per_second, 1234.5);
  EXPECT_EQ(all[0].host, "gpu-1");
  EXPECT_EQ(all[0].model, "qwen");
  EXPECT_EQ(all[0].started_at, started) << "an update is not a new start";
  EXPECT_GE(all[0].heartbeat_at, started);

  // A registration again (a restart) says it all again.
  w.state = "draining";
  w.tokens_per_second = 0.25;
  ASSERT_TRUE(s->RegisterWorker(w).ok());
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  EXPECT_EQ(all[0].state, "draining");
  EXPECT_EQ(all[0].tokens_per_second, 0.25);

  // An update renews no lease: a lease expired stays claimable by another worker.
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup(w.id, 0, 100, &c).ok());
  ASSERT_EQ(c.requests.size(), 1u);
  ASSERT_TRUE(s->UpdateWorker(w).ok());
  auto other = this->Open(Store::Check::kSkip);
  Claim taken;
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &taken).ok());
  EXPECT_EQ(Lines(taken), (std::vector<int64_t>{1}));

  // Errors.
  Status st = s->UpdateWorker(Worker("nobody"));
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.message();
  EXPECT_NE(st.message().find("nobody"), std::string::npos) << st.message();
  ASSERT_TRUE(s->ListWorkers(&all).ok());
  EXPECT_EQ(all.size(), 1u) << "an update registers no one";
  WorkerInfo chatty = w;
  chatty.state = std::string(33, 's');
  EXPECT_EQ(s->UpdateWorker(chatty).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->RegisterWorker(chatty).code(), Status::Code::kInvalidArgument);
  chatty.state = std::string(32, 's');
  EXPECT_TRUE(s->UpdateWorker(chatty).ok());
  EXPECT_EQ(s->UpdateWorker(Worker("")).code(), Status::Code::kInvalidArgument);
}

// A worker whose Feed failed gives back the leases of what it never handed to its engine, and keeps
// those of the requests its engine runs (given back, another worker would run them too: the
// four-worker test saw 3,997 results computed for 3,992 requests).
TYPED_TEST(StoreLeaseTest, ReleasingLeasesKeepsThoseOfTheRequestsStillRunning) {
  auto s = this->Open();
  IngestGroups(s.get(), "a.jsonl", {1, 2, 3, 4}, {10, 10, 20, 20});
  auto other = this->Open(Store::Check::kSkip);
  ASSERT_TRUE(s->RegisterWorker(Worker("w1")).ok());
  ASSERT_TRUE(other->RegisterWorker(Worker("w2")).ok());
  Claim g10, g20;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &g10).ok());
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &g20).ok());
  ASSERT_EQ(Lines(g20), (std::vector<int64_t>{3, 4}));
  const int64_t job = g10.requests[0].job;
  // Lines 1 and 2 run; line 4 runs too (a claim admitted before the one that failed); 3 not.
  int64_t released = -1;
  ASSERT_TRUE(s->ReleaseLeases("w1", &released, {{job, 2}, {job, 1}, {job, 4}}).ok());
  EXPECT_EQ(released, 1) << "line 3 only";
  Claim taken;
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &taken).ok());
  EXPECT_EQ(Lines(taken), (std::vector<int64_t>{3}));
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &taken).ok());
  EXPECT_TRUE(taken.requests.empty()) << "the kept leases stay w1's";
  int64_t renewed = -1;
  ASSERT_TRUE(s->Heartbeat("w1", 3600, &renewed).ok());
  EXPECT_EQ(renewed, 3) << "lines 1, 2 and 4";
  ASSERT_TRUE(s->ReleaseLeases("w1", &released, {{job, 4}}).ok());
  EXPECT_EQ(released, 2);
  ASSERT_TRUE(s->ReleaseLeases("w1", &released).ok());
  EXPECT_EQ(released, 1) << "line 4, kept before";
}

// Drain: a worker gives its leases back; another claims them at once; the heartbeat does not take
// them again; a result under a released lease counts while no one has claimed the request since.
TYPED_TEST(StoreLeaseTest, ReleasedLeasesAreClaimableAtOnceAndNotRenewed) {
  auto s = this->Open();
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {1, 2, 3, 4, 5}, {10, 10, 20, 30, 30});
  auto other = this->Open(Store::Check::kSkip);
  ASSERT_TRUE(s->RegisterWorker(Worker("w1")).ok());
  ASSERT_TRUE(other->RegisterWorker(Worker("w2")).ok());
  Claim g10, g20, g30;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &g10).ok());
  ASSERT_EQ(Lines(g10), (std::vector<int64_t>{1, 2}));
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &g20).ok());
  ASSERT_EQ(Lines(g20), (std::vector<int64_t>{3}));
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 100, &g30).ok());
  ASSERT_EQ(Lines(g30), (std::vector<int64_t>{4, 5}));
  // w1 finishes line 4, then drains.
  int64_t added = 0, fenced = 0;
  ASSERT_TRUE(s->CommitLeasedResults("w1", {Leased(g30.requests[0], "four")}, &added).ok());
  ASSERT_EQ(added, 1);
  int64_t released = -1;
  ASSERT_TRUE(s->ReleaseLeases("w1", &released).ok());
  EXPECT_EQ(released, 3) << "lines 1, 2 and 5; not w2's line 3, not line 4 (done)";
  ASSERT_TRUE(s->ReleaseLeases("w1", &released).ok());
  EXPECT_EQ(released, 0) << "released already";
  int64_t renewed = -1;
  ASSERT_TRUE(s->Heartbeat("w1", 3600, &renewed).ok());
  EXPECT_EQ(renewed, 0) << "a released lease is not taken again";

  // w2 claims the first released group at once, under new generations.
  Claim again;
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 100, &again).ok());
  EXPECT_EQ(again.plan_group, 10);
  ASSERT_EQ(Lines(again), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(again.requests[0].lease_generation, g10.requests[0].lease_generation + 1);
  // w1's late result for line 1 is fenced; its result for line 5 (released, not claimed since)
  // still counts.
  ASSERT_TRUE(s->CommitLeasedResults(
                   "w1", {Leased(g10.requests[0], "late"), Leased(g30.requests[1], "five")}, &added,
                   &fenced)
                  .ok());
  EXPECT_EQ(added, 1);
  EXPECT_EQ(fenced, 1);
  ASSERT_TRUE(
      other
          ->CommitLeasedResults("w2",
                                {Leased(again.requests[0], "one"), Leased(again.requests[1], "two"),
                                 Leased(g20.requests[0], "three")},
                                &added, &fenced)
          .ok());
  EXPECT_EQ(added, 3);
  EXPECT_EQ(fenced, 0);
  EXPECT_EQ(Outputs(s.get(), a), (std::vector<std::string>{"one", "two", "three", "four", "five"}));
  EXPECT_EQ(s->ReleaseLeases("", &released).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(s->ReleaseLeases("never-registered", &released).ok());
  EXPECT_EQ(released, 0);
}

TYPED_TEST(StoreLeaseTest, AJobFinalizeLeaseIsOneWorkersAtATime) {
  auto s = this->Open();
  auto other = this->Open(Store::Check::kSkip);
  const int64_t a = IngestGroups(s.get(), "a.jsonl", {1}, {10});
  const int64_t b = IngestGroups(s.get(), "b.jsonl", {2}, {20});
  ASSERT_TRUE(s->RegisterWorker(Worker("w1")).ok());
  ASSERT_TRUE(other->RegisterWorker(Worker("w2")).ok());
  bool got = false;
  ASSERT_TRUE(s->ClaimJobFinalize("w1", a, 3600, &got).ok());
  EXPECT_TRUE(got) << "free";
  ASSERT_TRUE(other->ClaimJobFinalize("w2", a, 3600, &got).ok());
  EXPECT_FALSE(got) << "w1's, unexpired";
  ASSERT_TRUE(s->ClaimJobFinalize("w1", a, 3600, &got).ok());
  EXPECT_TRUE(got) << "w1's own: renewed";
  ASSERT_TRUE(other->ClaimJobFinalize("w2", b, 3600, &got).ok());
  EXPECT_TRUE(got) << "another job's lease is another lease";
  // Only the holder gives it back.
  ASSERT_TRUE(other->ReleaseJobFinalize("w2", a).ok());
  ASSERT_TRUE(other->ClaimJobFinalize("w2", a, 3600, &got).ok());
  EXPECT_FALSE(got);
  ASSERT_TRUE(s->ReleaseJobFinalize("w1", a).ok());
  ASSERT_TRUE(other->ClaimJobFinalize("w2", a, 0, &got).ok());
  EXPECT_TRUE(got) << "given back";
  // w2's lease of 0 seconds has expired: w1 takes it over.
  ASSERT_TRUE(s->ClaimJobFinalize("w1", a, 0, &got).ok());
  EXPECT_TRUE(got) << "expired";
  // A heartbeat renews it (an expired one too, while no one took it over) ...
  ASSERT_TRUE(s->Heartbeat("w1", 3600).ok());
  ASSERT_TRUE(other->ClaimJobFinalize("w2", a, 3600, &got).ok());
  EXPECT_FALSE(got) << "renewed by w1's heartbeat";
  // ... but not once given back.
  ASSERT_TRUE(s->ReleaseJobFinalize("w1", a).ok());
  ASSERT_TRUE(s->Heartbeat("w1", 3600).ok());
  ASSERT_TRUE(other->ClaimJobFinalize("w2", a, 3600, &got).ok());
  EXPECT_TRUE(got);
  // Releasing what one does not hold, or a job that does not exist, changes nothing.
  ASSERT_TRUE(s->ReleaseJobFinalize("w1", a).ok());
  ASSERT_TRUE(s->ReleaseJobFinalize("w1", 999).ok());
  ASSERT_TRUE(s->ClaimJobFinalize("w1", a, 3600, &got).ok());
  EXPECT_FALSE(got) << "still w2's";
  // ReleaseLeases keeps finalize leases.
  ASSERT_TRUE(other->ReleaseLeases("w2").ok());
  ASSERT_TRUE(s->ClaimJobFinalize("w1", a, 3600, &got).ok());
  EXPECT_FALSE(got);
  const Status st = s->ClaimJobFinalize("w1", 999, 3600, &got);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.message();
  EXPECT_FALSE(got);
  EXPECT_EQ(s->ClaimJobFinalize("", a, 3600, &got).code(), Status::Code::kInvalidArgument);
}

// Workers on several connections ask for the same finalize leases at once: each job's goes to
// exactly one of them.
TYPED_TEST(StoreLeaseTest, ConcurrentFinalizeClaimsGiveEachJobToOneWorker) {
  constexpr int kJobs = 12, kThreads = 4;
  std::vector<int64_t> jobs;
  {
    auto s = this->Open();
    for (int j = 0; j < kJobs; ++j)
      jobs.push_back(IngestGroups(s.get(), "j" + std::to_string(j) + ".jsonl", {j + 1}, {j + 1}));
  }
  std::vector<std::unique_ptr<Store>> stores;
  for (int t = 0; t < kThreads; ++t) {
    stores.push_back(this->Open(Store::Check::kSkip));
    stores.back()->SetBusyTimeout(60000);
  }
  std::vector<std::vector<int>> got(kThreads, std::vector<int>(kJobs, 0));
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // all start together
      const std::string me = "w" + std::to_string(t);
      for (int j = 0; j < kJobs; ++j) {
        bool g = false;
        if (Status st = stores[t]->ClaimJobFinalize(me, jobs[j], 3600, &g); !st.ok()) {
          errors[t] = st.message();
          return;
        }
        got[t][j] = g;
      }
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "worker " << t;
  for (int j = 0; j < kJobs; ++j) {
    int holders = 0;
    for (int t = 0; t < kThreads; ++t) holders += got[t][j];
    EXPECT_EQ(holders, 1) << "job " << j;
  }
}

// Outputs are any text: a group's rows travel together (on PostgreSQL as arrays) and come back
// byte for byte, with their metrics, in one transaction; other connections see DataVersion move.
TYPED_TEST(StoreLeaseTest, ALargeLeasedGroupKeepsEveryByteAndMovesDataVersion) {
  constexpr int kLines = 600;
  std::vector<int64_t> ranks(kLines), groups(kLines, 1);
  for (int i = 0; i < kLines; ++i) ranks[i] = i + 1;
  auto s = this->Open();
  const int64_t a = IngestGroups(s.get(), "a.jsonl", ranks, groups);
  auto watcher = this->Open(Store::Check::kSkip);
  int64_t v0 = 0, v1 = 0;
  ASSERT_TRUE(watcher->DataVersion(&v0).ok());
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, kLines, &c).ok());
  ASSERT_EQ(c.requests.size(), static_cast<size_t>(kLines));
  const std::vector<std::string> tricky = {
      "",      "NULL",       "{\"a\": \"b\\\"c\"}", "back\\slash", "{1,2}", "quote \" and comma ,",
      "é ✓ 😀", "  spaces  ", "line\\nbreak",        "}{",          "\"",    "\\"};
  std::vector<LeasedResult> results;
  std::vector<std::string> want;
  for (int i = 0; i < kLines; ++i) {
    std::string out = tricky[i % tricky.size()] + "#" + std::to_string(i);
    LeasedResult lr = Leased(c.requests[i], out);
    lr.result.is_error = i % 7 == 0;
    lr.result.metrics.queue_seconds = 0.1 * i;
    lr.result.metrics.latency_seconds = 1e-300 * (i + 1);
    lr.result.metrics.finished_at = i % 2 ? 1767218400.123456789 + i : 0;
    results.push_back(lr);
    want.push_back(out);
  }
  // Out of order, and line 5 twice: the first one counts, the second is fenced.
  std::swap(results[3], results[400]);
  LeasedResult dup = results[5];
  dup.result.output = "second";
  results.push_back(dup);
  int64_t added = 0, fenced = 0;
  ASSERT_TRUE(s->CommitLeasedResults("w1", results, &added, &fenced).ok());
  EXPECT_EQ(added, kLines);
  EXPECT_EQ(fenced, 1);
  ASSERT_TRUE(watcher->DataVersion(&v1).ok());
  EXPECT_NE(v1, v0) << "another connection's commit is seen";
  std::vector<std::string> outs;
  int i = 0;
  ASSERT_TRUE(s->ForEachResult(a, [&](int64_t line, bool is_error, std::string_view o,
                                      const ResultMetrics& m) {
                 EXPECT_EQ(line, i + 1);
                 EXPECT_EQ(is_error, i % 7 == 0) << line;
                 EXPECT_EQ(m.queue_seconds, 0.1 * i) << line;
                 EXPECT_EQ(m.latency_seconds, 1e-300 * (i + 1)) << line;
                 if (i % 2) {
                   EXPECT_EQ(m.finished_at, 1767218400.123456789 + i) << line;
                 }
                 EXPECT_GT(m.finished_at, 0) << line;
                 outs.emplace_back(o);
                 ++i;
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(outs, want);
  JobRecord job;
  ASSERT_TRUE(s->GetJob(a, &job).ok());
  EXPECT_EQ(job.failed, (kLines + 6) / 7);
  EXPECT_EQ(job.completed, kLines - job.failed);
}

// The invariant "a pending request has no result", broken behind the store's back, is named
// rather than skipped over (which would leave the request pending for ever).
TYPED_TEST(StoreLeaseTest, APendingRequestWithAResultIsCorruption) {
  auto s = this->Open();
  const int64_t a = Ingest(s.get(), "a.jsonl", {1, 2});
  this->RawExec("INSERT INTO results (job, line, is_error, output, committed_at) VALUES (" +
                std::to_string(a) + ", 2, 0, 'planted', 1)");
  const Status st = s->CommitResults({MakeResult(a, 1), MakeResult(a, 2)});
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.message();
  EXPECT_NE(st.message().find("already have a result"), std::string::npos) << st.message();
  int64_t pending = 0;
  ASSERT_TRUE(s->CountPending(a, &pending).ok());
  EXPECT_EQ(pending, 2) << "rolled back as one";
}

// Claims keep taking the lowest claimable rank after many claims (on PostgreSQL they start from a
// claim floor that they raise now and then): a job ingested later with lower ranks comes first.
TYPED_TEST(StoreLeaseTest, AfterManyClaimsALowerRankedIngestIsClaimedFirst) {
  constexpr int kLines = 40;
  std::vector<int64_t> ranks(kLines);
  for (int i = 0; i < kLines; ++i) ranks[i] = 101 + i;
  auto s = this->Open();
  IngestGroups(s.get(), "a.jsonl", ranks, ranks);
  for (int i = 0; i < 20; ++i) {
    Claim c;
    ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 10, &c).ok());
    ASSERT_EQ(c.requests.size(), 1u);
    EXPECT_EQ(c.requests[0].plan_rank, 101 + i);
    if (i % 2 == 0) {  // every other one finished; the rest stay leased
      int64_t added = 0;
      ASSERT_TRUE(s->CommitLeasedResults("w1", {Leased(c.requests[0], "x")}, &added).ok());
      ASSERT_EQ(added, 1);
    }
  }
  const int64_t b = IngestGroups(s.get(), "b.jsonl", {1, 2, 3}, {1, 1, 2});
  Claim c;
  ASSERT_TRUE(s->ClaimNextGroup("w1", 3600, 10, &c).ok());
  EXPECT_EQ(c.plan_group, 1);
  ASSERT_EQ(Lines(c), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c.requests[0].job, b);
  // w1 gives its leases back: they are claimed again lowest rank first (b's group 1, b's group
  // 2, then a.jsonl's unfinished ones from rank 102).
  ASSERT_TRUE(s->ReleaseLeases("w1").ok());
  auto other = this->Open(Store::Check::kSkip);
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 10, &c).ok());
  EXPECT_EQ(c.plan_group, 1) << "b's group 1, released";
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 10, &c).ok());
  EXPECT_EQ(c.plan_group, 2);
  ASSERT_TRUE(other->ClaimNextGroup("w2", 3600, 10, &c).ok());
  EXPECT_EQ(c.plan_group, 102) << "the lowest released lease of a.jsonl";
}

// PostgreSQL: workers beat, claim, commit and take finalize leases while an ingest holds the write
// lock (a long one would otherwise let their leases run out).
TEST(PostgresStore, WorkersNeverWaitForAnIngestsWriteLock) {
  PostgresQueue q;
  if (q.location.empty()) LLMQ_SKIP_OR_FAIL_MISSING(q.why);
  auto worker = OpenOrDie(q.location);
  ASSERT_TRUE(worker);
  const int64_t a = IngestGroups(worker.get(), "a.jsonl", {1, 2}, {10, 10});
  ASSERT_TRUE(worker->RegisterWorker(Worker("w1")).ok());
  auto ingest = OpenOrDie(q.location, Store::Check::kSkip);
  ASSERT_TRUE(ingest->Begin().ok());  // holds the write lock until its commit
  JobRecord job;
  job.name = "b.jsonl";
  job.sha256 = "b";
  ASSERT_TRUE(ingest->InsertJob(&job).ok());
  worker->SetBusyTimeout(100);
  Claim c;
  ASSERT_TRUE(worker->ClaimNextGroup("w1", 3600, 100, &c).ok());
  ASSERT_EQ(c.requests.size(), 2u);
  EXPECT_TRUE(worker->Heartbeat("w1", 3600).ok());
  EXPECT_TRUE(worker->UpdateWorker(Worker("w1", "draining")).ok());
  int64_t added = 0;
  Status st = worker->CommitLeasedResults("w1", {Leased(c.requests[0], "one")}, &added);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(added, 1);
  bool got = false;
  EXPECT_TRUE(worker->ClaimJobFinalize("w1", a, 3600, &got).ok());
  EXPECT_TRUE(got);
  EXPECT_TRUE(worker->ReleaseLeases("w1").ok());
  // Claims go on (among them one that would raise the claim floor under the write lock: it lets
  // it be).
  for (int i = 0; i < 20; ++i) {
    st = worker->ClaimNextGroup("w1", 3600, 100, &c);
    ASSERT_TRUE(st.ok()) << i << ": " << st.message();
  }
  // What ingest serializes still waits: an unleased commit takes the write lock.
  st = worker->CommitResults({MakeResult(a, 2)});
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.message();
  ASSERT_TRUE(ingest->Commit().ok());
  ASSERT_TRUE(worker->CommitResults({MakeResult(a, 2)}, &added).ok());
  EXPECT_EQ(added, 1);
}

// A worker's feeding connection counts attempts (MarkAttempted, the claim's rows in its order)
// while its heartbeat connection renews every lease of it: each locks the rows in (job, line)
// order, or the two deadlock (PostgreSQL aborts one: the four-worker test's "cannot count an
// attempt: deadlock detected", after which the worker gave its running requests away).
TEST(PostgresStore, AttemptsAndHeartbeatsOfOneWorkerNeverDeadlock) {
  PostgresQueue q;
  if (q.location.empty()) LLMQ_SKIP_OR_FAIL_MISSING(q.why);
  auto feeder = OpenOrDie(q.location);
  ASSERT_TRUE(feeder);
  std::vector<int64_t> ranks, groups;
  for (int i = 0; i < 300; ++i) {
    ranks.push_back(300 - i);  // claimed in rank order: the lines backwards
    groups.push_back(1);
  }
  IngestGroups(feeder.get(), "a.jsonl", ranks, groups);
  ASSERT_TRUE(feeder->RegisterWorker(Worker("w1")).ok());
  Claim c;
  ASSERT_TRUE(feeder->ClaimNextGroup("w1", 3600, 1000, &c).ok());
  ASSERT_EQ(c.requests.size(), 300u);
  std::vector<std::pair<int64_t, int64_t>> claimed;
  for (const PendingRequest& r : c.requests) claimed.emplace_back(r.job, r.line);
  ASSERT_GT(claimed.front().second, claimed.back().second);
  auto heart = OpenOrDie(q.location, Store::Check::kSkip);
  std::atomic<bool> done{false};
  Status beat;
  std::thread t([&] {
    while (!done.load() && beat.ok()) beat = heart->Heartbeat("w1", 3600);
  });
  Status st;
  for (int i = 0; i < 40 && st.ok(); ++i) st = feeder->MarkAttempted(claimed);
  done = true;
  t.join();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(beat.ok()) << beat.message();
}

}  // namespace
}  // namespace llmq::jobs
