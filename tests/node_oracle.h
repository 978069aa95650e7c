// Running a differential test's npm oracle (tests/oracle/*/oracle.mjs): one node run, its input
// and output as JSON files in the current test's scratch folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

namespace llmq::testing {

// `node script` with `input` (a JSON text) on its standard input; its output parsed into *out.
inline ::testing::AssertionResult RunNodeOracle(const std::filesystem::path& script,
                                                const std::string& input, nlohmann::json* out) {
  const std::string tmp = CurrentTestDir();
  {
    std::ofstream f(tmp + "/in.json", std::ios::binary);
    f << input;
  }
  const std::string cmd = "node " + ShellQuote(script.string()) + " <" +
                          ShellQuote(tmp + "/in.json") + " >" + ShellQuote(tmp + "/out.json");
  if (std::system(cmd.c_str()) != 0) return ::testing::AssertionFailure() << "failed: " << cmd;
  std::ifstream f(tmp + "/out.json");
  *out = nlohmann::json::parse(f, nullptr, false);
  if (out->is_discarded())
    return ::testing::AssertionFailure() << "not JSON: " << tmp << "/out.json";
  return ::testing::AssertionSuccess();
}

}  // namespace llmq::testing
