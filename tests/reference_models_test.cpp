// The real binary against the independent references in ../shared: stories260K (llama2.c, fp32)
// and tiny-llama3 (a float64 Hugging Face forward: BF16, head_dim, GQA 4:1, llama3 rope scaling);
// and the forward of the newer families against theirs: tiny-qwen3 (q/k norm, head_dim 32),
// tiny-qwen2 (q/k/v biases, MQA) and tiny-llama32 (Llama 3.2: tied head, llama3 scaling, three
// EOS ids), each from its references' prompt_ids (their tokenizer.json is checked elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/backends/cpu_backend.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "tests/reference_forward.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::vector<fs::path> References(const std::string& model_dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(model_dir) / "reference"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

json ReadJson(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

// Runs `llmq generate --json` greedily for one reference file; checks ids (and text if asked).
void CheckGenerate(const std::string& model, const fs::path& ref_file, bool check_text) {
  const json ref = ReadJson(ref_file);
  const auto r = testing::RunLlmq(
      {"generate", "--model", model, "--prompt", ref["prompt"].get<std::string>(), "--max-tokens",
       std::to_string(ref["max_tokens"].get<int>()), "--temperature", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json got = json::parse(r.out);
  EXPECT_EQ(got["prompt_ids"], ref["prompt_ids"]) << ref_file;
  EXPECT_EQ(got["completion_ids"], ref["completion_ids"]) << ref_file;
  EXPECT_EQ(got["finish_reason"], ref["finish_reason"]) << ref_file;
  if (check_text) {
    EXPECT_EQ(got["text"], ref["completion_text"]) << ref_file;
  }
}

TEST(ReferenceModels, Stories260KGenerateReproducesLlama2c) {
  const std::string dir = testing::SharedModel("stories260K");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "stories260K");
  const auto refs = References(dir);
  ASSERT_GE(refs.size(), 5u);
  for (const fs::path& f : refs) CheckGenerate(dir, f, /*check_text=*/true);
}

TEST(ReferenceModels, TinyLlama3GenerateReproducesFloat64Reference) {
  const std::string dir = testing::SharedModel("tiny-llama3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama3");
  const auto refs = References(dir);
  ASSERT_GE(refs.size(), 4u);
  for (const fs::path& f : refs) CheckGenerate(dir, f, /*check_text=*/false);
}

TEST(ReferenceModels, TinyLlama3LastPromptLogitsWithin1e4) {
  const std::string dir = testing::SharedModel("tiny-llama3");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "tiny-llama3");
  Model m;
  ASSERT_TRUE(LoadModel(dir, &m).ok());
  const int bs = 16;
  ASSERT_TRUE(m.backend->AllocateKv(64, bs).ok());
  for (const fs::path& f : References(dir)) {
    const json ref = ReadJson(f);
    const std::vector<int> ids = ref["prompt_ids"].get<std::vector<int>>();
    const int n = static_cast<int>(ids.size()), vocab = m.cfg.vocab_size;
    std::vector<int32_t> table;  // blocks 0, 1, 2, ... in order
    for (int b = 0; b < (n + bs - 1) / bs; ++b) table.push_back(b);
    const std::vector<float> all =
        testing::ForwardOneSequence(*m.backend, ids, 0, n, table, bs, vocab);
    const std::vector<float> logits(all.end() - vocab, all.end());  // the last prompt position
    const std::vector<double> want = ref["last_prompt_position_logits"].get<std::vector<double>>();
    ASSERT_EQ(want.size(), logits.size());
    double max_ref = 0;
    for (double v : want) max_ref = std::max(max_ref, std::abs(v));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_LE(std::abs(logits[i] - want[i]), 1e-4 * std::max(std::abs(want[i]), max_ref * 0.01))
          << f << " logit " << i << ": got " << logits[i] << " want " << want[i];
  }
}

// Config + weights + the CPU backend + the engine (no tokenizer: ids only) on every reference's
// prompt_ids, greedily: the completion ids (with the stop token when one stopped it) and the finish
// reason must equal the float64 forward's; the model's EOS ids must be the reference's stop ids.
void CheckForwardGreedy(const std::string& dir, size_t min_refs) {
  ModelConfig cfg;
  Status st = LoadModelConfig(dir, &cfg);
  ASSERT_TRUE(st.ok()) << st.message();
  std::unique_ptr<Weights> w;
  st = Weights::Load(dir, cfg, &w);
  ASSERT_TRUE(st.ok()) << st.message();
  CpuBackend backend(cfg, *w);
  EngineOptions opt;
  opt.num_blocks = 64;
  std::unique_ptr<LlmEngine> engine;
  st = LlmEngine::Create(cfg, &backend, /*tokenizer=*/nullptr, opt, &engine);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto refs = References(dir);
  ASSERT_GE(refs.size(), min_refs) << dir;
  std::map<std::string, json> want;
  for (const fs::path& f : refs) {
    const json ref = ReadJson(f);
    EXPECT_EQ(json(cfg.eos_token_ids), ref["stop_token_ids"]) << f;
    Request r;
    r.id = f.filename().string();
    r.prompt_ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    r.params.max_tokens = ref["max_tokens"].get<int>();
    r.params.temperature = 0;
    engine->Add(r);
    want[r.id] = ref;
  }
  std::vector<RequestOutput> done;
  while (engine->HasWork()) {
    st = engine->Step(&done);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  ASSERT_EQ(done.size(), want.size());
  for (const RequestOutput& o : done) {
    ASSERT_TRUE(o.ok()) << o.id << ": " << o.error;
    const json& ref = want.at(o.id);
    ASSERT_EQ(o.completions.size(), 1u);
    EXPECT_EQ(json(o.completions[0].ids), ref["completion_ids"])
        << o.id << " (min_top2_margin " << ref["min_top2_margin"] << ")";
    EXPECT_EQ(o.completions[0].finish_reason, ref["finish_reason"]) << o.id;
  }
}

// The plain reference forward (tests/reference_forward) on the real checkpoint, over prompt +
// completion in one pass: its argmax after each prefix is the reference's next completion id (so
// it is the Hugging Face forward of this family), and the CPU backend's logits at every position
// are within 1e-4 of it, relative to the logits' scale.
void CheckPlainReferenceAgrees(const std::string& dir) {
  ModelConfig cfg;
  ASSERT_TRUE(LoadModelConfig(dir, &cfg).ok());
  std::unique_ptr<Weights> w;
  ASSERT_TRUE(Weights::Load(dir, cfg, &w).ok());
  CpuBackend backend(cfg, *w);
  const int bs = 16, vocab = cfg.vocab_size;
  ASSERT_TRUE(backend.AllocateKv(16, bs).ok());
  for (const fs::path& f : References(dir)) {
    const json ref = ReadJson(f);
    std::vector<int> ids = ref["prompt_ids"].get<std::vector<int>>();
    const size_t prompt = ids.size();
    const std::vector<int> completion = ref["completion_ids"].get<std::vector<int>>();
    ids.insert(ids.end(), completion.begin(), completion.end() - 1);  // the last is never input
    const int n = static_cast<int>(ids.size());
    ASSERT_LE(n, 16 * bs) << f;
    const auto want = testing::ReferenceLogits(cfg, *w, ids);
    std::vector<int32_t> table(16);
    for (int b = 0; b < 16; ++b) table[b] = 15 - b;  // blocks in reverse order
    const std::vector<float> got =
        testing::ForwardOneSequence(backend, ids, 0, n, table, bs, vocab);
    double worst = 0;
    for (int p = 0; p < n; ++p)
      worst =
          std::max(worst, testing::RelativeError(&got[static_cast<size_t>(p) * vocab], want[p]));
    EXPECT_LT(worst, 1e-4) << f;
    for (size_t i = 0; i < completion.size(); ++i) {
      const std::vector<double>& row = want[prompt - 1 + i];
      const int argmax = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      EXPECT_EQ(argmax, completion[i]) << f << " completion token " << i;
    }
  }
}

// The shared models of the newer families, each with at least two references.
class NewFamilies : public ::testing::TestWithParam<const char*> {};

TEST_P(NewFamilies, EngineReproducesFloat64GreedyIds) {
  const std::string dir = testing::SharedModel(GetParam());
  LLMQ_SKIP_WITHOUT_SHARED(dir, GetParam());
  CheckForwardGreedy(dir, 2);
}

TEST_P(NewFamilies, PlainReferenceAndCpuBackendAgree) {
  const std::string dir = testing::SharedModel(GetParam());
  LLMQ_SKIP_WITHOUT_SHARED(dir, GetParam());
  CheckPlainReferenceAgrees(dir);
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, NewFamilies,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "tiny-llama32"),
                         [](const auto& info) {
                           std::string name = info.param;  // "tiny-qwen3" -> "tiny_qwen3"
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace llmq
