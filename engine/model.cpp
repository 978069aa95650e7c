#include "engine/model.h"

#include "engine/cpu_backend.h"

namespace llmq {

Status LoadModel(const std::string& dir, Model* out) {
  Model m;
  LLMQ_RETURN_IF_ERROR(LoadModelConfig(dir, &m.cfg));
  LLMQ_RETURN_IF_ERROR(Weights::Load(dir, m.cfg, &m.weights));
  LLMQ_RETURN_IF_ERROR(Tokenizer::Load(dir, &m.tokenizer));
  if (m.tokenizer->vocab_size() > m.cfg.vocab_size)
    return Status::InvalidArgument(
        dir + (m.tokenizer->hf() ? "/tokenizer.json" : "/tokenizer.model") + ": has " +
        std::to_string(m.tokenizer->vocab_size()) + " pieces, more than the model's vocab_size " +
        std::to_string(m.cfg.vocab_size));
  m.backend = std::make_unique<CpuBackend>(m.cfg, *m.weights);
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace llmq
