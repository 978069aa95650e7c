// jobs/report/job_report: the collector's reasons, the derived batch sizes and buckets, and the
// rendered document (well-formed, self-contained, every section, its numbers the summary's).
#include "jobs/report/job_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "jobs/shared_prefixes.h"
#include "tests/report_check.h"

namespace llmq::jobs::report {
namespace {

using Timing = ReportCollector::Timing;

// A request accepted at `accepted`, admitted `queue` later, first token `ttft` after that,
// finished at `finished`.
Timing At(double accepted, double queue, double ttft, double finished) {
  Timing t;
  t.queue = queue;
  t.ttft = ttft;
  t.latency = finished - accepted;
  t.finished_at = finished;
  t.completion_tokens = 10;
  return t;
}

TEST(MeanBatchSizes, CountsTheRequestsRunningDuringEachDecode) {
  // a runs [0, 10] (decode [1, 10]); b runs [5, 10] (decode [6, 10]); c runs [20, 30] alone.
  const std::vector<Timing> ts = {At(0, 0, 1, 10), At(0, 5, 1, 10), At(20, 0, 1, 30),
                                  Timing{}};  // no finish time
  const std::vector<double> m = MeanBatchSizes(ts);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_NEAR(m[0], (4 * 1 + 5 * 2) / 9.0, 1e-12) << "alone for 4 s, then beside b for 5 s";
  EXPECT_NEAR(m[1], 2, 1e-12);
  EXPECT_NEAR(m[2], 1, 1e-12);
  EXPECT_EQ(m[3], -1);
}

TEST(BucketBy, EqualWidthBucketsWithTheirPercentiles) {
  const std::vector<double> x = {0, 1, 2, 9, 10};
  const std::vector<double> y = {1, 2, 3, 7, 9};
  const std::vector<Bucket> b = BucketBy(x, y, 2);  // [0, 5) and [5, 10]
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].requests, 3);
  EXPECT_EQ(b[0].p50, 2);
  EXPECT_EQ(b[0].p95, 3);
  EXPECT_EQ(b[1].requests, 2);
  EXPECT_EQ(b[1].lo, 5);
  EXPECT_EQ(b[1].hi, 10);
  EXPECT_EQ(b[1].p50, 7);
  EXPECT_EQ(BucketBy({4, 4}, {1, 2}, 8).size(), 1u) << "one x: one bucket";
  const std::vector<Bucket> ranged = BucketBy({9, 10}, {7, 9}, 2, 0, 10);
  ASSERT_EQ(ranged.size(), 1u) << "the range's buckets, whatever the values";
  EXPECT_EQ(ranged[0].lo, 5);
  EXPECT_TRUE(BucketBy({}, {}, 8).empty());
}

TEST(ReportCollector, GroupsFailuresByReasonWithTheFirstMessages) {
  ReportCollector c;
  ResultMetrics m;
  for (int i = 0; i < 5; ++i)
    c.Add(
        true,
        R"({"id":"x","custom_id":"a","response":null,"error":{"code":"engine_error","message":"boom )" +
            std::to_string(i) + "\"}}",
        m);
  c.Add(
      true,
      R"({"id":"y","custom_id":"b","response":{"status_code":400,"request_id":"r","body":{"error":{"message":"max_tokens too big","type":"invalid_request_error","param":"max_tokens","code":null}}},"error":null})",
      m);
  c.Add(true, "not json", m);
  c.Add(true, R"({"response":{"status_code":"x","body":{"error":{"message":7}}},"error":null})", m);
  m.prompt_tokens = 7;
  c.Add(false, "{}", m);
  const auto f = c.Failures();
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].reason, "engine_error");
  EXPECT_EQ(f[0].count, 5);
  EXPECT_EQ(f[0].first, (std::vector<std::string>{"boom 0", "boom 1", "boom 2"}));
  EXPECT_EQ(f[1].reason, "HTTP 400 invalid_request_error");
  EXPECT_EQ(f[1].first, std::vector<std::string>{"max_tokens too big"});
  EXPECT_EQ(f[2].reason, "unknown");
  EXPECT_EQ(f[3].reason, "HTTP ?") << "odd shapes are named, never thrown on";
  ASSERT_EQ(c.successes().size(), 1u);
  EXPECT_EQ(c.successes()[0].prompt_tokens, 7);
}

// 40 requests over 20 s, prompts of 100..4000 tokens (TTFT rising with them), one failure.
struct Job {
  JobSummary summary;
  ReportCollector data;
};
Job MakeJob() {
  Job j;
  std::vector<double> queue, ttft, itl, latency;
  for (int i = 0; i < 40; ++i) {
    ResultMetrics m;
    m.prompt_tokens = 100 + 100 * i;
    m.cached_tokens = i % 2 ? 64 : 0;
    m.computed_tokens = m.prompt_tokens - m.cached_tokens;
    m.completion_tokens = 20;
    m.queue_seconds = 0.01 * (i % 7);
    m.ttft_seconds = 0.001 * m.prompt_tokens;
    m.itl_seconds = 0.02 + 0.0001 * (i % 5);
    m.latency_seconds = m.queue_seconds + m.ttft_seconds + 19 * m.itl_seconds;
    m.finished_at = 1000 + 0.5 * i + m.latency_seconds;
    j.data.Add(false, "{}", m);
    queue.push_back(m.queue_seconds);
    ttft.push_back(m.ttft_seconds);
    itl.push_back(m.itl_seconds);
    latency.push_back(m.latency_seconds);
    j.summary.prompt_tokens += m.prompt_tokens;
    j.summary.cached_tokens += m.cached_tokens;
    j.summary.computed_tokens += m.computed_tokens;
    j.summary.completion_tokens += m.completion_tokens;
  }
  j.data.Add(true, R"({"error":{"code":"engine_error","message":"x <y> & z"}})", ResultMetrics{});
  JobSummary& s = j.summary;
  s.requests = 41;
  s.completed = 40;
  s.failed = 1;
  s.wall_seconds = 21;
  s.output_tokens_per_second = 800.0 / 21;
  SetPercentiles(queue, ttft, itl, latency, &s);
  s.model = "tiny <model>";
  s.profile_seconds = {{"forward", 1.5}, {"sample", 0.25}};
  return j;
}

TEST(JobReport, IsSoundSelfContainedAndShowsTheSummarysNumbers) {
  const Job j = MakeJob();
  const std::string html =
      RenderJobReport(j.summary, j.data, "batch_0123", "docs & <more>.jsonl", "{}");
  testing::ExpectSoundReport(html);
  testing::ExpectReportMatchesSummary(html, nlohmann::json::parse(j.summary.ToJson()));
  const auto n = testing::ReportNumbers(html);
  EXPECT_EQ(n.at("failures.engine_error"), 1);
  EXPECT_NEAR(n.at("cache_hit_rate"), double(20 * 64) / double(j.summary.prompt_tokens), 1e-12);
  EXPECT_EQ(n.at("profile_seconds.forward"), 1.5);
  EXPECT_NE(html.find("docs &amp; &lt;more&gt;.jsonl"), std::string::npos);
  EXPECT_NE(html.find("x &lt;y&gt; &amp; z"), std::string::npos) << "the failure's message";
  EXPECT_NE(html.find("<th>ITL p50</th>"), std::string::npos) << "the seed-004 table's ITL";
  EXPECT_NE(html.find("<td>64</td><td>20</td><td>1280</td>"), std::string::npos)
      << "20 requests reused a 64-token prefix, saving 1280 prompt tokens";
  EXPECT_NE(html.find("ingested before the planner&#39;s groups were recorded"), std::string::npos)
      << "options without prefix_groups: the cached-token grouping, and the note says why";
}

// A job whose planner groups ingest recorded (jobs/shared_prefixes.h): a chat opening shared by
// all 40 requests, a system prompt over 30 of them, two templates inside it (20 and 10).
TEST(JobReport, ShowsThePlannersSharedPrefixGroupsWhenRecorded) {
  const Job j = MakeJob();
  const std::string options = WithSharedPrefixes(
      R"({"source":"inbox"})", {{500, 20, 3}, {300, 30, 2}, {450, 10, 3}, {4, 40, 1}});
  const std::string html = RenderJobReport(j.summary, j.data, "batch_0123", "docs.jsonl", options);
  testing::ExpectSoundReport(html);
  const size_t at = html.find("<section id=\"prefixes\">");
  ASSERT_NE(at, std::string::npos);
  const std::string section = html.substr(at, html.find("</section>", at) - at);
  EXPECT_NE(section.find("<th>nesting depth</th>"), std::string::npos) << section;
  // shared tokens, requests, saved = shared x (requests - 1), depth; in the recorded order.
  const std::vector<std::string> rows = {"<td>500</td><td>20</td><td>9500</td><td>3</td>",
                                         "<td>300</td><td>30</td><td>8700</td><td>2</td>",
                                         "<td>450</td><td>10</td><td>4050</td><td>3</td>",
                                         "<td>4</td><td>40</td><td>156</td><td>1</td>"};
  size_t last = 0;
  for (const std::string& row : rows) {
    const size_t found = section.find(row);
    ASSERT_NE(found, std::string::npos) << row << "\n" << section;
    EXPECT_GT(found, last) << row;
    last = found;
  }
  EXPECT_EQ(section.find("<td>64</td><td>20</td><td>1280</td>"), std::string::npos)
      << "not the cached-token grouping";
  EXPECT_EQ(section.find("ingested before"), std::string::npos);
  const std::string none =
      RenderJobReport(j.summary, j.data, "batch_0123", "docs.jsonl", WithSharedPrefixes("{}", {}));
  EXPECT_NE(none.find("No two requests of the job share a prompt prefix."), std::string::npos);
}

TEST(JobReport, TtftTableRisesWithPromptLength) {
  const Job j = MakeJob();
  std::vector<double> prompt, ttft;
  for (const Timing& t : j.data.successes()) {
    prompt.push_back(double(t.prompt_tokens));
    ttft.push_back(t.ttft);
  }
  const std::vector<Bucket> b = BucketBy(prompt, ttft, 8);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_GT(b[i].p50, b[i - 1].p50);
}

TEST(JobReport, NonFiniteTimingsAreLeftOutNotFatal) {
  Job j = MakeJob();
  ResultMetrics m;
  m.prompt_tokens = 5;
  m.completion_tokens = 3;
  m.latency_seconds = INFINITY;
  m.ttft_seconds = INFINITY;
  m.finished_at = 1000;
  j.data.Add(false, "{}", m);
  EXPECT_EQ(MeanBatchSizes(j.data.successes()).back(), -1);
  const std::string html = RenderJobReport(j.summary, j.data, "batch_0123", "docs.jsonl", "{}");
  EXPECT_EQ(testing::XmlProblem(html), "");
}

TEST(JobReport, AJobWithoutResultsStillRendersEverySection) {
  JobSummary s;
  ReportCollector none;
  const std::string html = RenderJobReport(s, none, "batch_x", "empty.jsonl", "");
  EXPECT_EQ(testing::XmlProblem(html), "");
  EXPECT_FALSE(testing::HasExternalReference(html));
  EXPECT_NE(html.find("No request failed."), std::string::npos);
  EXPECT_NE(html.find("Not recorded"), std::string::npos);
}

}  // namespace
}  // namespace llmq::jobs::report
