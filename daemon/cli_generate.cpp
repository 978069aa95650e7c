// llmq generate: one prompt through the engine, for trying a model.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "daemon/args.h"
#include "daemon/commands.h"
#include "engine/llm_engine.h"
#include "engine/model.h"

namespace llmq::cli {

int Generate(int argc, char** argv) {
  Args args(
      {"model", "prompt", "max-tokens", "temperature", "top-p", "top-k", "min-p", "seed", "stop"},
      {"json", "ignore-eos"});
  std::string err;
  if (!args.Parse(argc, argv, 2, &err) || !args.Has("model") || !args.Has("prompt")) {
    if (err.empty()) err = "--model and --prompt are required";
    std::fprintf(stderr, "llmq generate: %s\n", err.c_str());
    return 2;
  }
  SamplingParams p;
  long long max_tokens = 0, top_k = 0, seed = 0;
  double temperature = 0, top_p = 0, min_p = 0;
  if (!args.GetInt("max-tokens", 64, &max_tokens, &err) || !args.GetInt("top-k", 0, &top_k, &err) ||
      !args.GetInt("seed", 0, &seed, &err) ||
      !args.GetDouble("temperature", 1.0, &temperature, &err) ||
      !args.GetDouble("top-p", 1.0, &top_p, &err) || !args.GetDouble("min-p", 0.0, &min_p, &err)) {
    std::fprintf(stderr, "llmq generate: %s\n", err.c_str());
    return 2;
  }
  if (max_tokens < 1 || temperature < 0 || top_p <= 0 || top_p > 1 || min_p < 0 || min_p > 1) {
    std::fprintf(stderr,
                 "llmq generate: need --max-tokens >= 1, --temperature >= 0, 0 < --top-p <= 1, 0 "
                 "<= --min-p <= 1\n");
    return 2;
  }
  p.max_tokens = static_cast<int>(max_tokens);
  p.temperature = static_cast<float>(temperature);
  p.top_p = static_cast<float>(top_p);
  p.top_k = static_cast<int>(top_k);
  p.min_p = static_cast<float>(min_p);
  p.ignore_eos = args.Has("ignore-eos");
  p.seed = args.Has("seed") ? static_cast<uint64_t>(seed) : std::random_device{}();
  if (auto s = args.Get("stop")) p.stop.push_back(*s);

  const std::string dir = *args.Get("model");
  Model model;
  if (Status st = LoadModel(dir, &model); !st.ok()) {
    std::fprintf(stderr, "llmq generate: %s\n", st.message().c_str());
    return 1;
  }
  Request req;
  req.id = "generate";
  const std::vector<int> ids = model.tokenizer->Encode(*args.Get("prompt"));
  req.prompt_ids.assign(ids.begin(), ids.end());
  // Generation stops at the context's end: a prompt near it gets what room is left.
  req.params = p;
  EngineOptions opt;
  opt.num_blocks = BlockManager::BlocksFor(model.cfg.max_position_embeddings, opt.block_size);
  std::unique_ptr<LlmEngine> engine;
  if (Status st =
          LlmEngine::Create(model.cfg, model.backend.get(), model.tokenizer.get(), opt, &engine);
      !st.ok()) {
    std::fprintf(stderr, "llmq generate: %s\n", st.message().c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  engine->Add(std::move(req));
  std::vector<RequestOutput> outs;
  while (engine->HasWork()) engine->Step(&outs);  // a failure is the output's error
  const RequestOutput& out = outs.at(0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!out.ok()) {
    std::fprintf(stderr, "llmq generate: %s\n", out.error.c_str());
    return 1;
  }
  const Completion& c = out.completions.at(0);
  if (args.Has("json")) {
    nlohmann::json j{{"prompt_ids", ids},
                     {"completion_ids", c.ids},
                     {"text", c.text},
                     {"finish_reason", c.finish_reason}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", c.text.c_str());
    std::fprintf(stderr, "[%zu prompt + %zu completion tokens in %.2f s, finish_reason %s]\n",
                 ids.size(), c.ids.size(), secs, c.finish_reason.c_str());
  }
  return 0;
}

}  // namespace llmq::cli
