// SvgPlot: one chart as inline SVG text, drawn without any library or external asset (the job
// report, jobs/report/job_report.h). A chart has linear x and y axes with "nice" ticks (1, 2 or 5
// times a power of ten), and any mix of: line series, a histogram, scatter points and vertical
// markers (p50 / p95 / p99). Every number written is finite: NaN and infinite inputs are dropped.
// Contracts:
//   - the ranges cover every value added, and 0 on the y axis (counts and rates start at 0);
//   - every line, histogram and scatter is one <path> with a non-empty `d` when it has a value,
//     so a chart that plotted something has at least one non-empty path (the report's test);
//   - text (titles, labels, legends) is escaped (html.h's Escape): the output is well-formed XML.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmq::jobs::report {

struct Point {
  double x = 0, y = 0;
};

// The ticks of an axis over [lo, hi]: at most about `max_ticks` values at a step of 1, 2 or 5
// times a power of ten, from the first multiple of the step >= lo to the last <= hi (lo == hi
// gives {lo}). Finite inputs only (LLMQ_CHECK).
std::vector<double> NiceTicks(double lo, double hi, int max_ticks);

// A tick's label: integers as integers, else up to 3 significant digits ("0.25", "1.5e-05").
std::string TickLabel(double v);

class SvgPlot {
 public:
  // `x_label` / `y_label`: the axes' titles (with units).
  SvgPlot(std::string x_label, std::string y_label) : x_label_(x_label), y_label_(y_label) {}

  // A polyline through `points` in the order given; `name` in the legend.
  void AddLine(std::string name, std::vector<Point> points);
  // Bars over the bins: edges[i]..edges[i + 1] of height counts[i] (edges.size() ==
  // counts.size() + 1, edges ascending; LLMQ_CHECK).
  void AddHistogram(std::vector<double> edges, std::vector<double> counts);
  // One dot per point.
  void AddScatter(std::string name, std::vector<Point> points);
  // A dashed vertical line at x with `label` at its top ("p95 0.12 s").
  void AddMarker(double x, std::string label);

  // True when a line, histogram or scatter holds a finite value.
  bool HasData() const;
  // The <svg> element (width x height pixels). A chart without data draws its axes and says "no
  // data".
  std::string Render(int width = 640, int height = 300) const;

 private:
  struct Series {
    enum class Kind { kLine, kScatter } kind;
    std::string name;
    std::vector<Point> points;
  };
  std::string x_label_, y_label_;
  std::vector<Series> series_;
  std::vector<double> edges_, counts_;
  std::vector<std::pair<double, std::string>> markers_;
};

}  // namespace llmq::jobs::report
