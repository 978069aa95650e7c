// Encode throughput of tokenizer.json tokenizers (issue 9): MB/s on one thread over ~3 MB of mixed
// text (the project's English-like corpus with multilingual, code, number and emoji lines, as
// ~2 KB documents), beside Hugging Face's JavaScript tokenizer on the same text in the same run
// (tests/oracle/tokenizers/bench.mjs; skipped when node or the oracle's node_modules are absent).
//
// A second table times what tokenizer_test checks for exactness only (tests bound no wall-clock
// time): TrainTokenizer(512) (the bound it had: < 2 s) and IncrementalDecoder streaming the
// test's ~60,000-id text one id at a time (< 5 s), on a tokenizer trained here.
//
//   build/bench/tokenize_bench [MODEL_DIR...]   (default: the shared tiny-qwen3 and tiny-llama32)
#include <filesystem>
#include <fstream>

#include "bench/bench_util.h"
#include "engine/text/tokenizer.h"
#include "engine/tools/corpus.h"
#include "engine/tools/tokenizer_trainer.h"

namespace fs = std::filesystem;
using llmq::bench::Clock;
using llmq::bench::json;
using llmq::bench::Since;

namespace {

const fs::path kRepo = LLMQ_SOURCE_DIR;
const fs::path kOracle = kRepo / "tests" / "oracle" / "tokenizers";

std::vector<std::string> Documents(size_t total_bytes) {
  llmq::CorpusOptions opt;
  opt.seed = 9;
  opt.num_sentences = 20000;
  const std::vector<std::string> english = llmq::GenerateCorpus(opt);
  const std::vector<std::string> extra = {
      "東京は日本の首都です。人口は約1400万人。",
      "مرحبا بالعالم، كيف حالك اليوم؟",
      "नमस्ते दुनिया, आप कैसे हैं?",
      "def f(x):\n    return x ** 2  # square\n",
      "Total: $1,234.56 (+7.8%) on 2025-11-30T16:00:00Z",
      "family 👨‍👩‍👧‍👦 and 👍🏽 🤖",
      "Café résumé naïve coöperate",
  };
  std::vector<std::string> docs;
  std::string cur;
  size_t bytes = 0;
  for (size_t i = 0; bytes < total_bytes; ++i) {
    cur += english[i % english.size()];
    cur += i % 7 == 3 ? "\n" + extra[i % extra.size()] + "\n" : " ";
    if (cur.size() >= 2000) {
      bytes += cur.size();
      docs.push_back(std::move(cur));
      cur.clear();
    }
  }
  return docs;
}

// Training and streaming on the 512-piece tokenizer the tests train (medians of 3).
void TrainedTable() {
  const fs::path dir = fs::temp_directory_path() / "llmq_tokenize_bench_trained";
  fs::create_directories(dir);
  const std::string model = (dir / "tokenizer.model").string();
  std::vector<double> train;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    llmq::bench::Check(llmq::TrainTokenizer(512, 11, model), "TrainTokenizer");
    train.push_back(Since(t0));
  }
  std::unique_ptr<llmq::Tokenizer> tok;
  llmq::bench::Check(llmq::Tokenizer::Load(dir.string(), &tok), "Tokenizer::Load");
  std::string text;
  for (int i = 0; i < 2500; ++i) text += "The cat 🙂 sat on the mat in 1987, café! ";
  const std::vector<int> ids = tok->EncodeNoBos(text);
  std::vector<double> stream;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    llmq::IncrementalDecoder dec(*tok, {1});
    for (int id : ids) dec.Add(id);
    dec.Flush();
    stream.push_back(Since(t0));
    if (dec.text() != tok->Decode(ids)) llmq::bench::Die("the stream differs from Decode");
  }
  fs::remove_all(dir);
  const double t = llmq::bench::Median(train), st = llmq::bench::Median(stream);
  std::printf("\n| trained 512-piece tokenizer | seconds | per second | test's former bound |\n");
  std::printf("|-----------------------------|---------|------------|---------------------|\n");
  std::printf("| TrainTokenizer(512, seed 11) | %.3f | - | < 2 s |\n", t);
  std::printf("| IncrementalDecoder, %zu ids one at a time | %.3f | %.0f ids | < 5 s |\n",
              ids.size(), st, ids.size() / st);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) models.push_back(argv[i]);
  if (models.empty()) {
    for (const char* m : {"tiny-qwen3", "tiny-llama32"})
      models.push_back((fs::path(LLMQ_SHARED_DIR) / "models" / m).string());
  }
  const std::vector<std::string> docs = Documents(3'000'000);
  size_t bytes = 0;
  for (const std::string& d : docs) bytes += d.size();
  const fs::path corpus = fs::temp_directory_path() / "llmq_tokenize_bench.json";
  std::ofstream(corpus) << json(docs).dump();
  const bool node = std::system("node --version >/dev/null 2>&1") == 0 &&
                    fs::exists(kOracle / "node_modules" / "@huggingface" / "tokenizers");

  std::printf("%s\n", llmq::bench::Stamp().c_str());
  std::printf("%zu documents, %.2f MB, one thread\n\n", docs.size(), bytes / 1e6);
  std::printf("| tokenizer | load s | ids | llmq MB/s | JS MB/s | ratio |\n");
  std::printf("|-----------|--------|-----|-----------|---------|-------|\n");
  for (const std::string& dir : models) {
    std::unique_ptr<llmq::Tokenizer> tok;
    const auto t0 = Clock::now();
    llmq::bench::Check(llmq::Tokenizer::Load(dir, &tok), dir.c_str());
    const double load = Since(t0);
    size_t ids = 0;
    std::vector<double> secs;
    for (int rep = 0; rep < 3; ++rep) {  // the first pass also fills the word cache
      ids = 0;
      const auto t1 = Clock::now();
      for (const std::string& d : docs) ids += tok->EncodeNoBos(d).size();
      secs.push_back(Since(t1));
    }
    const double ours = bytes / llmq::bench::Median(secs) / 1e6;
    double js = 0;
    if (node) {
      const std::string cmd =
          "node '" + (kOracle / "bench.mjs").string() + "' '" + dir + "' '" + corpus.string() + "'";
      FILE* p = popen(cmd.c_str(), "r");
      if (p != nullptr) {
        if (std::fscanf(p, "%lf", &js) != 1) js = 0;
        pclose(p);
      }
    }
    char js_col[32] = "-", ratio_col[32] = "-";
    if (js > 0) {
      std::snprintf(js_col, sizeof js_col, "%.2f", js);
      std::snprintf(ratio_col, sizeof ratio_col, "%.1fx", ours / js);
    }
    std::printf("| %s | %.2f | %zu | %.2f | %s | %s |\n", fs::path(dir).filename().c_str(), load,
                ids, ours, js_col, ratio_col);
  }
  fs::remove(corpus);
  TrainedTable();
  return 0;
}
