// Running a differential test's npm oracle (tests/oracle/*/oracle.mjs): one node run, its input
// and output as JSON files in the current test's scratch folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
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

// Whether a template's render (`st`, its text `got`) agrees with tests/oracle/jinja's answer
// `want` ({"ok": true, "text": ...} or {"ok": false, "error": ...}): the same text, or both raised
// with the same message (then `*raised` is set). A failure shows both sides.
inline ::testing::AssertionResult AgreesWithJinjaOracle(const Status& st, const std::string& got,
                                                        const nlohmann::json& want, bool* raised) {
  *raised = false;
  if (want["ok"].get<bool>() && st.ok() && got == want["text"].get<std::string>())
    return ::testing::AssertionSuccess();
  if (!want["ok"].get<bool>() && !st.ok() &&
      st.message().find(": the template raised: " + want["error"].get<std::string>()) !=
          std::string::npos) {
    *raised = true;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "\n got  " << (st.ok() ? nlohmann::json(got).dump() : "error: " + st.ToString())
         << "\n want " << want.dump();
}

}  // namespace llmq::testing
