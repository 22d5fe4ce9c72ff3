// `meshtrain schedule`: a pipeline schedule as the engine runs it, each
// stage's timeline replayed with the given op times (text, and a Perfetto /
// Chrome trace with --trace), its bubble beside the textbook formula, the
// micro-batches each stage holds, and with --instructions each rank's
// instruction list (sends and receives explicit), checked for deadlocks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/pipeline_instructions.h"
#include "meshtrain/plan/pipeline_schedule.h"

namespace meshtrain::cli {

namespace {
struct ScheduleArgs {
  int64_t pp = 4, micro_batches = 8, chunks = 1;
  std::string schedule = "1f1b";
  double forward_ms = 1, backward_ms = 2;
  std::string trace;
  bool instructions = false;
};

// One row per stage, one cell per `unit` ms: an op's label in its first
// cell, '-' through the rest of it, '.' where the stage idles.
void print_timeline(const plan::ScheduleReplay& r, double unit) {
  const auto cells = static_cast<int64_t>(std::llround(r.makespan / unit));
  constexpr int kWidth = 5;
  for (size_t s = 0; s < r.timeline.size(); ++s) {
    std::string row(static_cast<size_t>(cells * kWidth), ' ');
    for (int64_t c = 0; c < cells; ++c) row[static_cast<size_t>(c * kWidth)] = '.';
    for (const plan::OpTiming& t : r.timeline[s]) {
      const auto a = static_cast<int64_t>(std::llround(t.start / unit));
      const auto b = static_cast<int64_t>(std::llround(t.end / unit));
      for (int64_t c = a; c < b; ++c) row.replace(static_cast<size_t>(c * kWidth), kWidth, "-    ");
      row.replace(static_cast<size_t>(a * kWidth), kWidth,
                  fmt::format("{:<{}}", plan::pipe_op_label(t.op), kWidth));
    }
    fmt::print("stage {:>2} | {}\n", s, row);
  }
}

void write_trace(const plan::ScheduleReplay& r, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t s = 0; s < r.timeline.size(); ++s) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"name", fmt::format("stage {}", s)}}}});
    for (const plan::OpTiming& t : r.timeline[s])
      events.push_back({{"name", plan::pipe_op_label(t.op)}, {"ph", "X"}, {"pid", 0}, {"tid", s},
                        {"ts", t.start * 1e3}, {"dur", (t.end - t.start) * 1e3},
                        {"cat", t.op.forward ? "forward" : "backward"},
                        {"args", {{"micro_batch", t.op.micro_batch}, {"chunk", t.op.chunk}}}});
  }
  std::ofstream out(path);
  MT_CHECK(out.good(), "--trace {}: cannot write there", path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
}

void run_schedule(const ScheduleArgs& a) {
  if (a.forward_ms <= 0 || a.backward_ms <= 0)
    throw UsageError("--forward-ms and --backward-ms must be > 0");
  const plan::PipeSchedule kind = plan::parse_pipe_schedule(a.schedule);
  const auto ops = plan::pipeline_schedule(kind, a.pp, a.micro_batches, a.chunks);
  const auto instrs = plan::pipeline_instructions(ops, a.chunks);
  plan::check_instructions(instrs);
  // A chunk holds 1/v of a stage's layers: its ops take 1/v of the time.
  const double v = static_cast<double>(a.chunks);
  const plan::ScheduleReplay r = plan::replay_schedule(ops, a.chunks, a.forward_ms / v, a.backward_ms / v);
  fmt::print("schedule {}: {} stage(s) x {} micro-batch(es), {} chunk(s) per stage; forward {:g} ms, "
             "backward {:g} ms per micro-batch and stage{}\n", plan::pipe_schedule_name(kind), a.pp,
             a.micro_batches, a.chunks, a.forward_ms, a.backward_ms,
             kind == plan::PipeSchedule::ZeroBubbleH1 ? " (b: its input part, w: its weight part, half each)" : "");
  const double unit = std::min({a.forward_ms, a.backward_ms * 0.5}) / v;
  fmt::print("one cell = {:g} ms; F forward, B backward, '.' idle\n", unit);
  print_timeline(r, unit);
  std::string held;
  for (size_t s = 0; s < ops.size(); ++s)
    held += fmt::format("{}{:g}", s ? ", " : "", plan::peak_in_flight(ops[s], a.chunks));
  fmt::print("step {:g} ms; bubble {:.1f}% of the compute ({} {:.1f}%), {:.1f}% of the step idle; "
             "micro-batches held per stage at most: {}\n", r.makespan, 100 * r.bubble_ratio,
             kind == plan::PipeSchedule::ZeroBubbleH1 ? "1F1B's formula, its bound," : "formula",
             100 * plan::formula_bubble(kind, a.pp, a.micro_batches, a.chunks),
             100 * r.bubble_fraction, held);
  if (a.instructions)
    for (size_t s = 0; s < instrs.size(); ++s) {
      std::string line;
      for (const plan::PipeInstr& in : instrs[s]) line += (line.empty() ? "" : ", ") + plan::pipe_instr_label(in);
      fmt::print("rank {} instructions: {}\n", s, line);
    }
  if (!a.trace.empty()) {
    write_trace(r, a.trace);
    fmt::print("trace: {} (open in https://ui.perfetto.dev)\n", a.trace);
  }
}
}  // namespace

void register_schedule(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  auto* c = app.add_subcommand("schedule", "Show a pipeline schedule: each stage's timeline, its "
                               "bubble against the formula, and the per-rank instructions");
  c->add_option("--pp", a->pp, "Pipeline stages")->capture_default_str()->check(CLI::Range(1, 4096));
  c->add_option("--micro-batches", a->micro_batches, "Micro-batches per step")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  c->add_option("--schedule", a->schedule, "gpipe, 1f1b, interleaved or zb-h1")->capture_default_str();
  c->add_option("--chunks", a->chunks, "Model chunks per stage (interleaved; gpipe too)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  c->add_option("--forward-ms", a->forward_ms, "A forward's time per micro-batch and stage")->capture_default_str();
  c->add_option("--backward-ms", a->backward_ms, "A backward's time")->capture_default_str();
  c->add_option("--trace", a->trace, "Also write the timeline as a Chrome/Perfetto trace (JSON)");
  c->add_flag("--instructions", a->instructions, "Print each rank's instruction list");
  c->callback([a] { run_schedule(*a); });
}

}  // namespace meshtrain::cli
