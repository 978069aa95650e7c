// jobs/report/svg_plot: ticks, labels, and charts that are well-formed SVG with non-empty paths.
#include "jobs/report/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "tests/xml_check.h"

namespace llmq::jobs::report {
namespace {

// The `d` of every <path class="CLASS" ...>.
std::vector<std::string> PathsOfClass(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("<path class=\"" + cls + "\"[^>]* d=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(NiceTicks, StepsOfOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_EQ(NiceTicks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(NiceTicks(0, 100, 4), (std::vector<double>{0, 50, 100}));
  const std::vector<double> t = NiceTicks(0.013, 0.097, 8);  // a step of 0.01 gives 9 > 8
  ASSERT_EQ(t.size(), 4u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], 0.02 * double(i + 1), 1e-12);
  EXPECT_EQ(NiceTicks(3, 3, 5), std::vector<double>{3});
  EXPECT_EQ(NiceTicks(-1, 1, 2), (std::vector<double>{-1, 0, 1}));
}

TEST(TickLabel, IntegersPlainElseThreeSignificantDigits) {
  EXPECT_EQ(TickLabel(40), "40");
  EXPECT_EQ(TickLabel(0.25), "0.25");
  EXPECT_EQ(TickLabel(1.0 / 3), "0.333");
  EXPECT_EQ(TickLabel(1.5e-5), "1.5e-05");
}

TEST(SvgPlot, LinesScatterAndMarkersAreWellFormedNonEmptyPaths) {
  SvgPlot p("time <s>", "tokens & more");
  p.AddLine("gen \"tok\"/s", {{0, 1}, {1, 3}, {2, NAN}, {3, 2}});
  p.AddScatter("dots", {{0.5, 1}, {2.5, 2}});
  p.AddMarker(1.5, "p95 <1 s>");
  ASSERT_TRUE(p.HasData());
  const std::string svg = p.Render();
  EXPECT_EQ(testing::XmlProblem(svg), "") << svg;
  EXPECT_FALSE(testing::HasExternalReference(svg));
  const auto lines = PathsOfClass(svg, "line");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(std::count(lines[0].begin(), lines[0].end(), 'L'), 2) << "the NaN point is dropped";
  ASSERT_EQ(PathsOfClass(svg, "dots").size(), 1u);
  EXPECT_FALSE(PathsOfClass(svg, "dots")[0].empty());
  ASSERT_EQ(PathsOfClass(svg, "marker").size(), 1u);
  EXPECT_NE(svg.find("time &lt;s&gt;"), std::string::npos);
  EXPECT_NE(svg.find("p95 &lt;1 s&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("no data"), std::string::npos);
}

TEST(SvgPlot, HistogramDrawsOneBarPerNonEmptyBin) {
  SvgPlot p("x", "n");
  p.AddHistogram({0, 1, 2, 3}, {2, 0, 5});
  const std::string svg = p.Render(400, 200);
  EXPECT_EQ(testing::XmlProblem(svg), "");
  const auto bars = PathsOfClass(svg, "bars");
  ASSERT_EQ(bars.size(), 1u);
  EXPECT_EQ(std::count(bars[0].begin(), bars[0].end(), 'Z'), 2);
  EXPECT_NE(svg.find("width=\"400\" height=\"200\""), std::string::npos);
}

TEST(SvgPlot, WithoutDataSaysSoAndDrawsNoSeries) {
  SvgPlot p("x", "y");
  p.AddLine("empty", {});
  EXPECT_FALSE(p.HasData());
  const std::string svg = p.Render();
  EXPECT_EQ(testing::XmlProblem(svg), "");
  EXPECT_NE(svg.find("no data"), std::string::npos);
  EXPECT_TRUE(PathsOfClass(svg, "line").empty());
}

}  // namespace
}  // namespace llmq::jobs::report
