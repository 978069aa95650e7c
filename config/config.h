// LlmqConfig: the YAML configuration (yaml-cpp). Every key is optional; unknown keys are errors
// (a typo must not silently fall back to a default). See config/llmq.example.yaml.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/backend_kind.h"
#include "base/status.h"
#include "config/run_windows.h"

namespace llmq {

inline constexpr int kMaxCpuThreads = 1024;  // engine.cpu_threads / --threads at most
inline constexpr int kMaxDevice = 1023;      // engine.device / --device at most

struct LlmqConfig {
  // model:
  std::string model_dir;      // model.path
  std::string chat_template;  // model.chat_template: "" = the model's own / llama-2
  // model.tool_call_format: hermes, llama3_json or mistral (the calls a model writes, issue 25);
  // "" = recognised from the model's chat template.
  std::string tool_call_format;
  // model.reasoning_parser: qwen3 or deepseek_r1 (vLLM's --reasoning-parser: the thought between
  // <think> and </think> as message.reasoning_content); "" = none.
  std::string reasoning_parser;
  // model.name: the `model` field of every response (the model that ran, whatever a request
  // names); "" = the model folder's name.
  std::string model_name;
  // model.served_names (llmq serve, --served-model-name): the models this worker serves, as vLLM's
  // --served-model-name: it claims only jobs whose requests name one of them in body.model (or
  // name none). Empty (the default): jobs naming any model. Each 1 to 200 bytes.
  std::vector<std::string> served_names;
  // engine:
  int block_size = 16;  // engine.block_size
  // engine.max_num_seqs and engine.max_num_batched_tokens: the most sequences and tokens in one
  // step; 0 (absent, or auto) = the backend's (Backend::default_step_limits: 256 / 2,048 on the
  // CPU, 1,024 / 8,192 on a GPU).
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  // engine.kv_cache_memory: "4GiB", "512MB", bytes, or auto (0): the CPU backend sizes its pool
  // from the memory the process may take (base/host_memory.h), as `llmq plan` prints.
  int64_t kv_cache_bytes = 0;
  bool enable_prefix_caching = true;    // engine.enable_prefix_caching
  bool enable_planner = true;           // engine.enable_planner
  bool shared_prefix_attention = true;  // engine.shared_prefix_attention
  bool profile = false;                 // llmq run --profile (not a config key)
  // engine.backend: auto (CUDA when built with it and a device is present, else CPU) | cpu | cuda.
  BackendKind backend = BackendKind::kAuto;
  Precision precision = Precision::kBf16;  // engine.precision: bf16 | fp32 | fp8 (GPU only)
  // engine.weight_dtype: auto | f32 | bf16 | int8, the CPU backend's matrices
  // (base/backend_kind.h).
  WeightDtype weight_dtype = WeightDtype::kAuto;
  // engine.kv_dtype: auto | f32 | bf16, the CPU backend's KV cache (base/backend_kind.h).
  KvDtype kv_dtype = KvDtype::kAuto;
  // engine.gpu_memory_utilization: the share of the GPU's memory llmq may fill (weights,
  // activations, KV cache); the KV cache gets what the rest leaves. 0 < u <= 1.
  double gpu_memory_utilization = 0.9;
  // engine.device: the CUDA device this process runs on, 0..kMaxDevice (one `llmq serve` per GPU
  // on one queue: issue 27). The cuda backend's only: a CPU backend with a device other than 0 is
  // refused at load, so that a worker meant for GPU 3 never quietly runs on the CPU.
  int device = 0;
  // engine.cpu_threads: the CPU kernels' threads (1..1024); 0 (absent) = $OMP_NUM_THREADS when
  // set, else the CPUs the process may use (affinity mask and cgroup quota,
  // kernels/cpu/cpu_count.h).
  int cpu_threads = 0;
  std::string cpu_threads_source;  // who set cpu_threads: "engine.cpu_threads", "--threads" or ""
  // spool (the daemon, llmq serve; the CLI commands find its queue through state_dir):
  std::string state_dir = "/var/lib/llmq";  // spool.state_dir
  double settle_seconds = 1;                // spool.settle_seconds: unchanged this long
  // spool.group_window_ms: a file renamed into inbox/ is complete; it waits only this long, for
  // the files renamed in with it (they are accepted, and planned, together). 0..60000.
  int group_window_ms = 50;
  double rescan_seconds = 30;                 // spool.rescan_seconds: full inbox rescan period
  int64_t max_file_bytes = int64_t{1} << 30;  // spool.max_file_bytes: larger files are refused
  // spool.max_line_bytes: a longer line is an error line (naming its line and this limit), not
  // read into memory; the other lines run. At least 1KiB.
  int64_t max_line_bytes = int64_t{16} << 20;
  double drain_seconds = 30;    // spool.drain_seconds: SIGTERM waits this long
  int commit_interval_ms = 50;  // spool.commit_interval_ms: result commit period
  // queue.url: the queue on a PostgreSQL server, "postgresql://[user@]host[:port]/database[?...]"
  // (libpq's URI: sslmode, host=/socket/folder; a password from ~/.pgpass or PGPASSWORD rather
  // than in the file); "" (the default): the SQLite file <state_dir>/queue.db.
  std::string queue_url;
  // queue.lease_seconds: how long a worker's claim on a plan group (and on finalizing a job)
  // lasts without a heartbeat (every third of it): a worker that dies gives its unfinished
  // requests back to the others this long after its last heartbeat. 0.3..86400.
  double lease_seconds = 60;
  // metrics (llmq serve, daemon/metrics.h):
  std::string metrics_textfile;  // metrics.textfile: "" = <state_dir>/metrics/llmq.prom
  // metrics.interval_seconds: how often the textfile is rewritten, and the status page (GET / on
  // metrics.http_port) rendered; the page refreshes itself at the same pace.
  double metrics_interval_seconds = 5;
  // metrics.http_port: llmq serve answers on 127.0.0.1:PORT (daemon/metrics_http.h): GET /metrics
  // the textfile's exposition, GET / the status page (daemon/status_page.h: jobs with progress
  // and ETA, this daemon, links to the finished jobs' reports), GET /reports/<job id> a finished
  // job's report from outbox/. 0 (the default): off. Read at start-up.
  int metrics_http_port = 0;
  // metrics.job_reports: each finished job's report (jobs/report/job_report.h), written beside
  // its results: llmq serve's outbox/<name>.report.html, llmq run's <output stem>.report.html.
  bool job_reports = true;
  // serve.run_windows (llmq serve): daily periods of local time in which requests start, each
  // "HH:MM[:SS]-HH:MM[:SS]" (config/run_windows.h; a bad one is an error naming its line);
  // empty: always.
  std::vector<RunWindow> run_windows;
};

// Loads `path` over the defaults (a default LlmqConfig, not *out's current values); *out is
// written only on success. Relative model.path and spool.state_dir are taken relative to the
// config file's folder. An empty file (or comments only) gives the defaults; a section with no
// keys ("engine:") is allowed. Errors are InvalidArgument naming the file, the line and the key,
// e.g. "/etc/llmq.yaml:7: engine.max_num_seqs: must be a positive integer, got '0'" or
// "/etc/llmq.yaml:3: unknown key 'engine.max_seqs' (...)"; a missing file is NotFound naming the
// path, one without read permission InvalidArgument, a failed read IoError. Integers and booleans
// must be plain (unquoted) YAML 1.2 scalars (true/false; yes/no/on/off are rejected). Duplicate
// keys and a second YAML document are errors. The file is opened once as an UntrustedFile
// (base/untrusted_file.h), without waiting: it must be a regular file (a symbolic link, a FIFO, a
// device or a folder is InvalidArgument naming it) of at most kMaxConfigBytes.
Status LoadConfig(const std::string& path, LlmqConfig* out);
inline constexpr int64_t kMaxConfigBytes = int64_t{1} << 20;  // 1 MiB
// The system-wide config file, read when neither --config nor $LLMQ_CONFIG names one.
inline constexpr const char* kSystemConfigPath = "/etc/llmq/llmq.yaml";
// Which config file to read: `flag` (--config) when set, else $LLMQ_CONFIG when set (NotFound
// naming the variable when that file is missing), else kSystemConfigPath when it exists, else ""
// (the defaults).
Status FindConfig(const std::string& flag, std::string* path);
// Parses YAML text (`file` for messages), as LoadConfig does.
Status ParseConfig(const std::string& yaml_text, const std::string& file, LlmqConfig* out);
// A byte size: decimal digits, then optionally (after optional spaces) a unit: "B"; K, M, G or T
// (either case) followed by nothing, "iB" (powers of 1024) or "B" (powers of 1000). Bare K/M/G/T
// are powers of 1024, as in -Xmx4g. "4GiB" -> 4294967296, "512MB" -> 512000000, "1000000" ->
// 1000000, "0" -> 0. nullopt when malformed (signs, fractions, other units) or above INT64_MAX.
std::optional<int64_t> ParseByteSize(const std::string& s);

}  // namespace llmq
