// systemd/llmq-grafana-dashboard.json (issue 29): a Grafana dashboard of the daemon's Prometheus
// metrics. Every metric its PromQL names is one the daemon exports (RenderMetrics, the text of
// /metrics and the textfile), every label it matches on is one of that metric's, and the JSON has
// the shape Grafana imports: panels with a type, a place, a datasource and targets, and a
// datasource variable the panels use.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "daemon/metrics.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;

json Dashboard() {
  std::ifstream in(std::filesystem::path(LLMQ_SOURCE_DIR) / "systemd" /
                   "llmq-grafana-dashboard.json");
  return json::parse(in, nullptr, false);
}

// Each sample name of the exposition, with the label names its samples carry.
std::map<std::string, std::set<std::string>> Exported() {
  QueueTotals queue;
  EngineMetrics engine;
  engine.ObserveStep(0.01);
  engine.ObserveTtft(0.2);
  std::map<std::string, std::set<std::string>> out;
  std::istringstream text(RenderMetrics(queue, engine, 0));
  const std::regex label("([a-zA-Z_]+)=\"");
  for (std::string line; std::getline(text, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    std::set<std::string>& labels = out[line.substr(0, end)];
    if (line[end] != '{') continue;
    const std::string inside = line.substr(end + 1, line.find('}') - end - 1);
    for (auto it = std::sregex_iterator(inside.begin(), inside.end(), label);
         it != std::sregex_iterator(); ++it)
      labels.insert((*it)[1]);
  }
  return out;
}

TEST(GrafanaDashboard, NamesOnlyMetricsAndLabelsTheDaemonExports) {
  const json d = Dashboard();
  ASSERT_TRUE(d.is_object()) << "not JSON";
  const auto exported = Exported();
  ASSERT_TRUE(exported.count("llmq_queue_depth"));
  // Labels Prometheus adds to every scraped sample, and the histograms' buckets.
  const std::set<std::string> added = {"instance", "job"};
  const std::regex metric("\\b(llmq_[a-z_]+)(\\{([^}]*)\\})?");
  const std::regex matcher("([a-zA-Z_]+)\\s*(=~|!~|!=|=)");
  const std::regex by("by \\(([a-z_, ]+)\\)");
  std::set<std::string> used;
  int exprs = 0;
  for (const json& p : d["panels"])
    for (const json& t : p["targets"]) {
      const std::string e = t["expr"].get<std::string>();
      ++exprs;
      for (auto it = std::sregex_iterator(e.begin(), e.end(), metric); it != std::sregex_iterator();
           ++it) {
        const std::string name = (*it)[1];
        used.insert(name);
        ASSERT_TRUE(exported.count(name)) << name << " in " << e << " is not exported";
        const std::string matchers = (*it)[3];
        for (auto m = std::sregex_iterator(matchers.begin(), matchers.end(), matcher);
             m != std::sregex_iterator(); ++m)
          EXPECT_TRUE(added.count((*m)[1]) || exported.at(name).count((*m)[1]))
              << name << " has no label " << (*m)[1] << " (" << e << ")";
      }
      // sum by (label): a label of the metrics summed.
      for (auto it = std::sregex_iterator(e.begin(), e.end(), by); it != std::sregex_iterator();
           ++it) {
        const std::string labels = (*it)[1];
        const std::regex word("[a-z_]+");
        for (auto w = std::sregex_iterator(labels.begin(), labels.end(), word);
             w != std::sregex_iterator(); ++w) {
          bool some = added.count((*w)[0]) > 0;
          for (const std::string& name : used) some = some || exported.at(name).count((*w)[0]);
          EXPECT_TRUE(some) << "by (" << (*w)[0] << "): no metric of " << e << " has it";
        }
      }
    }
  EXPECT_GE(exprs, 12);
  // Every family the daemon exports is on the dashboard (histograms by their buckets).
  for (const char* family :
       {"llmq_jobs", "llmq_requests_total", "llmq_queue_depth", "llmq_prompt_tokens_total",
        "llmq_cached_prompt_tokens_total", "llmq_computed_prompt_tokens_total",
        "llmq_completion_tokens_total", "llmq_cache_hit_ratio", "llmq_tokens_per_second",
        "llmq_engine_requests", "llmq_kv_blocks", "llmq_step_duration_seconds_bucket",
        "llmq_time_to_first_token_seconds_bucket"})
    EXPECT_TRUE(used.count(family)) << family << " is not on the dashboard";
}

TEST(GrafanaDashboard, HasTheShapeGrafanaImports) {
  const json d = Dashboard();
  ASSERT_TRUE(d.is_object());
  EXPECT_TRUE(d["title"].is_string());
  EXPECT_TRUE(d["uid"].is_string());
  EXPECT_TRUE(d["schemaVersion"].is_number_integer());
  // The Prometheus datasource is a variable, chosen at import.
  bool datasource = false;
  for (const json& v : d["templating"]["list"])
    if (v["type"] == "datasource" && v["query"] == "prometheus") {
      EXPECT_EQ(v["name"], "datasource");
      datasource = true;
    }
  EXPECT_TRUE(datasource) << "no datasource variable";
  ASSERT_TRUE(d["panels"].is_array());
  ASSERT_GE(d["panels"].size(), 8u);
  std::set<int> ids;
  for (const json& p : d["panels"]) {
    const std::string title = p.value("title", "");
    EXPECT_FALSE(title.empty());
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "panel ids are unique";
    EXPECT_TRUE(p["type"] == "timeseries" || p["type"] == "stat") << title;
    for (const char* k : {"x", "y", "w", "h"}) EXPECT_TRUE(p["gridPos"][k].is_number()) << title;
    EXPECT_LE(p["gridPos"]["x"].get<int>() + p["gridPos"]["w"].get<int>(), 24) << title;
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << title;
    ASSERT_TRUE(p["targets"].is_array()) << title;
    ASSERT_FALSE(p["targets"].empty()) << title;
    std::set<std::string> refs;
    for (const json& t : p["targets"]) {
      EXPECT_FALSE(t.value("expr", "").empty()) << title;
      EXPECT_TRUE(refs.insert(t.value("refId", "")).second) << title << ": refIds are unique";
      EXPECT_EQ(t["datasource"]["uid"], "${datasource}") << title;
    }
  }
}

}  // namespace
}  // namespace llmq
