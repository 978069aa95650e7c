// LoadModel on the CPU backend holds the weights once: the backend packs its own copy and the
// safetensors mapping is released (the file no longer appears among the process's mappings), and
// the model still generates what it generated with the mapping held; ReleaseFreeHeap (which
// LoadModel calls after packing) gives freed heap memory back to the system.
#include "engine/model/model.h"

#include <gtest/gtest.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstring>
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

#ifdef __GLIBC__
// RssAnon of /proc/self/status, in kB.
int64_t RssAnonKb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8));
  return -1;
}

// Freed blocks between live ones on the heap stay resident until ReleaseFreeHeap: the widened
// weights LoadModel frees while packing are such blocks.
TEST(ModelTest, ReleaseFreeHeapReturnsFreedHeapMemory) {
  constexpr int kBlocks = 48;
  constexpr size_t kBig = 1 << 20;
  mallopt(M_MMAP_THRESHOLD, 64 << 20);  // 1 MiB blocks from the heap, not mapped on their own
  std::vector<char*> blocks;
  for (int i = 0; i < 2 * kBlocks; ++i) {
    blocks.push_back(static_cast<char*>(malloc(kBig)));
    std::memset(blocks.back(), 1, kBig);  // resident
  }
  // Every other block freed: the live ones keep the free ones apart and off the heap's top.
  for (int i = 0; i < 2 * kBlocks; i += 2) free(blocks[i]);
  const int64_t before = RssAnonKb();
  ReleaseFreeHeap();
  const int64_t after = RssAnonKb();
  for (int i = 1; i < 2 * kBlocks; i += 2) free(blocks[i]);
  mallopt(M_MMAP_THRESHOLD, 128 << 10);  // glibc's default again
  EXPECT_GT(before - after, static_cast<int64_t>(kBlocks) * 1024 * 3 / 4)
      << "RssAnon " << before << " kB before, " << after << " kB after";
}
#endif

}  // namespace
}  // namespace llmq
