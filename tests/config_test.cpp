#include "config/config.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "tests/test_util.h"

namespace llmq {
namespace {

void ExpectDefaults(const LlmqConfig& c) {
  const LlmqConfig d;
  EXPECT_EQ(c.model_dir, d.model_dir);
  EXPECT_EQ(c.chat_template, d.chat_template);
  EXPECT_EQ(c.tool_call_format, d.tool_call_format);
  EXPECT_EQ(c.reasoning_parser, d.reasoning_parser);
  EXPECT_EQ(c.model_name, d.model_name);
  EXPECT_EQ(c.block_size, d.block_size);
  EXPECT_EQ(c.max_num_seqs, d.max_num_seqs);
  EXPECT_EQ(c.max_num_batched_tokens, d.max_num_batched_tokens);
  EXPECT_EQ(c.kv_cache_bytes, d.kv_cache_bytes);
  EXPECT_EQ(c.enable_prefix_caching, d.enable_prefix_caching);
  EXPECT_EQ(c.enable_planner, d.enable_planner);
  EXPECT_EQ(c.backend, d.backend);
  EXPECT_EQ(c.precision, d.precision);
  EXPECT_EQ(c.weight_dtype, d.weight_dtype);
  EXPECT_EQ(c.kv_dtype, d.kv_dtype);
  EXPECT_EQ(c.gpu_memory_utilization, d.gpu_memory_utilization);
  EXPECT_EQ(c.cpu_threads, d.cpu_threads);
  EXPECT_EQ(c.state_dir, d.state_dir);
  EXPECT_EQ(c.settle_seconds, d.settle_seconds);
  EXPECT_EQ(c.group_window_ms, d.group_window_ms);
  EXPECT_EQ(c.rescan_seconds, d.rescan_seconds);
  EXPECT_EQ(c.max_file_bytes, d.max_file_bytes);
  EXPECT_EQ(c.drain_seconds, d.drain_seconds);
  EXPECT_EQ(c.commit_interval_ms, d.commit_interval_ms);
  EXPECT_EQ(c.job_reports, d.job_reports);
}

// Parses `yaml` as "t.yaml" and returns the error message ("" when it parsed).
std::string ParseError(const std::string& yaml) {
  LlmqConfig c;
  const Status st = ParseConfig(yaml, "t.yaml", &c);
  if (st.ok()) return "";
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.message();
  return st.message();
}

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ConfigTest, ExampleFileLoadsAsDefaults) {
  const std::string example =
      (std::filesystem::path(LLMQ_SOURCE_DIR) / "config" / "llmq.example.yaml").string();
  ASSERT_TRUE(std::filesystem::exists(example)) << example;
  LlmqConfig c;
  c.block_size = 1;  // LoadConfig starts from the defaults, not from *out
  const Status st = LoadConfig(example, &c);
  ASSERT_TRUE(st.ok()) << st.message();
  ExpectDefaults(c);

  // Every key of the schema appears in the example (a change to one key shows up here).
  std::ifstream in(example);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* key : {"model:",
                          "path:",
                          "name:",
                          "chat_template:",
                          "tool_call_format:",
                          "reasoning_parser:",
                          "engine:",
                          "block_size:",
                          "max_num_seqs:",
                          "max_num_batched_tokens:",
                          "kv_cache_memory:",
                          "enable_prefix_caching:",
                          "enable_planner:",
                          "shared_prefix_attention:",
                          "backend:",
                          "precision:",
                          "weight_dtype:",
                          "kv_dtype:",
                          "gpu_memory_utilization:",
                          "device:",
                          "cpu_threads:",
                          "spool:",
                          "state_dir:",
                          "settle_seconds:",
                          "group_window_ms:",
                          "rescan_seconds:",
                          "max_file_bytes:",
                          "max_line_bytes:",
                          "drain_seconds:",
                          "commit_interval_ms:",
                          "queue:",
                          "url:",
                          "metrics:",
                          "textfile:",
                          "interval_seconds:",
                          "http_port:",
                          "job_reports:",
                          "serve:",
                          "run_windows:"}) {
    EXPECT_NE(text.find(key), std::string::npos) << key;
  }
}

TEST(ConfigTest, EmptyFileGivesDefaults) {
  for (const char* yaml : {"", "\n", "# only a comment\n", "---\n", "~\n", "engine:\n",
                           "model:\nengine:\nspool:\n", "engine: {}\n"}) {
    LlmqConfig c;
    c.max_num_seqs = 3;
    const Status st = ParseConfig(yaml, "t.yaml", &c);
    ASSERT_TRUE(st.ok()) << "'" << yaml << "': " << st.message();
    ExpectDefaults(c);
  }
  const std::string dir = testing::TmpDir("config_empty");
  LlmqConfig c;
  ASSERT_TRUE(LoadConfig(WriteFile(dir, "empty.yaml", ""), &c).ok());
  ExpectDefaults(c);
}

TEST(ConfigTest, EachKeyParsed) {
  const std::string yaml = R"(# a full config
model:
  path: /models/llama-7b
  chat_template: chatml
engine:
  block_size: 32
  max_num_seqs: 64
  max_num_batched_tokens: 8192
  kv_cache_memory: 4GiB
  enable_prefix_caching: false
  enable_planner: False
spool:
  state_dir: /srv/llmq
)";
  LlmqConfig c;
  const Status st = ParseConfig(yaml, "t.yaml", &c);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(c.model_dir, "/models/llama-7b");
  EXPECT_EQ(c.chat_template, "chatml");
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.max_num_seqs, 64);
  EXPECT_EQ(c.max_num_batched_tokens, 8192);
  EXPECT_EQ(c.kv_cache_bytes, int64_t{4} << 30);
  EXPECT_FALSE(c.enable_prefix_caching);
  EXPECT_FALSE(c.enable_planner);
  EXPECT_EQ(c.state_dir, "/srv/llmq");
}

TEST(ConfigTest, KeysAreIndependentAndOthersKeepDefaults) {
  struct Case {
    const char* yaml;
    std::function<bool(const LlmqConfig&)> check;
  };
  const Case cases[] = {
      {"model: {path: m}", [](const LlmqConfig& c) { return c.model_dir == "m"; }},
      {"model: {path: 'my dir'}", [](const LlmqConfig& c) { return c.model_dir == "my dir"; }},
      {"model: {name: nightly}", [](const LlmqConfig& c) { return c.model_name == "nightly"; }},
      {"model: {chat_template: llama-2}",
       [](const LlmqConfig& c) { return c.chat_template == "llama-2"; }},
      {"model: {chat_template: mistral}",
       [](const LlmqConfig& c) { return c.chat_template == "mistral"; }},
      {"model: {chat_template: zephyr}",
       [](const LlmqConfig& c) { return c.chat_template == "zephyr"; }},
      {"model: {chat_template: ''}", [](const LlmqConfig& c) { return c.chat_template.empty(); }},
      {"model: {tool_call_format: llama3_json}",
       [](const LlmqConfig& c) { return c.tool_call_format == "llama3_json"; }},
      {"model: {reasoning_parser: deepseek_r1}",
       [](const LlmqConfig& c) { return c.reasoning_parser == "deepseek_r1"; }},
      {"engine: {block_size: 1}", [](const LlmqConfig& c) { return c.block_size == 1; }},
      {"engine: {block_size: 256}", [](const LlmqConfig& c) { return c.block_size == 256; }},
      {"engine: {block_size: +8}", [](const LlmqConfig& c) { return c.block_size == 8; }},
      {"engine: {max_num_seqs: 1}", [](const LlmqConfig& c) { return c.max_num_seqs == 1; }},
      {"engine: {max_num_batched_tokens: 2147483647}",
       [](const LlmqConfig& c) { return c.max_num_batched_tokens == 2147483647; }},
      {"engine: {kv_cache_memory: 1073741824}",
       [](const LlmqConfig& c) { return c.kv_cache_bytes == 1073741824; }},
      {"engine: {kv_cache_memory: '512MB'}",
       [](const LlmqConfig& c) { return c.kv_cache_bytes == 512000000; }},
      {"engine: {enable_prefix_caching: TRUE}",
       [](const LlmqConfig& c) { return c.enable_prefix_caching; }},
      {"engine: {enable_planner: false}", [](const LlmqConfig& c) { return !c.enable_planner; }},
      {"engine: {backend: cpu}",
       [](const LlmqConfig& c) { return c.backend == BackendKind::kCpu; }},
      {"engine: {backend: cuda}",
       [](const LlmqConfig& c) { return c.backend == BackendKind::kCuda; }},
      {"engine: {backend: 'auto'}",
       [](const LlmqConfig& c) { return c.backend == BackendKind::kAuto; }},
      {"engine: {precision: fp32}",
       [](const LlmqConfig& c) { return c.precision == Precision::kFp32; }},
      {"engine: {precision: fp8}",
       [](const LlmqConfig& c) { return c.precision == Precision::kFp8; }},
      {"engine: {weight_dtype: int8}",
       [](const LlmqConfig& c) { return c.weight_dtype == WeightDtype::kInt8; }},
      {"engine: {weight_dtype: bf16}",
       [](const LlmqConfig& c) { return c.weight_dtype == WeightDtype::kBf16; }},
      {"engine: {kv_dtype: bf16}",
       [](const LlmqConfig& c) { return c.kv_dtype == KvDtype::kBf16; }},
      {"engine: {device: 3}", [](const LlmqConfig& c) { return c.device == 3; }},
      {"engine: {cpu_threads: 3}",
       [](const LlmqConfig& c) {
         return c.cpu_threads == 3 && c.cpu_threads_source == "engine.cpu_threads";
       }},
      {"engine: {gpu_memory_utilization: 0.5}",
       [](const LlmqConfig& c) { return c.gpu_memory_utilization == 0.5; }},
      {"engine: {gpu_memory_utilization: 1}",
       [](const LlmqConfig& c) { return c.gpu_memory_utilization == 1; }},
      {"engine: {gpu_memory_utilization: .95}",
       [](const LlmqConfig& c) { return c.gpu_memory_utilization == 0.95; }},
      {"spool: {state_dir: rel/dir}", [](const LlmqConfig& c) { return c.state_dir == "rel/dir"; }},
      {"spool: {settle_seconds: 0.25}",
       [](const LlmqConfig& c) { return c.settle_seconds == 0.25; }},
      {"spool: {settle_seconds: 0}", [](const LlmqConfig& c) { return c.settle_seconds == 0; }},
      {"spool: {group_window_ms: 0}", [](const LlmqConfig& c) { return c.group_window_ms == 0; }},
      {"spool: {group_window_ms: 200}",
       [](const LlmqConfig& c) { return c.group_window_ms == 200; }},
      {"spool: {rescan_seconds: 2}", [](const LlmqConfig& c) { return c.rescan_seconds == 2; }},
      {"spool: {max_file_bytes: 10MiB}",
       [](const LlmqConfig& c) { return c.max_file_bytes == 10 << 20; }},
      {"spool: {max_line_bytes: 1MiB}",
       [](const LlmqConfig& c) { return c.max_line_bytes == 1 << 20; }},
      {"spool: {drain_seconds: 5.5}", [](const LlmqConfig& c) { return c.drain_seconds == 5.5; }},
      {"serve: {run_windows: [\"22:00-06:00\", \"12:00-13:00\"]}",
       [](const LlmqConfig& c) {
         return c.run_windows ==
                std::vector<RunWindow>{{22 * 3600, 6 * 3600}, {12 * 3600, 13 * 3600}};
       }},
      {"metrics: {job_reports: false}", [](const LlmqConfig& c) { return !c.job_reports; }},
      {"model: {served_names: [llama-3.1-8b, \"qwen 7b\"]}",
       [](const LlmqConfig& c) {
         return c.served_names == std::vector<std::string>{"llama-3.1-8b", "qwen 7b"};
       }},
      {"model: {served_names: []}", [](const LlmqConfig& c) { return c.served_names.empty(); }},
      {"metrics: {http_port: 9464}",
       [](const LlmqConfig& c) { return c.metrics_http_port == 9464; }},
      {"metrics: {textfile: /m/llmq.prom, interval_seconds: 0.5}",
       [](const LlmqConfig& c) {
         return c.metrics_textfile == "/m/llmq.prom" && c.metrics_interval_seconds == 0.5;
       }},
      {"spool: {commit_interval_ms: 10}",
       [](const LlmqConfig& c) { return c.commit_interval_ms == 10; }},
  };
  for (const Case& k : cases) {
    LlmqConfig c;
    const Status st = ParseConfig(k.yaml, "t.yaml", &c);
    ASSERT_TRUE(st.ok()) << k.yaml << ": " << st.message();
    EXPECT_TRUE(k.check(c)) << k.yaml;
  }
  // Setting one key leaves the others at their defaults.
  LlmqConfig c;
  ASSERT_TRUE(ParseConfig("engine:\n  max_num_seqs: 7\n", "t.yaml", &c).ok());
  EXPECT_EQ(c.max_num_seqs, 7);
  c.max_num_seqs = LlmqConfig().max_num_seqs;
  ExpectDefaults(c);
}

TEST(ConfigTest, UnknownKeysNameFileLineAndDottedKey) {
  EXPECT_NE(ParseError("engine:\n  block_size: 16\n  max_seqs: 8\n")
                .find("t.yaml:3: unknown key 'engine.max_seqs'"),
            std::string::npos);
  EXPECT_NE(ParseError("\n\nengnie:\n  block_size: 16\n").find("t.yaml:3: unknown key 'engnie'"),
            std::string::npos);
  EXPECT_NE(ParseError("model:\n  path: m\n  template: chatml\n")
                .find("t.yaml:3: unknown key 'model.template'"),
            std::string::npos);
  EXPECT_NE(ParseError("spool: {dir: /x}\n").find("t.yaml:1: unknown key 'spool.dir'"),
            std::string::npos);
  // The message lists what is known.
  EXPECT_NE(ParseError("engine:\n  max_seqs: 8\n").find("max_num_seqs"), std::string::npos);
  // Case matters.
  EXPECT_NE(ParseError("Engine:\n  block_size: 16\n").find("t.yaml:1: unknown key 'Engine'"),
            std::string::npos);
}

TEST(ConfigTest, WrongValuesNameFileLineAndKey) {
  struct Case {
    const char* yaml;
    const char* want;  // a substring of the message
  };
  const Case cases[] = {
      {"engine:\n  block_size: 17\n", "t.yaml:2: engine.block_size: must be a power of two"},
      {"engine:\n  block_size: 0\n", "t.yaml:2: engine.block_size: must be a power of two"},
      {"engine:\n  block_size: 512\n", "t.yaml:2: engine.block_size: must be a power of two"},
      {"engine:\n  block_size: -16\n", "t.yaml:2: engine.block_size: must be a power of two"},
      {"engine:\n  block_size: 16.0\n", "t.yaml:2: engine.block_size"},
      {"engine:\n  block_size: '16'\n", "t.yaml:2: engine.block_size"},
      {"engine:\n  block_size:\n", "t.yaml:2: engine.block_size"},
      {"\nengine:\n  max_num_seqs: 0\n",
       "t.yaml:3: engine.max_num_seqs: must be a positive integer"},
      {"engine:\n  max_num_seqs: -1\n",
       "t.yaml:2: engine.max_num_seqs: must be a positive integer"},
      {"engine:\n  max_num_seqs: lots\n", "t.yaml:2: engine.max_num_seqs: must be a positive"},
      {"engine:\n  max_num_seqs: [1]\n", "t.yaml:2: engine.max_num_seqs: must be a positive"},
      {"engine:\n  max_num_seqs: 0x10\n", "t.yaml:2: engine.max_num_seqs"},
      {"engine:\n  max_num_batched_tokens: 2147483648\n",
       "t.yaml:2: engine.max_num_batched_tokens: must be a positive integer"},
      {"engine:\n  max_num_batched_tokens: 99999999999999999999999\n",
       "t.yaml:2: engine.max_num_batched_tokens"},
      {"engine:\n  kv_cache_memory: 4XB\n", "t.yaml:2: engine.kv_cache_memory: must be a positive"},
      {"engine:\n  kv_cache_memory: 0\n", "t.yaml:2: engine.kv_cache_memory"},
      {"engine:\n  kv_cache_memory: -1GiB\n", "t.yaml:2: engine.kv_cache_memory"},
      {"engine:\n  kv_cache_memory: {a: 1}\n", "t.yaml:2: engine.kv_cache_memory"},
      {"engine:\n  enable_prefix_caching: yes\n",
       "t.yaml:2: engine.enable_prefix_caching: must be true or false"},
      {"engine:\n  enable_planner: 1\n", "t.yaml:2: engine.enable_planner: must be true or false"},
      {"engine:\n  enable_planner: 'true'\n", "t.yaml:2: engine.enable_planner"},
      {"engine:\n  backend: gpu\n",
       "t.yaml:2: engine.backend: must be one of auto, cpu, cuda, got 'gpu'"},
      {"engine:\n  backend: CUDA\n", "t.yaml:2: engine.backend: must be one of"},
      {"engine:\n  backend:\n", "t.yaml:2: engine.backend: must be one of"},
      {"engine:\n  precision: fp16\n",
       "t.yaml:2: engine.precision: must be one of bf16, fp32, fp8"},
      {"engine:\n  weight_dtype: q4\n",
       "t.yaml:2: engine.weight_dtype: must be one of auto, f32, bf16, int8"},
      {"engine:\n  device: -1\n",
       "t.yaml:2: engine.device: must be an integer between 0 and 1023, got '-1'"},
      {"engine:\n  device: 1024\n", "t.yaml:2: engine.device"},
      {"engine:\n  cpu_threads: 0\n",
       "t.yaml:2: engine.cpu_threads: must be an integer between 1 and 1024, got '0'"},
      {"engine:\n  cpu_threads: 1025\n", "t.yaml:2: engine.cpu_threads"},
      {"engine:\n  cpu_threads: two\n", "t.yaml:2: engine.cpu_threads"},
      {"engine:\n  cpu_threads: '2'\n", "t.yaml:2: engine.cpu_threads"},
      {"engine:\n  gpu_memory_utilization: 0\n",
       "t.yaml:2: engine.gpu_memory_utilization: must be a number greater than 0 and at most 1"},
      {"engine:\n  gpu_memory_utilization: 1.01\n", "t.yaml:2: engine.gpu_memory_utilization"},
      {"engine:\n  gpu_memory_utilization: -0.5\n", "t.yaml:2: engine.gpu_memory_utilization"},
      {"engine:\n  gpu_memory_utilization: 90%\n", "t.yaml:2: engine.gpu_memory_utilization"},
      {"engine:\n  gpu_memory_utilization: '0.9'\n", "t.yaml:2: engine.gpu_memory_utilization"},
      {"engine:\n  gpu_memory_utilization: .\n", "t.yaml:2: engine.gpu_memory_utilization"},
      {"model:\n  chat_template: vicuna\n", "t.yaml:2: model.chat_template: must be one of"},
      {"model:\n  tool_call_format: pythonic\n",
       "t.yaml:2: model.tool_call_format: must be one of hermes, llama3_json, mistral"},
      {"model:\n  reasoning_parser: granite\n",
       "t.yaml:2: model.reasoning_parser: must be one of qwen3, deepseek_r1"},
      {"model:\n  chat_template: ChatML\n", "t.yaml:2: model.chat_template"},
      {"model:\n  path: [a, b]\n", "t.yaml:2: model.path: must be a string"},
      {"model:\n  path:\n", "t.yaml:2: model.path: must be a string"},
      {"spool:\n  state_dir: ''\n", "t.yaml:2: spool.state_dir: must not be empty"},
      {"spool:\n  settle_seconds: -1\n", "t.yaml:2: spool.settle_seconds: must be a number"},
      {"spool:\n  settle_seconds: soon\n", "t.yaml:2: spool.settle_seconds: must be a number"},
      {"spool:\n  settle_seconds: '1'\n", "t.yaml:2: spool.settle_seconds"},
      {"spool:\n  group_window_ms: -1\n", "t.yaml:2: spool.group_window_ms: must be"},
      {"spool:\n  group_window_ms: 0.05\n", "t.yaml:2: spool.group_window_ms"},
      {"spool:\n  rescan_seconds: 0\n", "t.yaml:2: spool.rescan_seconds: must be a number"},
      {"spool:\n  max_file_bytes: 0\n", "t.yaml:2: spool.max_file_bytes: must be a positive"},
      {"spool:\n  max_file_bytes: 1XB\n", "t.yaml:2: spool.max_file_bytes"},
      {"spool:\n  max_line_bytes: 100\n", "t.yaml:2: spool.max_line_bytes: must be at least 1KiB"},
      {"\nspool:\n  drain_seconds: nan\n", "t.yaml:3: spool.drain_seconds"},
      {"spool:\n  commit_interval_ms: 0\n", "t.yaml:2: spool.commit_interval_ms: must be"},
      {"serve:\n  run_windows: 22:00-06:00\n", "t.yaml:2: serve.run_windows: must be a list"},
      {"model:\n  served_names: llama\n", "t.yaml:2: model.served_names: must be a list"},
      {"model:\n  served_names:\n    - llama\n    - ''\n",
       "t.yaml:4: model.served_names: each name must be a string of 1 to 200 bytes"},
      {"model:\n  served_names: [[a]]\n", "t.yaml:2: model.served_names: each name must be"},
      {"serve:\n  run_windows: [[1]]\n", "t.yaml:2: serve.run_windows: each window must be"},
      {"serve:\n  run_windows:\n    - 22:00-06:00\n    - 22:00-6:00\n",
       "t.yaml:4: serve.run_windows: run window '22:00-6:00': expected HH:MM-HH:MM"},
      {"serve:\n  run_windows: [\"22:00-06:00\", \"12:00-13:60\"]\n",
       "t.yaml:2: serve.run_windows: run window '12:00-13:60'"},
      {"metrics:\n  interval_seconds: 0\n", "t.yaml:2: metrics.interval_seconds: must be"},
      {"metrics:\n  http_port: 65536\n",
       "t.yaml:2: metrics.http_port: must be an integer between 0"},
      {"metrics:\n  http_port: auto\n", "t.yaml:2: metrics.http_port: must be"},
      {"spool:\n  commit_interval_ms: 2.5\n", "t.yaml:2: spool.commit_interval_ms"},
      {"engine: 16\n", "t.yaml:1: engine: must be a mapping"},
      {"engine:\n  - block_size: 16\n", "t.yaml:1: engine: must be a mapping"},
      {"- engine\n", "t.yaml:1: the top level must be a mapping"},
      {"just text\n", "t.yaml:1: the top level must be a mapping"},
      {"engine:\n  block_size: 16\n  block_size: 32\n",
       "t.yaml:3: duplicate key 'engine.block_size'"},
      {"engine: {}\n---\nengine: {}\n", "t.yaml:3: only one YAML document"},
  };
  for (const Case& k : cases) {
    const std::string msg = ParseError(k.yaml);
    EXPECT_NE(msg.find(k.want), std::string::npos)
        << "yaml:\n"
        << k.yaml << "message: " << msg << "\nwanted: " << k.want;
  }
  // The offending value is quoted back.
  EXPECT_NE(ParseError("engine:\n  block_size: 17\n").find("got '17'"), std::string::npos);
}

// queue.url: a PostgreSQL URL or nothing; a wrong one is named by its key, never repeated (it may
// hold a password).
TEST(ConfigTest, QueueUrlIsAPostgresUrlAndNeverRepeated) {
  LlmqConfig c;
  ASSERT_TRUE(
      ParseConfig("queue:\n  url: postgresql://llmq@db/q?sslmode=require\n", "t.yaml", &c).ok());
  EXPECT_EQ(c.queue_url, "postgresql://llmq@db/q?sslmode=require");
  EXPECT_EQ(LlmqConfig().queue_url, "") << "by default the SQLite file in spool.state_dir";
  ASSERT_TRUE(ParseConfig("queue:\n", "t.yaml", &c).ok()) << "an empty section";
  for (const char* yaml :
       {"queue:\n  url: /var/lib/llmq/queue.db\n", "queue:\n  url: postgresq://llmq:s3cret@db/q\n",
        "queue:\n  url: [1]\n"}) {
    const std::string m = ParseError(yaml);
    EXPECT_NE(m.find("t.yaml:2: queue.url: must be"), std::string::npos) << m;
    EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  }
}

TEST(ConfigTest, MalformedYamlNamesFileAndLine) {
  const std::string msg = ParseError("engine:\n  block_size: 16\n  max_num_seqs: [1, 2\n");
  EXPECT_EQ(msg.rfind("t.yaml:", 0), 0u) << msg;
  EXPECT_NE(msg.find("invalid YAML"), std::string::npos) << msg;
  const std::string tab = ParseError("engine:\n\tblock_size: 16\n");
  EXPECT_NE(tab.find("t.yaml:"), std::string::npos) << tab;
  const std::string implicit = ParseError("a: b: c\n");
  EXPECT_EQ(implicit.rfind("t.yaml:1: invalid YAML", 0), 0u) << implicit;
}

TEST(ConfigTest, ErrorLeavesOutputUntouched) {
  LlmqConfig c;
  c.max_num_seqs = 5;
  EXPECT_FALSE(ParseConfig("engine:\n  max_num_seqs: 9\n  block_size: 3\n", "t.yaml", &c).ok());
  EXPECT_EQ(c.max_num_seqs, 5);
}

TEST(ConfigTest, ByteSizes) {
  EXPECT_EQ(ParseByteSize("0"), 0);
  EXPECT_EQ(ParseByteSize("1000000"), 1000000);
  EXPECT_EQ(ParseByteSize("123B"), 123);
  EXPECT_EQ(ParseByteSize("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("4 GiB"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("4G"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("4g"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("4GB"), 4000000000);
  EXPECT_EQ(ParseByteSize("512MB"), 512000000);
  EXPECT_EQ(ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("512M"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("8KiB"), 8192);
  EXPECT_EQ(ParseByteSize("8kB"), 8000);
  EXPECT_EQ(ParseByteSize("8K"), 8192);
  EXPECT_EQ(ParseByteSize("2TiB"), int64_t{2} << 40);
  EXPECT_EQ(ParseByteSize("2TB"), 2000000000000);
  EXPECT_EQ(ParseByteSize("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ParseByteSize("8388607TiB"), int64_t{8388607} << 40);
  for (const char* bad :
       {"", "GiB", "-1", "+1", "1.5GiB", "4 ", " 4", "4GiBs", "4Gb", "4gib", "4XB", "4PiB", "4 G B",
        "4iB", "9223372036854775808", "8388608TiB", "99999999999999999999"}) {
    EXPECT_FALSE(ParseByteSize(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(ConfigTest, LoadReadsTheFileAndNamesItInErrors) {
  const std::string dir = testing::TmpDir("config_load");
  const std::string path =
      WriteFile(dir, "llmq.yaml", "engine:\n  block_size: 8\n  max_num_seqs: 0\n");
  LlmqConfig c;
  Status st = LoadConfig(path, &c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find(path + ":3: engine.max_num_seqs"), std::string::npos) << st.message();

  const std::string good = WriteFile(dir, "good.yaml", "engine:\n  block_size: 8\n");
  st = LoadConfig(good, &c);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(c.block_size, 8);

  st = LoadConfig(dir, &c);  // a directory
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(dir), std::string::npos) << st.message();
}

TEST(ConfigTest, OnlyARegularFileWithinTheLimitIsRead) {
  const std::string dir = testing::TmpDir("config_kinds");
  const std::string fifo = dir + "/fifo.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  LlmqConfig c;
  Status st = LoadConfig(fifo, &c);  // no writer: must not wait for one
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), fifo + ": it is a FIFO, not a regular file");
  const std::string link = dir + "/link.yaml";
  std::filesystem::create_symlink(WriteFile(dir, "good.yaml", "engine:\n  block_size: 8\n"), link);
  st = LoadConfig(link, &c);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find(link + ": it is a symbolic link"), std::string::npos) << st.message();
  const std::string big = WriteFile(dir, "big.yaml", "# " + std::string(kMaxConfigBytes, 'x'));
  st = LoadConfig(big, &c);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("over the config size limit (1 MiB)"), std::string::npos)
      << st.message();
}

TEST(ConfigTest, MissingFileIsNotFound) {
  const std::string path = testing::TmpDir("config_missing") + "/nope.yaml";
  LlmqConfig c;
  const Status st = LoadConfig(path, &c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

TEST(ConfigTest, StepLimitsAreAutoUnlessSet) {
  // Auto is 0: the engine takes the backend's (LlmEngine::Create,
  // KvPoolTest.StepLimitsLeftAuto...).
  LlmqConfig c;  // absent: auto
  EXPECT_EQ(c.max_num_seqs, 0);
  EXPECT_EQ(c.max_num_batched_tokens, 0);
  // Set, each on its own: the other stays auto.
  const std::string dir = testing::CurrentTestDir();
  std::ofstream(dir + "/a.yaml") << "engine:\n  max_num_seqs: 64\n  max_num_batched_tokens: auto\n";
  ASSERT_TRUE(LoadConfig(dir + "/a.yaml", &c).ok());
  EXPECT_EQ(c.max_num_seqs, 64);
  EXPECT_EQ(c.max_num_batched_tokens, 0);
  std::ofstream(dir + "/b.yaml")
      << "engine:\n  max_num_seqs: auto\n  max_num_batched_tokens: 4096\n";
  ASSERT_TRUE(LoadConfig(dir + "/b.yaml", &c).ok());
  EXPECT_EQ(c.max_num_seqs, 0);
  EXPECT_EQ(c.max_num_batched_tokens, 4096);
  // Anything else than a positive integer or auto is refused, naming both.
  std::ofstream(dir + "/c.yaml") << "engine:\n  max_num_seqs: Auto\n";
  const Status st = LoadConfig(dir + "/c.yaml", &c);
  EXPECT_NE(st.message().find(":2: engine.max_num_seqs: must be a positive integer or auto, got "
                              "'Auto'"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace llmq
