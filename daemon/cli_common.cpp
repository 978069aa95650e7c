#include "daemon/cli_common.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "daemon/model_fingerprint.h"
#include "daemon/request_builder.h"
#include "engine/backends/compute_resources.h"
#include "engine/backends/cpu_backend.h"
#include "jobs/batch_request.h"

namespace llmq::cli {

void AddEngineFlags(CLI::App* cmd, EngineFlags* f) {
  f->cmd = cmd;
  cmd->add_option("--config", f->config,
                  "YAML config file (default: $LLMQ_CONFIG, else " +
                      std::string(kSystemConfigPath) + " when it exists)");
  cmd->add_option("--model", f->model, "Model folder (default: model.path of the config)");
  cmd->add_option("--model-name", f->model_name,
                  "The \"model\" field of every response (default: model.name of the config, else "
                  "the model folder's name)");
  cmd->add_option("--chat-template", f->chat_template,
                  "llama-2|mistral|chatml|zephyr (default: the model's own, else llama-2)");
  cmd->add_option("--max-num-seqs", f->max_num_seqs,
                  "Most sequences in one step (default: engine.max_num_seqs, else 256 on the "
                  "CPU, 1024 on a GPU)")
      ->check(CLI::PositiveNumber)
      ->default_str("auto");
  cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                  "Most tokens (prefill and decode) in one step (default: "
                  "engine.max_num_batched_tokens, else 2048 on the CPU, 8192 on a GPU)")
      ->check(CLI::PositiveNumber)
      ->default_str("auto");
  cmd->add_option("--kv-cache-memory", f->kv_cache_memory,
                  "KV-cache memory: bytes, a size such as 4GiB or 512MB, or auto (the memory this "
                  "process may take, as llmq plan prints)");
  cmd->add_flag("--no-prefix-cache", f->no_prefix_cache,
                "Do not share KV blocks of common prefixes");
  cmd->add_flag("--no-planner", f->no_planner, "Run requests in input order (no prefix grouping)");
  cmd->add_flag("--no-shared-prefix-attention", f->no_shared_prefix_attention,
                "Read a shared prompt prefix once per request in decode, not once per group");
  AddBackendFlags(cmd, &f->backend, &f->precision, &f->weight_dtype, &f->kv_dtype);
  AddGpuMemoryFlag(cmd, &f->gpu_memory_utilization);
  AddThreadsFlag(cmd, &f->threads);
  cmd->add_option("--device", f->device,
                  "The CUDA device to run on: one llmq serve per GPU on one queue (default: "
                  "engine.device, else 0; the cuda backend's only)")
      ->check(CLI::Range(0, kMaxDevice));
}

void AddThreadsFlag(CLI::App* cmd, int* threads) {
  cmd->add_option("--threads", *threads,
                  "CPU threads of the kernels (default: engine.cpu_threads, else "
                  "$OMP_NUM_THREADS, else the CPUs this process may use: its affinity mask and "
                  "cgroup CPU quota)")
      ->check(CLI::Range(1, kMaxCpuThreads));
}

std::string DescribeCpuThreads(int threads, const std::string& source) {
  if (threads > 0) return std::to_string(threads) + " (" + source + ")";
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int n = CpuThreads();
  if (env && std::to_string(n) == env) return std::to_string(n) + " ($OMP_NUM_THREADS)";
  return std::to_string(n) + " (of " + std::to_string(UsableCpus()) +
         " usable CPUs: " + DescribeUsableCpus() + ")";
}

void ApplyCpuThreads(const LlmqConfig& cfg) {
  if (cfg.cpu_threads > 0) SetCpuThreads(cfg.cpu_threads);
}

void AddBackendFlags(CLI::App* cmd, std::string* backend, std::string* precision,
                     std::string* weight_dtype, std::string* kv_dtype) {
  cmd->add_option("--backend", *backend,
                  "auto|cpu|cuda: auto takes the GPU when llmq was built with CUDA and a device "
                  "is present, else the CPU; cuda fails, saying why, where it cannot")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--precision", *precision,
                  "bf16|fp32|fp8: the GPU backend's weights and KV cache (fp8: bf16 with the "
                  "projections' weights in FP8 E4M3, per-channel scales; compute capability 8.9+; "
                  "the CPU backend takes --weight-dtype and --kv-dtype)")
      ->check(CLI::IsMember({"bf16", "fp32", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--weight-dtype", *weight_dtype,
                  "auto|f32|bf16|int8: the CPU backend's weight matrices, chosen at load (auto: "
                  "the checkpoint's own type, BF16 -> bf16, else f32; int8: symmetric per output "
                  "channel, quantized at load) (default: engine.weight_dtype, else auto)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "int8"}));
  cmd->add_option("--kv-dtype", *kv_dtype,
                  "auto|f32|bf16: the CPU backend's KV cache (auto: f32; bf16: half the bytes, "
                  "twice the tokens per pool) (default: engine.kv_dtype, else auto)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
}

void AddGpuMemoryFlag(CLI::App* cmd, double* utilization) {
  cmd->add_option("--gpu-memory-utilization", *utilization,
                  "Share of the GPU's memory to fill (weights, activations, then KV cache)")
      ->check([](const std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return end != v.c_str() && *end == '\0' && x > 0 && x <= 1 ? "" : "must be in (0, 1]";
      })
      ->capture_default_str();
}

Status ResolveEngineConfig(const EngineFlags& f, LlmqConfig* cfg) {
  std::string path;
  LLMQ_RETURN_IF_ERROR(FindConfig(f.config, &path));
  *cfg = LlmqConfig();
  if (!path.empty()) LLMQ_RETURN_IF_ERROR(LoadConfig(path, cfg));
  auto given = [&](const char* flag) { return f.cmd->count(flag) > 0; };
  if (given("--model")) cfg->model_dir = f.model;
  if (given("--model-name")) cfg->model_name = f.model_name;
  if (given("--chat-template")) cfg->chat_template = f.chat_template;
  if (given("--max-num-seqs")) cfg->max_num_seqs = f.max_num_seqs;
  if (given("--max-num-batched-tokens")) cfg->max_num_batched_tokens = f.max_num_batched_tokens;
  if (given("--kv-cache-memory")) {
    const auto bytes =
        f.kv_cache_memory == "auto" ? std::optional<int64_t>(0) : ParseByteSize(f.kv_cache_memory);
    if (!bytes || *bytes < 0 || (*bytes == 0 && f.kv_cache_memory != "auto"))
      return Status::InvalidArgument(
          "--kv-cache-memory: must be a positive size such as 4GiB, or auto, got '" +
          f.kv_cache_memory + "'");
    cfg->kv_cache_bytes = *bytes;
  }
  if (given("--backend")) ParseBackendKind(f.backend, &cfg->backend);  // checked by CLI11
  if (given("--precision")) ParsePrecision(f.precision, &cfg->precision);
  if (given("--weight-dtype")) ParseWeightDtype(f.weight_dtype, &cfg->weight_dtype);  // by CLI11
  if (given("--kv-dtype")) ParseKvDtype(f.kv_dtype, &cfg->kv_dtype);  // checked by CLI11
  if (given("--gpu-memory-utilization")) cfg->gpu_memory_utilization = f.gpu_memory_utilization;
  if (given("--device")) cfg->device = f.device;
  if (given("--threads")) {
    cfg->cpu_threads = f.threads;
    cfg->cpu_threads_source = "--threads";
  }
  if (f.no_prefix_cache) cfg->enable_prefix_caching = false;
  if (f.no_planner) cfg->enable_planner = false;
  if (f.no_shared_prefix_attention) cfg->shared_prefix_attention = false;
  if (cfg->model_dir.empty())
    return Status::InvalidArgument("--model DIR (or model.path in the config) is required");
  return Status::Ok();
}

EngineOptions EngineOptionsFrom(const LlmqConfig& cfg) {
  EngineOptions o;
  o.block_size = cfg.block_size;
  o.kv_memory_bytes = cfg.kv_cache_bytes;
  o.gpu_memory_utilization = cfg.gpu_memory_utilization;
  o.enable_prefix_cache = cfg.enable_prefix_caching;
  o.enable_planner = cfg.enable_planner;
  o.shared_prefix_attention = cfg.shared_prefix_attention;
  o.profile = cfg.profile;
  o.scheduler.max_num_seqs = cfg.max_num_seqs;  // 0: the backend's (LlmEngine::Create)
  o.scheduler.max_num_batched_tokens = cfg.max_num_batched_tokens;
  return o;
}

std::string ServedModelName(const LlmqConfig& cfg) {
  if (!cfg.model_name.empty()) return cfg.model_name;
  // "models/x/" names x, as "models/x" does
  const std::filesystem::path dir = std::filesystem::path(cfg.model_dir).lexically_normal();
  return dir.has_filename() ? dir.filename().string() : dir.parent_path().filename().string();
}

Status LoadChatFormat(const LlmqConfig& cfg, const Tokenizer& tok,
                      std::shared_ptr<const ChatFormat>* out) {
  return ChatFormat::Load(cfg.model_dir, cfg.chat_template, tok, out);
}

Status EncodeMessagesFlag(const std::string& model_dir, const std::string& choice,
                          const std::string& messages_json, const std::string& tools_json,
                          const std::string& kwargs_json, const Tokenizer& tok,
                          std::string* rendered, std::vector<int>* ids) {
  jobs::BatchRequest req;
  LLMQ_RETURN_IF_ERROR(jobs::ParseChatMessages(messages_json, "--messages", &req.messages));
  if (!tools_json.empty())
    LLMQ_RETURN_IF_ERROR(jobs::ParseChatTools(tools_json, "--tools", &req.tools));
  if (!kwargs_json.empty())
    LLMQ_RETURN_IF_ERROR(jobs::ParseChatTemplateKwargs(kwargs_json, "--chat-template-kwargs",
                                                       &req.chat_template_kwargs));
  const Conversation conversation = ChatConversation(req);
  std::shared_ptr<const ChatFormat> chat;
  LLMQ_RETURN_IF_ERROR(ChatFormat::Load(model_dir, choice, tok, &chat));
  LLMQ_RETURN_IF_ERROR(chat->Render(conversation, rendered));
  return chat->Encode(tok, conversation, ids);
}

void SetOutputFormatsFrom(const LlmqConfig& cfg, BuildContext* ctx) {
  ctx->reasoning.reset();
  ReasoningFormat reasoning;
  if (!cfg.reasoning_parser.empty() &&
      ReasoningFormatByName(cfg.reasoning_parser, &reasoning).ok())  // checked by the config
    ctx->reasoning = reasoning;
  // The template that renders requests with tools: the "tool_use" entry when the model has one.
  std::string origin;
  std::string source = ReadNamedTemplateSource(cfg.model_dir, "tool_use", &origin);
  if (source.empty()) source = ReadTemplateSource(cfg.model_dir, &origin);
  SetToolCallFormat(cfg.tool_call_format, source, origin, ctx);
}

Status LoadServing(const LlmqConfig& cfg, Model* model, std::unique_ptr<LlmEngine>* engine,
                   BuildContext* ctx) {
  ApplyCpuThreads(cfg);                      // before the weights are packed (on the pool)
  const HostMemory host = ReadHostMemory();  // before the weights take their share of it
  // The grammars' token trie is built while the backend takes the weights.
  std::shared_ptr<GrammarCache> grammars;
  LLMQ_RETURN_IF_ERROR(LoadModel(
      cfg.model_dir,
      BackendChoice{cfg.backend, cfg.precision, cfg.weight_dtype, cfg.kv_dtype, cfg.device}, model,
      [&](const Tokenizer* tok) {
        grammars = std::make_shared<GrammarCache>(tok);
        grammars->BuildTrieInBackground();
      }));
  LLMQ_RETURN_IF_ERROR(LoadChatFormat(cfg, *model->tokenizer, &ctx->chat));
  SetOutputFormatsFrom(cfg, ctx);
  EngineOptions opt = EngineOptionsFrom(cfg);
  opt.host_memory = host;
  LLMQ_RETURN_IF_ERROR(
      LlmEngine::Create(model->cfg, model->backend.get(), model->tokenizer.get(), opt, engine));
  ctx->model = model;
  ctx->grammars = std::move(grammars);
  ctx->capacity = (*engine)->max_sequence_tokens();
  ctx->capacity_setting = "the KV cache size (--kv-cache-memory / engine.kv_cache_memory: " +
                          (cfg.kv_cache_bytes > 0 ? std::to_string(cfg.kv_cache_bytes) + " bytes"
                                                  : std::string("auto")) +
                          ")";
  ctx->model_name = ServedModelName(cfg);
  ctx->system_fingerprint = ModelFingerprint(cfg.model_dir);
  return Status::Ok();
}

std::string DescribeEngine(const LlmqConfig& cfg, const Model& model, const LlmEngine& engine) {
  const KvPoolPlan& pool = engine.kv_pool();
  const int block = engine.blocks().block_size();
  char budget[128] = "";
  if (pool.budget_bytes > 0)
    std::snprintf(budget, sizeof budget, "%.2f GiB from ",
                  static_cast<double>(pool.budget_bytes) / (int64_t{1} << 30));
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "KV cache %d blocks of %d = %lld tokens (%s%s, %lld bytes per token)",
                pool.num_blocks, block, static_cast<long long>(pool.num_blocks) * block, budget,
                pool.source.c_str(), static_cast<long long>(pool.bytes_per_token));
  std::string weights;
  if (const auto* cpu = dynamic_cast<const CpuBackend*>(model.backend.get()))
    weights = std::string("; weights ") + kernels::WeightTypeName(cpu->weight_type()) +
              "; KV cache " + KvDtypeName(cpu->kv_dtype());
  return "backend " + model.backend_description() + "; " + buf + "; cpu threads " +
         DescribeCpuThreads(cfg.cpu_threads, cfg.cpu_threads_source) + weights +
         "; steps of at most " + std::to_string(engine.max_num_seqs()) + " sequences and " +
         std::to_string(engine.max_num_batched_tokens()) + " tokens";
}

int Fail(const CLI::App* cmd, const std::string& message, int code) {
  std::fprintf(stderr, "llmq %s: %s\n", cmd->get_name().c_str(), message.c_str());
  return code;
}

int Fail(const CLI::App* cmd, const Status& st, int code) {
  return Fail(cmd, st.message(), code);
}

}  // namespace llmq::cli
