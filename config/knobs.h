// Every key of the config file, once: its dotted name, whether SIGHUP applies it to a running
// `llmq serve`, and how two configs are compared on it. A reload names the keys that changed but
// need a restart (issue 23, row 5); the parser checks that every key it reads is listed here
// (config.cpp), and tests/config_test.cpp that each is told apart.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"

namespace llmq {

struct Knob {
  const char* key;  // dotted: "engine.max_num_seqs"
  bool reloadable;  // SIGHUP applies it to a running llmq serve
  std::function<bool(const LlmqConfig&, const LlmqConfig&)> same;
};

// Every key, in the order of config/llmq.example.yaml.
const std::vector<Knob>& Knobs();
// Whether `key` is one of Knobs().
bool IsKnob(const std::string& key);
// The keys in which `a` and `b` differ, in Knobs() order: all of them, or only those a reload
// does not apply (`restart_only`).
std::vector<std::string> ChangedKeys(const LlmqConfig& a, const LlmqConfig& b, bool restart_only);

}  // namespace llmq
