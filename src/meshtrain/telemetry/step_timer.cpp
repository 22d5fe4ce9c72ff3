#include "meshtrain/telemetry/step_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/progress.h"

namespace meshtrain::telemetry {

double StepTimer::now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void StepTimer::start() {
  b_ = StepBreakdown{};
  t0_ = last_ = now_s();
}

void StepTimer::add(Phase p, double s) {
  switch (p) {
    case Phase::DataWait: b_.data_wait_s += s; break;
    case Phase::Forward: b_.forward_s += s; break;
    case Phase::Backward: b_.backward_s += s; break;
    case Phase::Optimizer: b_.optimizer_s += s; break;
    case Phase::CommExposed: b_.comm_exposed_s += s; break;
  }
}

double StepTimer::lap(Phase p) {
  const double t = now_s();
  const double d = t - last_;
  last_ = t;
  add(p, d);
  return d;
}

void StepTimer::add_comm_total(double s) { b_.comm_total_s += s; }

StepBreakdown StepTimer::finish() {
  b_.step_s = now_s() - t0_;
  return b_;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  double hi = v[n / 2];
  if (n % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + n / 2);
  return 0.5 * (lo + hi);
}

BreakdownStats aggregate(const std::vector<StepBreakdown>& steps) {
  BreakdownStats s;
  s.steps = static_cast<int64_t>(steps.size());
  if (steps.empty()) return s;
  auto field = [&](double StepBreakdown::*m, double& med, double& mean) {
    std::vector<double> v;
    v.reserve(steps.size());
    double sum = 0;
    for (const auto& b : steps) {
      v.push_back(b.*m);
      sum += b.*m;
    }
    mean = sum / steps.size();
    med = median_of(std::move(v));
  };
  field(&StepBreakdown::data_wait_s, s.median.data_wait_s, s.mean.data_wait_s);
  field(&StepBreakdown::forward_s, s.median.forward_s, s.mean.forward_s);
  field(&StepBreakdown::backward_s, s.median.backward_s, s.mean.backward_s);
  field(&StepBreakdown::optimizer_s, s.median.optimizer_s, s.mean.optimizer_s);
  field(&StepBreakdown::comm_exposed_s, s.median.comm_exposed_s, s.mean.comm_exposed_s);
  field(&StepBreakdown::comm_total_s, s.median.comm_total_s, s.mean.comm_total_s);
  field(&StepBreakdown::comm_tp_s, s.median.comm_tp_s, s.mean.comm_tp_s);
  field(&StepBreakdown::pp_wait_s, s.median.pp_wait_s, s.mean.pp_wait_s);
  field(&StepBreakdown::step_s, s.median.step_s, s.mean.step_s);
  return s;
}

double model_flops_per_token(int64_t n_params_no_pos, int n_layer, int n_embd, int seq_len) {
  return 6.0 * static_cast<double>(n_params_no_pos) +
         6.0 * static_cast<double>(n_layer) * n_embd * seq_len;
}

double usd_per_million(double price_per_device_hour, int devices, double step_s, double items_per_step) {
  if (price_per_device_hour <= 0 || items_per_step <= 0) return -1;
  return price_per_device_hour * devices * (step_s / 3600.0) / items_per_step * 1e6;
}

std::string StragglerReport::describe() const {
  if (ranks == 0) return "no ranks";
  return fmt::format("rank {} slowest: {:.1f} ms, +{:.1f} ms (+{:.1f}%) vs median {:.1f} ms "
                     "(fastest rank {}: {:.1f} ms)",
                     slowest_rank, slowest_s * 1e3, lag_s * 1e3, lag_pct, median_s * 1e3,
                     fastest_rank, fastest_s * 1e3);
}

nlohmann::json StragglerReport::to_json() const {
  return {{"ranks", ranks}, {"slowest_rank", slowest_rank}, {"slowest_ms", slowest_s * 1e3},
          {"fastest_rank", fastest_rank}, {"fastest_ms", fastest_s * 1e3},
          {"median_ms", median_s * 1e3}, {"lag_ms", lag_s * 1e3}, {"lag_pct", lag_pct}};
}

StragglerReport straggler_report(const std::vector<double>& t) {
  StragglerReport r;
  r.ranks = static_cast<int>(t.size());
  if (t.empty()) return r;
  // Ties go to the lowest rank, so the report is deterministic.
  r.slowest_rank = static_cast<int>(std::max_element(t.begin(), t.end()) - t.begin());
  r.fastest_rank = static_cast<int>(std::min_element(t.begin(), t.end()) - t.begin());
  r.slowest_s = t[r.slowest_rank];
  r.fastest_s = t[r.fastest_rank];
  r.median_s = median_of(t);
  r.lag_s = r.slowest_s - r.median_s;
  r.lag_pct = r.median_s > 0 ? 100.0 * r.lag_s / r.median_s : 0.0;
  return r;
}

double StepTelemetry::mfu() const {
  if (peak_flops_per_device <= 0 || flops_per_token <= 0 || time.step_s <= 0) return -1;
  return model_flops_per_s() / (peak_flops_per_device * std::max(1, devices));
}

double StepTelemetry::usd_per_million_tokens() const {
  return usd_per_million(price_per_device_hour, std::max(1, devices), time.step_s, tokens);
}

double StepTelemetry::usd_per_million_samples() const {
  return usd_per_million(price_per_device_hour, std::max(1, devices), time.step_s, samples);
}

nlohmann::json StepTelemetry::to_json() const {
  nlohmann::json r = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"step_ms", time.step_s * 1e3},
                      {"data_ms", time.data_wait_s * 1e3},
                      {"forward_ms", time.forward_s * 1e3},
                      {"backward_ms", time.backward_s * 1e3},
                      {"optimizer_ms", time.optimizer_s * 1e3},
                      {"comm_exposed_ms", time.comm_exposed_s * 1e3},
                      {"comm_total_ms", time.comm_total_s * 1e3},
                      {"comm_tp_ms", time.comm_tp_s * 1e3},
                      {"pp_wait_ms", time.pp_wait_s * 1e3},
                      {"other_ms", time.other_s() * 1e3},
                      {"tokens", tokens},
                      {"samples", samples},
                      {"devices", devices},
                      {"tokens_per_s", tokens_per_s()},
                      {"samples_per_s", samples_per_s()},
                      {"skipped", skipped}};
  if (val_loss) r["val_loss"] = *val_loss;
  for (const auto& [name, value] : val_metrics) r["val_" + name] = value;
  if (flops_per_token > 0) r["model_tflops"] = model_flops_per_s() / 1e12;
  if (mfu() >= 0) r["mfu"] = mfu();
  if (peak_mem_bytes > 0) r["peak_mem_mb"] = peak_mem_bytes / 1e6;
  if (price_per_device_hour > 0) {
    r["usd_per_million_tokens"] = usd_per_million_tokens();
    r["usd_per_million_samples"] = usd_per_million_samples();
  }
  if (straggler) r["straggler"] = straggler->to_json();
  if (grad_wire_bytes >= 0) {
    r["grad_wire_bytes"] = grad_wire_bytes;
    r["grad_dense_bytes"] = grad_dense_bytes;
  }
  return r;
}

std::vector<std::pair<std::string, double>> StepTelemetry::scalars() const {
  std::vector<std::pair<std::string, double>> s = {
      {"train/loss", loss},
      {"train/lr", lr},
      {"train/grad_norm", grad_norm},
      {"time/step_ms", time.step_s * 1e3},
      {"time/data_wait_ms", time.data_wait_s * 1e3},
      {"time/forward_ms", time.forward_s * 1e3},
      {"time/backward_ms", time.backward_s * 1e3},
      {"time/optimizer_ms", time.optimizer_s * 1e3},
      {"time/comm_exposed_ms", time.comm_exposed_s * 1e3},
      {"time/comm_total_ms", time.comm_total_s * 1e3},
      {"time/comm_tp_ms", time.comm_tp_s * 1e3},
      {"time/pp_wait_ms", time.pp_wait_s * 1e3},
      {"time/other_ms", time.other_s() * 1e3},
      {"throughput/tokens_per_s", tokens_per_s()},
      {"throughput/samples_per_s", samples_per_s()},
  };
  if (val_loss) s.emplace_back("val/loss", *val_loss);
  for (const auto& [name, value] : val_metrics) s.emplace_back("val/" + name, value);
  if (flops_per_token > 0) s.emplace_back("throughput/model_tflops", model_flops_per_s() / 1e12);
  if (mfu() >= 0) s.emplace_back("throughput/mfu", mfu());
  if (peak_mem_bytes > 0) s.emplace_back("memory/peak_mb", peak_mem_bytes / 1e6);
  if (price_per_device_hour > 0) {
    s.emplace_back("cost/usd_per_million_tokens", usd_per_million_tokens());
    s.emplace_back("cost/usd_per_million_samples", usd_per_million_samples());
  }
  if (straggler) {
    s.emplace_back("straggler/lag_ms", straggler->lag_s * 1e3);
    s.emplace_back("straggler/slowest_rank", straggler->slowest_rank);
  }
  return s;
}

void StepTelemetry::fill_progress(ProgressState& ps) const {
  ps.step = step;
  ps.loss = static_cast<float>(loss);
  if (val_loss) ps.val_loss = static_cast<float>(*val_loss);
  ps.lr = static_cast<float>(lr);
  ps.grad_norm = grad_norm;
  ps.step_s = time.step_s;
  ps.tokens_per_s = per_sample ? samples_per_s() : tokens_per_s();
  if (per_sample) ps.rate_unit = "samples/s";
  ps.mfu = mfu();
  if (time.comm_total_s > 0 || time.comm_exposed_s > 0) {
    ps.comm_exposed_s = time.comm_exposed_s;
    ps.comm_total_s = time.comm_total_s;
  }
  if (grad_wire_bytes > 0 && grad_dense_bytes > 0 && grad_wire_bytes < grad_dense_bytes) {
    ps.grad_wire_bytes = grad_wire_bytes;  // shown when compressed
    ps.grad_dense_bytes = grad_dense_bytes;
  }
  if (straggler && straggler->ranks > 1) {
    ps.straggler_rank = straggler->slowest_rank;
    ps.straggler_lag_s = straggler->lag_s;
  }
}

}  // namespace meshtrain::telemetry
