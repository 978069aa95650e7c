// Structured outputs' cost in tokens/s (issue 24, done-when 4): one job of --requests chat
// requests (default 256), each under one of three MaskBench schemas (`response_format`
// json_schema, strict), runs through the real `llmq run`; then the same job without
// response_format, each request's max_tokens set to the completion tokens its constrained twin
// generated and ignore_eos on, so both runs generate the same tokens in the same number of steps.
// Both run from this one invocation, alternating, three times each (the medians compared: a shared
// machine's noise is larger than the difference measured), side by side: wall seconds, completion
// tokens, tokens/s, the ratio, and the structured-output summary (forced tokens, compile and mask
// times); the pair runs seeded at temperature 0.8, then greedy (where sampling costs least, so
// masks weigh the most).
//
// The data is guidance-ai/jsonschemabench's maskbench/data (fetched, never committed):
//   git clone --depth 1 https://github.com/guidance-ai/jsonschemabench /tmp/jsonschemabench
//   build/bench/structured_bench /tmp/jsonschemabench/maskbench/data [--model DIR]
//     [--requests N] [--max-tokens N] [--schemas A.json,B.json,C.json] [--profile]
//     [--temperature T]   (this one only, instead of 0.8 and then greedy)
//     [--repeats N]       (each job N times, alternating, median wall time; default 3)
//     [--keep DIR]        (writes the jobs and their results in DIR, kept: to profile one run)
// (default model: ../shared/models/tiny-llama32, the Llama 3 tokenizer, random weights: the
// smallest forward pass over the largest vocabulary, the case where masks weigh the most.)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_util.h"

using json = nlohmann::ordered_json;
using llmq::bench::Die;

namespace {

// Three schemas of the nightly kind, records of strings, numbers, enums and arrays of objects: a
// resume (GlaiveAI function call), a support ticket (lengths, an integer enum) and a bibliography
// entry (GitHub).
const char* const kDefaultSchemas[] = {"Glaiveai2K---create_resume_beb97649.json",
                                       "Github_medium---o12244.json",
                                       "Github_medium---o28956.json"};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  if (!f) Die("cannot read " + path);
  try {
    return json::parse(f);
  } catch (const std::exception& e) {
    Die(path + ": " + e.what());
  }
}

// `llmq run ARGS`; its summary JSON.
json RunLlmq(const std::string& args, const std::string& summary) {
  const std::string cmd = std::string("exec ") + LLMQ_BINARY + " run " + args +
                          " --no-progress --summary-json " + summary + " 2>/dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Die("failed: " + cmd);
  return ReadJson(summary);
}

// The request of line i: a short document to extract from; `format` null for none.
json Line(size_t i, const json& format, int max_tokens, bool ignore_eos, double temperature) {
  llmq::Rng rng(1000 + i);
  json body = {
      {"model", "bench"},
      {"messages", json::array({{{"role", "system"},
                                 {"content",
                                  "Extract the record described in the user's document "
                                  "and answer with JSON only."}},
                                {{"role", "user"}, {"content", llmq::bench::Words(rng, 300)}}})},
      {"max_tokens", max_tokens},
      {"temperature", temperature},
      {"seed", static_cast<int64_t>(i)}};
  if (!format.is_null()) body["response_format"] = format;
  if (ignore_eos) body["ignore_eos"] = true;
  return {{"custom_id", "req-" + std::to_string(i)},
          {"method", "POST"},
          {"url", "/v1/chat/completions"},
          {"body", body}};
}

// custom_id -> completion tokens, and -> finish_reason, from a results file.
void ReadResults(const std::string& path, std::map<std::string, int64_t>* tokens,
                 std::map<std::string, std::string>* finish) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line);
    if (!j["error"].is_null() || j["response"]["status_code"] != 200)  // failed, or refused
      Die(path + ": a request failed: " + line.substr(0, 400));
    const json& body = j["response"]["body"];
    (*tokens)[j["custom_id"]] = body["usage"]["completion_tokens"].get<int64_t>();
    (*finish)[j["custom_id"]] = body["choices"][0]["finish_reason"].get<std::string>();
  }
}

// One temperature: the constrained job, then its unconstrained twin, `repeats` times each,
// alternating (a shared machine's drift falls on both); prints their table (median wall times).
void RunPair(const std::string& dir, const std::string& model, bool profile,
             const std::vector<json>& formats, size_t requests, int max_tokens, double temperature,
             int repeats) {
  const std::string flags = std::string(" --model ") + model + (profile ? " --profile" : "");
  {
    std::ofstream in(dir + "/constrained.jsonl");
    for (size_t i = 0; i < requests; ++i)
      in << Line(i, formats[i % formats.size()], max_tokens, false, temperature).dump() << "\n";
  }
  std::vector<json> cs, us;
  std::map<std::string, int> finishes;
  for (int rep = 0; rep < repeats; ++rep) {
    cs.push_back(RunLlmq(dir + "/constrained.jsonl -o " + dir + "/constrained.out.jsonl" + flags,
                         dir + "/constrained.json"));
    std::map<std::string, int64_t> tokens;
    std::map<std::string, std::string> finish;
    ReadResults(dir + "/constrained.out.jsonl", &tokens, &finish);
    if (rep == 0) {
      for (const auto& [id, f] : finish) ++finishes[f];
      // The same requests unconstrained, generating the same number of tokens each.
      std::ofstream in(dir + "/free.jsonl");
      for (size_t i = 0; i < requests; ++i) {
        const int64_t n = tokens.at("req-" + std::to_string(i));
        in << Line(i, json(), static_cast<int>(std::max<int64_t>(n, 1)), true, temperature).dump()
           << "\n";
      }
    } else if (cs[rep]["completion_tokens"] != cs[0]["completion_tokens"]) {
      Die("the constrained job did not repeat itself");
    }
    us.push_back(
        RunLlmq(dir + "/free.jsonl -o " + dir + "/free.out.jsonl" + flags, dir + "/free.json"));
  }
  // The run of median wall time of each kind.
  const auto median = [](std::vector<json> v) {
    std::sort(v.begin(), v.end(), [](const json& a, const json& b) {
      return a["wall_seconds"].get<double>() < b["wall_seconds"].get<double>();
    });
    return v[v.size() / 2];
  };
  const json c = median(cs), u = median(us);

  std::printf("\n%s; constrained finish reasons:",
              temperature > 0 ? ("temperature " + std::to_string(temperature) + ", seeded").c_str()
                              : "greedy");
  for (const auto& [f, n] : finishes) std::printf(" %s %d", f.c_str(), n);
  std::printf("\n\n| %-13s | %8s | %-22s | %11s | %9s | %7s |\n", "run", "wall s", "each run, s",
              "completion", "tokens/s", "ratio");
  std::printf(
      "|:--------------|---------:|:-----------------------|------------:|----------:|--------:|"
      "\n");
  const double free_tps = u["completion_tokens"].get<double>() / u["wall_seconds"].get<double>();
  for (const auto& [name, s, all] :
       {std::tuple<const char*, const json*, const std::vector<json>*>{"unconstrained", &u, &us},
        std::tuple<const char*, const json*, const std::vector<json>*>{"constrained", &c, &cs}}) {
    std::string each;
    for (const json& r : *all) {
      char b[16];
      std::snprintf(b, sizeof b, "%s%.2f", each.empty() ? "" : " ",
                    r["wall_seconds"].get<double>());
      each += b;
    }
    const double tps = (*s)["completion_tokens"].get<double>() / (*s)["wall_seconds"].get<double>();
    std::printf("| %-13s | %8.2f | %-22s | %11lld | %9.1f | %6.3fx |\n", name,
                (*s)["wall_seconds"].get<double>(), each.c_str(),
                static_cast<long long>((*s)["completion_tokens"].get<int64_t>()), tps,
                tps / free_tps);
  }
  const json& so = c["structured_outputs"];
  std::printf(
      "\nconstrained: %lld requests, %lld forced tokens, %lld schemas compiled in %.1f ms (max "
      "%.1f ms), mask p50 %.0f us, p99 %.0f us\n",
      static_cast<long long>(so["constrained_requests"].get<int64_t>()),
      static_cast<long long>(so["forced_tokens"].get<int64_t>()),
      static_cast<long long>(so["schemas_compiled"].get<int64_t>()),
      so["compile_seconds"].get<double>() * 1e3, so["compile_seconds_max"].get<double>() * 1e3,
      so["mask_seconds_p50"].get<double>() * 1e6, so["mask_seconds_p99"].get<double>() * 1e6);
  if (profile)
    for (const auto& [name, s] : {std::pair<const char*, const json*>{"unconstrained", &u},
                                  std::pair<const char*, const json*>{"constrained", &c}})
      std::printf("profile %-13s %s\n", name, (*s)["profile_seconds"].dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, model = std::string(LLMQ_SHARED_DIR) + "/models/tiny-llama32";
  size_t requests = 256;
  int max_tokens = 192;
  bool profile = false;
  std::vector<double> temperatures = {0.8, 0.0};
  int repeats = 3;
  std::string keep;
  std::vector<std::string> schemas(std::begin(kDefaultSchemas), std::end(kDefaultSchemas));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--requests" && i + 1 < argc)
      requests = std::stoul(argv[++i]);
    else if (a == "--max-tokens" && i + 1 < argc)
      max_tokens = std::stoi(argv[++i]);
    else if (a == "--schemas" && i + 1 < argc)
      schemas = Split(argv[++i]);
    else if (a == "--repeats" && i + 1 < argc)
      repeats = std::max(1, std::stoi(argv[++i]));
    else if (a == "--temperature" && i + 1 < argc)
      temperatures = {std::stod(argv[++i])};
    else if (a == "--profile")
      profile = true;
    else if (a == "--keep" && i + 1 < argc)
      keep = argv[++i];
    else if (data.empty() && a.rfind("--", 0) != 0)
      data = a;
    else
      Die("unknown argument " + a);
  }
  if (data.empty() || schemas.empty())
    Die("usage: structured_bench MASKBENCH_DATA_DIR [--model DIR] [--requests N] [--max-tokens N] "
        "[--schemas A,B,C] [--profile] [--temperature T] [--repeats N] [--keep DIR]");

  std::vector<json> formats;
  for (size_t k = 0; k < schemas.size(); ++k) {
    json file = ReadJson(data + "/" + schemas[k]);
    formats.push_back({{"type", "json_schema"},
                       {"json_schema",
                        {{"name", "schema_" + std::to_string(k)},
                         {"schema", file["schema"]},
                         {"strict", true}}}});
  }

  char tmpl[] = "/tmp/structured_bench.XXXXXX";
  if (keep.empty() && mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  const std::string dir = keep.empty() ? std::string(tmpl) : keep;
  if (!keep.empty()) std::filesystem::create_directories(dir);
  std::printf("structured_bench: %s\n", llmq::bench::Stamp().c_str());
  std::printf("model %s, %zu requests over %zu schemas (", model.c_str(), requests, schemas.size());
  for (size_t k = 0; k < schemas.size(); ++k)
    std::printf("%s%s", k ? ", " : "", schemas[k].c_str());
  std::printf("), max_tokens %d\n", max_tokens);
  for (const double temperature : temperatures)
    RunPair(dir, model, profile, formats, requests, max_tokens, temperature, repeats);
  if (keep.empty()) std::filesystem::remove_all(dir);
  return 0;
}
