// Helpers the benchmark programs share: timing, the stamp printed above every table, medians,
// and the job text of the 2,000-request comparisons (queue_bench, serve_bench).
#pragma once

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/sampling/sampler.h"

namespace llmq::bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

inline void Check(const llmq::Status& st, const char* what) {
  if (!st.ok()) Die(std::string(what) + ": " + st.message());
}

// A benchmark's command line: "--name value" pairs. Each Get names a flag and where its value
// goes (left as it is when the flag is absent); Done() ends the program with the usage on a
// flag no Get named (exit 2), or on --help / -h (exit 0). A flag without a value is an error.
class Flags {
 public:
  Flags(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("%s\n", usage_.c_str());
        std::exit(0);
      }
      if (i + 1 >= argc) Fail(a + " needs a value");
      pairs_.push_back({a, argv[++i], false});
    }
  }
  Flags& Get(const char* name, std::string* out) {
    for (Pair& p : pairs_)
      if (p.name == name) *out = p.value, p.used = true;
    return *this;
  }
  template <typename Int>
  Flags& Get(const char* name, Int* out) {
    std::string v;
    if (Has(name)) *out = ToInt<Int>(name, (Get(name, &v), v));
    return *this;
  }
  // A comma-separated list ("--workers 1,2,4").
  template <typename T>
  Flags& Get(const char* name, std::vector<T>* out) {
    std::string v;
    if (!Has(name)) return *this;
    Get(name, &v);
    out->clear();
    for (size_t at = 0; at <= v.size();) {
      const size_t comma = std::min(v.find(',', at), v.size());
      const std::string item = v.substr(at, comma - at);
      if constexpr (std::is_same_v<T, std::string>)
        out->push_back(item);
      else
        out->push_back(ToInt<T>(name, item));
      at = comma + 1;
    }
    return *this;
  }
  void Done() const {
    for (const Pair& p : pairs_)
      if (!p.used) Fail("unknown flag " + p.name);
  }

 private:
  struct Pair {
    std::string name, value;
    bool used;
  };
  template <typename Int>
  Int ToInt(const char* name, const std::string& v) const {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0) Fail(std::string(name) + ": not an integer: " + v);
    return static_cast<Int>(x);
  }
  bool Has(const char* name) const {
    for (const Pair& p : pairs_)
      if (p.name == name) return true;
    return false;
  }
  [[noreturn]] void Fail(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n%s\n", program_invocation_short_name, what.c_str(),
                 usage_.c_str());
    std::exit(2);
  }
  std::string usage_;
  std::vector<Pair> pairs_;
};

// "2026-11-30 13:04 UTC, nproc 2, load average ...": printed above every table (others' work on
// a shared machine shows in the load).
inline std::string Stamp() {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int nproc = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  char tail[96];
  std::snprintf(tail, sizeof tail, ", nproc %d, load average %.2f %.2f %.2f", nproc, load[0],
                load[1], load[2]);
  return std::string(date) + tail;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline const char* const kWords[] = {
    "the",      "report",   "customer", "shipment", "delayed",   "invoice", "product", "quality",
    "review",   "summary",  "market",   "quarter",  "revenue",   "support", "ticket",  "account",
    "service",  "price",    "order",    "delivery", "warehouse", "team",    "meeting", "project",
    "deadline", "budget",   "client",   "contract", "issue",     "update",  "request", "payment",
    "refund",   "policy",   "feedback", "survey",   "growth",    "sales",   "region",  "office",
    "manager",  "schedule", "travel",   "hotel",    "flight",    "weather", "morning", "evening",
    "and",      "with",     "from",     "about",    "after",     "before",  "during",  "because",
    "was",      "were",     "is",       "are",      "has",       "had",     "will",    "could",
    "new",      "old",      "late",     "early",    "good",      "poor",    "high",    "low",
    "blue",     "green",    "quick",    "careful",  "simple",    "clear",   "short",   "long"};
inline constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Random words up to about `chars` characters, sentence-cased, ending with a period.
inline std::string Words(llmq::Rng& rng, size_t chars) {
  std::string s;
  while (s.size() < chars) {
    if (!s.empty()) s += ' ';
    s += kWords[rng.NextU64() % kNumWords];
  }
  s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s + ".";
}

// The compare job's shared instruction (the tiny model's context is 512 tokens).
inline const std::string kInstruction =
    "Summarize the following customer note in one sentence, keeping every figure exactly as "
    "written.";

inline json Line(const std::string& id, const std::string& url, json body) {
  return json{{"custom_id", id}, {"method", "POST"}, {"url", url}, {"body", std::move(body)}};
}

// Compare: chat lines, shared instruction + distinct note (random words from `seed`); even lines
// greedy, odd lines seeded sampling; max_tokens 4..8.
inline void WriteCompareJob(const std::string& path, int requests, uint64_t seed) {
  std::ofstream out(path, std::ios::binary);
  llmq::Rng rng(seed);
  for (int i = 0; i < requests; ++i) {
    json body{
        {"model", "tiny"},
        {"messages",
         {{{"role", "system"}, {"content", kInstruction}},
          {{"role", "user"}, {"content", "Note " + std::to_string(i) + ": " + Words(rng, 120)}}}},
        {"max_tokens", 4 + i % 5}};
    if (i % 2 == 0) {
      body["temperature"] = 0;
    } else {
      body["temperature"] = 0.8;
      body["top_p"] = 0.95;
      body["seed"] = 1000 + i;
    }
    out << Line("note-" + std::to_string(i), "/v1/chat/completions", body).dump() << '\n';
  }
}

}  // namespace llmq::bench
