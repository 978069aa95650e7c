// llmq make-model: a random-weight model in the Hugging Face layout, tokenizer included.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "daemon/args.h"
#include "daemon/commands.h"
#include "engine/model_maker.h"

namespace llmq::cli {

int MakeModel(int argc, char** argv) {
  Args args({"shape", "config", "out", "seed", "dtype"}, {});
  std::string err;
  long long seed = 0;
  if (!args.Parse(argc, argv, 2, &err) || !args.Has("out") ||
      args.Has("shape") == args.Has("config") || !args.GetInt("seed", 0, &seed, &err)) {
    if (err.empty()) err = "need --out DIR and exactly one of --shape NAME or --config FILE";
    std::fprintf(stderr, "llmq make-model: %s\n", err.c_str());
    return 2;
  }
  ModelConfig cfg;
  DType dtype = DType::kF32;
  Status st;
  if (auto shape = args.Get("shape")) {
    st = ShapeConfig(*shape, &cfg, &dtype);
  } else {
    const std::string path = *args.Get("config");
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    st = f ? ParseModelConfig(text.str(), path, &cfg) : Status::NotFound(path + ": cannot open");
    if (cfg.torch_dtype == "bfloat16") dtype = DType::kBF16;
    if (cfg.torch_dtype == "float16") dtype = DType::kF16;
  }
  if (st.ok() && args.Has("dtype")) {
    const std::string d = *args.Get("dtype");
    if (d == "f32")
      dtype = DType::kF32;
    else if (d == "bf16")
      dtype = DType::kBF16;
    else if (d == "f16")
      dtype = DType::kF16;
    else
      st = Status::InvalidArgument("--dtype must be f32, bf16 or f16");
  }
  if (st.ok() && cfg.eos_token_ids.empty()) cfg.eos_token_ids = {2};
  if (st.ok() && cfg.bos_token_id < 0) cfg.bos_token_id = 1;
  if (st.ok()) st = llmq::MakeModel(cfg, dtype, static_cast<uint64_t>(seed), *args.Get("out"));
  if (!st.ok()) {
    std::fprintf(stderr, "llmq make-model: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s (%lld parameters, %s)\n", args.Get("out")->c_str(),
              static_cast<long long>(cfg.NumParams()), DTypeName(dtype));
  return 0;
}

}  // namespace llmq::cli
