#include "engine/tools/tokenizer_trainer.h"

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <unordered_map>

#include "base/durable_file.h"
#include "engine/tools/corpus.h"

namespace llmq {

Status TrainTokenizer(int vocab_size, uint64_t seed, const std::string& out_path,
                      const TokenizerExtras& extras) {
  if (vocab_size <= 0 || vocab_size > 1000000)
    return Status::InvalidArgument(out_path + ": tokenizer vocab_size " +
                                   std::to_string(vocab_size) + " outside [1, 1000000]");
  // The corpus must hold enough distinct words for the vocab_size - 259 merges (byte pieces and
  // control ids take the rest). Measured: vocab / 2 sentences and pseudo-words reach exactly 32000
  // pieces in ~9 s (BPE training time grows with the vocabulary, hardly with the corpus), 512 in
  // ~0.15 s.
  CorpusOptions copt;
  copt.seed = seed;
  copt.num_sentences = std::max<size_t>(2000, static_cast<size_t>(vocab_size) / 2);
  copt.num_pseudo_words = std::max<size_t>(1000, static_cast<size_t>(vocab_size) / 2);
  const std::vector<std::string> lines = GenerateCorpus(copt);

  class Lines : public sentencepiece::SentenceIterator {
   public:
    explicit Lines(const std::vector<std::string>& v) : v_(v) {}
    bool done() const override { return i_ >= v_.size(); }
    void Next() override { ++i_; }
    const std::string& value() const override { return v_[i_]; }
    sentencepiece::util::Status status() const override { return {}; }

   private:
    const std::vector<std::string>& v_;
    size_t i_ = 0;
  } it(lines);

  // Llama-style: BPE with byte fallback, identity normalisation, whitespace kept as is.
  std::unordered_map<std::string, std::string> kwargs = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"input_sentence_size", "0"},  // use every line: no random sampling
      {"num_threads", "1"},
      {"minloglevel", "2"},  // errors only
      // No model_prefix: the model comes back serialized (and is byte-identical per seed).
  };
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& x : v) out += (out.empty() ? "" : ",") + x;
    return out;
  };
  if (!extras.control_symbols.empty()) kwargs["control_symbols"] = join(extras.control_symbols);
  if (!extras.user_defined_symbols.empty())
    kwargs["user_defined_symbols"] = join(extras.user_defined_symbols);
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &model);
  if (!st.ok())
    return Status::InvalidArgument(out_path + ": tokenizer training failed: " + st.ToString());

  // Readers never see a partial file.
  return WriteFileDurably(out_path, model);
}

}  // namespace llmq
