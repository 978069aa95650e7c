// Pages loaded in Debian's Chromium, headless, by tests/oracle/browser (playwright-core, pinned):
// what a reader sees of llmq's pages (the job report, the status page), their console errors and
// every URL they asked for (the browser reaches nothing else), and a screenshot.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/node_oracle.h"
#include "tests/test_util.h"

namespace llmq::testing {

constexpr const char* kChromium = "/usr/bin/chromium";

// Why pages cannot be loaded here, or "".
inline std::string MissingBrowser() {
  if (!std::filesystem::exists(kChromium))
    return std::string(kChromium) + " is absent (Debian's chromium: scripts/bootstrap installs it)";
  return MissingNodeOracle(OracleDir("browser"), "playwright-core");
}

struct PageToLoad {
  std::string url;         // file:///... or http://127.0.0.1:PORT/...
  std::string screenshot;  // a PNG of the whole page, or "" for none
  bool javascript = true;
};

// The oracle's answer per page (tests/oracle/browser/oracle.mjs): title, console_errors,
// page_errors, requests, svgs, drawn_svgs, empty_paths, text, height, screenshot. Wipes
// CurrentTestDir().
inline ::testing::AssertionResult LoadPages(const std::vector<PageToLoad>& pages,
                                            nlohmann::json* out) {
  nlohmann::json in = {{"chromium", kChromium}, {"pages", nlohmann::json::array()}};
  for (const PageToLoad& p : pages)
    in["pages"].push_back(
        {{"url", p.url}, {"screenshot", p.screenshot}, {"javascript", p.javascript}});
  return RunNodeOracle(OracleDir("browser") / "oracle.mjs", in.dump(), out);
}

}  // namespace llmq::testing
