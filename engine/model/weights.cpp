#include "engine/model/weights.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace llmq {
namespace {

using json = nlohmann::json;

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A tensor the config requires: its name, expected shape, how that shape follows from the config
// and why the config requires it at all (for messages).
struct Required {
  std::string name;
  std::vector<int64_t> shape;
  const char* why;
  std::string needed_because;
};

std::vector<Required> RequiredTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, v = c.vocab_size, in = c.intermediate_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim, kv = int64_t{c.num_kv_heads} * c.head_dim;
  std::vector<Required> r = {
      {"model.embed_tokens.weight", {v, h}, "vocab_size x hidden_size", ""},
      {"model.norm.weight", {h}, "hidden_size", ""},
  };
  if (!c.tie_word_embeddings)
    r.push_back(
        {"lm_head.weight", {v, h}, "vocab_size x hidden_size", "tie_word_embeddings is false"});
  const std::string layers = "num_hidden_layers is " + std::to_string(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    std::string because = layers;
    auto add = [&](const char* suffix, std::vector<int64_t> shape, const char* why) {
      r.push_back({LayerTensorName(i, suffix), std::move(shape), why, because});
    };
    add("input_layernorm.weight", {h}, "hidden_size");
    add("post_attention_layernorm.weight", {h}, "hidden_size");
    add("self_attn.q_proj.weight", {q, h}, "num_attention_heads*head_dim x hidden_size");
    add("self_attn.k_proj.weight", {kv, h}, "num_key_value_heads*head_dim x hidden_size");
    add("self_attn.v_proj.weight", {kv, h}, "num_key_value_heads*head_dim x hidden_size");
    add("self_attn.o_proj.weight", {h, q}, "hidden_size x num_attention_heads*head_dim");
    add("mlp.gate_proj.weight", {in, h}, "intermediate_size x hidden_size");
    add("mlp.up_proj.weight", {in, h}, "intermediate_size x hidden_size");
    add("mlp.down_proj.weight", {h, in}, "hidden_size x intermediate_size");
    if (c.qkv_bias) {
      because = layers + "; " + c.architecture + " has q/k/v projection biases";
      add("self_attn.q_proj.bias", {q}, "num_attention_heads*head_dim");
      add("self_attn.k_proj.bias", {kv}, "num_key_value_heads*head_dim");
      add("self_attn.v_proj.bias", {kv}, "num_key_value_heads*head_dim");
    }
    if (c.qk_norm) {
      because = layers + "; " + c.architecture + " normalizes q and k per head";
      add("self_attn.q_norm.weight", {c.head_dim}, "head_dim");
      add("self_attn.k_norm.weight", {c.head_dim}, "head_dim");
    }
  }
  return r;
}

// True for a layer tensor that some family uses but `c`'s does not (a q/k/v bias, a q/k norm) and
// for any other layer bias: loading it under this architecture would silently drop it.
bool IsForeignLayerTensor(const ModelConfig& c, const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  const std::string suffix = name.substr(dot + 1);  // "self_attn.q_proj.bias"
  const bool qkv_bias = suffix == "self_attn.q_proj.bias" || suffix == "self_attn.k_proj.bias" ||
                        suffix == "self_attn.v_proj.bias";
  const bool qk_norm = suffix == "self_attn.q_norm.weight" || suffix == "self_attn.k_norm.weight";
  if (qkv_bias) return !c.qkv_bias;
  if (qk_norm) return !c.qk_norm;
  return suffix.ends_with(".bias");
}

Status ReadText(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IoError(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::IoError(path + ": read failed");
  *out = ss.str();
  return Status::Ok();
}

// Reads model.safetensors.index.json: weight_map (tensor name -> shard file name, a plain file
// name inside the model directory).
Status ParseIndex(const std::string& path, std::map<std::string, std::string>* weight_map) {
  std::string text;
  LLMQ_RETURN_IF_ERROR(ReadText(path, &text));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corruption(path + ": not a valid JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object())
    return Status::Corruption(path + ": field 'weight_map' is missing or not an object");
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const json& shard = it.value();
    if (!shard.is_string())
      return Status::Corruption(path + ": field 'weight_map' entry '" + it.key() +
                                "' is not a file name");
    const std::string s = shard.get<std::string>();
    // Shards live next to the index: no paths, so an index cannot point outside the directory.
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos ||
        s.find('\0') != std::string::npos)
      return Status::Corruption(path + ": field 'weight_map' entry '" + it.key() +
                                "' names shard '" + s + "', which is not a plain file name");
    (*weight_map)[it.key()] = s;
  }
  if (weight_map->empty()) return Status::Corruption(path + ": field 'weight_map' is empty");
  return Status::Ok();
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string LayerTensorName(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

Status Weights::Load(const std::string& dir, const ModelConfig& cfg,
                     std::unique_ptr<Weights>* out) {
  auto w = std::make_unique<Weights>();
  // Maps one file and adds its tensors; a name seen in an earlier shard is an error.
  auto add_file = [&](const std::string& path) -> Status {
    std::unique_ptr<MappedFile> f;
    LLMQ_RETURN_IF_ERROR(MappedFile::Open(path, &f));
    std::vector<TensorInfo> infos;
    LLMQ_RETURN_IF_ERROR(ParseSafetensors(f->data(), f->size(), path, &infos));
    for (TensorInfo& t : infos) {
      auto [it, inserted] = w->tensors_.try_emplace(t.name);
      if (!inserted)
        return Status::Corruption(path + ": tensor '" + t.name + "' also appears in " +
                                  it->second.file);
      TensorView& v = it->second;
      v.name = t.name;
      v.file = path;
      v.dtype = t.dtype;
      v.shape = std::move(t.shape);
      v.data = f->data() + t.begin;  // ParseSafetensors: begin <= end <= size
      w->total_bytes_ += t.end - t.begin;
    }
    w->files_.push_back(std::move(f));
    return Status::Ok();
  };

  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  std::string where;  // the file named when a required tensor is missing
  if (FileExists(single)) {
    where = single;
    LLMQ_RETURN_IF_ERROR(add_file(single));
  } else if (FileExists(index)) {
    where = index;
    std::map<std::string, std::string> weight_map;
    LLMQ_RETURN_IF_ERROR(ParseIndex(index, &weight_map));
    std::map<std::string, std::string> shards;  // shard -> first tensor naming it
    for (const auto& [name, shard] : weight_map) shards.try_emplace(shard, name);
    for (const auto& [shard, first] : shards) {
      Status s = add_file(dir + "/" + shard);
      if (s.code() == Status::Code::kNotFound)
        return Status::NotFound(index + ": shard '" + shard + "' (named for tensor '" + first +
                                "'): " + s.message());
      LLMQ_RETURN_IF_ERROR(s);
    }
    for (const auto& [name, shard] : weight_map) {
      const std::string path = dir + "/" + shard;
      auto it = w->tensors_.find(name);
      if (it == w->tensors_.end() || it->second.file != path)
        return Status::Corruption(index + ": tensor '" + name + "' is mapped to shard '" + shard +
                                  "', but " + path + " does not contain it");
    }
  } else {
    return Status::NotFound(dir + ": neither model.safetensors nor model.safetensors.index.json" +
                            " exists");
  }

  for (const Required& r : RequiredTensors(cfg)) {
    const TensorView* t = w->Find(r.name);
    if (t == nullptr) {
      return Status::NotFound(where + ": required tensor '" + r.name + "' is missing" +
                              (r.needed_because.empty() ? "" : " (" + r.needed_because + ")"));
    }
    if (t->shape != r.shape)
      return Status::InvalidArgument(t->file + ": tensor '" + r.name + "' has shape " +
                                     ShapeString(t->shape) + ", expected " + ShapeString(r.shape) +
                                     " (" + r.why + ")");
  }
  LLMQ_RETURN_IF_ERROR(w->FindScales(cfg));
  for (const auto& [name, t] : w->tensors_) {
    if (!IsForeignLayerTensor(cfg, name)) continue;
    return Status::Unsupported(t.file + ": tensor '" + name + "' is not part of " +
                               cfg.architecture +
                               " (its config.json 'architectures'); a checkpoint of another "
                               "family, or a variant llmq does not implement");
  }
  *out = std::move(w);
  return Status::Ok();
}

Status Weights::FindScales(const ModelConfig& cfg) {
  const WeightQuantization& q = cfg.quantization;
  for (const Required& r : RequiredTensors(cfg)) {
    TensorView& t = tensors_.at(r.name);
    const bool linear = r.name == "lm_head.weight" || r.name.ends_with("_proj.weight");
    const std::string module = r.name.substr(0, r.name.size() - std::string(".weight").size());
    if (t.dtype != DType::kF8E4M3) continue;  // a float tensor, quantized or not
    if (!linear || !q.Quantizes(module))
      return Status::InvalidArgument(
          t.file + ": tensor '" + r.name + "' is F8_E4M3, but " +
          (!linear  ? std::string("only linear weights are quantized")
           : !q.fp8 ? std::string("config.json has no quantization_config")
                    : "quantization_config leaves '" + module + "' unquantized"));
    const std::string scale_name = module + "." + q.scale_suffix;
    const TensorView* s = Find(scale_name);
    if (s == nullptr)
      return Status::NotFound(t.file + ": tensor '" + r.name + "' is F8_E4M3 but its scale '" +
                              scale_name + "' is missing");
    if (s->dtype == DType::kF8E4M3)
      return Status::InvalidArgument(s->file + ": tensor '" + scale_name +
                                     "' must be a float type, not F8_E4M3");
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const auto shape_is = [&](std::vector<int64_t> want) { return s->shape == want; };
    if (s->numel() == 1) {  // per tensor
      t.scale_rows = rows;
      t.scale_cols = cols;
    } else if (shape_is({rows}) || shape_is({rows, 1})) {  // per output channel
      t.scale_rows = 1;
      t.scale_cols = cols;
    } else if (q.block_rows > 0 && shape_is({(rows + q.block_rows - 1) / q.block_rows,
                                             (cols + q.block_cols - 1) / q.block_cols})) {
      t.scale_rows = q.block_rows;
      t.scale_cols = q.block_cols;
    } else {
      std::string want =
          "one value, [" + std::to_string(rows) + "] or [" + std::to_string(rows) + ", 1]";
      if (q.block_rows > 0)
        want += ", or [" + std::to_string((rows + q.block_rows - 1) / q.block_rows) + ", " +
                std::to_string((cols + q.block_cols - 1) / q.block_cols) + "] (blocks of " +
                std::to_string(q.block_rows) + " x " + std::to_string(q.block_cols) + ")";
      return Status::InvalidArgument(s->file + ": tensor '" + scale_name + "' has shape " +
                                     ShapeString(s->shape) + ", expected " + want);
    }
    t.scale = s;
  }
  return Status::Ok();
}

const TensorView* Weights::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& Weights::Get(const std::string& name) const {
  const TensorView* t = Find(name);
  if (t == nullptr) std::fprintf(stderr, "llmq: Weights::Get: no tensor '%s'\n", name.c_str());
  LLMQ_CHECK(t != nullptr);
  return *t;
}

std::vector<float> Weights::ToF32(const std::string& name) const {
  const TensorView& t = Get(name);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ConvertToF32(t.dtype, t.data, t.numel(), out.data());
  if (t.scale == nullptr) return out;
  // W[r][c] = fp8(Q[r][c]) * scale[r / scale_rows][c / scale_cols] (one fp32 product each).
  std::vector<float> scale(static_cast<size_t>(t.scale->numel()));
  ConvertToF32(t.scale->dtype, t.scale->data, t.scale->numel(), scale.data());
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t per_row = (cols + t.scale_cols - 1) / t.scale_cols;  // scales across a row
  for (int64_t r = 0; r < rows; ++r) {
    const float* sr = scale.data() + (r / t.scale_rows) * per_row;
    float* o = out.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] *= sr[c / t.scale_cols];
  }
  return out;
}

void Weights::ReleasePages(const std::string& name) const {
  const TensorView& t = Get(name);
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) / page * page;
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(t.data) + t.numel() * DTypeSize(t.dtype) + page - 1) / page *
      page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

const float* Weights::F32InPlace(const std::string& name) const {
  const TensorView& t = Get(name);
  if (t.dtype != DType::kF32 || reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0)
    return nullptr;
  return reinterpret_cast<const float*>(t.data);
}

const uint16_t* Weights::Bf16InPlace(const std::string& name) const {
  const TensorView& t = Get(name);
  if (t.dtype != DType::kBF16 || reinterpret_cast<uintptr_t>(t.data) % alignof(uint16_t) != 0)
    return nullptr;
  return reinterpret_cast<const uint16_t*>(t.data);
}

}  // namespace llmq
