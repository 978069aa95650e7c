#include "engine/structured/schema_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"

namespace llmq {

using ojson = nlohmann::ordered_json;

namespace {

double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double Percentile(std::vector<double>* v, double p) {
  if (v->empty()) return 0;
  std::sort(v->begin(), v->end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v->size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return (*v)[std::min(i, v->size() - 1)];
}

bool SchemaCheckResult::passing() const {
  return compiled && std::all_of(tests.begin(), tests.end(),
                                 [](const SchemaTestResult& t) { return t.agrees(); });
}

SchemaChecker::SchemaChecker(const Tokenizer* tok)
    : tok_(tok), trie_(std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*tok))) {}

SchemaCheckResult SchemaChecker::Check(const ojson& file) const {
  SchemaCheckResult r;
  const bool tests = file.is_object() && file.contains("schema") && file.contains("tests") &&
                     file["tests"].is_array();
  const ojson& schema = tests ? file["schema"] : file;
  const auto t0 = std::chrono::steady_clock::now();
  Grammar g;
  std::shared_ptr<CompiledGrammar> compiled;
  Status st = CompileJsonSchema(schema, &g);
  if (st.ok()) st = CompiledGrammar::Compile(std::move(g), trie_, &compiled);
  r.compile_us = MicrosSince(t0);
  if (!st.ok()) {
    r.error = st.message();
    return r;
  }
  r.compiled = true;
  if (!tests) return r;
  TokenMask mask(trie_->vocab_size());
  for (const ojson& t : file["tests"]) {
    SchemaTestResult tr;
    tr.valid = t.value("valid", false);
    const std::string text = PythonJsonDumps(t.contains("data") ? t["data"] : ojson());
    const std::vector<int> ids = tok_->EncodeNoBos(text);
    tr.tokens = static_cast<int>(ids.size());
    Matcher m(compiled);
    std::string so_far;
    tr.accepted = true;
    for (size_t k = 0; k < ids.size(); ++k) {
      const auto t1 = std::chrono::steady_clock::now();
      m.Mask(&mask);
      const bool in = ids[k] < mask.size() && mask.Test(ids[k]);
      const std::string bytes = tok_->TokenBytes(ids[k]);
      const bool consumed = in && m.Consume(bytes);
      tr.mask_us.push_back(MicrosSince(t1));
      if (!consumed) {
        tr.accepted = false;
        tr.rejected_at = static_cast<int>(k);
        tr.text_at = so_far.substr(so_far.size() > 40 ? so_far.size() - 40 : 0) + " | " + bytes;
        break;
      }
      so_far += bytes;
    }
    tr.complete = tr.accepted && m.CanEnd();
    r.tests.push_back(std::move(tr));
  }
  return r;
}

ojson SchemaChecker::ToJson(const std::string& name, const SchemaCheckResult& r) {
  ojson o{{"file", name},
          {"compiled", r.compiled},
          {"error", r.compiled ? ojson() : ojson(r.error)},
          {"compile_us", std::round(r.compile_us)}};
  ojson tests = ojson::array();
  for (const SchemaTestResult& t : r.tests) {
    std::vector<double> us = t.mask_us;
    ojson x{{"valid", t.valid},
            {"accepted", t.accepted},
            {"complete", t.complete},
            {"rejected_at", t.rejected_at < 0 ? ojson() : ojson(t.rejected_at)},
            {"tokens", t.tokens},
            {"mask_us_p50", std::round(Percentile(&us, 50) * 10) / 10},
            {"mask_us_max", std::round(Percentile(&us, 100) * 10) / 10}};
    if (t.rejected_at >= 0) x["text_at"] = t.text_at;
    tests.push_back(std::move(x));
  }
  o["tests"] = std::move(tests);
  return o;
}

}  // namespace llmq
