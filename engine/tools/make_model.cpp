// MakeModel: a whole model folder (random weights and a trained tokenizer). Apart from
// model_maker.cpp so that the weights-only part builds without sentencepiece (the GPU-only build).
#include "engine/tools/model_maker.h"
#include "engine/tools/tokenizer_trainer.h"

namespace llmq {

Status MakeModel(const ModelConfig& c, DType dtype, uint64_t seed, const std::string& out_dir) {
  LLMQ_RETURN_IF_ERROR(WriteRandomModel(c, dtype, seed, out_dir));
  return TrainTokenizer(c.vocab_size, seed, out_dir + "/tokenizer.model");
}

}  // namespace llmq
