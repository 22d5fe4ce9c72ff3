#include "meshtrain/telemetry/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace meshtrain::telemetry::svg {

Ticks nice_ticks(double lo, double hi, int target, bool integer) {
  if (!(hi > lo)) {
    const double pad = std::abs(lo) > 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  if (integer) step = std::max(1.0, std::round(step));
  Ticks t;
  t.step = step;
  t.lo = std::floor(lo / step + 1e-9) * step;
  t.hi = std::ceil(hi / step - 1e-9) * step;
  for (double v = t.lo; v <= t.hi + step * 1e-6; v += step) t.at.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  if (std::abs(step / std::pow(10.0, -t.decimals) - std::round(step / std::pow(10.0, -t.decimals))) > 1e-6)
    ++t.decimals;  // 2.5 × 10^k
  return t;
}

namespace {

std::string fmt_tick(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

}  // namespace

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

void axes(std::string& s, const Panel& p, const Ticks& xt, const Ticks& yt, const std::string& xlabel,
          const std::string& ylabel) {
  s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fbfbfd\"/>\n",
                   p.x, p.y, p.w, p.h);
  for (double v : yt.at) {
    const double y = p.py(v);
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e3e3e8\"/>\n",
                     p.x, y, p.x + p.w, y);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"12\" "
                     "fill=\"#555\">{}</text>\n", p.x - 8, y + 4, fmt_tick(v, yt.decimals));
  }
  for (double v : xt.at) {
    const double x = p.px(v);
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eeeef2\"/>\n",
                     x, p.y, x, p.y + p.h);
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#888\"/>\n",
                     x, p.y + p.h, x, p.y + p.h + 5);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"12\" "
                     "fill=\"#555\">{}</text>\n", x, p.y + p.h + 19, fmt_tick(v, xt.decimals));
  }
  s += fmt::format("<path d=\"M{:.1f},{:.1f} V{:.1f} H{:.1f}\" fill=\"none\" stroke=\"#888\"/>\n",
                   p.x, p.y, p.y + p.h, p.x + p.w);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"13\" "
                   "fill=\"#333\">{}</text>\n", p.x + p.w / 2, p.y + p.h + 40, esc(xlabel));
  s += fmt::format("<text transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\" "
                   "font-size=\"13\" fill=\"#333\">{}</text>\n", p.x - 52, p.y + p.h / 2, esc(ylabel));
}

std::string points(const Panel& p, const std::vector<std::pair<double, double>>& xy) {
  std::string s;
  for (const auto& [x, y] : xy) s += fmt::format("{:.1f},{:.1f} ", p.px(x), p.py(y));
  if (!s.empty()) s.pop_back();
  return s;
}

void legend(std::string& s, double x, double y, const std::vector<LegendItem>& items, bool boxed) {
  double w = 0;
  for (const auto& it : items) w += 34 + 7.0 * it.label.size() + 16;
  if (boxed)
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"24\" rx=\"4\" "
                     "fill=\"white\" fill-opacity=\"0.9\" stroke=\"#ddd\"/>\n", x - 8, y - 16, w);
  for (const auto& it : items) {
    switch (it.kind) {
      case 'r':
        s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"12\" rx=\"2\" "
                         "fill=\"{}\"/>\n", x + 6, y - 10, it.color);
        break;
      case 'd':
        s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
                         "stroke-width=\"2\" stroke-dasharray=\"5,3\"/>\n", x, y - 4, x + 26, y - 4, it.color);
        break;
      default:
        s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
                         "stroke-width=\"{}\"{}/>\n", x, y - 4, x + 26, y - 4, it.color,
                         it.kind == 'f' ? 1.2 : 2.2, it.kind == 'f' ? " stroke-opacity=\"0.4\"" : "");
        if (it.kind == 'o')
          s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"white\" stroke=\"{}\" "
                           "stroke-width=\"2\"/>\n", x + 13, y - 4, it.color);
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12.5\" fill=\"#333\">{}</text>\n",
                     x + 32, y, esc(it.label));
    x += 34 + 7.0 * it.label.size() + 16;
  }
}

}  // namespace meshtrain::telemetry::svg
