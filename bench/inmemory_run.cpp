#include "bench/inmemory_run.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/durable_file.h"
#include "daemon/request_builder.h"
#include "jobs/batch_output.h"
#include "jobs/batch_request.h"
#include "jobs/finalizer.h"

namespace llmq::bench {
namespace {

struct Line {
  jobs::BatchRequest req;
  std::string request_id;
  std::string out;  // the output line, once known
  bool is_error = false;
};

// Writes `lines` to `path` durably (DurableFile: temporary file, fsync, rename, folder fsync).
Status WriteLines(const std::string& path, const std::vector<const std::string*>& lines) {
  DurableFile f;
  LLMQ_RETURN_IF_ERROR(f.Open(path));
  for (const std::string* l : lines) {
    LLMQ_RETURN_IF_ERROR(f.Append(*l));
    LLMQ_RETURN_IF_ERROR(f.Append("\n"));
  }
  return f.Commit();
}

std::string RequestId(size_t index, int64_t created) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "batch_req_%llx%06zx", static_cast<unsigned long long>(created),
                index);
  return buf;
}

SamplingParams ToParams(const jobs::BatchRequest& r, int max_tokens) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = static_cast<float>(r.temperature);
  p.top_p = static_cast<float>(r.top_p);
  p.top_k = r.top_k;
  p.min_p = static_cast<float>(r.min_p);
  if (r.seed) p.seed = static_cast<uint64_t>(*r.seed);
  p.stop = r.stop;
  p.ignore_eos = r.ignore_eos;
  return p;
}

// Tokenizes a good line into an engine request; returns an error message naming line and field
// when it cannot run.
std::string BuildRequest(const Model& m, const BatchRunOptions& opt, int capacity,
                         const jobs::BatchRequest& r, Request* out) {
  const std::string where = opt.input + ":" + std::to_string(r.line) + ": ";
  std::vector<int> ids;
  const char* prompt_field = "body.prompt";
  if (jobs::IsChat(r.endpoint)) {
    prompt_field = "body.messages";
    const Conversation c = ChatConversation(r);
    Status st = c.tools.empty() ? Status::Ok()
                                : Status::InvalidArgument(
                                      "field 'tools': a built-in chat "
                                      "template cannot render tools");
    if (st.ok()) st = EncodeChat(*m.tokenizer, opt.chat_template, c.messages, &ids);
    if (!st.ok()) {
      std::string msg = st.message();  // "field 'messages[2].role': ..." -> the body's field
      if (msg.rfind("field '", 0) == 0) msg.insert(7, "body.");
      return where + msg;
    }
  } else if (r.prompt_is_ids) {
    for (int32_t id : r.prompt_token_ids) {
      if (id < 0 || id >= m.cfg.vocab_size)
        return where + "field 'body.prompt': token id " + std::to_string(id) +
               " is outside the vocabulary (" + std::to_string(m.cfg.vocab_size) + ")";
      ids.push_back(id);
    }
  } else {
    ids = m.tokenizer->Encode(r.prompt);
  }
  const int ctx = m.cfg.max_position_embeddings;
  const int n = static_cast<int>(ids.size());
  if (n == 0) return where + "field '" + prompt_field + "': the prompt is empty";
  // Chat without max_tokens may use what is left of what one sequence can hold.
  const int64_t max_tokens =
      r.max_tokens.value_or(r.endpoint == jobs::Endpoint::kCompletions ? 16 : capacity - n);
  const std::string field = r.max_tokens ? "body.max_tokens" : prompt_field;
  if (n >= ctx || n + max_tokens > ctx)
    return where + "field '" + field + "': prompt (" + std::to_string(n) +
           " tokens) + max_tokens (" + std::to_string(max_tokens) +
           ") exceed the model's context of " + std::to_string(ctx) + " tokens";
  if (n >= capacity || n + max_tokens > capacity)
    return where + "field '" + field + "': prompt (" + std::to_string(n) +
           " tokens) + max_tokens (" + std::to_string(max_tokens) + ") exceed the KV cache of " +
           std::to_string(capacity) + " tokens (raise --kv-cache-memory)";
  out->prompt_ids.assign(ids.begin(), ids.end());
  out->params = ToParams(r, static_cast<int>(max_tokens));
  out->n = r.n;
  return "";
}

void Progress(size_t done, size_t total, int64_t out_tokens, int64_t cached, int64_t prompt,
              double secs) {
  const double tps = secs > 0 ? out_tokens / secs : 0;
  char eta[16] = "--:--";  // unknown until a request finishes
  if (done) {
    const int left = static_cast<int>(secs * (total - done) / done);
    std::snprintf(eta, sizeof eta, "%d:%02d", left / 60, left % 60);
  }
  const int width = 24, fill = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu requests | %.1f tok/s | cache hit %.1f%% | ETA %s ",
               fill, "########################", width - fill, "", done, total, tps,
               prompt ? 100.0 * cached / prompt : 0.0, eta);
}

}  // namespace

std::string BatchSummary::ToJson() const {
  nlohmann::ordered_json j{{"requests", requests},
                           {"failed", failed},
                           {"prompt_tokens", prompt_tokens},
                           {"cached_prompt_tokens", cached_prompt_tokens},
                           {"computed_prompt_tokens", computed_prompt_tokens},
                           {"completion_tokens", completion_tokens},
                           {"preemptions", preemptions},
                           {"wall_seconds", wall_seconds},
                           {"output_tokens_per_second", output_tokens_per_second},
                           {"ttft_seconds_p50", ttft_p50},
                           {"ttft_seconds_p95", ttft_p95},
                           {"latency_seconds_p50", latency_p50},
                           {"latency_seconds_p95", latency_p95}};
  return j.dump(2);
}

std::string BatchSummary::ToText() const {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "requests %lld (failed %lld) | prompt tokens %lld: cached %lld, computed %lld | "
                "completion tokens %lld | %.2f s, %.1f output tok/s | TTFT p50 %.3f s p95 %.3f s | "
                "latency p50 %.3f s p95 %.3f s | preemptions %lld",
                static_cast<long long>(requests), static_cast<long long>(failed),
                static_cast<long long>(prompt_tokens), static_cast<long long>(cached_prompt_tokens),
                static_cast<long long>(computed_prompt_tokens),
                static_cast<long long>(completion_tokens), wall_seconds, output_tokens_per_second,
                ttft_p50, ttft_p95, latency_p50, latency_p95, static_cast<long long>(preemptions));
  return buf;
}

Status RunBatchFile(const Model& m, const BatchRunOptions& opt, BatchSummary* sum) {
  const auto t0 = std::chrono::steady_clock::now();
  std::ifstream in(opt.input, std::ios::binary);
  if (!in) return Status::NotFound(opt.input + ": cannot open");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::vector<Line> lines;
  std::unordered_map<std::string, int> first_line;  // custom_id -> line
  std::string text;
  for (int no = 1; std::getline(in, text); ++no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos)
      continue;  // blank lines carry nothing
    Line l;
    l.req = jobs::ParseBatchLine(text, no, opt.input);
    l.request_id = RequestId(lines.size(), created);
    if (l.req.error.empty()) {
      auto [it, fresh] = first_line.emplace(l.req.custom_id, no);
      if (!fresh) {
        l.req.error = opt.input + ":" + std::to_string(no) + ": field 'custom_id': duplicate '" +
                      l.req.custom_id + "' (first on line " + std::to_string(it->second) + ")";
        l.req.error_param = "custom_id";
      }
    }
    lines.push_back(std::move(l));
  }
  if (in.bad()) return Status::IoError(opt.input + ": read failed");

  std::unique_ptr<LlmEngine> engine;
  LLMQ_RETURN_IF_ERROR(
      LlmEngine::Create(m.cfg, m.backend.get(), m.tokenizer.get(), opt.engine, &engine));
  auto refuse = [&](Line& l, const std::string& msg) {  // as OpenAI's API refuses it (HTTP 400)
    l.out = jobs::RefusedLine(l.req.custom_id, l.req.line, l.request_id, msg, l.req.error_param);
    l.is_error = true;
  };
  auto fail = [&](Line& l, const std::string& msg) {  // the engine failed it
    l.out = jobs::ErrorLine(l.req.custom_id, l.req.line, l.request_id, jobs::kEngineErrorCode, msg);
    l.is_error = true;
  };
  size_t queued = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    Line& l = lines[i];
    if (!l.req.error.empty()) {
      refuse(l, l.req.error);
      continue;
    }
    Request r;
    r.id = std::to_string(i);
    if (std::string err = BuildRequest(m, opt, engine->max_sequence_tokens(), l.req, &r);
        !err.empty()) {
      refuse(l, err);
      continue;
    }
    engine->Add(std::move(r));
    ++queued;
  }

  *sum = BatchSummary();
  std::vector<double> ttft, latency;
  size_t finished = 0;
  auto last_print = std::chrono::steady_clock::now();
  std::vector<RequestOutput> step_out;
  while (engine->HasWork()) {
    step_out.clear();
    // A failed step fails its requests (their lines say why); the rest go on.
    if (Status st = engine->Step(&step_out); !st.ok())
      std::fprintf(stderr, "llmq run: %s\n", st.message().c_str());
    for (RequestOutput& o : step_out) {
      Line& l = lines[std::stoul(o.id)];
      ++finished;
      if (!o.ok()) {
        fail(l, opt.input + ":" + std::to_string(l.req.line) + ": " + o.error);
        continue;
      }
      std::vector<jobs::Choice> choices;
      for (const Completion& c : o.completions) choices.push_back({c.text, c.finish_reason, {}});
      jobs::Usage usage{o.metrics.prompt_tokens, o.metrics.completion_tokens,
                        o.metrics.cached_prompt_tokens};
      l.out = jobs::SuccessLine(l.req, choices, usage, l.request_id, created,
                                l.req.model.empty() ? opt.model_name : l.req.model);
      sum->prompt_tokens += o.metrics.prompt_tokens;
      sum->cached_prompt_tokens += o.metrics.cached_prompt_tokens;
      sum->computed_prompt_tokens += o.metrics.computed_prompt_tokens;
      sum->completion_tokens += o.metrics.completion_tokens;
      sum->preemptions += o.metrics.preemptions;
      ttft.push_back(o.metrics.ttft_seconds);
      latency.push_back(o.metrics.total_seconds);
    }
    const auto now = std::chrono::steady_clock::now();
    if (opt.progress && now - last_print > std::chrono::milliseconds(250)) {
      last_print = now;
      Progress(finished, queued, sum->completion_tokens, sum->cached_prompt_tokens,
               sum->prompt_tokens, std::chrono::duration<double>(now - t0).count());
    }
  }
  if (opt.progress) {
    Progress(finished, queued, sum->completion_tokens, sum->cached_prompt_tokens,
             sum->prompt_tokens,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fputc('\n', stderr);
  }

  std::vector<const std::string*> out, errors;
  for (const Line& l : lines) {
    (l.is_error && !opt.errors.empty() ? errors : out).push_back(&l.out);
    sum->failed += l.is_error;
  }
  sum->requests = static_cast<int64_t>(lines.size());
  LLMQ_RETURN_IF_ERROR(WriteLines(opt.output, out));
  if (!opt.errors.empty()) LLMQ_RETURN_IF_ERROR(WriteLines(opt.errors, errors));
  sum->wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sum->output_tokens_per_second =
      sum->wall_seconds > 0 ? sum->completion_tokens / sum->wall_seconds : 0;
  sum->ttft_p50 = jobs::NearestRankPercentile(ttft, 0.5);
  sum->ttft_p95 = jobs::NearestRankPercentile(ttft, 0.95);
  sum->latency_p50 = jobs::NearestRankPercentile(latency, 0.5);
  sum->latency_p95 = jobs::NearestRankPercentile(latency, 0.95);
  return Status::Ok();
}

}  // namespace llmq::bench
