// Tests for engine/weights: loading the shared models, single vs sharded checkpoints written here,
// and the messages for every way a checkpoint can disagree with its config.
#include "engine/model/weights.h"
#include "base/bf16.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmq {
namespace {

namespace fs = std::filesystem;

#define SKIP_IF_NO_MODEL(dir) LLMQ_SKIP_WITHOUT_FILE(std::string(dir) + "/model.safetensors")

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A tensor with its bytes, for writing synthetic checkpoints.
struct Owned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

Owned MakeTensor(const std::string& name, DType dt, std::vector<int64_t> shape, int seed) {
  Owned t{name, dt, std::move(shape), {}};
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.bytes.resize(static_cast<size_t>(n) * DTypeSize(dt));
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.1f * std::sin(static_cast<float>(seed * 31 + i));
    uint8_t* p = t.bytes.data() + i * DTypeSize(dt);
    if (dt == DType::kF32) std::memcpy(p, &v, 4);
    const uint16_t h = dt == DType::kBF16 ? FloatToBf16(v) : F32ToF16(v);
    if (dt != DType::kF32) std::memcpy(p, &h, 2);
  }
  return t;
}

ModelConfig SmallConfig(bool tied) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 16;
  c.intermediate_size = 40;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 6;  // != hidden / heads, so q/o shapes differ from hidden x hidden
  c.vocab_size = 32;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  return c;
}

// Loads a model folder's config and weights, expecting success.
void LoadDir(const std::string& dir, std::unique_ptr<Weights>* w) {
  ModelConfig c;
  ASSERT_TRUE(LoadModelConfig(dir, &c).ok());
  Status s = Weights::Load(dir, c, w);
  ASSERT_TRUE(s.ok()) << s.message();
}

// SmallConfig of another family (its q/k/v biases or q/k norms).
ModelConfig SmallConfigOf(const char* arch, bool tied) {
  ModelConfig c = SmallConfig(tied);
  EXPECT_TRUE(SetArchitecture(arch, "test", &c).ok());
  return c;
}

// Every tensor the config requires, with the right shapes, in Hugging Face order.
std::vector<Owned> SyntheticModel(const ModelConfig& c, DType dt) {
  const int64_t h = c.hidden_size, in = c.intermediate_size, v = c.vocab_size;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  int seed = 0;
  std::vector<Owned> t;
  t.push_back(MakeTensor("model.embed_tokens.weight", dt, {v, h}, seed++));
  for (int i = 0; i < c.num_layers; ++i) {
    auto add = [&](const char* s, std::vector<int64_t> shape) {
      t.push_back(MakeTensor(LayerTensorName(i, s), dt, std::move(shape), seed++));
    };
    add("input_layernorm.weight", {h});
    add("self_attn.q_proj.weight", {q, h});
    add("self_attn.k_proj.weight", {kv, h});
    add("self_attn.v_proj.weight", {kv, h});
    add("self_attn.o_proj.weight", {h, q});
    add("post_attention_layernorm.weight", {h});
    add("mlp.gate_proj.weight", {in, h});
    add("mlp.up_proj.weight", {in, h});
    add("mlp.down_proj.weight", {h, in});
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q});
      add("self_attn.k_proj.bias", {kv});
      add("self_attn.v_proj.bias", {kv});
    }
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", {c.head_dim});
      add("self_attn.k_norm.weight", {c.head_dim});
    }
  }
  t.push_back(MakeTensor("model.norm.weight", dt, {h}, seed++));
  if (!c.tie_word_embeddings) t.push_back(MakeTensor("lm_head.weight", dt, {v, h}, seed++));
  return t;
}

std::vector<TensorToWrite> Views(const std::vector<Owned>& ts) {
  std::vector<TensorToWrite> w;
  for (const Owned& t : ts) w.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  return w;
}

void WriteSingle(const std::string& dir, const std::vector<Owned>& ts) {
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", Views(ts)).ok());
}

// Splits `ts` into `n` consecutive shards named as Hugging Face does, plus the index.
void WriteSharded(const std::string& dir, const std::vector<Owned>& ts, int n) {
  nlohmann::json map = nlohmann::json::object();
  const size_t per = (ts.size() + n - 1) / n;
  for (int s = 0; s < n; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, n);
    std::vector<Owned> part(ts.begin() + std::min(ts.size(), s * per),
                            ts.begin() + std::min(ts.size(), (s + 1) * per));
    for (const Owned& t : part) map[t.name] = name;
    ASSERT_TRUE(WriteSafetensors(dir + "/" + name, Views(part)).ok());
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
  WriteText(dir + "/model.safetensors.index.json", index.dump(2));
}

// Loads `dir` and expects failure with a message containing every needle.
void ExpectLoadError(const std::string& dir, const ModelConfig& c,
                     const std::vector<std::string>& needles) {
  std::unique_ptr<Weights> w;
  Status s = Weights::Load(dir, c, &w);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(w, nullptr);
  for (const std::string& n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
}

std::vector<Owned> Without(std::vector<Owned> ts, const std::string& name) {
  std::erase_if(ts, [&](const Owned& t) { return t.name == name; });
  return ts;
}

TEST(WeightsTest, LayerTensorName) {
  EXPECT_EQ(LayerTensorName(3, "self_attn.q_proj.weight"),
            "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(LayerTensorName(0, "mlp.down_proj.weight"), "model.layers.0.mlp.down_proj.weight");
}

TEST(WeightsTest, LoadsStories260K) {
  const std::string dir = testing::SharedModelDir("stories260K");
  SKIP_IF_NO_MODEL(dir);
  std::unique_ptr<Weights> w;
  ASSERT_NO_FATAL_FAILURE(LoadDir(dir, &w));
  const TensorView& e = w->Get("model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, DType::kF32);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(e.file, dir + "/model.safetensors");
  EXPECT_EQ(w->Find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(w->Get(LayerTensorName(4, "mlp.down_proj.weight")).shape,
            (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(w->Get(LayerTensorName(0, "self_attn.k_proj.weight")).shape,
            (std::vector<int64_t>{32, 64}));
  // 48 tensors, 260K-ish floats: every byte after the header is tensor data.
  const uint64_t file_size = fs::file_size(dir + "/model.safetensors");
  EXPECT_GT(w->total_bytes(), file_size - 6000);
  EXPECT_LE(w->total_bytes(), file_size);
  const std::vector<float> norm = w->ToF32("model.norm.weight");
  ASSERT_EQ(norm.size(), 64u);
  float first;
  std::memcpy(&first, w->Get("model.norm.weight").data, 4);
  EXPECT_EQ(norm[0], first);
  for (float v : norm) EXPECT_TRUE(std::isfinite(v));
}

TEST(WeightsTest, LoadsTinyLlama3) {
  const std::string dir = testing::SharedModelDir("tiny-llama3");
  SKIP_IF_NO_MODEL(dir);
  std::unique_ptr<Weights> w;
  ASSERT_NO_FATAL_FAILURE(LoadDir(dir, &w));
  const TensorView& lm = w->Get("lm_head.weight");
  EXPECT_EQ(lm.dtype, DType::kBF16);
  EXPECT_EQ(lm.shape, (std::vector<int64_t>{512, 96}));
  EXPECT_EQ(w->Get(LayerTensorName(2, "self_attn.q_proj.weight")).shape,
            (std::vector<int64_t>{128, 96}));  // head_dim 16 * 8 heads != hidden 96
  EXPECT_EQ(w->Get(LayerTensorName(2, "self_attn.o_proj.weight")).shape,
            (std::vector<int64_t>{96, 128}));
  const std::vector<float> f = w->ToF32("lm_head.weight");
  ASSERT_EQ(f.size(), 512u * 96u);
  uint16_t raw;
  std::memcpy(&raw, lm.data + 2 * 777, 2);
  EXPECT_EQ(f[777], Bf16ToFloat(raw));
}

TEST(WeightsTest, ShardedRealModelEqualsSingleFile) {
  const std::string src = testing::SharedModelDir("tiny-llama3");
  SKIP_IF_NO_MODEL(src);
  ModelConfig c;
  ASSERT_TRUE(LoadModelConfig(src, &c).ok());
  std::unique_ptr<Weights> single;
  ASSERT_TRUE(Weights::Load(src, c, &single).ok());
  // Re-shard the real checkpoint into 3 files (tensor order as in the original header).
  std::unique_ptr<MappedFile> f;
  ASSERT_TRUE(MappedFile::Open(src + "/model.safetensors", &f).ok());
  std::vector<TensorInfo> infos;
  ASSERT_TRUE(ParseSafetensors(f->data(), f->size(), f->path(), &infos).ok());
  std::vector<Owned> ts;
  for (const TensorInfo& t : infos)
    ts.push_back({t.name, t.dtype, t.shape, {f->data() + t.begin, f->data() + t.end}});
  const std::string dir = testing::CurrentTestDir();
  WriteSharded(dir, ts, 3);
  std::unique_ptr<Weights> sharded;
  Status s = Weights::Load(dir, c, &sharded);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(sharded->total_bytes(), single->total_bytes());
  for (const TensorInfo& t : infos) {
    SCOPED_TRACE(t.name);
    const TensorView& a = single->Get(t.name);
    const TensorView& b = sharded->Get(t.name);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_NE(b.file.find("-of-00003.safetensors"), std::string::npos);
    EXPECT_EQ(single->ToF32(t.name), sharded->ToF32(t.name));
  }
}

TEST(WeightsTest, ShardedSyntheticEqualsSingleFile) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    const ModelConfig c = SmallConfig(/*tied=*/false);
    const std::vector<Owned> ts = SyntheticModel(c, dt);
    const std::string base = testing::CurrentTestDir();
    fs::create_directories(base + "/single");
    fs::create_directories(base + "/sharded");
    WriteSingle(base + "/single", ts);
    WriteSharded(base + "/sharded", ts, 2);
    std::unique_ptr<Weights> a, b;
    ASSERT_TRUE(Weights::Load(base + "/single", c, &a).ok());
    Status s = Weights::Load(base + "/sharded", c, &b);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(a->total_bytes(), b->total_bytes());
    for (const Owned& t : ts) {
      EXPECT_EQ(b->Get(t.name).shape, t.shape);
      EXPECT_EQ(b->Get(t.name).dtype, dt);
      EXPECT_EQ(std::memcmp(b->Get(t.name).data, t.bytes.data(), t.bytes.size()), 0);
      EXPECT_EQ(a->ToF32(t.name), b->ToF32(t.name));
    }
    EXPECT_NE(b->Get("lm_head.weight").file, b->Get("model.embed_tokens.weight").file);
  }
}

// The shared models of the newer families load: their biases / q/k norms are found and shaped.
TEST(WeightsTest, LoadsTinyQwen2Qwen3Llama32) {
  struct Case {
    const char* model;
    std::vector<std::string> present, absent;
  };
  const std::vector<Case> cases = {
      {"tiny-qwen2",
       {"model.layers.1.self_attn.q_proj.bias", "model.layers.1.self_attn.v_proj.bias"},
       {"lm_head.weight"}},
      {"tiny-qwen3",
       {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"},
       {"lm_head.weight"}},
      {"tiny-llama32", {"model.layers.1.mlp.down_proj.weight"}, {"lm_head.weight"}}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.model);
    const std::string dir = testing::SharedModelDir(k.model);
    SKIP_IF_NO_MODEL(dir);
    std::unique_ptr<Weights> w;
    ASSERT_NO_FATAL_FAILURE(LoadDir(dir, &w));
    for (const std::string& n : k.present) EXPECT_NE(w->Find(n), nullptr) << n;
    for (const std::string& n : k.absent) EXPECT_EQ(w->Find(n), nullptr) << n;
  }
}

TEST(WeightsTest, FamilyTensorsMissingOrMisshapedAreNamed) {
  const std::string dir = testing::CurrentTestDir();
  ModelConfig c = SmallConfigOf("Qwen2ForCausalLM", /*tied=*/true);
  const std::string bias = LayerTensorName(1, "self_attn.k_proj.bias");
  WriteSingle(dir, Without(SyntheticModel(c, DType::kBF16), bias));
  ExpectLoadError(dir, c,
                  {dir + "/model.safetensors: required tensor '" + bias + "' is missing",
                   "Qwen2ForCausalLM has q/k/v projection biases"});
  WriteSingle(dir, SyntheticModel(c, DType::kBF16));
  c.num_kv_heads = 1;  // the checkpoint's k/v are for 2 KV heads: k_proj.weight is named first
  ExpectLoadError(dir, c, {"k_proj.weight' has shape [12, 16], expected [6, 16]"});

  c = SmallConfigOf("Qwen3ForCausalLM", /*tied=*/false);
  std::vector<Owned> ts = SyntheticModel(c, DType::kF32);
  for (Owned& t : ts)  // q_norm of head_dim 8 beside projections of head_dim 6
    if (t.name.ends_with("self_attn.q_norm.weight")) t = MakeTensor(t.name, DType::kF32, {8}, 1);
  WriteSingle(dir, ts);
  ExpectLoadError(dir, c,
                  {dir + "/model.safetensors: tensor 'model.layers.0.self_attn.q_norm.weight' has "
                         "shape [8], expected [6] (head_dim)"});
  const std::string norm = LayerTensorName(0, "self_attn.k_norm.weight");
  WriteSingle(dir, Without(SyntheticModel(c, DType::kF32), norm));
  ExpectLoadError(dir, c,
                  {"'" + norm + "' is missing", "Qwen3ForCausalLM normalizes q and k per head"});
}

// A checkpoint of one family loaded under another's architecture would silently drop its biases
// or q/k norms: refused, naming the tensor and the file.
TEST(WeightsTest, TensorsOfAnotherFamilyAreRefused) {
  const std::string dir = testing::CurrentTestDir();
  WriteSingle(dir, SyntheticModel(SmallConfigOf("Qwen2ForCausalLM", true), DType::kF32));
  ExpectLoadError(dir, SmallConfig(true),
                  {dir + "/model.safetensors: tensor 'model.layers.0.self_attn.k_proj.bias' is "
                         "not part of LlamaForCausalLM"});
  WriteSingle(dir, SyntheticModel(SmallConfigOf("Qwen3ForCausalLM", true), DType::kF32));
  ExpectLoadError(dir, SmallConfigOf("Qwen2ForCausalLM", true),
                  {"'model.layers.0.self_attn.q_proj.bias' is missing"});
  ExpectLoadError(dir, SmallConfig(true),
                  {"'model.layers.0.self_attn.k_norm.weight' is not part of LlamaForCausalLM"});
  std::vector<Owned> ts = SyntheticModel(SmallConfigOf("Qwen2ForCausalLM", true), DType::kF32);
  ts.push_back(MakeTensor(LayerTensorName(1, "self_attn.o_proj.bias"), DType::kF32, {16}, 5));
  WriteSingle(dir, ts);
  ExpectLoadError(dir, SmallConfigOf("Qwen2ForCausalLM", true),
                  {"'model.layers.1.self_attn.o_proj.bias' is not part of Qwen2ForCausalLM"});
}

TEST(WeightsTest, TiedModelMayOmitLmHeadAndExtrasAreIgnored) {
  const ModelConfig c = SmallConfig(/*tied=*/true);
  std::vector<Owned> ts = SyntheticModel(c, DType::kF32);
  ts.push_back(MakeTensor("model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {3}, 99));
  const std::string dir = testing::CurrentTestDir();
  WriteSingle(dir, ts);
  std::unique_ptr<Weights> w;
  Status s = Weights::Load(dir, c, &w);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(w->Find("lm_head.weight"), nullptr);
  ASSERT_NE(w->Find("model.layers.0.self_attn.rotary_emb.inv_freq"), nullptr);
  EXPECT_EQ(w->ToF32("model.norm.weight").size(), 16u);
}

TEST(WeightsTest, UntiedMissingLmHead) {
  const ModelConfig c = SmallConfig(/*tied=*/false);
  const std::string dir = testing::CurrentTestDir();
  WriteSingle(dir, Without(SyntheticModel(c, DType::kBF16), "lm_head.weight"));
  ExpectLoadError(dir, c,
                  {dir + "/model.safetensors: required tensor 'lm_head.weight' is missing "
                         "(tie_word_embeddings is false)"});
}

TEST(WeightsTest, MissingLayerTensor) {
  const ModelConfig c = SmallConfig(/*tied=*/true);
  const std::string dir = testing::CurrentTestDir();
  const std::string name = LayerTensorName(1, "self_attn.v_proj.weight");
  WriteSingle(dir, Without(SyntheticModel(c, DType::kF32), name));
  ExpectLoadError(dir, c, {dir + "/model.safetensors", "'" + name + "' is missing"});
}

TEST(WeightsTest, WrongShape) {
  ModelConfig c = SmallConfig(/*tied=*/true);
  const std::string dir = testing::CurrentTestDir();
  WriteSingle(dir, SyntheticModel(c, DType::kF32));
  c.intermediate_size = 48;  // the checkpoint has 40
  ExpectLoadError(dir, c,
                  {dir + "/model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has "
                         "shape [40, 16], expected [48, 16] (intermediate_size x hidden_size)"});
  c = SmallConfig(true);
  c.num_kv_heads = 4;
  ExpectLoadError(
      dir, c,
      {"k_proj.weight' has shape [12, 16], expected [24, 16]", "num_key_value_heads*head_dim"});
  c = SmallConfig(true);
  c.vocab_size = 33;
  ExpectLoadError(dir, c, {"'model.embed_tokens.weight' has shape [32, 16], expected [33, 16]"});
  c = SmallConfig(true);
  c.num_layers = 3;
  ExpectLoadError(dir, c,
                  {"'model.layers.2.input_layernorm.weight' is missing", "num_hidden_layers is 3"});
}

TEST(WeightsTest, UnsupportedDtypeNamesShard) {
  const ModelConfig c = SmallConfig(/*tied=*/true);
  const std::string dir = testing::CurrentTestDir();
  WriteSingle(dir, SyntheticModel(c, DType::kF32));
  // Rewrite the norm's dtype in place: "F32" -> "I32" keeps the header length.
  std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), {});
  const size_t at = all.find("\"F32\"", all.find("model.norm.weight"));
  ASSERT_NE(at, std::string::npos);
  f.seekp(static_cast<std::streamoff>(at + 1));
  f.write("I", 1);
  f.close();
  std::unique_ptr<Weights> w;
  Status s = Weights::Load(dir, c, &w);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_NE(s.message().find(dir + "/model.safetensors: tensor 'model.norm.weight'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("'I32'"), std::string::npos) << s.message();
}

TEST(WeightsTest, CorruptShardIsNamed) {
  const ModelConfig c = SmallConfig(/*tied=*/false);
  const std::string dir = testing::CurrentTestDir();
  WriteSharded(dir, SyntheticModel(c, DType::kBF16), 2);
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 10);
  ExpectLoadError(dir, c, {shard + ": tensor 'lm_head.weight'", "extend past the end"});
}

TEST(WeightsTest, IndexNamesMissingShard) {
  const ModelConfig c = SmallConfig(/*tied=*/false);
  const std::string dir = testing::CurrentTestDir();
  WriteSharded(dir, SyntheticModel(c, DType::kBF16), 2);
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  std::unique_ptr<Weights> w;
  Status s = Weights::Load(dir, c, &w);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find(dir + "/model.safetensors.index.json"), std::string::npos);
  EXPECT_NE(s.message().find("shard 'model-00002-of-00002.safetensors'"), std::string::npos)
      << s.message();
}

TEST(WeightsTest, IndexTensorNotInItsShard) {
  const ModelConfig c = SmallConfig(/*tied=*/false);
  const std::string dir = testing::CurrentTestDir();
  WriteSharded(dir, SyntheticModel(c, DType::kF32), 2);
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream in(index_path);
  nlohmann::json index = nlohmann::json::parse(in);
  in.close();
  index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors";
  WriteText(index_path, index.dump());
  ExpectLoadError(dir, c,
                  {index_path, "tensor 'model.extra.weight'",
                   "model-00001-of-00002.safetensors does not contain it"});
  // A tensor mapped to the wrong shard.
  index["weight_map"].erase("model.extra.weight");
  index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors";
  WriteText(index_path, index.dump());
  ExpectLoadError(dir, c, {index_path, "tensor 'lm_head.weight'"});
}

TEST(WeightsTest, DuplicateTensorAcrossShards) {
  const ModelConfig c = SmallConfig(/*tied=*/true);
  const std::string dir = testing::CurrentTestDir();
  std::vector<Owned> ts = SyntheticModel(c, DType::kF32);
  WriteSharded(dir, ts, 2);
  // Add the norm to shard 1 as well (it lives in shard 2).
  std::vector<Owned> first(ts.begin(), ts.begin() + static_cast<long>((ts.size() + 1) / 2));
  first.push_back(ts.back());
  ASSERT_EQ(first.back().name, "model.norm.weight");
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", Views(first)).ok());
  ExpectLoadError(dir, c,
                  {"tensor 'model.norm.weight' also appears in", "model-00001-of-00002.safetensors",
                   "model-00002-of-00002.safetensors"});
}

TEST(WeightsTest, BadIndexFiles) {
  const ModelConfig c = SmallConfig(/*tied=*/true);
  const std::string dir = testing::CurrentTestDir();
  const std::string index_path = dir + "/model.safetensors.index.json";
  WriteText(index_path, "{not json");
  ExpectLoadError(dir, c, {index_path, "JSON"});
  WriteText(index_path, R"({"metadata": {}})");
  ExpectLoadError(dir, c, {index_path, "'weight_map'"});
  WriteText(index_path, R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
  ExpectLoadError(dir, c, {index_path, "'model.norm.weight'", "not a plain file name"});
  WriteText(index_path, R"({"weight_map": {"model.norm.weight": 3}})");
  ExpectLoadError(dir, c, {index_path, "'model.norm.weight'"});
}

TEST(WeightsTest, NoCheckpointInDirectory) {
  const std::string dir = testing::CurrentTestDir();
  std::unique_ptr<Weights> w;
  Status s = Weights::Load(dir, SmallConfig(true), &w);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find(dir), std::string::npos);
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos);
}

TEST(WeightsTest, GetAbortsOnUnknownName) {
  const ModelConfig c = SmallConfig(/*tied=*/true);
  const std::string dir = testing::CurrentTestDir();
  WriteSingle(dir, SyntheticModel(c, DType::kF32));
  std::unique_ptr<Weights> w;
  ASSERT_TRUE(Weights::Load(dir, c, &w).ok());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(w->Get("no.such.tensor"), "no.such.tensor");
}

}  // namespace
}  // namespace llmq
