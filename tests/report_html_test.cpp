// jobs/report/html: escaping for element text and attributes, tables.
#include "jobs/report/html.h"

#include <gtest/gtest.h>

#include "tests/xml_check.h"

namespace llmq::jobs::report {
namespace {

TEST(ReportHtml, EscapesMarkupQuotesAndBadBytes) {
  EXPECT_EQ(Escape("a<b>&\"c\"'d'"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
  EXPECT_EQ(Escape("caf\xC3\xA9"), "caf\xC3\xA9") << "UTF-8 kept";
  EXPECT_EQ(Escape("x\xFFy"), "x\xEF\xBF\xBDy") << "a byte that is not UTF-8 becomes U+FFFD";
  EXPECT_EQ(Escape(std::string("a\x01\x1b[31m\tb\n", 10)), "a[31m\tb\n")
      << "control bytes XML forbids are dropped, tab and newline kept";
}

TEST(ReportHtml, TableIsWellFormedWithEscapedCellsAndPaddedRows) {
  const std::string t = Table({"reason", "count"}, {{"<bad> & worse", "3"}, {"short"}});
  EXPECT_EQ(testing::XmlProblem(t), "") << t;
  EXPECT_NE(t.find("<td>&lt;bad&gt; &amp; worse</td><td>3</td>"), std::string::npos);
  EXPECT_NE(t.find("<td>short</td><td></td>"), std::string::npos);
}

TEST(ReportHtml, NumFormats) {
  EXPECT_EQ(Num(0.1234, "%.3f"), "0.123");
  EXPECT_EQ(Num(12, "%.0f"), "12");
}

}  // namespace
}  // namespace llmq::jobs::report
