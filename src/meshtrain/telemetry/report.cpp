#include "meshtrain/telemetry/report.h"
#include "meshtrain/telemetry/run_attempts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/run_summary.h"
#include "meshtrain/telemetry/svg_plot.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain::telemetry {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- reading

namespace {

std::optional<double> num(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail("{}: \"{}\" is not a number", where, key);
  return it->get<double>();
}

}  // namespace

std::vector<MetricsRecord> read_metrics(const std::string& path) {
  std::ifstream f(path);
  MT_CHECK(f.good(), "cannot open metrics file {}", path);
  std::vector<MetricsRecord> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not a JSON record ({})", where, e.what());
    }
    if (!j.is_object()) fail("{}: expected a JSON object per line", where);
    if (!j.contains("step")) continue;  // another record kind
    if (!j["step"].is_number_integer()) fail("{}: \"step\" is not an integer", where);
    MetricsRecord r;
    r.step = j["step"].get<int64_t>();
    r.loss = num(j, "loss", where);
    r.val_loss = num(j, "val_loss", where);
    r.lr = num(j, "lr", where);
    r.tokens_per_s = num(j, "tokens_per_s", where);
    r.samples_per_s = num(j, "samples_per_s", where);
    r.mfu = num(j, "mfu", where);
    r.model_tflops = num(j, "model_tflops", where);
    r.peak_mem_mb = num(j, "peak_mem_mb", where);
    r.usd_per_million_tokens = num(j, "usd_per_million_tokens", where);
    r.usd_per_million_samples = num(j, "usd_per_million_samples", where);
    if (j.contains("straggler") && j["straggler"].is_object())
      r.straggler_lag_ms = num(j["straggler"], "lag_ms", where);
    auto ms = [&](const char* key) { return num(j, key, where).value_or(0.0) / 1e3; };
    if (auto s = num(j, "step_ms", where)) {
      r.has_time = true;
      r.time.step_s = *s / 1e3;
    }
    r.time.data_wait_s = ms("data_ms");
    r.time.forward_s = ms("forward_ms");
    r.time.backward_s = ms("backward_ms");
    r.time.optimizer_s = ms("optimizer_ms");
    r.time.comm_exposed_s = ms("comm_exposed_ms");
    r.time.comm_total_s = ms("comm_total_ms");
    r.has_comm = j.contains("comm_total_ms") || j.contains("comm_exposed_ms");
    r.tokens = static_cast<int64_t>(num(j, "tokens", where).value_or(0));
    if (r.tokens == 0 && r.tokens_per_s && r.has_time)  // older records: derive from the rate
      r.tokens = std::llround(*r.tokens_per_s * r.time.step_s);
    r.samples = static_cast<int64_t>(num(j, "samples", where).value_or(0));
    r.devices = static_cast<int>(num(j, "devices", where).value_or(0));
    for (const auto& [key, value] : j.items())
      if (key.rfind("val_", 0) == 0 && key != "val_loss" && value.is_number())
        r.val_measures.emplace_back(key.substr(4), value.get<double>());
    out.push_back(std::move(r));
  }
  MT_CHECK(!out.empty(), "{}: no step records (is this a meshtrain metrics file?)", path);
  return out;
}

// ---------------------------------------------------------------- text

namespace {

std::vector<double> collect(const std::vector<MetricsRecord>& recs, size_t from,
                            std::optional<double> MetricsRecord::*m) {
  std::vector<double> v;
  for (size_t i = from; i < recs.size(); ++i)
    if (recs[i].*m) v.push_back(*(recs[i].*m));
  return v;
}

// Each evaluation measure's (step, value) points, measures in first-seen order.
struct MeasureSeries {
  std::string name;
  std::vector<std::pair<double, double>> xy;
};

std::vector<MeasureSeries> val_measure_series(const std::vector<MetricsRecord>& recs) {
  std::vector<MeasureSeries> out;
  for (const auto& r : recs)
    for (const auto& [name, value] : r.val_measures) {
      if (!std::isfinite(value)) continue;
      auto it = std::find_if(out.begin(), out.end(), [&](const MeasureSeries& m) { return m.name == name; });
      if (it == out.end()) it = out.insert(out.end(), MeasureSeries{name, {}});
      it->xy.emplace_back(static_cast<double>(r.step), value);
    }
  return out;
}

}  // namespace

std::string report_text(const std::vector<MetricsRecord>& all, const ReportOptions& o) {
  const RunAttempts at = split_attempts(all, o.restart_log);
  const std::vector<MetricsRecord>& recs = at.final_records;  // a step's last record
  std::string t = fmt::format("{} step records (steps {}..{})\n", all.size(), recs.front().step,
                              recs.back().step);
  if (!at.restarts.empty()) {
    t += fmt::format("{} restart(s): {} steps, {} of them run again ({} records in "
                     "all)\n", at.restarts.size(), at.new_steps, at.rerun_steps, all.size());
    for (const RestartMark& m : at.restarts) t += "  " + describe(m) + "\n";
  }
  t += "\n";
  std::vector<StepBreakdown> times;
  for (const auto& r : recs)
    if (r.has_time) times.push_back(r.time);
  const size_t from = first_steady_step(times.size());
  const size_t rfrom = first_steady_step(recs.size());
  if (!times.empty()) {
    const BreakdownStats b = aggregate({times.begin() + from, times.end()});
    t += breakdown_table(b, from > 0 ? fmt::format("time per step ({} steps; the first is warm-up "
                                                   "and left out):", times.size() - from)
                                     : fmt::format("time per step ({} steps):", times.size()));
    if (b.mean.other_s() < -(kBreakdownRelTol * b.mean.step_s + kBreakdownAbsTolS))
      t += "  warning: the parts exceed the step time; the phases overlap or were mis-timed\n";
    double total_s = 0;  // every record: a step run again cost its time again
    int64_t tokens = 0, samples = 0;
    int devices = o.devices;
    for (const auto& r : all) {
      total_s += r.time.step_s;
      tokens += r.tokens;
      samples += r.samples;
      if (devices == 0) devices = r.devices;
    }
    devices = std::max(devices, 1);
    t += "\n";
    if (o.price_per_device_hour > 0) {
      const double usd = o.price_per_device_hour * devices * total_s / 3600.0;
      if (tokens > 0)
        t += fmt::format("cost: ${:.4f} per million tokens{} (${:.2f}/device-hour x {} device(s); "
                         "run total ${:.4f})\n", usd / tokens * 1e6,
                         samples > 0 ? fmt::format(", ${:.4f} per million samples", usd / samples * 1e6)
                                     : std::string(),
                         o.price_per_device_hour, devices, usd);
      else
        t += fmt::format("cost: run total ${:.4f} (${:.2f}/device-hour x {} device(s); the records "
                         "carry no token counts)\n", usd, o.price_per_device_hour, devices);
    }
  }
  auto line = [&](const char* label, std::optional<double> MetricsRecord::*m, const char* fmtstr,
                  double scale) {
    std::vector<double> v = collect(recs, rfrom, m);
    if (v.empty()) return;
    t += fmt::format("{:<24} ", label);
    t += fmt::format(fmt::runtime(fmtstr), median_of(v) * scale);
    t += "\n";
  };
  line("tokens/s (median)", &MetricsRecord::tokens_per_s, "{:.0f}", 1);
  line("samples/s (median)", &MetricsRecord::samples_per_s, "{:.1f}", 1);
  line("model TFLOP/s (median)", &MetricsRecord::model_tflops, "{:.3f}", 1);
  line("MFU (median)", &MetricsRecord::mfu, "{:.1f}%", 100);
  line("peak memory MB (max)", &MetricsRecord::peak_mem_mb, "{:.1f}", 1);
  if (o.price_per_device_hour <= 0) {
    line("$ per million tokens", &MetricsRecord::usd_per_million_tokens, "{:.4f}", 1);
    line("$ per million samples", &MetricsRecord::usd_per_million_samples, "{:.4f}", 1);
  }
  line("straggler lag ms (med.)", &MetricsRecord::straggler_lag_ms, "{:.2f}", 1);
  // Losses.
  const MetricsRecord* best = nullptr;
  const MetricsRecord* last = nullptr;
  const MetricsRecord* best_val = nullptr;
  const MetricsRecord* last_val = nullptr;
  for (const auto& r : recs) {
    if (r.loss && std::isfinite(*r.loss)) {
      last = &r;
      if (!best || *r.loss < *best->loss) best = &r;
    }
    if (r.val_loss && std::isfinite(*r.val_loss)) {
      last_val = &r;
      if (!best_val || *r.val_loss < *best_val->val_loss) best_val = &r;
    }
  }
  if (last)
    t += fmt::format("{:<24} final {:.4f} (step {}), best {:.4f} (step {})\n", "train loss",
                     *last->loss, last->step, *best->loss, best->step);
  if (last_val)
    t += fmt::format("{:<24} final {:.4f} (step {}), best {:.4f} (step {})\n", "val loss",
                     *last_val->val_loss, last_val->step, *best_val->val_loss, best_val->step);
  for (const MeasureSeries& m : val_measure_series(recs)) {
    const auto best_at = std::max_element(m.xy.begin(), m.xy.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
    t += fmt::format("{:<24} final {:.2f}% (step {:.0f}), best {:.2f}% (step {:.0f})\n",
                     "val " + m.name, 100 * m.xy.back().second, m.xy.back().first,
                     100 * best_at->second, best_at->first);
  }
  return t;
}

// ---------------------------------------------------------------- picture

namespace {

using namespace svg;

constexpr const char* kTrain = "#3b6fb6";
constexpr const char* kVal = "#d9534f";

struct Part {
  const char* label;
  const char* color;
  double StepBreakdown::*m;  // nullptr: other
};
const Part kParts[] = {
    {"data wait", "#9d9da6", &StepBreakdown::data_wait_s},
    {"forward", "#4e79a7", &StepBreakdown::forward_s},
    {"backward", "#f28e2b", &StepBreakdown::backward_s},
    {"optimizer", "#59a14f", &StepBreakdown::optimizer_s},
    {"comm exposed", "#e15759", &StepBreakdown::comm_exposed_s},
    {"other", "#d4cfc9", nullptr},
};

// A dashed line after the last step each attempt recorded before its
// restart, labelled with the cause (the loss panel) and the steps run again.
void restart_lines(std::string& s, const Panel& p, const std::vector<RestartMark>& marks, bool label) {
  for (const RestartMark& m : marks) {
    if (m.mark_step() < 0) continue;
    const double x = p.px(static_cast<double>(m.mark_step()) + 0.5);
    if (x < p.x || x > p.x + p.w) continue;
    s += fmt::format("<line class=\"restart\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                     "stroke=\"#c0392b\" stroke-width=\"1.6\" stroke-dasharray=\"6,4\"><title>{}</title></line>\n",
                     x, p.y, x, p.y + p.h, esc(describe(m)));
    if (!label) continue;
    const std::string text = fmt::format("restart {}: {}{}{}", m.number, m.cause.empty() ? "resumed" : m.cause,
                                         m.rank >= 0 ? fmt::format(", rank {}", m.rank) : "",
                                         m.resumed_step >= 0 ? fmt::format(" ({} run again)", m.steps_lost()) : "");
    s += fmt::format("<text class=\"restart-label\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" "
                     "fill=\"#c0392b\" transform=\"rotate(-90 {:.1f} {:.1f})\">{}</text>\n",
                     x - 4, p.y + p.h - 6, x - 4, p.y + p.h - 6, esc(text));
  }
}

// The evaluation's measures in percent, one line with dots per measure,
// over the loss panel's steps (`p` gives the place and the x range).
void measure_panel(std::string& s, const std::vector<MeasureSeries>& measures, Panel p, const Ticks& xt,
                   const std::vector<RestartMark>& restarts) {
  static const char* const kColors[] = {"#2a9d8f", "#8e6bbf", "#e9a23b", "#5b8c5a"};
  double lo = INFINITY, hi = -INFINITY;
  for (const MeasureSeries& m : measures)
    for (const auto& [x, v] : m.xy) lo = std::min(lo, 100 * v), hi = std::max(hi, 100 * v);
  const Ticks yt = nice_ticks(std::max(0.0, lo - 2), std::min(100.0, hi + 2), 5);
  p.y0 = yt.lo, p.y1 = yt.hi;
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"16\" font-weight=\"bold\" fill=\"#333\">"
                   "Validation measures</text>\n", p.x - 50, p.y - 20);
  axes(s, p, xt, yt, "step", "percent");
  std::vector<LegendItem> items;
  for (size_t i = 0; i < measures.size(); ++i) {
    const MeasureSeries& m = measures[i];
    const char* color = kColors[i % std::size(kColors)];
    std::vector<std::pair<double, double>> pct;
    for (const auto& [x, v] : m.xy) pct.emplace_back(x, 100 * v);
    s += fmt::format("<polyline class=\"val-{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
                     "stroke-width=\"2.2\" stroke-linejoin=\"round\"/>\n", esc(m.name), points(p, pct), color);
    if (pct.size() <= 60)
      for (const auto& [x, y] : pct)
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"white\" stroke=\"{}\" "
                         "stroke-width=\"2\"><title>step {:.0f}: {} {:.2f}%</title></circle>\n",
                         p.px(x), p.py(y), color, x, esc(m.name), y);
    items.push_back({fmt::format("val {} (final {:.2f}%)", m.name, pct.back().second), color, 'o'});
  }
  restart_lines(s, p, restarts, false);
  double lw = 0;
  for (const auto& it : items) lw += 34 + 7.0 * it.label.size() + 16;
  legend(s, p.x + p.w - lw - 4, p.y + p.h - 12, items, true);
}

}  // namespace

std::string report_svg(const std::vector<MetricsRecord>& all, const ReportOptions& o) {
  const RunAttempts at = split_attempts(all, o.restart_log);
  const std::vector<MetricsRecord>& recs = at.final_records;  // a step's last record
  const double W = 960, L = 84, R = 36;
  const double pw = W - L - R;
  const double loss_top = 124, loss_h = 290;
  // The evaluation's measures (a classifier's accuracy) get a panel of their own.
  const std::vector<MeasureSeries> measures = val_measure_series(recs);
  const double measure_top = loss_top + loss_h + 100, measure_h = measures.empty() ? 0 : 220;
  const double time_top = measure_top + measure_h + (measures.empty() ? 18 : 118), time_h = 250;
  const double H = time_top + time_h + 62;
  std::string s;
  s += fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
                   "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"{}\">\n", W, H, W, H, kFont);
  s += fmt::format("<rect width=\"{:.0f}\" height=\"{:.0f}\" fill=\"white\"/>\n", W, H);

  // Header: title and the numbers a person asks first.
  std::vector<StepBreakdown> times;
  for (const auto& r : recs)
    if (r.has_time) times.push_back(r.time);
  const size_t tfrom = first_steady_step(times.size());
  const BreakdownStats bs = aggregate({times.begin() + tfrom, times.end()});
  std::vector<double> tps;
  for (size_t i = first_steady_step(recs.size()); i < recs.size(); ++i)
    if (recs[i].tokens_per_s) tps.push_back(*recs[i].tokens_per_s);
  std::string sub = fmt::format("{} steps", recs.size());
  if (!at.restarts.empty())
    sub += fmt::format(" · {} restart(s), {} steps run again", at.restarts.size(), at.rerun_steps);
  if (!times.empty()) sub += fmt::format(" · median step {:.1f} ms", bs.median.step_s * 1e3);
  if (!tps.empty()) sub += fmt::format(" · {:.0f} tokens/s", median_of(tps));
  const MetricsRecord* last_loss = nullptr;
  const MetricsRecord* last_val = nullptr;
  for (const auto& r : recs) {
    if (r.loss && std::isfinite(*r.loss)) last_loss = &r;
    if (r.val_loss && std::isfinite(*r.val_loss)) last_val = &r;
  }
  if (last_loss) sub += fmt::format(" · final loss {:.4f}", *last_loss->loss);
  if (last_val) sub += fmt::format(" · val {:.4f}", *last_val->val_loss);
  s += fmt::format("<text x=\"{:.0f}\" y=\"38\" font-size=\"22\" font-weight=\"bold\" fill=\"#222\">{}</text>\n",
                   L - 50, esc(o.title.empty() ? std::string("meshtrain run report") : o.title));
  s += fmt::format("<text x=\"{:.0f}\" y=\"62\" font-size=\"14\" fill=\"#666\">{}</text>\n", L - 50, esc(sub));

  const double xmin = static_cast<double>(recs.front().step);
  double xmax = static_cast<double>(recs.back().step);
  for (const auto& r : recs) xmax = std::max(xmax, static_cast<double>(r.step));
  const Ticks xt = nice_ticks(xmin, xmax, 10, true);

  // ---- Loss panel.
  {
    std::vector<std::pair<double, double>> train, val, smooth;
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& r : recs) {
      if (r.loss && std::isfinite(*r.loss)) {
        train.emplace_back(r.step, *r.loss);
        lo = std::min(lo, *r.loss);
        hi = std::max(hi, *r.loss);
      }
      if (r.val_loss && std::isfinite(*r.val_loss)) {
        val.emplace_back(r.step, *r.val_loss);
        lo = std::min(lo, *r.val_loss);
        hi = std::max(hi, *r.val_loss);
      }
    }
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"16\" font-weight=\"bold\" fill=\"#333\">"
                     "Loss</text>\n", L - 50, loss_top - 20);
    if (train.empty() && val.empty()) {
      lo = 0;
      hi = 1;
    }
    const Ticks yt = nice_ticks(lo, hi, 6);
    Panel p{L, loss_top, pw, loss_h, xt.lo, xt.hi, yt.lo, yt.hi};
    axes(s, p, xt, yt, "step", "loss");
    // Exponential moving average, debiased like TensorBoard's smoothing, with
    // a window of about 2% of the run (raw values shown faintly behind it).
    const double alpha = std::clamp(1.0 - 1.0 / std::max(1.0, train.size() / 50.0), 0.0, 0.98);
    double ema = 0, wsum = 0;
    for (const auto& [x, y] : train) {
      ema = alpha * ema + (1 - alpha) * y;
      wsum = alpha * wsum + (1 - alpha);
      smooth.emplace_back(x, ema / wsum);
    }
    std::vector<LegendItem> items;
    if (!train.empty()) {
      const bool show_raw = alpha > 0.3;
      if (show_raw) {
        s += fmt::format("<polyline class=\"train-loss-raw\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
                         "stroke-width=\"1.2\" stroke-opacity=\"0.35\" stroke-linejoin=\"round\"/>\n",
                         points(p, train), kTrain);
        items.push_back({"train (raw)", kTrain, 'f'});
      }
      s += fmt::format("<polyline class=\"train-loss\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
                       "stroke-width=\"2.4\" stroke-linejoin=\"round\" stroke-linecap=\"round\"/>\n",
                       points(p, show_raw ? smooth : train), kTrain);
      items.push_back({show_raw ? "train (smoothed)" : "train", kTrain, 'l'});
    }
    if (!val.empty()) {
      s += fmt::format("<polyline class=\"val-loss\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
                       "stroke-width=\"2.2\" stroke-linejoin=\"round\"/>\n", points(p, val), kVal);
      if (val.size() <= 60)
        for (const auto& [x, y] : val)
          s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"white\" stroke=\"{}\" "
                           "stroke-width=\"2\"/>\n", p.px(x), p.py(y), kVal);
      items.push_back({"validation", kVal, 'o'});
    }
    restart_lines(s, p, at.restarts, true);
    if (!items.empty()) {
      double lw = 0;
      for (const auto& it : items) lw += 34 + 7.0 * it.label.size() + 16;
      legend(s, p.x + p.w - lw - 4, p.y + 24, items, true);
    } else {
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"14\" "
                       "fill=\"#999\">no loss values in the records</text>\n", p.x + p.w / 2, p.y + p.h / 2);
    }
  }

  if (!measures.empty()) measure_panel(s, measures, Panel{L, measure_top, pw, measure_h, xt.lo, xt.hi, 0, 1}, xt,
                                        at.restarts);

  // ---- Time breakdown panel: stacked bars, one per bin of steps (mean of the bin).
  {
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"16\" font-weight=\"bold\" fill=\"#333\">"
                     "Time per step</text>\n", L - 50, time_top - 50);
    std::vector<const MetricsRecord*> tr;
    bool has_comm = false;
    for (const auto& r : recs)
      if (r.has_time) {
        tr.push_back(&r);
        has_comm = has_comm || r.has_comm;
      }
    std::vector<LegendItem> items;
    for (const Part& pt : kParts) {
      if (pt.m == &StepBreakdown::comm_exposed_s && !has_comm) continue;
      items.push_back({pt.label, pt.color, 'r'});
    }
    if (has_comm) items.push_back({"comm total (overlapped)", "#222", 'd'});
    legend(s, L - 6, time_top - 22, items, false);
    const size_t n = tr.size();
    const size_t nb = std::min<size_t>(n, 80);
    struct Bin {
      double x0, x1;
      StepBreakdown mean;
      double total;
    };
    std::vector<Bin> bins;
    for (size_t b = 0; b < nb; ++b) {
      const size_t i0 = b * n / nb, i1 = (b + 1) * n / nb;
      Bin bin{};
      bin.x0 = static_cast<double>(tr[i0]->step) - 0.5;
      bin.x1 = static_cast<double>(tr[i1 - 1]->step) + 0.5;
      std::vector<StepBreakdown> v;
      for (size_t i = i0; i < i1; ++i) v.push_back(tr[i]->time);
      bin.mean = aggregate(v).mean;
      bin.total = std::max(bin.mean.step_s, bin.mean.parts_s()) * 1e3;
      bins.push_back(bin);
    }
    // Scale to the typical bar, not the warm-up outlier: bars past the top are
    // clipped and labelled with their height.
    std::vector<double> tot;
    for (const auto& b : bins) tot.push_back(b.total);
    std::sort(tot.begin(), tot.end());
    double ymax = tot.empty() ? 1.0 : tot.back();
    if (tot.size() >= 4) {
      const double p90 = tot[static_cast<size_t>(0.9 * (tot.size() - 1))];
      if (ymax > 1.6 * p90) ymax = 1.25 * p90;
    }
    for (const auto& b : bins) ymax = std::max(ymax, b.mean.comm_total_s * 1e3 * 1.02);
    const Ticks yt = nice_ticks(0, ymax > 0 ? ymax : 1.0, 5);
    const Ticks bxt = nice_ticks(bins.empty() ? xmin : bins.front().x0 + 0.5,
                                 bins.empty() ? xmax : bins.back().x1 - 0.5, 10, true);
    Panel p{L, time_top, pw, time_h, std::min(bxt.lo, bins.empty() ? bxt.lo : bins.front().x0),
            std::max(bxt.hi, bins.empty() ? bxt.hi : bins.back().x1), 0, yt.hi};
    axes(s, p, bxt, yt, n == nb ? "step" : fmt::format("step (each bar: mean of {:.0f} steps)",
                                                      static_cast<double>(n) / nb),
         "milliseconds");
    s += "<g class=\"time-breakdown\">\n";
    for (const auto& b : bins) {
      const double x0 = p.px(b.x0), x1 = p.px(b.x1);
      const double gap = std::min(2.0, (x1 - x0) * 0.15);
      double acc = 0;
      for (const Part& pt : kParts) {
        double v = (pt.m ? b.mean.*(pt.m) : std::max(0.0, b.mean.other_s())) * 1e3;
        if (v <= 0) continue;
        const double lo = std::min(acc, yt.hi), hi = std::min(acc + v, yt.hi);
        acc += v;
        if (hi <= lo) continue;
        s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
                         "<title>{}: {:.2f} ms</title></rect>\n", x0 + gap / 2, p.py(hi),
                         std::max(0.5, x1 - x0 - gap), p.py(lo) - p.py(hi), pt.color, pt.label, v);
      }
      if (acc > yt.hi) {
        // Beside the bar's left edge (or right edge near the right border), so
        // the label never covers the axis.
        const bool right = x0 > p.x + p.w - 80;
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"11\" "
                         "fill=\"#b00\">&#9650; {:.0f} ms</text>\n", right ? x1 - 2 : x0 + 2,
                         p.y + 13, right ? "end" : "start", acc);
      }
    }
    s += "</g>\n";
    if (has_comm) {
      std::vector<std::pair<double, double>> ct;
      for (const auto& b : bins) {
        ct.emplace_back(b.x0, b.mean.comm_total_s * 1e3);
        ct.emplace_back(b.x1, b.mean.comm_total_s * 1e3);
      }
      s += fmt::format("<polyline class=\"comm-total\" points=\"{}\" fill=\"none\" stroke=\"#222\" "
                       "stroke-width=\"1.8\" stroke-dasharray=\"5,3\"/>\n", points(p, ct));
    }
    restart_lines(s, p, at.restarts, false);
    if (bins.empty())
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"14\" "
                       "fill=\"#999\">no step times in the records</text>\n", p.x + p.w / 2, p.y + p.h / 2);
  }
  s += "</svg>\n";
  return s;
}

// ---------------------------------------------------------------- command

ReportResult write_report(const std::string& run_dir, ReportOptions o) {
  std::error_code ec;
  MT_CHECK(fs::is_directory(run_dir, ec), "run directory {} does not exist", run_dir);
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  MT_CHECK(fs::exists(metrics, ec), "{} not found (is {} a meshtrain run directory?)", metrics, run_dir);
  const std::vector<MetricsRecord> recs = read_metrics(metrics);
  const fs::path restarts = fs::path(run_dir) / "restarts.jsonl";
  if (o.restart_log.empty() && fs::exists(restarts, ec)) o.restart_log = restarts.string();
  if (o.title.empty()) {
    fs::path d = fs::path(run_dir);
    if (d.filename().empty()) d = d.parent_path();
    o.title = "meshtrain run " + d.filename().string();
  }
  ReportResult res;
  res.records = static_cast<int64_t>(recs.size());
  res.text = report_text(recs, o);
  res.svg_path = (fs::path(run_dir) / "report.svg").string();
  {
    std::ofstream f(res.svg_path, std::ios::trunc);
    MT_CHECK(f.good(), "cannot write {}", res.svg_path);
    f << report_svg(recs, o);
    MT_CHECK(f.good(), "cannot write {}", res.svg_path);
  }
  const int merged = merge_trace_dir(run_dir);
  if (merged > 0)
    res.text += fmt::format("trace: merged {} rank file(s) into {}\n", merged,
                            (fs::path(run_dir) / "trace.json").string());
  return res;
}

}  // namespace meshtrain::telemetry
