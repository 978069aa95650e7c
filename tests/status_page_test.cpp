// The status page (daemon/status_page.h) over a real queue: its numbers are `llmq status --json`'s
// (JobStatusJson over the same snapshot) and the store's counts; it is well-formed, names nothing
// outside the daemon, escapes what job files name, links only the reports there are.
#include "daemon/status_page.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/report_check.h"
#include "tests/status_page_check.h"
#include "tests/store_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = jobs::OpenOrDie(jobs::DbPath());
    // Finished: 3 requests, all committed; running: 4 requests, 2 committed (one failed); waiting:
    // a name that would be markup, nothing committed.
    done_ = jobs::Ingest(store_.get(), "done.jsonl", {1, 2, 3});
    running_ = jobs::Ingest(store_.get(), "running.jsonl", {4, 5, 6, 7});
    waiting_ = jobs::Ingest(store_.get(), "<b>a&b</b>\".jsonl", {8, 9});
    std::vector<jobs::Result> results = {jobs::MakeResult(done_, 1), jobs::MakeResult(done_, 2),
                                         jobs::MakeResult(done_, 3), jobs::MakeResult(running_, 1),
                                         jobs::MakeResult(running_, 2, /*is_error=*/true)};
    results[0].metrics.cached_tokens = 4;  // a cache hit rate that is not 0
    ASSERT_TRUE(store_->CommitResults(results).ok());
    ASSERT_TRUE(store_->MarkJobStarted(done_, 1000).ok());
    ASSERT_TRUE(store_->MarkJobStarted(running_, 1000).ok());
    ASSERT_TRUE(store_->SetJobStatus(done_, jobs::JobStatus::kCompleted).ok());
    ASSERT_TRUE(store_->SetJobOptions(done_, R"({"outbox": "done"})").ok());
  }

  // The page over the queue as it is, with a daemon working at 10 tokens/s.
  std::string Render(size_t max_finished = 50, StatusPageData* data = nullptr) {
    EXPECT_TRUE(ReadQueueSnapshot(store_.get(), &q_).ok());
    spool::ServeProgress p;
    p.tokens_per_second = 10;
    p.running = 3;
    p.tokens_generated = 1234;
    p.in_flight_tokens = {{"batch_x", 7}, {Record(running_).public_id, 3}};
    eta_ = EstimateQueue(q_, &p, {});
    StatusPageData d;
    d.now = q_.now;
    d.refresh_seconds = 0.25;
    d.host = "night-host";
    d.backend = "cpu (4 threads)";
    d.model = "tiny";
    std::string line;
    d.daemon = DaemonJson(eta_, &line);
    d.in_engine = p.in_flight_tokens;
    FillStatusPageJobs(
        q_, eta_, max_finished, [&](const jobs::JobRecord& j) { return j.id == done_; }, &d);
    if (data != nullptr) *data = d;
    return RenderStatusPage(d);
  }

  const jobs::JobRecord& Record(int64_t id) const {
    for (const jobs::JobRecord& j : q_.all)
      if (j.id == id) return j;
    ADD_FAILURE() << "no job " << id;
    return q_.all.front();
  }

  std::unique_ptr<jobs::Store> store_;
  int64_t done_ = 0, running_ = 0, waiting_ = 0;
  QueueSnapshot q_;
  EtaContext eta_;
};

TEST_F(StatusPageTest, ItsNumbersAreTheQueuesAndLlmqStatus) {
  const std::string html = Render();
  const auto n = testing::ReportNumbers(html);
  for (const int64_t id : {done_, running_, waiting_}) {
    const jobs::JobRecord& j = Record(id);
    const std::string k = "job." + j.public_id + ".";
    EXPECT_EQ(n.at(k + "total"), j.total);
    EXPECT_EQ(n.at(k + "completed"), j.completed);
    EXPECT_EQ(n.at(k + "failed"), j.failed);
    EXPECT_EQ(n.at(k + "done"), j.completed + j.failed);
    // `llmq status --json`'s object of the same snapshot.
    const json o = JobStatusJson(j, &q_.totals.at(id), &eta_, q_.now);
    EXPECT_DOUBLE_EQ(n.at(k + "tokens_per_second"), o["tokens_per_second"].get<double>());
    EXPECT_DOUBLE_EQ(n.at(k + "cache_hit_rate"), o["cache_hit_rate"].get<double>());
    ASSERT_TRUE(o["eta_seconds"].is_number()) << o;
    EXPECT_DOUBLE_EQ(n.at(k + "eta_seconds"), o["eta_seconds"].get<double>());
  }
  const std::string done = Record(done_).public_id, running = Record(running_).public_id;
  EXPECT_EQ(n.at("job." + done + ".done"), 3);
  EXPECT_EQ(n.at("job." + running + ".completed"), 1);
  EXPECT_EQ(n.at("job." + running + ".failed"), 1);
  EXPECT_DOUBLE_EQ(n.at("job." + done + ".cache_hit_rate"), 4.0 / 60);  // 4 of 10 + 20 + 30
  EXPECT_GT(n.at("job." + running + ".eta_seconds"), 0) << "2 requests left at 10 tokens/s";
  EXPECT_EQ(n.at("daemon.running"), 3);
  EXPECT_EQ(n.at("daemon.tokens_per_second"), 10);
  EXPECT_EQ(n.at("daemon.tokens_generated"), 1234);
  EXPECT_NE(html.find("batch_x (7 tokens in flight), " + running + " running.jsonl (3 tokens"),
            std::string::npos)
      << "the jobs in the engine, named";
  for (const char* text : {"night-host", "cpu (4 threads)", "tiny", "none: always open"})
    EXPECT_NE(html.find(text), std::string::npos) << text;
}

TEST_F(StatusPageTest, IsWellFormedSelfContainedAndRefreshesItself) {
  const std::string html = Render();
  testing::ExpectSoundStatusPage(html);
  EXPECT_NE(html.find("<body data-refresh-ms=\"250\">"), std::string::npos);
  // A job's name is text, never markup.
  EXPECT_EQ(html.find("<b>a&b"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;a&amp;b&lt;/b&gt;&quot;.jsonl"), std::string::npos);
  // A progress bar per job; the report linked only where there is one.
  for (const int64_t id : {done_, running_, waiting_})
    EXPECT_NE(html.find("id=\"progress-" + Record(id).public_id + "\""), std::string::npos);
  EXPECT_NE(html.find("<a href=\"/reports/" + Record(done_).public_id + "\">report</a>"),
            std::string::npos);
  size_t links = 0;
  for (size_t at = 0; (at = html.find("href=\"/reports/", at)) != std::string::npos; ++at) ++links;
  EXPECT_EQ(links, 1u);
}

TEST_F(StatusPageTest, ShowsTheNewestFinishedJobsAndCountsTheRest) {
  const int64_t later = jobs::Ingest(store_.get(), "later.jsonl", {10});
  ASSERT_TRUE(store_->CommitResults({jobs::MakeResult(later, 1)}).ok());
  ASSERT_TRUE(store_->SetJobStatus(later, jobs::JobStatus::kCompleted).ok());
  StatusPageData d;
  const std::string html = Render(/*max_finished=*/1, &d);
  ASSERT_EQ(d.finished.size(), 1u);
  EXPECT_EQ(d.finished[0]["id"], Record(later).public_id) << "the newest first";
  EXPECT_EQ(d.finished_left_out, 1);
  EXPECT_EQ(d.unfinished.size(), 2u);
  EXPECT_NE(html.find("1 older finished job(s) not shown"), std::string::npos);
  EXPECT_EQ(html.find("href=\"/reports/"), std::string::npos) << "the one with a report is older";
}

// Issue 27: a job naming a model that no live worker serves waits, and llmq status (and the page)
// says so; a worker serving it, or serving any model, ends the wait.
TEST(QueueStatusModels, AJobForAModelNoLiveWorkerServesSaysItWaits) {
  auto store = jobs::OpenOrDie(jobs::DbPath());
  const int64_t qwen = jobs::IngestGroups(store.get(), "q.jsonl", {1, 2}, {1, 2}, "qwen");
  const int64_t any = jobs::IngestGroups(store.get(), "n.jsonl", {3}, {3});
  const auto read = [&](QueueSnapshot* q) {
    ASSERT_TRUE(ReadQueueSnapshot(store.get(), q, SIZE_MAX, 3600).ok());
  };
  QueueSnapshot q;
  read(&q);
  ASSERT_EQ(q.waiting.count(qwen), 1u) << "no worker at all";
  EXPECT_EQ(q.waiting.at(qwen),
            "no worker serves model qwen: start one with --served-model-name qwen");
  EXPECT_EQ(q.waiting.count(any), 0u) << "a job naming no model waits for no model";
  const jobs::JobRecord& j = q.all[0];
  json o = JobStatusJson(j, nullptr, nullptr, q.now);
  AddWaiting(q, j.id, &o);
  EXPECT_EQ(o["model"], "qwen");
  EXPECT_NE(JobStatusLine(o).find("  model qwen  q.jsonl  waiting: no worker serves model qwen"),
            std::string::npos)
      << JobStatusLine(o);
  // The status page says it too, from the same snapshot.
  StatusPageData d;
  FillStatusPageJobs(
      q, EstimateQueue(q, nullptr, {}), 50, [](const jobs::JobRecord&) { return false; }, &d);
  ASSERT_EQ(d.unfinished.size(), 2u);
  EXPECT_EQ(d.unfinished[0]["waiting"], q.waiting.at(qwen));
  EXPECT_FALSE(d.unfinished[1].contains("waiting"));
  EXPECT_NE(RenderStatusPage(d).find("(waiting: no worker serves model qwen: start one with "
                                     "--served-model-name qwen)"),
            std::string::npos);

  jobs::WorkerInfo w;
  w.id = "w-llama";
  w.host = "h";
  w.state = "running";
  w.served_models = {"llama"};
  ASSERT_TRUE(store->RegisterWorker(w).ok());
  read(&q);
  EXPECT_EQ(q.waiting.count(qwen), 1u) << "a worker serving another model";
  jobs::WorkerInfo v = w;
  v.id = "w-qwen";
  v.served_models = {"llama", "qwen"};
  ASSERT_TRUE(store->RegisterWorker(v).ok());
  read(&q);
  EXPECT_EQ(q.waiting.count(qwen), 0u) << "a live worker serves it";
  v.state = "stopped";
  ASSERT_TRUE(store->UpdateWorker(v).ok());
  read(&q);
  EXPECT_EQ(q.waiting.count(qwen), 1u) << "the worker serving it stopped";
  jobs::WorkerInfo all = w;
  all.id = "w-any";
  all.served_models.clear();
  ASSERT_TRUE(store->RegisterWorker(all).ok());
  read(&q);
  EXPECT_EQ(q.waiting.count(qwen), 0u) << "a worker serving any model";

  // Live is a heartbeat within the lease: one older than that serves nothing.
  std::vector<jobs::WorkerInfo> workers;
  ASSERT_TRUE(store->ListWorkers(&workers).ok());
  ASSERT_EQ(workers.size(), 3u);
  const double beat = workers[0].heartbeat_at;
  EXPECT_EQ(JobWaiting(j, workers, beat + 60, 3600), "");
  EXPECT_NE(JobWaiting(j, workers, beat + 7200, 3600), "");
  // Nothing left to run, or cancelled: not waiting.
  jobs::JobRecord finished = j;
  finished.completed = finished.total;
  EXPECT_EQ(JobWaiting(finished, {}, beat, 3600), "");
  jobs::JobRecord cancelled = j;
  cancelled.cancel_requested = true;
  EXPECT_EQ(JobWaiting(cancelled, {}, beat, 3600), "");
}

}  // namespace
}  // namespace llmq
