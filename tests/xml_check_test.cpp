// The well-formedness check the report tests rely on: it accepts what it should and refuses each
// kind of mistake.
#include "tests/xml_check.h"

#include <gtest/gtest.h>

namespace llmq::testing {
namespace {

TEST(XmlCheck, AcceptsWellFormedHtml) {
  EXPECT_EQ(XmlProblem("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/></head>"
                       "<body><p>a &amp; b &lt; c &#39;d&#39; &#8212;</p></body></html>\n"),
            "");
}

TEST(XmlCheck, RefusesEachMistake) {
  EXPECT_NE(XmlProblem("<p><b>x</p></b>"), "") << "crossed elements";
  EXPECT_NE(XmlProblem("<p>x"), "") << "unclosed";
  EXPECT_NE(XmlProblem("<p>a & b</p>"), "") << "bare ampersand";
  EXPECT_NE(XmlProblem("<p>a < b</p>"), "") << "bare less-than";
  EXPECT_NE(XmlProblem("<p class=x>a</p>"), "") << "unquoted attribute";
  EXPECT_NE(XmlProblem("<p>a</p><p>b</p>"), "") << "two roots";
  EXPECT_NE(XmlProblem("<p title=\"a<b\">a</p>"), "") << "'<' in an attribute";
  EXPECT_NE(XmlProblem("text"), "") << "no root";
}

TEST(XmlCheck, FindsExternalReferences) {
  EXPECT_FALSE(HasExternalReference("<svg><path d=\"M0 0\"/></svg>"));
  EXPECT_TRUE(HasExternalReference("<img src=\"https://x/y.png\"/>"));
  EXPECT_TRUE(HasExternalReference("<script src=\"a.js\"></script>"));
  EXPECT_TRUE(HasExternalReference("<link rel=\"stylesheet\" href=\"a.css\"/>"));
  EXPECT_TRUE(HasExternalReference("<img src=\"//cdn/a.png\"/>"));
}

}  // namespace
}  // namespace llmq::testing
