// config/knobs.h: every key of the config file is in the table, told apart from every other, and
// marked reloadable exactly when SIGHUP applies it.
#include "config/knobs.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace llmq {
namespace {

// A value other than the default for every key, as a YAML line of its section.
const std::map<std::string, std::string>& Samples() {
  static const std::map<std::string, std::string> s = {
      {"model.path", "/models/x"},
      {"model.name", "x"},
      {"model.served_names", "[\"x\", \"y\"]"},
      {"model.chat_template", "chatml"},
      {"model.tool_call_format", "mistral"},
      {"model.reasoning_parser", "qwen3"},
      {"engine.block_size", "32"},
      {"engine.max_num_seqs", "7"},
      {"engine.max_num_batched_tokens", "999"},
      {"engine.kv_cache_memory", "1GiB"},
      {"engine.enable_prefix_caching", "false"},
      {"engine.enable_planner", "false"},
      {"engine.shared_prefix_attention", "false"},
      {"engine.backend", "cpu"},
      {"engine.precision", "fp32"},
      {"engine.weight_dtype", "int8"},
      {"engine.kv_dtype", "bf16"},
      {"engine.gpu_memory_utilization", "0.5"},
      {"engine.device", "3"},
      {"engine.cpu_threads", "3"},
      {"spool.state_dir", "/srv/llmq"},
      {"spool.settle_seconds", "3"},
      {"spool.group_window_ms", "70"},
      {"spool.rescan_seconds", "9"},
      {"spool.max_file_bytes", "1MiB"},
      {"spool.max_line_bytes", "2MiB"},
      {"spool.drain_seconds", "4"},
      {"spool.commit_interval_ms", "80"},
      {"queue.url", "postgresql://llmq@db.example/llmq"},
      {"queue.lease_seconds", "15"},
      {"metrics.textfile", "/srv/m.prom"},
      {"metrics.interval_seconds", "2"},
      {"metrics.http_port", "9400"},
      {"metrics.job_reports", "false"},
      {"serve.run_windows", "[\"22:00-06:00\"]"},
  };
  return s;
}

LlmqConfig Parse(const std::string& key, const std::string& value) {
  const size_t dot = key.find('.');
  LlmqConfig c;
  const Status st = ParseConfig(
      key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + value + "\n", "knobs.yaml", &c);
  EXPECT_TRUE(st.ok()) << key << ": " << st.message();
  return c;
}

TEST(Knobs, EveryKeyIsListedOnceAndToldApart) {
  std::set<std::string> listed;
  for (const Knob& k : Knobs()) EXPECT_TRUE(listed.insert(k.key).second) << k.key << " twice";
  std::set<std::string> sampled;
  for (const auto& [key, value] : Samples()) sampled.insert(key);
  EXPECT_EQ(listed, sampled) << "a sample for every key of the table";
  const LlmqConfig defaults;
  for (const auto& [key, value] : Samples()) {
    EXPECT_EQ(ChangedKeys(defaults, Parse(key, value), false), std::vector<std::string>{key});
    EXPECT_TRUE(ChangedKeys(Parse(key, value), Parse(key, value), false).empty()) << key;
  }
}

TEST(Knobs, ARestartIsNeededForAllButTheSpoolTimingsAndTheRunWindows) {
  const std::set<std::string> reloadable = {"spool.settle_seconds",     "spool.group_window_ms",
                                            "spool.rescan_seconds",     "spool.max_file_bytes",
                                            "spool.max_line_bytes",     "spool.drain_seconds",
                                            "spool.commit_interval_ms", "serve.run_windows"};
  for (const Knob& k : Knobs()) EXPECT_EQ(k.reloadable, reloadable.count(k.key) > 0) << k.key;
  LlmqConfig a, b;
  ASSERT_TRUE(ParseConfig("engine:\n  max_num_seqs: 8\nspool:\n  settle_seconds: 2\nmetrics:\n"
                          "  http_port: 9000\n",
                          "b.yaml", &b)
                  .ok());
  EXPECT_EQ(ChangedKeys(a, b, /*restart_only=*/true),
            (std::vector<std::string>{"engine.max_num_seqs", "metrics.http_port"}));
  EXPECT_EQ(ChangedKeys(a, b, false),
            (std::vector<std::string>{"engine.max_num_seqs", "spool.settle_seconds",
                                      "metrics.http_port"}));
}

}  // namespace
}  // namespace llmq
