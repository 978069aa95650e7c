// MaskBench (github.com/guidance-ai/jsonschemabench, folder maskbench/, issue 24) in C++: every
// schema of its data compiled for the Llama 3 tokenizer, every test instance serialized as
// json.dumps(data, ensure_ascii=False) and walked token by token (the mask computed, the token
// checked against it and committed), single-threaded, through the harness of `llmq schema check`
// (engine/structured/schema_check.h). Prints the table in MaskBench's shape beside LLGuidance's
// published column (maskbench/README.md, llguidance 0.7.10, 48-core A100 host), and the keywords
// that made schemas refused.
//
// The data is fetched, never committed:
//   git clone --depth 1 https://github.com/guidance-ai/jsonschemabench /tmp/jsonschemabench
//   build/bench/mask_bench /tmp/jsonschemabench/maskbench/data [--model DIR] [--limit N]
//     [--failures FILE]   (each schema not passing: its file, the refusal or the test at fault;
//                          and each compiled in over 100 ms)
//     [--no-reorder]      (walk every instance as written)
// MaskBench's creation step rewrote each instance LLGuidance rejected with its properties in the
// order LLGuidance generates them (maskbench/creation/reorder.py); the same step is taken here for
// this engine's order (SchemaCheckOptions::reorder), and the instances it rewrote are counted.
// The model defaults to ../shared/models/tiny-llama32 (the Llama 3.1/3.2 tokenizer).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/structured/matcher.h"
#include "engine/structured/schema_check.h"
#include "engine/text/tokenizer.h"

namespace fs = std::filesystem;
using llmq::bench::Clock;
using llmq::bench::Since;
using ojson = nlohmann::ordered_json;

int main(int argc, char** argv) {
  std::string data, model = (fs::path(LLMQ_SHARED_DIR) / "models" / "tiny-llama32").string();
  std::string failures_path;
  size_t limit = 0;
  bool reorder = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--limit" && i + 1 < argc)
      limit = std::stoul(argv[++i]);
    else if (a == "--failures" && i + 1 < argc)
      failures_path = argv[++i];
    else if (a == "--no-reorder")
      reorder = false;
    else if (a.rfind("-", 0) == 0 || !data.empty()) {
      data.clear();  // an unknown flag (--help among them), or a second folder: the usage
      break;
    } else {
      data = a;
    }
  }
  if (data.empty())
    llmq::bench::Die(
        "usage: mask_bench DATA_DIR [--model DIR] [--limit N] [--failures FILE] "
        "[--no-reorder]");
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::directory_iterator(data, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (it->path().extension() == ".json") files.push_back(it->path());
  if (ec) llmq::bench::Die(data + ": " + ec.message());
  std::sort(files.begin(), files.end());
  if (limit > 0 && files.size() > limit) files.resize(limit);
  if (files.empty()) llmq::bench::Die("no .json file in " + data);

  std::unique_ptr<llmq::Tokenizer> tok;
  llmq::bench::Check(llmq::Tokenizer::Load(model, &tok), "tokenizer");
  const llmq::SchemaChecker checker(tok.get());

  int passing = 0, compile_error = 0, validation_error = 0, invalidation_error = 0;
  int valid_tests = 0, invalid_tests = 0, valid_rejected = 0, invalid_accepted = 0;
  int valid_reordered = 0, invalid_reordered = 0;
  int64_t tokens = 0;
  std::vector<double> mask_us, compile_us;
  int64_t mask_work_max = 0;  // the parser's work of the costliest mask (CompiledGrammar's fuel)
  std::string mask_work_file;
  int exhausted = 0;
  std::map<std::string, int> refused_by;  // keyword -> schemas
  std::ofstream failures;
  if (!failures_path.empty()) failures.open(failures_path);
  const auto t0 = Clock::now();
  for (const fs::path& f : files) {
    if (failures) failures << "# " << f.filename().string() << std::endl;  // a crash names it
    std::ifstream in(f, std::ios::binary);
    const ojson file = ojson::parse(in, nullptr, /*allow_exceptions=*/false);
    llmq::SchemaCheckOptions copt;
    copt.reorder = reorder;
    const llmq::SchemaCheckResult r = checker.Check(file, copt);
    if (!r.compiled) {
      ++compile_error;
      const size_t k = r.error.find("keyword \"");
      const std::string kw = k == std::string::npos
                                 ? "(other)"
                                 : r.error.substr(k + 9, r.error.find('"', k + 9) - (k + 9));
      ++refused_by[kw];
      if (failures) failures << f.filename().string() << "\tcompile\t" << r.error << std::endl;
      continue;
    }
    compile_us.push_back(r.compile_us);
    if (failures && r.compile_us > 100e3)
      failures << f.filename().string() << "\tslow compile\t" << r.compile_us / 1e3 << " ms\n";
    bool invalidation = false, validation = false;
    for (size_t i = 0; i < r.tests.size(); ++i) {
      const llmq::SchemaTestResult& t = r.tests[i];
      tokens += static_cast<int64_t>(t.mask_us.size());
      if (t.mask_work_max > mask_work_max) {
        mask_work_max = t.mask_work_max;
        mask_work_file = f.filename().string();
      }
      exhausted += t.exhausted;
      mask_us.insert(mask_us.end(), t.mask_us.begin(), t.mask_us.end());
      (t.valid ? valid_tests : invalid_tests) += 1;
      if (t.reordered) (t.valid ? valid_reordered : invalid_reordered) += 1;
      if (t.valid && !(t.accepted && t.complete)) {
        ++valid_rejected;
        validation = true;
        if (failures)
          failures << f.filename().string() << "\tvalid #" << i
                   << (t.reordered ? " (reordered)" : "") << " rejected at token " << t.rejected_at
                   << (t.accepted ? " (no EOS at the end)" : "") << "\t" << t.text_at << "\n";
      }
      if (!t.valid && t.accepted) {
        ++invalid_accepted;
        invalidation = true;
        if (failures) failures << f.filename().string() << "\tinvalid #" << i << " accepted\n";
      }
    }
    if (invalidation)
      ++invalidation_error;
    else if (validation)
      ++validation_error;
    else
      ++passing;
  }
  const double secs = Since(t0);

  std::printf("mask_bench: %s\n", llmq::bench::Stamp().c_str());
  std::printf("%zu schemas of %s, tokenizer %s, one thread, %.0f s\n\n", files.size(), data.c_str(),
              model.c_str(), secs);
  // LLGuidance's column, as maskbench/README.md publishes it (mask and compile times in us).
  const std::map<std::string, std::string> llg = {
      {"TBM avg", "64"},          {"TBM p25", "29"},          {"TBM p50", "46"},
      {"TBM p75", "55"},          {"TBM p90", "77"},          {"TBM p95", "119"},
      {"TBM p99", "533"},         {"TBM p99.9", "1,695"},     {"TBM p100", "33,055"},
      {"TTFM avg", "1,850"},      {"TTFM p25", "800"},        {"TTFM p50", "1,037"},
      {"TTFM p75", "1,534"},      {"TTFM p90", "3,030"},      {"TTFM p95", "5,457"},
      {"TTFM p99", "17,988"},     {"TTFM p99.9", "40,092"},   {"TTFM p100", "229,367"},
      {"tokens", "2,607,859"},    {"schemas", "11,306"},      {"passing", "8,909"},
      {"compile error", "2,377"}, {"validation error", "20"}, {"invalidation error", "0"}};
  std::printf("| %-18s | %12s | %12s |\n|:%s|%s:|%s:|\n", "metric", "llmq", "LLGuidance",
              std::string(19, '-').c_str(), std::string(13, '-').c_str(),
              std::string(13, '-').c_str());
  const auto row = [&](const std::string& name, const std::string& v) {
    std::printf("| %-18s | %12s | %12s |\n", name.c_str(), v.c_str(),
                llg.count(name) ? llg.at(name).c_str() : "");
  };
  const auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", v);
    return std::string(b);
  };
  for (const auto& [name, values] : std::vector<std::pair<std::string, std::vector<double>*>>{
           {"TBM", &mask_us}, {"TTFM", &compile_us}}) {
    double sum = 0;
    for (const double v : *values) sum += v;
    row(name + " avg", num(values->empty() ? 0 : sum / static_cast<double>(values->size())));
    for (const double p : {25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0}) {
      char label[32];
      std::snprintf(label, sizeof label, "%s p%g", name.c_str(), p);
      row(label, num(llmq::Percentile(values, p)));
    }
  }
  row("tokens", std::to_string(tokens));
  row("schemas", std::to_string(files.size()));
  row("passing", std::to_string(passing));
  row("compile error", std::to_string(compile_error));
  row("validation error", std::to_string(validation_error));
  row("invalidation error", std::to_string(invalidation_error));
  std::printf(
      "\ntests: %d valid (%d rejected), %d invalid (%d accepted); properties reordered "
      "(MaskBench's creation step, %s): %d valid, %d invalid\n",
      valid_tests, valid_rejected, invalid_tests, invalid_accepted, reorder ? "on" : "off",
      valid_reordered, invalid_reordered);
  std::printf("costliest mask: %lld steps of the parser (%s); masks given up: %d (fuel %lld)\n",
              static_cast<long long>(mask_work_max), mask_work_file.c_str(), exhausted,
              static_cast<long long>(llmq::CompiledGrammar::kDefaultMaskFuel));
  std::vector<std::pair<int, std::string>> by;
  for (const auto& [k, n] : refused_by) by.emplace_back(n, k);
  std::sort(by.rbegin(), by.rend());
  std::printf("\nschemas refused, by the keyword named:\n");
  for (const auto& [n, k] : by) std::printf("  %-24s %5d\n", k.c_str(), n);
  return 0;
}
