// Pages loaded in Debian's Chromium, headless, by tests/oracle/browser (playwright-core, pinned):
// what a reader sees of llmq's pages (the job report, the status page), their console errors and
// every URL they asked for (the browser reaches nothing else), and a screenshot.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
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

// Loads `page` (with JavaScript) and takes its screenshot; reads the text of `selector` and calls
// on_first(text); then waits, for as long as it takes, until the page itself changes that text
// (no time limit: ctest's ends a page that never does) and takes `second_screenshot`. *out: the
// oracle's answer for the page, with "watch": {"first", "second", "screenshot"}. Wipes
// CurrentTestDir().
inline ::testing::AssertionResult WatchPage(const PageToLoad& page, const std::string& selector,
                                            const std::string& second_screenshot,
                                            const std::function<void(const std::string&)>& on_first,
                                            nlohmann::json* out) {
  const std::string tmp = CurrentTestDir();
  nlohmann::json in = {
      {"chromium", kChromium},
      {"pages",
       {{{"url", page.url},
         {"screenshot", page.screenshot},
         {"javascript", true},
         {"watch", {{"selector", selector}, {"screenshot", second_screenshot}}}}}}};
  std::ofstream(tmp + "/in.json", std::ios::binary) << in.dump();
  const std::string cmd = "node " + ShellQuote((OracleDir("browser") / "oracle.mjs").string()) +
                          " <" + ShellQuote(tmp + "/in.json");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return ::testing::AssertionFailure() << "cannot run " << cmd;
  std::string line, last;
  bool first_seen = false;
  for (int c; (c = std::fgetc(pipe)) != EOF;) {  // line by line, as the oracle writes them
    if (c != '\n') {
      line += static_cast<char>(c);
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == "first" && !first_seen) {
      first_seen = true;
      on_first(j["text"].get<std::string>());
    }
    last = std::move(line);
    line.clear();
  }
  if (::pclose(pipe) != 0) return ::testing::AssertionFailure() << "failed: " << cmd;
  if (!first_seen) return ::testing::AssertionFailure() << "no first reading from " << cmd;
  const nlohmann::json all = nlohmann::json::parse(last, nullptr, false);
  if (!all.is_array() || all.size() != 1)
    return ::testing::AssertionFailure() << "not the oracle's answer: " << last;
  *out = all[0];
  return ::testing::AssertionSuccess();
}

}  // namespace llmq::testing
