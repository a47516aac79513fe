#include "cli/bench_serve_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace deepinfer::cli {

namespace {

constexpr double kPanelW = 420, kPanelH = 260, kLeft = 64, kTop = 48, kGap = 90;

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

struct Series {
  const char* name;
  const char* colour;
  std::function<double(const SweepPoint&)> value;
};

// "Nice" upper bound for an axis: 1, 2 or 5 times a power of ten at or above `v`.
double nice_max(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

std::string panel(double x0, const std::string& title, const std::string& unit, const std::vector<SweepPoint>& points,
                  const std::vector<Series>& series) {
  std::string s;
  double y_max = 0;
  for (const auto& p : points) {
    for (const auto& se : series) y_max = std::max(y_max, se.value(p));
  }
  y_max = nice_max(y_max);
  double lx_min = INFINITY, lx_max = -INFINITY;
  for (const auto& p : points) {
    lx_min = std::min(lx_min, std::log2(std::max(p.concurrency, 1.0)));
    lx_max = std::max(lx_max, std::log2(std::max(p.concurrency, 1.0)));
  }
  if (!(lx_max > lx_min)) lx_max = lx_min + 1;
  auto px = [&](double c) { return x0 + (std::log2(std::max(c, 1.0)) - lx_min) / (lx_max - lx_min) * kPanelW; };
  auto py = [&](double v) { return kTop + kPanelH - v / y_max * kPanelH; };
  s += "<text x=\"" + fmt("%.1f", x0) + "\" y=\"" + fmt("%.1f", kTop - 14) + "\" font-size=\"14\">" + escape(title) + "</text>\n";
  s += "<rect x=\"" + fmt("%.1f", x0) + "\" y=\"" + fmt("%.1f", kTop) + "\" width=\"" + fmt("%.1f", kPanelW) + "\" height=\"" +
       fmt("%.1f", kPanelH) + "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = y_max * i / 4;
    s += "<text x=\"" + fmt("%.1f", x0 - 6) + "\" y=\"" + fmt("%.1f", py(v) + 4) + "\" font-size=\"11\" text-anchor=\"end\">" +
         fmt("%g", v) + "</text>\n";
  }
  for (const auto& p : points) {
    s += "<text x=\"" + fmt("%.1f", px(p.concurrency)) + "\" y=\"" + fmt("%.1f", kTop + kPanelH + 16) +
         "\" font-size=\"11\" text-anchor=\"middle\">" + fmt("%g", p.concurrency) + "</text>\n";
  }
  s += "<text x=\"" + fmt("%.1f", x0 + kPanelW / 2) + "\" y=\"" + fmt("%.1f", kTop + kPanelH + 34) +
       "\" font-size=\"12\" text-anchor=\"middle\">concurrency</text>\n";
  s += "<text x=\"" + fmt("%.1f", x0 - 48) + "\" y=\"" + fmt("%.1f", kTop + kPanelH / 2) +
       "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 " + fmt("%.1f", x0 - 48) + " " +
       fmt("%.1f", kTop + kPanelH / 2) + ")\">" + escape(unit) + "</text>\n";
  double legend_y = kTop + 14;
  for (const auto& se : series) {
    std::string pts;
    for (const auto& p : points) pts += fmt("%.1f", px(p.concurrency)) + "," + fmt("%.1f", py(se.value(p))) + " ";
    s += "<polyline fill=\"none\" stroke=\"" + std::string(se.colour) + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    for (const auto& p : points) {
      s += "<circle cx=\"" + fmt("%.1f", px(p.concurrency)) + "\" cy=\"" + fmt("%.1f", py(se.value(p))) + "\" r=\"3\" fill=\"" +
           se.colour + "\"/>\n";
    }
    s += "<text x=\"" + fmt("%.1f", x0 + 10) + "\" y=\"" + fmt("%.1f", legend_y) + "\" font-size=\"11\" fill=\"" + se.colour +
         "\">" + se.name + "</text>\n";
    legend_y += 14;
  }
  return s;
}

}  // namespace

std::string sweep_svg(const std::string& title, const std::vector<SweepPoint>& points) {
  const double width = kLeft + 2 * kPanelW + kGap + 20, height = kTop + kPanelH + 50;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", width) + "\" height=\"" +
                  fmt("%.0f", height + 20) + "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt("%.1f", kLeft) + "\" y=\"16\" font-size=\"15\" font-weight=\"bold\">" + escape(title) + "</text>\n";
  s += panel(kLeft, "latency", "ms", points,
             {{"TTFT p50", "#2b6cb0", [](const SweepPoint& p) { return p.ttft_p50_ms; }},
              {"TTFT p99", "#90cdf4", [](const SweepPoint& p) { return p.ttft_p99_ms; }},
              {"TPOT p50", "#c05621", [](const SweepPoint& p) { return p.tpot_p50_ms; }}});
  s += panel(kLeft + kPanelW + kGap, "output throughput", "tokens/s", points,
             {{"output tok/s", "#2f855a", [](const SweepPoint& p) { return p.output_throughput; }}});
  s += "</svg>\n";
  return s;
}

}  // namespace deepinfer::cli
