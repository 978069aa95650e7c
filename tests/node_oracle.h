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

// tests/oracle/<name> in the source tree.
inline std::filesystem::path OracleDir(const char* name) {
  return std::filesystem::path(LLMQ_SOURCE_DIR) / "tests" / "oracle" / name;
}

// Why the oracle in `dir` cannot run, or "" when it can: node is not installed, or `installed` (a
// file `npm ci` puts in dir/node_modules) is absent.
inline std::string MissingNodeOracle(const std::filesystem::path& dir,
                                     const std::filesystem::path& installed) {
  if (std::system("node --version >/dev/null 2>&1") != 0)
    return "node not installed (scripts/bootstrap installs nodejs)";
  if (!std::filesystem::exists(dir / "node_modules" / installed))
    return "oracle not installed: run `npm ci` in " + dir.string() + " (scripts/bootstrap does)";
  return "";
}

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
