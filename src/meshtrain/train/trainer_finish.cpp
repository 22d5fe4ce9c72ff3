// TrainingRun's finish (train/training_run.h): the merged trace, each rank's
// memory peaks beside the prediction, and the final model file.
#include <fmt/format.h>

#include <fstream>

#include "meshtrain/core/memory.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/optim/offloaded_optimizer.h"
#include "meshtrain/plan/pipeline_schedule.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/train/step_time_prediction.h"
#include "meshtrain/train/training_run.h"

namespace meshtrain {

namespace {

// Every rank's peak bytes per memory category, gathered (collective).
// Per rank: the category peaks, then the training's total peak and the
// setup's (before training; ZeRO-3 holds the full parameters once there).
constexpr size_t kPeakValues = kMemCategoryCount + 2;
std::vector<std::vector<double>> gather_memory_peaks(comm::Communicator* comm, int world,
                                                     int64_t setup_peak, const DeviceMemStats& ms) {
  std::vector<double> mine(kPeakValues), all(kPeakValues * world);
  for (size_t c = 0; c < kMemCategoryCount; ++c) mine[c] = static_cast<double>(ms.peak[c]);
  mine[kMemCategoryCount] = static_cast<double>(ms.total_peak);
  mine[kMemCategoryCount + 1] = static_cast<double>(setup_peak);
  if (comm) {
    // allgather takes the total count: kPeakValues values from each rank.
    comm->allgather(mine.data(), all.data(), all.size(), DType::F64).wait();
  } else {
    all = mine;
  }
  std::vector<std::vector<double>> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    out[r].assign(all.begin() + r * kPeakValues, all.begin() + (r + 1) * kPeakValues);
  return out;
}

// Every rank's allocator peak over the whole run so far (collective): after
// the copies saving makes, which training's peaks above do not include.
std::vector<double> gather_run_peaks(comm::Communicator* comm, int world, const DeviceMemStats& ms) {
  const double mine = static_cast<double>(ms.total_peak);
  std::vector<double> all(static_cast<size_t>(world), mine);
  if (comm) comm->allgather(&mine, all.data(), all.size(), DType::F64).wait();
  return all;
}

}  // namespace

TrainerSummary TrainingRun::finish() {
  // The trace: each rank writes its file, then rank 0 merges them.
  telemetry::set_global_tracer(nullptr);
  if (tracer_->enabled()) {
    tracer_->write();
    if (world_comm()) world_comm()->barrier().wait();
    if (lead_) {
      const int n = telemetry::merge_trace_dir(opt_.run_dir);
      say(fmt::format("trace: {}/trace.json ({} rank file(s); open in https://ui.perfetto.dev)",
                      opt_.run_dir, n));
    }
  }
  // Per-rank peaks per category during training, next to the formulas.
  const std::vector<std::vector<double>> peaks =
      gather_memory_peaks(world_comm(), world_, setup_peak_, memory_stats());
  sync_->gather_full_parameters();  // rank 0 saves the whole model
  const Tensor params = product_parameters();
  const std::vector<double> run_peaks = gather_run_peaks(world_comm(), world_, memory_stats());
  const TrainerSummary& sum = result_;
  if (!lead_) return sum;
  if (summary_.steps() > 0) {
    fmt::print("{}", summary_.text());
    if (pipe_) {
      // Every stage idles about as long in a step; rank 0 is stage 0.
      const telemetry::StepBreakdown& md = summary_.breakdown().median;
      const plan::PipeSchedule kind = plan::parse_pipe_schedule(opt_.pipe_schedule);
      fmt::print("pipeline bubble: stage 0 waited {:.1f}% of its compute (median step; {})\n",
                 md.forward_s > 0 ? 100 * md.pp_wait_s / md.forward_s : 0.0,
                 plan::expected_bubble(kind, opt_.pp, opt_.grad_accum, opt_.pipe_chunks));
    }
    // The planner's prediction of this step on this machine, beside the
    // measured median (docs/PLANNER.md, "Own runs").
    RunLayout run;
    run.micro_batch = opt_.micro_batch, run.seq = T_, run.grad_accum = opt_.grad_accum;
    run.dp = mesh_.size(parallel::Axis::DP), run.tp = opt_.tp, run.zero_stage = opt_.zero_stage;
    run.pp = opt_.pp, run.chunks = opt_.pipe_chunks;
    run.sequence_parallel = opt_.sequence_parallel, run.recompute = opt_.recompute;
    run.precision = opt_.precision, run.threads_per_rank = thread_count();
    run.grad_wire_bytes = static_cast<int>(dtype_size(opt_.dp.grad_dtype));
    std::string why;
    const auto predicted = predict_step_time(*opt_.model, run, why);
    const double measured = summary_.breakdown().median.step_s;
    if (predicted) {
      fmt::print("step time: {} [{}]\n", step_time_line(*predicted, measured), predicted->machine);
      std::ofstream(opt_.run_dir + "/step_time.json")
          << nlohmann::json{{"predicted_s", predicted->step_s()}, {"measured_median_s", measured},
                            {"error", predicted->step_s() / measured - 1},
                            {"machine", predicted->machine}}.dump(2) << "\n";
    } else {
      fmt::print("step time: measured {:.3f} s; no prediction: {}\n", measured, why);
    }
  }
  save_model_safetensors(sum.model_path, product_spec(), params);
  const DeviceMemStats ms = memory_stats();
  const int64_t steps_run = total_steps_ - std::min(total_steps_, start_step_);
  // A model of dense samples counts one token per sample.
  fmt::print("done: {} steps in {} ({:.0f} {}/s), final loss {:.4f}, val loss {}\n", steps_run,
             ProgressDisplay::format_duration(sum.seconds), sum.tokens_per_s,
             spec_.input() == ModelSpec::Input::Dense ? "samples" : "tokens", sum.final_loss,
             sum.final_val_loss >= 0 ? fmt::format("{:.4f}", sum.final_val_loss) : "-");
  // The run's allocator peak also covers setup and, under ZeRO, gathering the
  // whole model to save it; the table below splits training from setup.
  const RankMemory lead_pred = predict_rank_memory(memory_plan(0));
  const std::string end_pred =
      lead_pred.product_copy + lead_pred.zero_gather > 0
          ? fmt::format(", end of run with the saved model's copy predicted {:.1f} MB",
                        lead_pred.finish_total() / 1e6)
          : "";
  fmt::print("memory (measured): {} allocator peak {:.1f} MB over the whole run (training predicted "
             "{:.1f} MB, per category below{}), process peak RSS {:.1f} MB\n", opt_.device.str(),
             ms.total_peak / 1e6, lead_pred.total() / 1e6, end_pred, process_peak_rss_bytes() / 1e6);
  std::vector<RankMemory> predicted;
  nlohmann::json mj = nlohmann::json::array();
  for (int r = 0; r < world_; ++r) {
    const MemoryPlan plan = memory_plan(r);
    predicted.push_back(predict_rank_memory(plan));
    nlohmann::json row = {{"rank", r}, {"zero_stage", plan.zero_stage}};
    for (size_t c = 0; c < kMemCategoryCount; ++c)
      row["peak"][std::string(mem_category_name(static_cast<MemCategory>(c)))] = peaks[r][c];
    row["training_peak_total"] = peaks[r][kMemCategoryCount];
    row["setup_peak_total"] = peaks[r][kMemCategoryCount + 1];
    // From the first step to the end, the copies for saving included (ZeRO: rank 0's gather).
    row["run_peak_total"] = run_peaks[r];
    const RankMemory& pm = predicted.back();
    row["predicted"] = {{"parameters", pm.params}, {"gradients", pm.grads},
                        {"optimizer", pm.optimizer}, {"activations", pm.activations},
                        {"comm", pm.comm}, {"workspace", pm.workspace},
                        {"training_total", pm.total()}, {"end_of_run_total", pm.finish_total()},
                        {"setup_total", pm.setup}, {"offloaded", pm.offloaded}};
    mj.push_back(row);
  }
  fmt::print("{}", memory_report_text(predicted, peaks));
  print_offload_report(predicted.front());
  if (opt_.checkpoint.memory_every > 0) {
    // Node memory (tmpfs), outside the allocator: beside the table, not in it.
    const int node_ranks = std::max(1, memory_copies_node_ranks_);
    fmt::print("in-memory checkpoint copies (node memory, {}): predicted {:.3g} MB per rank (its "
               "shard and a buddy's, two steps each); rank 0's node held {:.3g} MB for its {} "
               "rank(s) at the end, {:.3g} MB per rank\n", opt_.checkpoint.memory_dir,
               predicted_memory_copies_per_rank() / 1e6, memory_copies_bytes_ / 1e6, node_ranks,
               memory_copies_bytes_ / 1e6 / node_ranks);
  }
  std::ofstream(opt_.run_dir + "/memory.json") << mj.dump(2) << "\n";
  fmt::print("model saved to {}\n", sum.model_path);
  return sum;
}

void TrainingRun::print_offload_report(const RankMemory& predicted) {
  const auto* off = dynamic_cast<const OffloadedOptimizer*>(&stepper_->optimizer());
  if (!off) return;
  const StateTransfers& io = off->transfers();
  fmt::print("optimizer state offloaded to disk: {:.1f} MB on rank 0 (predicted {:.1f} MB) in {} "
             "{} units, {} ({}); resident staging {:.1f} MB; read {:.1f} MB, written {:.1f} MB, "
             "waits for transfers the updates did not hide {:.2f} s\n",
             off->file().bytes() / 1e6, predicted.offloaded / 1e6, off->plan().units.size(),
             off->type(), off->file().where(),
             off->file().direct() ? "O_DIRECT" : "through the page cache, dropped after writing",
             off->plan().staging_bytes / 1e6, io.bytes_read() / 1e6, io.bytes_written() / 1e6,
             io.wait_seconds());
}

}  // namespace meshtrain
