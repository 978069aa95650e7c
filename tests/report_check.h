// Checks of a job report (jobs/report/job_report.h) shared by its unit test and the end-to-end
// tests: the numbers it shows by key, its well-formedness, its self-containment, its plots.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tests/xml_check.h"

namespace llmq::testing {

// data-key -> data-value of every number the report shows by key.
inline std::map<std::string, double> ReportNumbers(const std::string& html) {
  std::map<std::string, double> out;
  const std::regex re("data-key=\"([^\"]+)\" data-value=\"([^\"]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator();
       ++it)
    out[(*it)[1]] = std::strtod((*it)[2].str().c_str(), nullptr);
  return out;
}

// The report is well-formed, names nothing outside itself, has every section, and each of its
// <svg> plots that is not marked "no data" has a non-empty path beyond its axis.
inline void ExpectSoundReport(const std::string& html) {
  EXPECT_EQ(XmlProblem(html), "");
  EXPECT_FALSE(HasExternalReference(html));
  for (const char* id : {"summary", "failures", "throughput", "distributions", "ttft-by-prompt",
                         "itl-by-batch", "prefixes", "profile"})
    EXPECT_NE(html.find(std::string("<section id=\"") + id + "\">"), std::string::npos) << id;
  size_t at = 0;
  int plots = 0;
  while ((at = html.find("<svg", at)) != std::string::npos) {
    const size_t end = html.find("</svg>", at);
    ASSERT_NE(end, std::string::npos);
    const std::string svg = html.substr(at, end - at);
    ++plots;
    if (svg.find(">no data<") == std::string::npos) {
      EXPECT_TRUE(
          std::regex_search(svg, std::regex("<path class=\"(line|bars|dots)\"[^>]* d=\"[^\"]+\"")))
          << "plot " << plots << " draws nothing";
    }
    at = end;
  }
  EXPECT_EQ(plots, 7) << "throughput, four distributions, TTFT by prompt, ITL by batch";
}

// The report's numbers equal the summary JSON's: every summary key it shows, and the
// distributions' p50 / p95 (computed by the report from its own walk) equal the summary's.
inline void ExpectReportMatchesSummary(const std::string& html, const nlohmann::json& summary) {
  const auto n = ReportNumbers(html);
  int compared = 0;
  for (const auto& [key, value] : n) {
    std::string k = key;
    if (k.rfind("distribution.", 0) == 0) {
      k = k.substr(13);
      if (k.ends_with("_p99")) continue;
    }
    if (k.rfind("profile_seconds.", 0) == 0) {
      EXPECT_DOUBLE_EQ(value, summary["profile_seconds"][k.substr(16)].get<double>()) << key;
      ++compared;
      continue;
    }
    if (k == "cache_hit_rate") {
      const double p = summary["prompt_tokens"].get<double>();
      EXPECT_DOUBLE_EQ(value, p > 0 ? summary["cached_prompt_tokens"].get<double>() / p : 0);
      ++compared;
      continue;
    }
    if (!summary.contains(k)) continue;  // failures.<reason>: checked by the caller
    EXPECT_DOUBLE_EQ(value, summary[k].get<double>()) << key;
    ++compared;
  }
  EXPECT_GE(compared, 20 + 8) << "the summary's numbers and the distributions' p50 / p95";
}

}  // namespace llmq::testing
