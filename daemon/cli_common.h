// What the llmq subcommands share: the CLI11 set-up, the engine flags and how they combine with
// the config file, and one way to report a failure.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "config/config.h"
#include "daemon/request_builder.h"
#include "engine/core/llm_engine.h"

namespace llmq::cli {

// Flags of the commands that run the engine. Each overrides the config key of the same name only
// when given on the command line; the help shows the built-in defaults.
struct EngineFlags {
  std::string config;         // --config (else $LLMQ_CONFIG, else /etc/llmq/llmq.yaml)
  std::string model;          // --model (else model.path)
  std::string model_name;     // --model-name (else model.name)
  std::string chat_template;  // --chat-template (else model.chat_template)
  int max_num_seqs = LlmqConfig{}.max_num_seqs;
  int max_num_batched_tokens = LlmqConfig{}.max_num_batched_tokens;
  std::string kv_cache_memory = "auto";
  bool no_prefix_cache = false;
  bool no_planner = false;
  bool no_shared_prefix_attention = false;
  std::string backend = "auto";       // --backend (else engine.backend)
  std::string precision = "bf16";     // --precision (else engine.precision)
  std::string weight_dtype = "auto";  // --weight-dtype (else engine.weight_dtype)
  std::string kv_dtype = "auto";      // --kv-dtype (else engine.kv_dtype)
  double gpu_memory_utilization = LlmqConfig{}.gpu_memory_utilization;
  int threads = 0;          // --threads (else engine.cpu_threads)
  int device = 0;           // --device (else engine.device)
  CLI::App* cmd = nullptr;  // to ask which flags were given
};

void AddEngineFlags(CLI::App* cmd, EngineFlags* f);
// --backend, --precision and --weight-dtype (also on generate and plan, which take no other engine
// flags).
void AddBackendFlags(CLI::App* cmd, std::string* backend, std::string* precision,
                     std::string* weight_dtype, std::string* kv_dtype);
// --gpu-memory-utilization, checked to lie in (0, 1].
void AddGpuMemoryFlag(CLI::App* cmd, double* utilization);

// --threads N: the CPU kernels' threads (run, serve, generate, plan).
void AddThreadsFlag(CLI::App* cmd, int* threads);

// Makes the CPU kernels use the threads `cfg` asks for (engine.cpu_threads / --threads; else the
// default of kernels::CpuThreads()).
void ApplyCpuThreads(const LlmqConfig& cfg);
// How many threads and why: "2 (of 2 usable CPUs: affinity 2, no cgroup quota)", "1 (--threads)",
// "1 ($OMP_NUM_THREADS)"; `threads` > 0 as `source` gives it.
std::string DescribeCpuThreads(int threads, const std::string& source);

// Finds and loads the config (FindConfig), then applies the flags that were given over it.
// Errors name the config file and key, or the flag.
Status ResolveEngineConfig(const EngineFlags& f, LlmqConfig* cfg);

// The engine options a config describes (step limits left auto stay 0: the backend's).
EngineOptions EngineOptionsFrom(const LlmqConfig& cfg);

// The "model" field of responses: model.name, else the model folder's name.
std::string ServedModelName(const LlmqConfig& cfg);

// The chat format a config asks for (engine/text/chat_format.h): model.chat_template, else the
// model's own template, else llama-2. Errors name the template's file, line and construct.
Status LoadChatFormat(const LlmqConfig& cfg, const Tokenizer& tok,
                      std::shared_ptr<const ChatFormat>* out);

// The output formats of a config: ctx->tool_format from model.tool_call_format, else recognised
// from the model's chat template (SetToolCallFormat); ctx->reasoning from model.reasoning_parser.
void SetOutputFormatsFrom(const LlmqConfig& cfg, BuildContext* ctx);

// --messages JSON (tokenize, generate): the conversation rendered by the model's chat format
// (`choice` as model.chat_template: "" = the model's own) and encoded as a chat request's prompt
// is, with `tools_json` (--tools: a chat request's tools; "" none) on offer and `kwargs_json`
// (--chat-template-kwargs: a chat request's chat_template_kwargs; "" none) for the template.
// InvalidArgument naming the flag and the field for bad JSON, messages, tools or variables; the
// template's errors as ChatFormat gives them.
Status EncodeMessagesFlag(const std::string& model_dir, const std::string& choice,
                          const std::string& messages_json, const std::string& tools_json,
                          const std::string& kwargs_json, const Tokenizer& tok,
                          std::string* rendered, std::vector<int>* ids);

// What `run` and `serve` start with: the CPU threads set (ApplyCpuThreads), the model loaded, the
// engine made from the config, and the context that turns input lines into its requests (its chat
// format). Errors name the file.
Status LoadServing(const LlmqConfig& cfg, Model* model, std::unique_ptr<LlmEngine>* engine,
                   BuildContext* ctx);

// "backend cpu; KV cache 4096 blocks of 16 = 65536 tokens (1.00 GiB from engine.kv_cache_memory,
// 256 bytes per token); cpu threads 2 (of 2 usable CPUs: ...); weights bf16": what a start-up line
// says of the model's backend, the engine's pool, the CPU kernels' threads and (CPU backend) how
// its matrices are held.
std::string DescribeEngine(const LlmqConfig& cfg, const Model& model, const LlmEngine& engine);

// Prints "llmq <command>: <message>" on stderr and returns `code`.
int Fail(const CLI::App* cmd, const Status& st, int code = 1);
int Fail(const CLI::App* cmd, const std::string& message, int code = 1);

}  // namespace llmq::cli
