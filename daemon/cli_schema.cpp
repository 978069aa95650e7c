// llmq schema check --model DIR FILE... [--json]: whether a JSON Schema will work with a model,
// before a night is spent on it (issue 24). Each FILE is a schema, or a test file {"schema": ...,
// "tests": [{"data": ..., "valid": bool}, ...]}; engine/structured/schema_check.h says what is
// measured. Exit status 0 when every schema compiled and every test agreed, 1 otherwise.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "engine/structured/schema_check.h"
#include "engine/text/tokenizer.h"

namespace llmq::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct SchemaFlags {
  std::string model;
  std::vector<std::string> files;
  bool json = false;
  bool reorder = false;
};

int Check(const CLI::App* cmd, const SchemaFlags& f) {
  std::unique_ptr<Tokenizer> tok;
  if (Status st = Tokenizer::Load(f.model, &tok); !st.ok()) return Fail(cmd, st);
  const SchemaChecker checker(tok.get());
  bool all = true;
  for (const std::string& name : f.files) {
    std::ifstream in(name, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "llmq schema check: %s: cannot open\n", name.c_str());
      all = false;
      continue;
    }
    ojson file;
    try {
      file = ojson::parse(in);
    } catch (const ojson::parse_error& e) {
      std::fprintf(stderr, "llmq schema check: %s: not JSON (%s)\n", name.c_str(), e.what());
      all = false;
      continue;
    }
    SchemaCheckOptions opt;
    opt.reorder = f.reorder;
    const SchemaCheckResult r = checker.Check(file, opt);
    all = all && r.passing();
    if (f.json) {
      std::printf("%s\n", SchemaChecker::ToJson(name, r)
                              .dump(-1, ' ', false, ojson::error_handler_t::replace)
                              .c_str());
      continue;
    }
    if (!r.compiled) {
      std::printf("%s: refused: %s\n", name.c_str(), r.error.c_str());
      continue;
    }
    std::printf("%s: compiled in %.0f us\n", name.c_str(), r.compile_us);
    for (const std::string& why : r.restrictions) std::printf("  restricted: %s\n", why.c_str());
    for (size_t i = 0; i < r.tests.size(); ++i) {
      const SchemaTestResult& t = r.tests[i];
      std::vector<double> us = t.mask_us;
      const double p50 = Percentile(&us, 50), max = Percentile(&us, 100);
      std::string verdict =
          t.accepted
              ? (t.complete ? "accepted" : "accepted, but EOS not allowed at its end")
              : "rejected at token " + std::to_string(t.rejected_at) + " (" + t.text_at + ")";
      std::printf("  test %zu (%s%s): %s; %d tokens, mask p50 %.1f us, max %.1f us%s\n", i,
                  t.valid ? "valid" : "invalid", t.reordered ? ", properties reordered" : "",
                  verdict.c_str(), t.tokens, p50, max, t.agrees() ? "" : "  <-- disagrees");
    }
  }
  return all ? 0 : 1;
}

}  // namespace

void AddSchemaCommand(CLI::App* app, int* rc) {
  CLI::App* schema =
      app->add_subcommand("schema", "JSON Schemas for structured outputs (response_format)");
  schema->require_subcommand(1);
  auto f = std::make_shared<SchemaFlags>();
  CLI::App* cmd = schema->add_subcommand(
      "check",
      "Compile each schema for the model's tokenizer (or a test file {\"schema\", \"tests\": "
      "[{\"data\", \"valid\"}]}) and walk each test's tokens through the masks");
  cmd->add_option("--model", f->model, "Model folder (its tokenizer)")->required();
  cmd->add_option("FILE", f->files, "Schema or test files")->required();
  cmd->add_flag("--json", f->json,
                "One JSON object per file: {file, compiled, error, compile_us, tests: [{valid, "
                "accepted, complete, rejected_at, tokens, reordered, mask_us_p50, mask_us_max}]}");
  cmd->add_flag("--reorder", f->reorder,
                "Walk a test rejected as written again with its objects' properties in the order "
                "the grammar generates them (JSON Schema allows any; MaskBench's creation step)");
  cmd->callback([cmd, f, rc] { *rc = Check(cmd, *f); });
}

}  // namespace llmq::cli
