#include "jobs/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/status.h"
#include "jobs/report/html.h"

namespace llmq::jobs::report {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
constexpr int kLeft = 70, kRight = 20, kTop = 28, kBottom = 46;

std::vector<Point> Finite(std::vector<Point> points) {
  std::erase_if(points, [](const Point& p) { return !std::isfinite(p.x) || !std::isfinite(p.y); });
  return points;
}

// A coordinate with two decimals (SVG numbers).
std::string C(double v) {
  return Num(v, "%.2f");
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int max_ticks) {
  LLMQ_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && max_ticks >= 1);
  if (lo == hi) return {lo};
  const double raw = (hi - lo) / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1) {
    const double t = k * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string TickLabel(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return Num(v, "%.0f");
  return Num(v, "%.3g");
}

void SvgPlot::AddLine(std::string name, std::vector<Point> points) {
  series_.push_back({Series::Kind::kLine, std::move(name), Finite(std::move(points))});
}

void SvgPlot::AddScatter(std::string name, std::vector<Point> points) {
  series_.push_back({Series::Kind::kScatter, std::move(name), Finite(std::move(points))});
}

void SvgPlot::AddHistogram(std::vector<double> edges, std::vector<double> counts) {
  LLMQ_CHECK(edges.size() == counts.size() + 1);
  LLMQ_CHECK(std::is_sorted(edges.begin(), edges.end()));
  for (double e : edges) LLMQ_CHECK(std::isfinite(e));
  for (double& c : counts)
    if (!std::isfinite(c)) c = 0;
  edges_ = std::move(edges);
  counts_ = std::move(counts);
}

void SvgPlot::AddMarker(double x, std::string label) {
  if (std::isfinite(x)) markers_.emplace_back(x, std::move(label));
}

bool SvgPlot::HasData() const {
  if (!counts_.empty()) return true;
  return std::any_of(series_.begin(), series_.end(),
                     [](const Series& s) { return !s.points.empty(); });
}

std::string SvgPlot::Render(int width, int height) const {
  LLMQ_CHECK(width > kLeft + kRight && height > kTop + kBottom);
  // The ranges: every value, and 0 on y.
  double x0 = INFINITY, x1 = -INFINITY, y1 = 0;
  auto cover_x = [&](double x) { x0 = std::min(x0, x), x1 = std::max(x1, x); };
  for (const Series& s : series_)
    for (const Point& p : s.points) cover_x(p.x), y1 = std::max(y1, p.y);
  double y0 = 0;
  for (const Series& s : series_)
    for (const Point& p : s.points) y0 = std::min(y0, p.y);
  if (!edges_.empty()) cover_x(edges_.front()), cover_x(edges_.back());
  for (double c : counts_) y1 = std::max(y1, c);
  for (const auto& m : markers_) cover_x(m.first);
  if (!(x0 <= x1)) x0 = 0, x1 = 1;
  if (x0 == x1) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y1 = y0 + 1;
  y1 += (y1 - y0) * 0.05;

  const double pw = width - kLeft - kRight, ph = height - kTop - kBottom;
  auto sx = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };

  std::string o = "<svg width=\"" + std::to_string(width) + "\" height=\"" +
                  std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                  std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  // Axes, grid and ticks.
  o += "<path class=\"axis\" stroke=\"#333\" fill=\"none\" d=\"M" + C(kLeft) + " " + C(kTop) +
       " V" + C(kTop + ph) + " H" + C(kLeft + pw) + "\"/>\n";
  for (double t : NiceTicks(x0, x1, 8)) {
    o += "<path stroke=\"#ccc\" d=\"M" + C(sx(t)) + " " + C(kTop + ph) + " v5\"/>";
    o += "<text x=\"" + C(sx(t)) + "\" y=\"" + C(kTop + ph + 17) + "\" text-anchor=\"middle\">" +
         Escape(TickLabel(t)) + "</text>\n";
  }
  for (double t : NiceTicks(y0, y1, 6)) {
    o += "<path stroke=\"#eee\" d=\"M" + C(kLeft) + " " + C(sy(t)) + " H" + C(kLeft + pw) + "\"/>";
    o += "<text x=\"" + C(kLeft - 6) + "\" y=\"" + C(sy(t) + 4) + "\" text-anchor=\"end\">" +
         Escape(TickLabel(t)) + "</text>\n";
  }
  o += "<text x=\"" + C(kLeft + pw / 2) + "\" y=\"" + C(height - 8) + "\" text-anchor=\"middle\">" +
       Escape(x_label_) + "</text>\n";
  o += "<text transform=\"translate(14 " + C(kTop + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + Escape(y_label_) + "</text>\n";

  if (!counts_.empty()) {
    std::string d;
    for (size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i] <= 0) continue;
      d += "M" + C(sx(edges_[i])) + " " + C(sy(0)) + " V" + C(sy(counts_[i])) + " H" +
           C(sx(edges_[i + 1])) + " V" + C(sy(0)) + " Z ";
    }
    if (d.empty()) d = "M" + C(sx(edges_.front())) + " " + C(sy(0)) + " H" + C(sx(edges_.back()));
    o += "<path class=\"bars\" fill=\"#9ecae1\" stroke=\"#3182bd\" stroke-width=\"0.5\" d=\"" + d +
         "\"/>\n";
  }
  int legend = 0;
  for (size_t k = 0; k < series_.size(); ++k) {
    const Series& s = series_[k];
    if (s.points.empty()) continue;
    const char* color = kColors[k % std::size(kColors)];
    std::string d;
    for (size_t i = 0; i < s.points.size(); ++i) {
      const double px = sx(s.points[i].x), py = sy(s.points[i].y);
      if (s.kind == Series::Kind::kLine)
        d += (i == 0 ? "M" : " L") + C(px) + " " + C(py);
      else
        d += "M" + C(px - 2) + " " + C(py) + " a2 2 0 1 0 4 0 a2 2 0 1 0 -4 0 ";
    }
    if (s.kind == Series::Kind::kLine)
      o += "<path class=\"line\" fill=\"none\" stroke=\"" + std::string(color) +
           "\" stroke-width=\"1.5\" d=\"" + d + "\"/>\n";
    else
      o += "<path class=\"dots\" fill=\"" + std::string(color) + "\" fill-opacity=\"0.6\" d=\"" +
           d + "\"/>\n";
    if (!s.name.empty()) {
      const double ly = kTop + 4 + 14 * legend++;
      o += "<path stroke=\"" + std::string(color) + "\" stroke-width=\"3\" d=\"M" +
           C(kLeft + pw - 200) + " " + C(ly) + " h14\"/><text x=\"" + C(kLeft + pw - 182) +
           "\" y=\"" + C(ly + 4) + "\">" + Escape(s.name) + "</text>\n";
    }
  }
  for (size_t i = 0; i < markers_.size(); ++i) {
    const double mx = sx(markers_[i].first);
    o += "<path class=\"marker\" stroke=\"#d62728\" stroke-dasharray=\"4 3\" d=\"M" + C(mx) + " " +
         C(kTop) + " V" + C(kTop + ph) + "\"/><text x=\"" + C(mx + 3) + "\" y=\"" +
         C(kTop - 4 - 10 * static_cast<double>(i % 2)) + "\" fill=\"#d62728\">" +
         Escape(markers_[i].second) + "</text>\n";
  }
  if (!HasData())
    o += "<text x=\"" + C(kLeft + pw / 2) + "\" y=\"" + C(kTop + ph / 2) +
         "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n";
  return o + "</svg>\n";
}

}  // namespace llmq::jobs::report
