// A small random-weight Llama for engine tests: the "tiny" shape narrowed to hidden 32, 2 layers,
// 2 heads over 1 KV head of 16 (fast enough for thousands of steps), written to a scratch folder
// and loaded back.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/model_config.h"
#include "engine/model_maker.h"
#include "engine/weights.h"
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

}  // namespace llmq::testing
