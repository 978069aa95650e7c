// A small random-weight Llama for engine tests: the "tiny" shape narrowed to hidden 32, 2 layers,
// 2 heads over 1 KV head of 16 (fast enough for thousands of steps), written to a scratch folder
// and loaded back.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tools/model_maker.h"
#include "tests/test_util.h"

namespace llmq::testing {

inline void MakeSmallModel(const std::string& name, uint64_t seed, int max_positions,
                           ModelConfig* cfg, std::unique_ptr<Weights>* w) {
  DType dt;
  ASSERT_TRUE(ShapeConfig("tiny", cfg, &dt).ok());
  cfg->hidden_size = 32;
  cfg->intermediate_size = 64;
  cfg->num_layers = 2;
  cfg->num_heads = 2;
  cfg->num_kv_heads = 1;
  cfg->head_dim = 16;
  cfg->max_position_embeddings = max_positions;
  const std::string dir = TmpDir(name);
  ASSERT_TRUE(WriteRandomModel(*cfg, DType::kF32, seed, dir).ok());
  ASSERT_TRUE(Weights::Load(dir, *cfg, w).ok());
}

// Runs `reqs` to the end on `be` and a fresh engine (without `tok`: ids only; requests with a
// grammar need it) with a token budget of `budget` per step; the outputs by request id.
inline std::map<std::string, RequestOutput> RunEngineOn(const ModelConfig& cfg, Backend* be,
                                                        const std::vector<Request>& reqs,
                                                        int budget = 2048, int num_blocks = 64,
                                                        const Tokenizer* tok = nullptr) {
  EngineOptions opt;
  opt.num_blocks = num_blocks;
  opt.scheduler.max_num_batched_tokens = budget;
  std::unique_ptr<LlmEngine> engine;
  EXPECT_TRUE(LlmEngine::Create(cfg, be, tok, opt, &engine).ok());
  for (const Request& r : reqs) engine->Add(r);
  std::map<std::string, RequestOutput> out;
  std::vector<RequestOutput> step;
  while (engine->HasWork()) {
    EXPECT_TRUE(engine->Step(&step).ok());
    for (RequestOutput& o : step) out[o.id] = std::move(o);
    step.clear();
  }
  return out;
}

// Every request of `a` is OK and has the same completions' ids as in `b` (`what` names the pair).
inline void ExpectSameIds(const std::map<std::string, RequestOutput>& a,
                          const std::map<std::string, RequestOutput>& b, const char* what = "") {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [id, o] : a) {
    ASSERT_TRUE(o.ok()) << what << " " << id << ": " << o.error;
    ASSERT_EQ(o.completions.size(), b.at(id).completions.size()) << what << " " << id;
    for (size_t k = 0; k < o.completions.size(); ++k)
      EXPECT_EQ(o.completions[k].ids, b.at(id).completions[k].ids)
          << what << " " << id << " sample " << k;
  }
}

// The same on a fresh CPU backend holding its matrices as `type` and its KV cache as `kv`.
inline std::map<std::string, RequestOutput> RunEngine(
    const ModelConfig& cfg, const Weights& w, const std::vector<Request>& reqs, int budget = 2048,
    int num_blocks = 64, kernels::WeightType type = kernels::WeightType::kF32,
    KvDtype kv = KvDtype::kF32) {
  CpuBackend be(cfg, w, type, kv);
  return RunEngineOn(cfg, &be, reqs, budget, num_blocks);
}

}  // namespace llmq::testing
