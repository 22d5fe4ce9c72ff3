// `meshtrain plan`'s simulation and failure sections (cmd_plan_simulate.h):
// the event-driven step of the top layout (plan/step_simulator.h) against
// the analytic one, and the checkpoint interval (plan/failure_model.h).
#include "cmd_plan_simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/failure_model.h"
#include "meshtrain/plan/step_simulator.h"

namespace meshtrain::cli {

namespace {

std::map<int64_t, double> parse_stragglers(const SimulateOptions& o, int64_t gpus) {
  std::map<int64_t, double> out;
  for (const std::string& s : o.stragglers) {
    const size_t colon = s.find(':');
    int64_t rank = -1;
    double factor = 0;
    bool ok = colon != std::string::npos && colon > 0;
    if (ok) {
      const auto [p, ec] = std::from_chars(s.data(), s.data() + colon, rank);
      ok = ec == std::errc() && p == s.data() + colon;
    }
    if (ok) {
      try {
        size_t used = 0;
        factor = std::stod(s.substr(colon + 1), &used);
        ok = used == s.size() - colon - 1;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) throw UsageError(fmt::format("--straggler expects RANK:FACTOR, e.g. 5:1.5 (got '{}')", s));
    if (rank < 0 || rank >= gpus)
      throw UsageError(fmt::format("--straggler rank {} is outside the {} GPUs (0-{})", rank, gpus, gpus - 1));
    if (!(factor > 0) || !std::isfinite(factor))
      throw UsageError(fmt::format("--straggler factor must be > 0 (got {} for rank {})", factor, rank));
    if (!out.emplace(rank, factor).second)
      throw UsageError(fmt::format("--straggler gives rank {} twice", rank));
  }
  return out;
}

bool wants_simulation(const SimulateOptions& o) {
  return o.simulate || !o.trace.empty() || !o.stragglers.empty();
}

plan::SimResult simulate(const plan::PlanRequest& req, const plan::PlanRow& row, const SimulateOptions& o) {
  plan::SimOptions so;
  so.stragglers = parse_stragglers(o, req.gpus);
  so.jitter_sigma = o.jitter;
  so.seed = o.seed;
  so.trace_path = o.trace;
  return plan::simulate_step(req, row.layout, so);
}

// The ranks worth a line: first and last stage, stragglers with a peer of
// each kind, the most and least idle.
std::vector<std::pair<const plan::RankTime*, std::string>> notable_ranks(const plan::SimResult& r,
                                                                        const plan::Layout& l,
                                                                        const SimulateOptions& o) {
  std::map<int64_t, std::string> pick;
  auto add = [&](int64_t rank, const std::string& why) {
    auto& s = pick[rank];
    s += s.empty() ? why : ", " + why;
  };
  add(0, "first stage");
  if (l.pp > 1) add((l.pp - 1) * l.dp * l.tp, "last stage");
  for (const auto& [rank, f] : parse_stragglers(o, static_cast<int64_t>(r.ranks.size()))) {
    add(rank, fmt::format("straggler x{:g}", f));
    const plan::RankTime& s = r.ranks[static_cast<size_t>(rank)];
    if (l.dp > 1) add((s.pp * l.dp + (s.dp == 0 ? 1 : 0)) * l.tp + s.tp, fmt::format("dp peer of {}", rank));
    if (l.tp > 1) add(rank - s.tp + (s.tp == 0 ? 1 : 0), fmt::format("tp peer of {}", rank));
  }
  auto by_idle = [](const plan::RankTime& a, const plan::RankTime& b) { return a.idle() < b.idle(); };
  const auto most = std::max_element(r.ranks.begin(), r.ranks.end(), by_idle);
  const auto least = std::min_element(r.ranks.begin(), r.ranks.end(), by_idle);
  if (most->idle() - least->idle() > 1e-3 * r.step) {  // else every rank looks alike
    add(most->rank, "most idle");
    add(least->rank, "least idle");
  }
  std::vector<std::pair<const plan::RankTime*, std::string>> out;
  for (const auto& [rank, why] : pick) out.emplace_back(&r.ranks[static_cast<size_t>(rank)], why);
  return out;
}

std::string duration(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

plan::FailurePlan failures(const plan::PlanRequest& req, const SimulateOptions& o) {
  return plan::plan_failures({req.gpus, *o.mtbf_hours, o.checkpoint_s, o.restart_s});
}

double tokens_per_step(const plan::PlanRequest& req) {
  return static_cast<double>(req.global_batch) * static_cast<double>(req.seq > 0 ? req.seq : req.model.seq);
}

void print_simulation(const plan::PlanRow& row, const SimulateOptions& o, const plan::SimResult& r) {
  const plan::Layout& l = row.layout;
  const double analytic = r.analytic.time.step();
  fmt::print("\nsimulated step of #1 ({}, {} ranks, {} ops in {:.2f} s): {:.3f} s vs {:.3f} s analytic ({:+.1f}%)\n",
             l.pp > 1 ? plan::pipe_schedule_name(r.schedule) : "no pipeline", r.ranks.size(), r.tasks, r.seconds, r.step, analytic,
             (r.step / analytic - 1) * 100);
  const plan::RankTime& m = r.mean;
  fmt::print("   mean per rank: busy {:.3f} s (compute {:.3f} + tp {:.3f} + optimizer {:.3f}), idle {:.3f} s = "
             "bubble {:.3f} + exposed comm {:.3f} + tp wait {:.3f} + waiting {:.3f}\n", m.busy(), m.compute,
             m.tp_comm, m.optimizer, m.idle(), m.bubble, m.exposed_comm, m.tp_wait, m.tail_wait);
  if (l.pp > 1)
    fmt::print("   stage 0 holds {:g} micro-batches at its peak (of {} per step)\n", r.stage0_in_flight, l.micro_batches);
  std::string path;
  for (const auto& [kind, s] : r.critical_by_kind)
    if (s >= 5e-4) path += fmt::format("{}{} {:.3f}", path.empty() ? "" : " + ", kind, s);
  // Where the path runs: its time per cell (a tp group, or a stage's dp collective).
  std::map<std::pair<int64_t, int64_t>, double> by_cell;
  for (const auto& s : r.critical_path) by_cell[{s.stage, s.replica}] += s.seconds;
  std::vector<std::pair<double, std::pair<int64_t, int64_t>>> cells;
  for (const auto& [cell, s] : by_cell) cells.emplace_back(s, cell);
  std::sort(cells.rbegin(), cells.rend());
  std::string parts;
  for (size_t i = 0; i < std::min<size_t>(3, cells.size()); ++i)
    parts += fmt::format("{}stage {}{} {:.0f}%", i ? ", " : "", cells[i].second.first,
                         cells[i].second.second >= 0 ? fmt::format(" dp {}", cells[i].second.second) : " (all dp)",
                         cells[i].first / r.step * 100);
  fmt::print("   critical path: {} s; on {}\n", path, parts);
  fmt::print("   {:>6} {:>5} {:>4} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "rank", "stage", "dp", "tp", "busy",
             "tp wait", "bubble", "exp.comm", "waiting");
  for (const auto& [rt, why] : notable_ranks(r, l, o))
    fmt::print("   {:>6} {:>5} {:>4} {:>3} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}  {}\n", rt->rank, rt->pp,
               rt->dp, rt->tp, rt->busy(), rt->tp_wait, rt->bubble, rt->exposed_comm, rt->tail_wait, why);
  if (!o.trace.empty())
    fmt::print("   trace: {} ({} of {} ranks; open in https://ui.perfetto.dev)\n", o.trace, r.traced_ranks.size(),
               r.ranks.size());
}

void print_failures(const plan::PlanRequest& req, const SimulateOptions& o, double step_s, const char* step_from) {
  const plan::FailurePlan f = failures(req, o);
  fmt::print("\nfailures: {} GPUs of {:g} h MTBF each: one every {} (system MTBF); checkpoint {:g} s, restart {:g} s\n",
             req.gpus, *o.mtbf_hours, duration(f.system_mtbf_s), o.checkpoint_s, o.restart_s);
  fmt::print("   Young's interval {} (sqrt(2 delta M)): goodput {:.2f}%\n", duration(f.young_s), f.goodput_young * 100);
  fmt::print("   Daly's interval  {}: goodput {:.2f}%, a checkpoint every {:.0f} steps of {:.3f} s ({})\n",
             duration(f.daly_s), f.goodput_daly * 100, std::max(1.0, std::round(f.daly_s / step_s)), step_s, step_from);
  if (req.train_tokens > 0) {
    const double days = req.train_tokens / (tokens_per_step(req) / step_s) / 86400;
    fmt::print("   {:.3g} tokens: {:.1f} days without failures, {:.1f} days with them at Daly's interval\n",
               req.train_tokens, days, days / f.goodput_daly);
  }
}

}  // namespace

void add_simulate_options(CLI::App* c, SimulateOptions& o) {
  c->add_flag("--simulate", o.simulate, "Simulate the first layout's step event by event (per-rank timelines, "
              "stragglers, critical path) and compare it with the analytic step");
  c->add_option("--trace", o.trace, "Write the simulated step as a Perfetto/Chrome trace JSON (implies --simulate)");
  c->add_option("--straggler", o.stragglers, "RANK:FACTOR: that rank computes FACTOR times slower (repeatable; "
                "implies --simulate)");
  c->add_option("--jitter", o.jitter, "--simulate: log-normal sigma of per-op compute jitter on every rank");
  c->add_option("--seed", o.seed, "--simulate: the jitter's seed")->capture_default_str();
  c->add_option("--mtbf-hours", o.mtbf_hours, "Mean hours between failures of one GPU: print the failure section "
                "(system MTBF, Young and Daly checkpoint intervals, goodput)");
  c->add_option("--checkpoint-s", o.checkpoint_s, "Seconds to write a checkpoint (with --mtbf-hours)")
      ->capture_default_str();
  c->add_option("--restart-s", o.restart_s, "Seconds to relaunch and load after a failure (with --mtbf-hours)")
      ->capture_default_str();
}

void check_simulate_options(const SimulateOptions& o, int64_t gpus) {
  parse_stragglers(o, gpus);
  if (!(o.jitter >= 0)) throw UsageError(fmt::format("--jitter must be >= 0 (got {})", o.jitter));
  if (o.mtbf_hours && !(*o.mtbf_hours > 0 && std::isfinite(*o.mtbf_hours)))
    throw UsageError(fmt::format("--mtbf-hours must be > 0 (got {})", *o.mtbf_hours));
  if (!(o.checkpoint_s > 0)) throw UsageError(fmt::format("--checkpoint-s must be > 0 (got {})", o.checkpoint_s));
  if (!(o.restart_s >= 0)) throw UsageError(fmt::format("--restart-s must be >= 0 (got {})", o.restart_s));
}

void print_simulate_sections(const plan::PlanRequest& req, const plan::PlanRow& row, const SimulateOptions& o) {
  double step = row.time.step();
  const char* from = "analytic";
  if (wants_simulation(o)) {
    const plan::SimResult r = simulate(req, row, o);
    print_simulation(row, o, r);
    step = r.step;
    from = "simulated";
  }
  if (o.mtbf_hours) print_failures(req, o, step, from);
}

void add_simulate_json(nlohmann::json& out, const plan::PlanRequest& req, const plan::PlanRow& row,
                       const SimulateOptions& o) {
  double step = row.time.step();
  if (wants_simulation(o)) {
    const plan::SimResult r = simulate(req, row, o);
    step = r.step;
    nlohmann::json ranks = nlohmann::json::array(), path = nlohmann::json::object();
    for (const auto& [rt, why] : notable_ranks(r, row.layout, o))
      ranks.push_back({{"rank", rt->rank}, {"stage", rt->pp}, {"dp", rt->dp}, {"tp", rt->tp}, {"why", why},
                       {"compute", rt->compute}, {"tp_comm", rt->tp_comm}, {"tp_wait", rt->tp_wait},
                       {"optimizer", rt->optimizer}, {"bubble", rt->bubble}, {"exposed_comm", rt->exposed_comm},
                       {"waiting", rt->tail_wait}});
    for (const auto& [kind, s] : r.critical_by_kind) path[kind] = s;
    const plan::RankTime& m = r.mean;
    out["simulation"] = {{"schedule", plan::pipe_schedule_name(r.schedule)}, {"step_s", r.step},
                         {"analytic_step_s", r.analytic.time.step()}, {"ops", r.tasks}, {"seconds", r.seconds},
                         {"stage0_in_flight", r.stage0_in_flight},
                         {"mean", {{"compute", m.compute}, {"tp_comm", m.tp_comm}, {"tp_wait", m.tp_wait},
                                   {"optimizer", m.optimizer}, {"bubble", m.bubble},
                                   {"exposed_comm", m.exposed_comm}, {"waiting", m.tail_wait}}},
                         {"critical_path_s", path}, {"ranks", ranks}};
    if (!o.trace.empty()) out["simulation"]["trace"] = o.trace;
  }
  if (o.mtbf_hours) {
    const plan::FailurePlan f = failures(req, o);
    out["failures"] = {{"system_mtbf_s", f.system_mtbf_s}, {"young_interval_s", f.young_s},
                       {"daly_interval_s", f.daly_s}, {"goodput_young", f.goodput_young},
                       {"goodput_daly", f.goodput_daly}, {"step_s", step}};
    if (req.train_tokens > 0)
      out["failures"]["days_to_train"] = req.train_tokens / (tokens_per_step(req) / step) / 86400 / f.goodput_daly;
  }
}

}  // namespace meshtrain::cli
