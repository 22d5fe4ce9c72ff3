#include "meshtrain/train/step_time_prediction.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/pipeline_stages.h"

namespace meshtrain {

std::string default_machine_file() {
  if (const char* s = std::getenv("MESHTRAIN_MACHINE_FILE"); s && *s) return s;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/meshtrain/machine.json";
}

namespace {

plan::RecomputePolicy policy_of(const Recompute& r) {
  switch (r.mode) {
    case Recompute::Mode::Full: return plan::RecomputePolicy::Full;
    case Recompute::Mode::Selective: return plan::RecomputePolicy::Selective;
    default: return plan::RecomputePolicy::None;
  }
}

}  // namespace

std::optional<StepTimePrediction> predict_step_time(const ModelSpec& spec, const RunLayout& run,
                                                    std::string& why) {
  const std::string file = default_machine_file();
  if (!std::filesystem::is_regular_file(file)) {
    why = fmt::format("no machine calibration at {} (run `meshtrain plan --calibrate`)", file);
    return std::nullopt;
  }
  plan::ClusterSpec machine;
  try {
    machine = plan::ClusterSpec::load(file);
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
  auto p = predict_step_time(spec, run, machine, why);
  if (p) p->machine = file;
  return p;
}

std::optional<StepTimePrediction> predict_step_time(const ModelSpec& spec, const RunLayout& run,
                                                    const plan::ClusterSpec& machine, std::string& why) {
  const std::optional<plan::TransformerShape> shape = plan::shape_from_description(spec.to_json());
  if (!shape) {
    why = fmt::format("the planner does not model {} models", spec.family());
    return std::nullopt;
  }
  plan::PlanRequest r;
  r.cluster = machine;
  // Rates were measured with the calibration's threads per rank; a run with
  // more or fewer threads per rank gets them scaled (GEMMs and memory
  // traffic both spread over the threads).
  if (r.cluster.threads_per_device > 0 && run.threads_per_rank != r.cluster.threads_per_device) {
    const double k = static_cast<double>(run.threads_per_rank) / r.cluster.threads_per_device;
    r.cluster.bf16_tflops *= k;
    r.cluster.fp32_tflops *= k;
    r.cluster.memory_gbps *= k;
  }
  const int world = run.dp * run.tp * run.pp;
  r.cluster.gpus_per_node = std::max(r.cluster.gpus_per_node, world);  // one machine: every link is local
  r.model = *shape;
  r.model.seq = run.seq;
  r.seq = run.seq;
  r.gpus = world;
  r.global_batch = static_cast<int64_t>(run.micro_batch) * run.grad_accum * run.dp;
  r.engine.gradient_wire_bytes = run.grad_wire_bytes;
  r.fp32 = run.precision != Precision::BF16;  // fp16's GEMMs are sgemms after widening
  // The engine's exact stored activations of one micro-batch (no recompute).
  const int threads = std::max(1, run.threads_per_rank);
  r.stored_activation_bytes = 0;
  if (run.pp > 1) {
    // The last stage (the planner's slowest: its layers and the head), all its chunks.
    parallel::PipelineLayout pipe;
    pipe.stages = run.pp, pipe.chunks = run.chunks, pipe.micro_batches = run.grad_accum, pipe.seq = run.seq;
    const auto stages = parallel::pipeline_virtual_stage_specs(spec, pipe, 0, run.tp, run.sequence_parallel);
    for (int64_t c = 0; c < run.chunks; ++c)
      r.stored_activation_bytes += static_cast<double>(
          stages[static_cast<size_t>(plan::virtual_stage(run.pp - 1, c, run.pp))]
              ->memory(run.micro_batch, run.seq, threads, Recompute::none(), run.precision).activations);
  } else {
    const std::shared_ptr<const ModelSpec> shard =
        run.tp > 1 ? spec.sharded(ModelShard{0, run.tp, run.sequence_parallel}) : nullptr;
    const ModelSpec& local = shard ? *shard : spec;
    r.stored_activation_bytes = static_cast<double>(
        local.memory(run.micro_batch, run.seq, threads, Recompute::none(), run.precision).activations);
  }
  plan::Layout l;
  l.dp = run.dp, l.tp = run.tp, l.pp = run.pp, l.chunks = run.chunks;
  l.micro_batch = run.micro_batch, l.micro_batches = run.grad_accum;
  l.zero_stage = run.zero_stage;
  l.recompute = policy_of(run.recompute);
  l.sequence_parallel = run.sequence_parallel;
  StepTimePrediction p;
  p.machine = machine.name;
  p.time = plan::evaluate_layout(r, l).time;
  if (run.recompute.mode == Recompute::Mode::EveryK) {
    // Blocks 0, K, 2K, ... re-run: that share of full recompute's cost.
    l.recompute = plan::RecomputePolicy::Full;
    const plan::TimeBreakdown full = plan::evaluate_layout(r, l).time;
    const int64_t L = shape->layers, k = run.recompute.every;
    p.time.recompute = full.recompute * static_cast<double>((L + k - 1) / k) / static_cast<double>(L);
  }
  return p;
}

std::string step_time_line(const StepTimePrediction& p, double measured_s) {
  const plan::TimeBreakdown& t = p.time;
  const std::string pipeline = t.bubble > 0 || t.pp_comm > 0
                                   ? fmt::format(" + bubble {:.3f} + pp sends {:.3f}", t.bubble, t.pp_comm)
                                   : "";
  return fmt::format("predicted {:.3f} s (compute {:.3f} + recompute {:.3f} + tp {:.3f}{} + dp exposed "
                     "{:.3f} + update {:.3f}) vs measured {:.3f} s ({:+.1f}%)", t.step(), t.compute,
                     t.recompute, t.tp_comm, pipeline, t.dp_exposed, t.optimizer, measured_s,
                     (t.step() / measured_s - 1) * 100);
}

}  // namespace meshtrain
