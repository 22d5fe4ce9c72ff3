#include "meshtrain/telemetry/run_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace meshtrain::telemetry {

namespace {

std::string row(const char* name, double med_s, double mean_s, double step_mean_s) {
  const double pct = step_mean_s > 0 ? 100.0 * mean_s / step_mean_s : 0.0;
  return fmt::format("  {:<16} {:>11.3f} {:>11.3f} {:>9.1f}%\n", name, med_s * 1e3, mean_s * 1e3, pct);
}

double mean_of(const std::vector<double>& v, size_t from) {
  if (v.size() <= from) return 0;
  double s = 0;
  for (size_t i = from; i < v.size(); ++i) s += v[i];
  return s / (v.size() - from);
}

}  // namespace

size_t first_steady_step(size_t n) { return n >= 3 ? 1 : 0; }

std::string breakdown_table(const BreakdownStats& s, const std::string& title) {
  const StepBreakdown& md = s.median;
  const StepBreakdown& mn = s.mean;
  std::string t = title + "\n";
  t += fmt::format("  {:<16} {:>11} {:>11} {:>10}\n", "phase", "median ms", "mean ms", "% of step");
  t += row("data wait", md.data_wait_s, mn.data_wait_s, mn.step_s);
  // A pipeline stage runs its forwards and backwards interleaved: one row.
  if (mn.pp_wait_s > 0) {
    t += row("fwd + bwd", md.forward_s, mn.forward_s, mn.step_s);
    t += row("pipeline wait", md.pp_wait_s, mn.pp_wait_s, mn.step_s);
  } else {
    t += row("forward", md.forward_s, mn.forward_s, mn.step_s);
    t += row("backward", md.backward_s, mn.backward_s, mn.step_s);
  }
  t += row("optimizer", md.optimizer_s, mn.optimizer_s, mn.step_s);
  t += row("comm exposed", md.comm_exposed_s, mn.comm_exposed_s, mn.step_s);
  if (mn.comm_tp_s > 0) {
    t += row("  of it dp", md.comm_exposed_s - md.comm_tp_s, mn.comm_exposed_s - mn.comm_tp_s, mn.step_s);
    t += row("  of it tp", md.comm_tp_s, mn.comm_tp_s, mn.step_s);
  }
  // "other" from the means is exact (means are additive); its median is the
  // median step minus the median parts, shown for orientation.
  t += row("other", md.other_s(), mn.other_s(), mn.step_s);
  t += fmt::format("  {:-<16} {:->11} {:->11} {:->10}\n", "", "", "", "");
  t += row("step", md.step_s, mn.step_s, mn.step_s);
  if (mn.comm_total_s > 0) {
    t += fmt::format("  {:<16} {:>11.3f} {:>11.3f}  ({:.0f}% hidden behind compute)\n",
                     "comm total", md.comm_total_s * 1e3, mn.comm_total_s * 1e3,
                     100.0 * mn.comm_overlap());
  }
  return t;
}

void RunSummary::add(const StepTelemetry& t) {
  times_.push_back(t.time);
  per_sample_ = t.per_sample;
  tokens_per_s_.push_back(t.tokens_per_s());
  samples_per_s_.push_back(t.samples_per_s());
  if (t.flops_per_token > 0) tflops_.push_back(t.model_flops_per_s() / 1e12);
  if (t.mfu() >= 0) mfu_.push_back(t.mfu());
  if (!t.skipped && std::isfinite(t.loss) && (times_.size() == 1 || t.loss < best_loss_)) {
    best_loss_ = t.loss;
    best_step_ = t.step;
  }
  last_loss_ = t.loss;
  last_step_ = t.step;
  if (t.val_loss) {
    last_val_ = t.val_loss;
    if (!best_val_ || *t.val_loss < *best_val_) {
      best_val_ = t.val_loss;
      best_val_step_ = t.step;
    }
  }
  peak_mem_bytes_ = std::max(peak_mem_bytes_, t.peak_mem_bytes);
  tokens_ += t.tokens;
  samples_ += t.samples;
  devices_ = std::max(1, t.devices);
  if (t.price_per_device_hour > 0) price_ = t.price_per_device_hour;
  if (t.straggler && t.straggler->ranks > 0) {
    const auto& s = *t.straggler;
    if (slowest_count_.size() < static_cast<size_t>(s.ranks)) slowest_count_.resize(s.ranks, 0);
    ++slowest_count_[s.slowest_rank];
    lag_sum_s_ += s.lag_s;
    lag_max_s_ = std::max(lag_max_s_, s.lag_s);
    ++straggler_steps_;
  }
}

BreakdownStats RunSummary::breakdown() const {
  const size_t from = first_steady_step(times_.size());
  return aggregate(std::vector<StepBreakdown>(times_.begin() + from, times_.end()));
}

std::string RunSummary::text() const {
  if (times_.empty()) return "no steps recorded\n";
  const size_t from = first_steady_step(times_.size());
  const BreakdownStats b = breakdown();
  std::string title = from > 0 ? fmt::format("time per step (steps {}..{}; the first is warm-up):",
                                             from + 1, times_.size())
                               : fmt::format("time per step ({} steps):", times_.size());
  std::string t = breakdown_table(b, title);
  double total_s = 0;
  for (const auto& x : times_) total_s += x.step_s;
  const double samples_per_s = median_of({samples_per_s_.begin() + from, samples_per_s_.end()});
  if (per_sample_)
    t += fmt::format("throughput: {:.1f} samples/s (median over steady steps)", samples_per_s);
  else
    t += fmt::format("throughput: {:.0f} tokens/s, {:.1f} samples/s (median over steady steps)",
                     median_of({tokens_per_s_.begin() + from, tokens_per_s_.end()}), samples_per_s);
  if (!tflops_.empty())
    t += fmt::format(", {:.3f} model TFLOP/s", median_of({tflops_.begin() + std::min(from, tflops_.size()), tflops_.end()}));
  if (!mfu_.empty())
    t += fmt::format(", MFU {:.1f}%", 100.0 * median_of({mfu_.begin() + std::min(from, mfu_.size()), mfu_.end()}));
  t += "\n";
  if (peak_mem_bytes_ > 0) t += fmt::format("memory: peak {:.1f} MB per rank\n", peak_mem_bytes_ / 1e6);
  if (price_ > 0 && tokens_ > 0) {
    const double usd = price_ * devices_ * total_s / 3600.0;
    t += fmt::format("cost: ${:.4f} per million tokens, ${:.4f} per million samples "
                     "(${:.2f}/device-hour x {} device(s); this run ${:.4f})\n",
                     usd / tokens_ * 1e6, samples_ > 0 ? usd / samples_ * 1e6 : 0.0, price_,
                     devices_, usd);
  }
  if (straggler_steps_ > 0) {
    const auto it = std::max_element(slowest_count_.begin(), slowest_count_.end());
    t += fmt::format("stragglers: rank {} was slowest in {} of {} steps; lag vs median rank "
                     "mean {:.2f} ms, max {:.2f} ms\n",
                     it - slowest_count_.begin(), *it, straggler_steps_,
                     lag_sum_s_ / straggler_steps_ * 1e3, lag_max_s_ * 1e3);
  }
  t += fmt::format("loss: final {:.4f} (step {}), best {:.4f} (step {})", last_loss_, last_step_,
                   best_loss_, best_step_);
  if (last_val_)
    t += fmt::format("; val final {:.4f}, best {:.4f} (step {})", *last_val_, *best_val_, best_val_step_);
  t += "\n";
  return t;
}

nlohmann::json RunSummary::to_json() const {
  const BreakdownStats b = breakdown();
  const size_t from = first_steady_step(times_.size());
  auto ms = [](const StepBreakdown& x) {
    return nlohmann::json{{"step_ms", x.step_s * 1e3}, {"data_ms", x.data_wait_s * 1e3},
                          {"forward_ms", x.forward_s * 1e3}, {"backward_ms", x.backward_s * 1e3},
                          {"optimizer_ms", x.optimizer_s * 1e3},
                          {"comm_exposed_ms", x.comm_exposed_s * 1e3},
                          {"comm_total_ms", x.comm_total_s * 1e3}, {"other_ms", x.other_s() * 1e3}};
  };
  nlohmann::json j = {{"steps", steps()},
                      {"steady_from_step", from + 1},
                      {"median", ms(b.median)},
                      {"mean", ms(b.mean)},
                      {"tokens_per_s", mean_of(tokens_per_s_, from)},
                      {"final_loss", last_loss_},
                      {"best_loss", best_loss_}};
  if (last_val_) j["final_val_loss"] = *last_val_;
  if (best_val_) j["best_val_loss"] = *best_val_;
  if (!mfu_.empty()) j["mfu"] = mean_of(mfu_, std::min(from, mfu_.size()));
  if (peak_mem_bytes_ > 0) j["peak_mem_mb"] = peak_mem_bytes_ / 1e6;
  return j;
}

}  // namespace meshtrain::telemetry
