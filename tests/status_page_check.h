// Checks of the daemon's status page (daemon/status_page.h) shared by its unit test and the
// end-to-end test: well-formed, every section, one inline script and nothing outside the page.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/xml_check.h"

namespace llmq::testing {

inline void ExpectSoundStatusPage(const std::string& html) {
  EXPECT_EQ(XmlProblem(html), "");
  // Its one script is inline (no src=) and asks for nothing but the page itself (location).
  const size_t open = html.find("<script>"), close = html.find("</script>");
  ASSERT_NE(open, std::string::npos);
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(html.find("<script", open + 1), std::string::npos) << "one script";
  const std::string script = html.substr(open, close - open);
  EXPECT_EQ(script.find("://"), std::string::npos) << script;
  EXPECT_NE(script.find("fetch(location.pathname"), std::string::npos) << script;
  // Without it, nothing names anything outside the page.
  EXPECT_FALSE(HasExternalReference(html.substr(0, open) + html.substr(close)));
  for (const char* id : {"worker", "unfinished", "finished"})
    EXPECT_NE(html.find(std::string("<section id=\"") + id + "\">"), std::string::npos) << id;
}

}  // namespace llmq::testing
