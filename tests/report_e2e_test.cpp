// The job report end to end, with the real binary on a tiny generated model: `llmq run` writes it
// beside its output, `llmq serve` into outbox/ (unless metrics.job_reports is false), `llmq report
// JOB` on demand; each is well-formed, self-contained, draws every plot, and shows the summary's
// numbers; and opened in headless Chromium, with and without JavaScript, it draws every plot,
// asks for nothing but itself and logs no error.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tests/browser.h"
#include "tests/report_check.h"
#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::ReadText;
using testing::RunLlmq;

// 24 completions sharing a 40-word instruction, prompts growing with the line, 4 tokens each, and
// one line refused at validation.
std::string Job() {
  std::string instruction;
  for (int i = 0; i < 40; ++i) instruction += "word" + std::to_string(i % 7) + " ";
  std::string text;
  for (int i = 0; i < 24; ++i) {
    std::string doc;
    for (int k = 0; k <= i; ++k)
      doc += "doc" + std::to_string(i) + " part" + std::to_string(k) + " ";
    text += testing::CompletionLine("r" + std::to_string(i), instruction + doc, 4);
  }
  text +=
      R"({"custom_id": "bad", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": -1}})";
  return text + "\n";
}

// The report's failures add up to the summary's.
void ExpectFailuresAddUp(const std::string& html, const json& summary) {
  double failures = 0;
  for (const auto& [key, value] : testing::ReportNumbers(html))
    if (key.rfind("failures.", 0) == 0) failures += value;
  EXPECT_EQ(failures, summary["failed"].get<double>());
  EXPECT_GE(summary["failed"].get<int>(), 1);
}

// The rows of the report's "Largest shared prefixes" table when it shows the planner's groups:
// shared tokens, requests, prompt tokens saved, nesting depth.
std::vector<std::vector<int64_t>> PlannerPrefixRows(const std::string& html) {
  const size_t at = html.find("<section id=\"prefixes\">");
  if (at == std::string::npos) return {};
  const std::string section = html.substr(at, html.find("</section>", at) - at);
  const std::regex row("<tr><td>(\\d+)</td><td>(\\d+)</td><td>(\\d+)</td><td>(\\d+)</td></tr>");
  std::vector<std::vector<int64_t>> rows;
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it) {
    rows.emplace_back();
    for (int k = 1; k <= 4; ++k) rows.back().push_back(std::stoll((*it)[k].str()));
  }
  return rows;
}

class ReportRunTest : public testing::TinyModelSuite {};

// Chromium shows the report at `path` as written: every <svg> drawn (a shape of non-zero size), no
// empty path, every section's heading in the text, no request but the file itself, no console or
// page error; with JavaScript off the same (the report has none). A screenshot of the whole page
// is taken to `screenshot`. Returns the number of plots.
int ExpectChromiumDrawsEverySection(const std::string& path, const std::string& screenshot) {
  const std::string html = ReadText(path);
  int plots = 0;
  for (size_t at = 0; (at = html.find("<svg", at)) != std::string::npos; ++at) ++plots;
  const std::string url = "file://" + path;
  json pages;
  EXPECT_TRUE(testing::LoadPages({{url, screenshot, true}, {url, "", false}}, &pages));
  EXPECT_EQ(pages.size(), 2u);
  for (const json& p : pages) {
    EXPECT_EQ(p["console_errors"], json::array()) << p["console_errors"];
    EXPECT_EQ(p["page_errors"], json::array()) << p["page_errors"];
    EXPECT_EQ(p["requests"], json::array({url})) << "asked for more than itself";
    EXPECT_EQ(p["svgs"], plots);
    EXPECT_EQ(p["drawn_svgs"], plots) << "a plot the browser draws nothing of";
    EXPECT_EQ(p["empty_paths"], 0);
    const std::string text = p["text"].get<std::string>();
    for (const char* heading : {"Summary", "Failures", "Throughput", "Distributions", "TTFT", "ITL",
                                "Largest shared prefixes", "profile"})
      EXPECT_NE(text.find(heading), std::string::npos) << heading;
    EXPECT_GT(p["height"].get<int>(), 2000) << "the sections laid out one after another";
  }
  EXPECT_TRUE(fs::exists(screenshot));
  return plots;
}

TEST_F(ReportRunTest, ChromiumDrawsEveryPlotOfTheReport) {
  if (const std::string missing = testing::MissingBrowser(); !missing.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(missing);
  const std::string dir = testing::TmpDir("report_chromium");
  std::ofstream(dir + "/in.jsonl") << Job();
  const auto r =
      RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model_, "--profile"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ExpectChromiumDrawsEverySection(dir + "/out.report.html", dir + "/report.png"), 7);
  EXPECT_GT(fs::file_size(dir + "/report.png"), 50000u) << "a page of plots, not a blank one";
}

TEST_F(ReportRunTest, RunWritesTheReportBesideItsOutput) {
  const std::string dir = testing::CurrentTestDir();
  std::ofstream(dir + "/in.jsonl") << Job();
  const auto r = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/out.jsonl", "--model", model_,
                          "--summary-json", dir + "/summary.json", "--profile"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("llmq run: report: " + dir + "/out.report.html"), std::string::npos)
      << r.err;
  const std::string html = ReadText(dir + "/out.report.html");
  const json summary = json::parse(ReadText(dir + "/summary.json"));
  testing::ExpectSoundReport(html);
  testing::ExpectReportMatchesSummary(html, summary);
  ExpectFailuresAddUp(html, summary);
  EXPECT_EQ(testing::ReportNumbers(html).at("requests"), 25);
  EXPECT_NE(html.find("profile_seconds."), std::string::npos) << "--profile: the phases shown";
  // The planner's groups, recorded at ingest: the instruction the 24 valid lines share saves the
  // most (its 40 words are 40 tokens or more); groups of documents ("doc1", "doc10".."doc19") nest
  // inside it.
  const auto rows = PlannerPrefixRows(html);
  ASSERT_GE(rows.size(), 2u) << html;
  EXPECT_GE(rows[0][0], 40);
  EXPECT_EQ(rows[0][1], 24);
  EXPECT_EQ(rows[0][2], rows[0][0] * 23);
  EXPECT_EQ(rows[0][3], 1);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_GT(rows[i][0], rows[0][0]) << "nested: a longer prefix";
    EXPECT_LT(rows[i][1], 24);
    EXPECT_GE(rows[i][3], 2);
    EXPECT_LE(rows[i][2], rows[i - 1][2]) << "largest saving first";
  }

  const auto quiet = RunLlmq(
      {"run", dir + "/in.jsonl", "-o", dir + "/quiet.jsonl", "--model", model_, "--no-report"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_FALSE(fs::exists(dir + "/quiet.report.html"));
  const auto named = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/named.jsonl", "--model",
                              model_, "--report", dir + "/elsewhere.html"});
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_TRUE(fs::exists(dir + "/elsewhere.html"));
  EXPECT_FALSE(fs::exists(dir + "/named.report.html"));

  // Refused before anything runs: the report over the output, or where nothing can be written.
  auto refused = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/x.jsonl", "--model", model_,
                          "--report", dir + "/x.jsonl"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("names the same file as -o"), std::string::npos) << refused.err;
  refused = RunLlmq({"run", dir + "/in.jsonl", "-o", dir + "/y.jsonl", "--model", model_,
                     "--report", dir + "/no/such/folder/y.html"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("no/such/folder"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir + "/y.jsonl")) << "nothing was run";
}

class ReportServeTest : public testing::ServeFixture {};

TEST_F(ReportServeTest, ServeWritesEachJobsReportAndLlmqReportWritesItAgain) {
  Start();
  Drop("night.jsonl", Job());
  ASSERT_EQ(WaitResults("night").size(), 24u) << Log();  // the refused line: in .errors.jsonl
  ASSERT_TRUE(testing::WaitFor(
      [&] { return StatusOf("night.jsonl").value("status", "") == "completed"; }, 30));
  const json summary = json::parse(ReadText(outbox("night.summary.json")));
  const std::string html = ReadText(outbox("night.report.html"));
  testing::ExpectSoundReport(html);
  testing::ExpectReportMatchesSummary(html, summary);
  ExpectFailuresAddUp(html, summary);

  // On demand, from the queue and the summary's facts: the same numbers.
  const auto r = testing::RunLlmqWith(
      {}, {"report", "night.jsonl", "-o", dir_ + "/reports", "--config", config_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, dir_ + "/reports/night.report.html\n");
  const std::string again = ReadText(dir_ + "/reports/night.report.html");
  testing::ExpectSoundReport(again);
  testing::ExpectReportMatchesSummary(again, summary);
  EXPECT_EQ(testing::ReportNumbers(again), testing::ReportNumbers(html));

  const auto missing = testing::RunLlmqWith({}, {"report", "nope.jsonl", "--config", config_});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("nope.jsonl"), std::string::npos) << missing.err;
}

// What scripts/demo does (issue 29, done when 1): the sample job (jobs/examples/sample.jsonl)
// dropped into llmq serve's inbox, the daemon stopped, then `llmq report` writes the job's report
// and prints its path; the report opens in Chromium with every section drawn.
TEST_F(ReportServeTest, TheDemosSampleJobsReportOpensInChromiumWithEverySectionDrawn) {
  if (const std::string missing = testing::MissingBrowser(); !missing.empty())
    LLMQ_SKIP_OR_FAIL_MISSING(missing);
  Start();
  Drop("sample.jsonl", ReadText(std::string(LLMQ_SOURCE_DIR) + "/jobs/examples/sample.jsonl"));
  ASSERT_TRUE(testing::WaitFor(
      [&] { return StatusOf("sample.jsonl").value("status", "") == "completed"; }, 60))
      << Log();
  EXPECT_EQ(Stop(), 0) << Log();
  const auto r = testing::RunLlmqWith(
      {}, {"report", "sample.jsonl", "-o", dir_ + "/reports", "--config", config_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string path = dir_ + "/reports/sample.report.html";
  EXPECT_EQ(r.out, path + "\n");
  const std::string html = ReadText(path);
  EXPECT_FALSE(PlannerPrefixRows(html).empty()) << "the sample's shared instructions\n" << html;
  // LoadPages wipes the test's own folder (it works there): the report is looked at from a
  // folder of its own.
  const std::string apart = testing::TmpDir("report_sample_chromium");
  std::ofstream(apart + "/sample.report.html") << html;
  EXPECT_EQ(ExpectChromiumDrawsEverySection(apart + "/sample.report.html", apart + "/sample.png"),
            7);
}

TEST_F(ReportServeTest, NoReportWhenSwitchedOff) {
  testing::WriteServeConfig(config_, {.model = model_,
                                      .state = state_,
                                      .after_spool = "engine:\n  kv_cache_memory: 64MiB\n"
                                                     "metrics:\n  job_reports: false\n"});
  Start();
  Drop("quiet.jsonl", testing::GoodLine("a") + testing::GoodLine("b"));
  ASSERT_EQ(WaitResults("quiet").size(), 2u) << Log();
  EXPECT_FALSE(fs::exists(outbox("quiet.report.html")));
}

}  // namespace
}  // namespace llmq
