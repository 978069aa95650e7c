#include "config/knobs.h"

namespace llmq {
namespace {

// A knob compared on one member of LlmqConfig.
template <typename T>
Knob On(const char* key, bool reloadable, T LlmqConfig::*member) {
  return Knob{key, reloadable, [member](const LlmqConfig& a, const LlmqConfig& b) {
                return a.*member == b.*member;
              }};
}

}  // namespace

const std::vector<Knob>& Knobs() {
  static const std::vector<Knob> knobs = {
      On("model.path", false, &LlmqConfig::model_dir),
      On("model.name", false, &LlmqConfig::model_name),
      On("model.served_names", false, &LlmqConfig::served_names),
      On("model.chat_template", false, &LlmqConfig::chat_template),
      On("model.tool_call_format", false, &LlmqConfig::tool_call_format),
      On("model.reasoning_parser", false, &LlmqConfig::reasoning_parser),
      On("engine.block_size", false, &LlmqConfig::block_size),
      On("engine.max_num_seqs", false, &LlmqConfig::max_num_seqs),
      On("engine.max_num_batched_tokens", false, &LlmqConfig::max_num_batched_tokens),
      On("engine.kv_cache_memory", false, &LlmqConfig::kv_cache_bytes),
      On("engine.enable_prefix_caching", false, &LlmqConfig::enable_prefix_caching),
      On("engine.enable_planner", false, &LlmqConfig::enable_planner),
      On("engine.shared_prefix_attention", false, &LlmqConfig::shared_prefix_attention),
      On("engine.backend", false, &LlmqConfig::backend),
      On("engine.precision", false, &LlmqConfig::precision),
      On("engine.weight_dtype", false, &LlmqConfig::weight_dtype),
      On("engine.kv_dtype", false, &LlmqConfig::kv_dtype),
      On("engine.gpu_memory_utilization", false, &LlmqConfig::gpu_memory_utilization),
      On("engine.device", false, &LlmqConfig::device),
      On("engine.cpu_threads", false, &LlmqConfig::cpu_threads),
      On("spool.state_dir", false, &LlmqConfig::state_dir),
      On("spool.settle_seconds", true, &LlmqConfig::settle_seconds),
      On("spool.group_window_ms", true, &LlmqConfig::group_window_ms),
      On("spool.rescan_seconds", true, &LlmqConfig::rescan_seconds),
      On("spool.max_file_bytes", true, &LlmqConfig::max_file_bytes),
      On("spool.max_line_bytes", true, &LlmqConfig::max_line_bytes),
      On("spool.drain_seconds", true, &LlmqConfig::drain_seconds),
      On("spool.commit_interval_ms", true, &LlmqConfig::commit_interval_ms),
      On("queue.url", false, &LlmqConfig::queue_url),
      On("queue.lease_seconds", false, &LlmqConfig::lease_seconds),
      On("metrics.textfile", false, &LlmqConfig::metrics_textfile),
      On("metrics.interval_seconds", false, &LlmqConfig::metrics_interval_seconds),
      On("metrics.http_port", false, &LlmqConfig::metrics_http_port),
      On("metrics.job_reports", false, &LlmqConfig::job_reports),
      On("serve.run_windows", true, &LlmqConfig::run_windows),
  };
  return knobs;
}

bool IsKnob(const std::string& key) {
  for (const Knob& k : Knobs())
    if (key == k.key) return true;
  return false;
}

std::vector<std::string> ChangedKeys(const LlmqConfig& a, const LlmqConfig& b, bool restart_only) {
  std::vector<std::string> out;
  for (const Knob& k : Knobs())
    if ((!restart_only || !k.reloadable) && !k.same(a, b)) out.push_back(k.key);
  return out;
}

}  // namespace llmq
