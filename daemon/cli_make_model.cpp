// llmq make-model: a random-weight model in the Hugging Face layout, tokenizer included.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/tools/model_maker.h"

namespace llmq::cli {

namespace {

struct MakeModelFlags {
  std::string shape, config, out, dtype, tokenizer_from;
  uint64_t seed = 0;
  bool force = false;
};

// The tokenizer files of a model folder that --tokenizer-from copies (those it has).
constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer.model",
                                           "tokenizer_config.json", "special_tokens_map.json"};

// --tokenizer-from: the source's special ids into *cfg (so that config.json and
// generation_config.json name the tokenizer's own), after checking that the source has a
// tokenizer whose vocabulary fits the model's.
Status TokenizerSource(const std::string& dir, ModelConfig* cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "tokenizer.json", ec) &&
      !fs::exists(fs::path(dir) / "tokenizer.model", ec))
    return Status::NotFound(dir + ": no tokenizer.json or tokenizer.model to copy");
  std::ifstream in(fs::path(dir) / "config.json");
  if (!in) return Status::NotFound(dir + "/config.json: cannot open (the tokenizer's vocab_size)");
  std::stringstream text;
  text << in.rdbuf();
  ModelConfig src;
  LLMQ_RETURN_IF_ERROR(ParseModelConfig(text.str(), dir + "/config.json", &src));
  if (src.vocab_size > cfg->vocab_size)
    return Status::InvalidArgument(dir + ": its vocabulary (" + std::to_string(src.vocab_size) +
                                   " ids) does not fit the model's vocab_size " +
                                   std::to_string(cfg->vocab_size));
  cfg->bos_token_id = src.bos_token_id;
  cfg->eos_token_ids = src.eos_token_ids;
  return Status::Ok();
}

int MakeModel(const CLI::App* cmd, const MakeModelFlags& f) {
  // A model folder holds someone's weights: never overwrite them by accident.
  std::error_code ec;
  if (std::filesystem::is_directory(f.out, ec) && !std::filesystem::is_empty(f.out, ec) && !f.force)
    return Fail(cmd,
                f.out + ": folder is not empty (pass --force to write the model into it anyway)");
  if (std::filesystem::exists(f.out, ec) && !std::filesystem::is_directory(f.out, ec))
    return Fail(cmd, f.out + ": exists and is not a folder");
  ModelConfig cfg;
  DType dtype = DType::kF32;
  Status st;
  if (!f.shape.empty()) {
    st = ShapeConfig(f.shape, &cfg, &dtype);
  } else {
    std::ifstream in(f.config);
    std::stringstream text;
    text << in.rdbuf();
    st = in ? ParseModelConfig(text.str(), f.config, &cfg)
            : Status::NotFound(f.config + ": cannot open");
    if (cfg.torch_dtype == "bfloat16") dtype = DType::kBF16;
    if (cfg.torch_dtype == "float16") dtype = DType::kF16;
  }
  if (st.ok() && !f.dtype.empty())
    dtype = f.dtype == "bf16"  ? DType::kBF16
            : f.dtype == "f16" ? DType::kF16
            : f.dtype == "fp8" ? DType::kF8E4M3
                               : DType::kF32;
  if (st.ok() && !f.tokenizer_from.empty()) st = TokenizerSource(f.tokenizer_from, &cfg);
  if (st.ok() && cfg.eos_token_ids.empty()) cfg.eos_token_ids = {2};
  if (st.ok() && cfg.bos_token_id < 0) cfg.bos_token_id = 1;
  if (st.ok() && f.tokenizer_from.empty()) st = llmq::MakeModel(cfg, dtype, f.seed, f.out);
  if (st.ok() && !f.tokenizer_from.empty()) {
    // The weights, then the source's tokenizer in place of a trained one (training a BPE of
    // Llama 3's 128,256 pieces takes minutes).
    st = WriteRandomModel(cfg, dtype, f.seed, f.out);
    for (const char* name : kTokenizerFiles) {
      const std::filesystem::path from = std::filesystem::path(f.tokenizer_from) / name;
      std::error_code ec;
      if (!st.ok() || !std::filesystem::exists(from, ec)) continue;
      std::filesystem::copy_file(from, std::filesystem::path(f.out) / name,
                                 std::filesystem::copy_options::overwrite_existing, ec);
      if (ec)
        st = Status::IoError(from.string() + ": cannot copy to " + f.out + ": " + ec.message());
    }
  }
  if (!st.ok()) return Fail(cmd, st);
  std::printf("wrote %s (%lld parameters, %s)\n", f.out.c_str(),
              static_cast<long long>(cfg.NumParams()), DTypeName(dtype));
  return 0;
}

}  // namespace

void AddMakeModelCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<MakeModelFlags>();
  CLI::App* cmd = app->add_subcommand(
      "make-model", "Write a random-weight model (Hugging Face layout, tokenizer included)");
  std::string shapes;  // ShapeNames(), as "a|b|c"
  for (const std::string& n : ShapeNames()) shapes += (shapes.empty() ? "" : "|") + n;
  auto* shape = cmd->add_option("--shape", f->shape, shapes);
  auto* config = cmd->add_option("--config", f->config, "A Hugging Face config.json to follow");
  shape->excludes(config);
  cmd->add_option("--out", f->out, "Folder to write (must be empty or absent)")->required();
  cmd->add_option("--seed", f->seed, "Seed of the weights and the tokenizer");
  cmd->add_option("--dtype", f->dtype,
                  "f32|bf16|f16|fp8 (default: the shape's or config's; fp8: an FP8 checkpoint as "
                  "llm-compressor writes it, the projections in E4M3 with per-channel scales)")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "fp8"}));
  cmd->add_option(
      "--tokenizer-from", f->tokenizer_from,
      "A model folder whose tokenizer (tokenizer.json or .model, tokenizer_config.json) "
      "and special ids the model takes instead of a trained one; its vocabulary must "
      "fit the model's");
  cmd->add_flag("--force", f->force, "Write into a non-empty folder, replacing its model files");
  cmd->callback([cmd, f, rc, shape, config] {
    if (!*shape && !*config) {
      *rc = Fail(cmd, std::string("one of --shape or --config is required"), 2);
      return;
    }
    *rc = MakeModel(cmd, *f);
  });
}

}  // namespace llmq::cli
