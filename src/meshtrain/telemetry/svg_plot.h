// The SVG drawing primitives of `meshtrain report` (telemetry/report.h): nice
// axis ticks, a plot panel's data-to-pixel mapping, axes with grid lines and
// labels, polyline points, a legend, text escaping. Hand-written SVG text,
// no dependencies.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::telemetry::svg {

inline constexpr const char* kFont = "Helvetica, Arial, sans-serif";

struct Ticks {
  double lo, hi, step;
  std::vector<double> at;
  int decimals;
};

// "Nice" ticks (1, 2, 5 x 10^k) covering [lo, hi] with about `target` intervals.
Ticks nice_ticks(double lo, double hi, int target, bool integer = false);

// XML-escaped text.
std::string esc(const std::string& s);

struct Panel {
  double x, y, w, h;  // plot area in pixels
  double x0, x1, y0, y1;  // data range
  double px(double v) const { return x + (v - x0) / (x1 - x0) * w; }
  double py(double v) const { return y + h - (v - y0) / (y1 - y0) * h; }
};

// The panel's background, grid lines, tick labels and axis labels.
void axes(std::string& s, const Panel& p, const Ticks& xt, const Ticks& yt, const std::string& xlabel,
          const std::string& ylabel);

// A polyline's points attribute for data (x, y) pairs.
std::string points(const Panel& p, const std::vector<std::pair<double, double>>& xy);

// Legend entries: kind 'l' line, 'd' dashed line, 'o' line with dot, 'r'
// filled square, 'f' faint line.
struct LegendItem {
  std::string label, color;
  char kind;
};

// One row of entries from (x, y), in a box when `boxed`.
void legend(std::string& s, double x, double y, const std::vector<LegendItem>& items, bool boxed);

}  // namespace meshtrain::telemetry::svg
