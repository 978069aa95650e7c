// Tests for jobs/finalizer: a real store's results written to real files, split or in place,
// the summary's numbers, and refusals before anything is written.
#include "jobs/finalizer.h"
#include "tests/report_check.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmq::jobs {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A job of 6 lines: line 2 refused at ingest, line 5 failed in the engine, lines 1, 3, 4, 6
// succeeded (committed out of order); line k's metrics are multiples of k.
struct Fixture {
  std::string dir;
  std::unique_ptr<Store> store;
  int64_t job = 0;
};

Fixture Make() {
  Fixture f;
  f.dir = testing::CurrentTestDir();
  EXPECT_TRUE(Store::Open(f.dir + "/queue.db", &f.store).ok());
  Store& s = *f.store;
  EXPECT_TRUE(s.Begin().ok());
  JobRecord job;
  job.name = "docs.jsonl";
  job.sha256 = "sha";
  EXPECT_TRUE(s.InsertJob(&job).ok());
  for (int i = 1; i <= 6; ++i) {
    NewRequest r;
    r.line = i;
    r.plan_rank = i;
    r.body = "{}";
    if (i == 2) r.error_output = "{\"error\": \"line 2: no custom_id\"}";
    EXPECT_TRUE(s.InsertRequest(job.id, r).ok());
  }
  EXPECT_TRUE(s.FinishIngest(job.id, JobStatus::kInProgress).ok());
  EXPECT_TRUE(s.Commit().ok());
  std::vector<Result> results;
  for (int line : {6, 3, 5, 1, 4}) {
    Result r;
    r.job = job.id;
    r.line = line;
    r.is_error = line == 5;
    r.output =
        r.is_error ? "{\"error\": \"line 5: failed\"}" : "{\"ok\": " + std::to_string(line) + "}";
    r.metrics.prompt_tokens = 100 * line;
    r.metrics.cached_tokens = 10 * line;
    r.metrics.computed_tokens = 90 * line;
    r.metrics.completion_tokens = line;
    r.metrics.queue_seconds = 1.0 * line;
    r.metrics.ttft_seconds = 0.1 * line;
    r.metrics.itl_seconds = 0.01 * line;
    r.metrics.latency_seconds = 2.0 * line;
    results.push_back(r);
  }
  EXPECT_TRUE(s.CommitResults(results).ok());
  f.job = job.id;
  return f;
}

TEST(Finalizer, SplitsErrorsAndWritesEverythingInLineOrder) {
  Fixture f = Make();
  FinalizeTargets t{f.dir + "/out/docs.results.jsonl", f.dir + "/out/docs.errors.jsonl",
                    f.dir + "/out/docs.summary.json"};
  fs::create_directories(f.dir + "/out");
  JobSummary sum;
  sum.wall_seconds = 2;
  sum.resumed = 1;
  sum.model = "tiny";
  sum.input = "inbox/docs.jsonl";
  const Status st = FinalizeJob(f.store.get(), f.job, t, &sum);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(ReadAll(t.results), "{\"ok\": 1}\n{\"ok\": 3}\n{\"ok\": 4}\n{\"ok\": 6}\n");
  EXPECT_EQ(ReadAll(t.errors),
            "{\"error\": \"line 2: no custom_id\"}\n{\"error\": \"line 5: failed\"}\n");
  EXPECT_EQ(sum.requests, 6);
  EXPECT_EQ(sum.completed, 4);
  EXPECT_EQ(sum.failed, 2);
  EXPECT_EQ(sum.resumed, 1) << "the caller's";
  EXPECT_EQ(sum.prompt_tokens, 100 * (1 + 3 + 4 + 5 + 6));  // the refused line has no tokens
  EXPECT_EQ(sum.cached_tokens, 10 * 19);
  EXPECT_EQ(sum.computed_tokens, 90 * 19);
  EXPECT_EQ(sum.completion_tokens, 19);
  EXPECT_DOUBLE_EQ(sum.output_tokens_per_second, 9.5);
  // Successful lines 1, 3, 4, 6: nearest rank p50 = 2nd (3), p95 = 4th (6).
  EXPECT_DOUBLE_EQ(sum.queue_p50, 3.0);
  EXPECT_DOUBLE_EQ(sum.queue_p95, 6.0);
  EXPECT_DOUBLE_EQ(sum.ttft_p50, 0.3);
  EXPECT_DOUBLE_EQ(sum.ttft_p95, 0.6);
  EXPECT_DOUBLE_EQ(sum.itl_p50, 0.03);
  EXPECT_DOUBLE_EQ(sum.itl_p95, 0.06);
  EXPECT_DOUBLE_EQ(sum.latency_p50, 6.0);
  EXPECT_DOUBLE_EQ(sum.latency_p95, 12.0);
  EXPECT_EQ(sum.output, t.results);
  EXPECT_EQ(sum.errors, t.errors);

  const auto j = nlohmann::json::parse(ReadAll(t.summary));
  EXPECT_EQ(j["requests"], 6);
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["failed"], 2);
  EXPECT_EQ(j["resumed"], 1);
  EXPECT_EQ(j["cached_prompt_tokens"], 190);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["input"], "inbox/docs.jsonl");
  EXPECT_EQ(j["output"], t.results);
  EXPECT_DOUBLE_EQ(j["latency_seconds_p95"].get<double>(), 12.0);
  EXPECT_EQ(ReadAll(t.summary), sum.ToJson() + "\n");
  EXPECT_EQ(sum.ToJson().rfind("{\n  \"requests\": 6,\n  \"completed\": 4,", 0), 0u)
      << "ordered keys, 2-space indent";
  const std::string text = sum.ToText();
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_NE(text.find("requests 6 (completed 4, failed 2, resumed 1)"), std::string::npos) << text;
  // Only the three targets, no temporary files.
  EXPECT_EQ(std::distance(fs::directory_iterator(f.dir + "/out"), fs::directory_iterator()), 3);
}

TEST(Finalizer, ErrorLinesInPlaceWithoutSummary) {
  Fixture f = Make();
  const std::string out = f.dir + "/results.jsonl";
  JobSummary sum;
  ASSERT_TRUE(FinalizeJob(f.store.get(), f.job, {out, "", ""}, &sum).ok());
  EXPECT_EQ(ReadAll(out),
            "{\"ok\": 1}\n{\"error\": \"line 2: no custom_id\"}\n{\"ok\": 3}\n{\"ok\": 4}\n"
            "{\"error\": \"line 5: failed\"}\n{\"ok\": 6}\n");
  EXPECT_EQ(sum.failed, 2);
  EXPECT_EQ(sum.output_tokens_per_second, 0) << "no wall time given";
  EXPECT_EQ(sum.errors, "");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(f.dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"queue.db", "queue.db-shm", "queue.db-wal", "results.jsonl"}))
      << "no summary, no temporary file";
}

TEST(Finalizer, RefusesBeforeWritingAnything) {
  Fixture f = Make();
  const std::string out = f.dir + "/results.jsonl";
  JobSummary sum;
  Status st = FinalizeJob(f.store.get(), f.job, {out, out, ""}, &sum);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  st = FinalizeJob(f.store.get(), f.job, {out, "", "", DurableFile::kUmaskMode, out}, &sum);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << "the report over the results";
  st = FinalizeJob(f.store.get(), f.job, {out, "", "/etc/passwd/summary.json"}, &sum);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/etc/passwd/summary.json"), std::string::npos) << st.message();
  st = FinalizeJob(f.store.get(), f.job, {f.dir + "/missing/results.jsonl", "", ""}, &sum);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing/results.jsonl"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(out)) << "nothing written when a target is refused";
  st = FinalizeJob(f.store.get(), f.job + 7, {out, "", ""}, &sum);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.message();
}

// The report is written with the results, before the summary, and shows the summary's numbers
// (its distributions computed from its own copy of the results).
TEST(Finalizer, WritesTheReportWithTheSummarysNumbers) {
  Fixture f = Make();
  FinalizeTargets t{f.dir + "/docs.results.jsonl", "", f.dir + "/docs.summary.json",
                    DurableFile::kUmaskMode, f.dir + "/docs.report.html"};
  JobSummary sum;
  sum.wall_seconds = 4;
  sum.profile_seconds = {{"forward", 2.5}};
  const Status st = FinalizeJob(f.store.get(), f.job, t, &sum);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::string html = ReadAll(t.report);
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(t.summary));
  testing::ExpectSoundReport(html);
  testing::ExpectReportMatchesSummary(html, summary);
  EXPECT_EQ(testing::ReportNumbers(html).at("failures.unknown"), 2)
      << "the refused line and the engine's failure (lines whose error is no object)";
  EXPECT_DOUBLE_EQ(testing::ReportNumbers(html).at("distribution.ttft_seconds_p99"), 0.6);
}

TEST(Finalizer, SummarizeJobCountsAsFinalizeJobWithoutWriting) {
  Fixture f = Make();
  FinalizeTargets t{f.dir + "/docs.results.jsonl", "", ""};
  JobSummary written, counted;
  ASSERT_TRUE(FinalizeJob(f.store.get(), f.job, t, &written).ok());
  int lines = 0;
  ASSERT_TRUE(SummarizeJob(f.store.get(), f.job, &counted,
                           [&](int64_t, bool, std::string_view, const ResultMetrics&) {
                             ++lines;
                             return Status::Ok();
                           })
                  .ok());
  EXPECT_EQ(lines, 6);
  counted.output = written.output;
  EXPECT_EQ(counted.ToJson(), written.ToJson());
  EXPECT_FALSE(fs::exists(f.dir + "/docs.summary.json"));
}

TEST(Finalizer, ReadSummaryFactsTakesBackWhatTheCallerSet) {
  JobSummary s;
  s.model = "m";
  s.backend = "cpu";
  s.cpu_threads = 3;
  s.input = "in.jsonl";
  s.resumed = 2;
  s.refused = 1;
  s.finished_this_run = 5;
  s.wall_seconds = 1.25;
  s.output_tokens_per_second = 8.5;
  s.profile_seconds = {{"forward", 1.0}, {"sample", 0.5}};
  s.requests = 99;
  JobSummary back;
  ASSERT_TRUE(ReadSummaryFacts(s.ToJson(), &back).ok());
  EXPECT_EQ(back.requests, 0) << "counted fields are the walk's, not read back";
  back.requests = 99;
  EXPECT_EQ(back.ToJson(), s.ToJson());
  EXPECT_FALSE(ReadSummaryFacts("[1]", &back).ok());
}

TEST(Finalizer, NearestRankPercentile) {
  EXPECT_EQ(NearestRankPercentile({}, 0.5), 0);
  EXPECT_EQ(NearestRankPercentile({7}, 0.5), 7);
  EXPECT_EQ(NearestRankPercentile({7}, 0.95), 7);
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(NearestRankPercentile(v, 0.5), 10);   // rank ceil(10) = 10
  EXPECT_EQ(NearestRankPercentile(v, 0.95), 19);  // rank ceil(19) = 19
  EXPECT_EQ(NearestRankPercentile(v, 0.96), 20);  // rank ceil(19.2) = 20
  EXPECT_EQ(NearestRankPercentile(v, 0), 1);      // clamped to rank 1
}

// Every field a summary can have is defined in the README's table (issue 23, row 9).
TEST(Finalizer, EverySummaryFieldIsDefinedInTheReadme) {
  JobSummary sum;
  sum.preemptions = 0;
  sum.kv_blocks_peak = sum.kv_blocks_touched = 0;
  sum.profile_seconds = {{"forward", 1.0}};
  const nlohmann::json j = nlohmann::json::parse(sum.ToJson());
  const std::string readme = ReadAll(std::string(LLMQ_SOURCE_DIR) + "/README.md");
  const size_t table = readme.find("| field | meaning |");
  ASSERT_NE(table, std::string::npos);
  const std::string defined = readme.substr(table, readme.find("\n\n", table) - table);
  for (const auto& [key, value] : j.items())
    EXPECT_NE(defined.find("`" + key + "`"), std::string::npos) << key << " is not in the README";
}

}  // namespace
}  // namespace llmq::jobs
