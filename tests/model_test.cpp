// LoadModel on the CPU backend holds the weights once: the backend packs its own copy and the
// safetensors mapping is released (the file no longer appears among the process's mappings), and
// the model still generates what it generated with the mapping held.
#include "engine/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/small_model.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ModelTest, CpuBackendReleasesTheSafetensorsMapping) {
  const std::string dir = testing::SharedModel("tiny-llama3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama3");
  const std::string file =
      std::filesystem::canonical(std::filesystem::path(dir) / "model.safetensors").string();

  std::unique_ptr<Weights> mapped;  // the mapping, as LoadModel used to keep it
  ModelConfig cfg;
  ASSERT_TRUE(LoadModelConfig(dir, &cfg).ok());
  ASSERT_TRUE(Weights::Load(dir, cfg, &mapped).ok());
  ASSERT_NE(Maps().find(file), std::string::npos) << "the check below would prove nothing";
  Request r;
  r.id = "a";
  r.prompt_ids = {1, 15, 200, 7, 42};
  r.params.temperature = 0;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  const auto want = testing::RunEngine(cfg, *mapped, {r});
  mapped.reset();
  ASSERT_EQ(Maps().find(file), std::string::npos);

  Model m;
  ASSERT_TRUE(LoadModel(dir, &m).ok());
  EXPECT_EQ(m.weights, nullptr);
  EXPECT_EQ(Maps().find(file), std::string::npos) << file << " is still mapped";

  EngineOptions opt;
  opt.num_blocks = 64;
  std::unique_ptr<LlmEngine> engine;
  ASSERT_TRUE(LlmEngine::Create(m.cfg, m.backend.get(), nullptr, opt, &engine).ok());
  engine->Add(r);
  std::vector<RequestOutput> out, step;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step(&step).ok());
    out.insert(out.end(), step.begin(), step.end());
    step.clear();
  }
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error;
  EXPECT_EQ(out[0].completions.at(0).ids, want.at("a").completions.at(0).ids);
}

}  // namespace
}  // namespace llmq
