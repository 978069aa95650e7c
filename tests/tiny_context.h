// The tiny generated model loaded whole (tokenizer, chat format) and the BuildContext that
// validates request lines against it: for the tests of ingest and intake, which need a model's
// text side but never run it.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "daemon/request_builder.h"
#include "engine/model/model.h"
#include "engine/tools/model_maker.h"
#include "tests/test_util.h"

namespace llmq::testing {

// Makes the "tiny" shape in the scratch folder `name` and loads it into *model.
inline void LoadTinyModel(const std::string& name, Model* model) {
  const std::string dir = TmpDir(name);
  ModelConfig cfg;
  DType dt;
  ASSERT_TRUE(ShapeConfig("tiny", &cfg, &dt).ok());
  ASSERT_TRUE(MakeModel(cfg, dt, 1, dir + "/m").ok());
  ASSERT_TRUE(LoadModel(dir + "/m", model).ok());
}

// Validation against `model`: the llama-2 chat format, a 512-token capacity.
inline BuildContext TinyContext(const Model* model) {
  BuildContext ctx;
  ctx.model = model;
  ctx.chat = ChatFormat::Builtin(ChatTemplate::kLlama2, model->tokenizer->add_bos());
  ctx.capacity = 512;
  ctx.capacity_setting = "the test";
  ctx.grammars = std::make_shared<GrammarCache>(model->tokenizer.get());
  return ctx;
}

}  // namespace llmq::testing
