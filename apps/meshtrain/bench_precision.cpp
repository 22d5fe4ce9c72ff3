#include "bench_precision.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/conv2d.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/train/mixed_precision.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/parallel/gradient_sync.h"
#include "meshtrain/train/train_step.h"
#include "recompute_option.h"
#include "bench_clock.h"

namespace meshtrain::cli {

namespace {

// One side of the comparison: a model, its mixed-precision setting and its
// optimizer, with the per-step timings it collected.
struct Side {
  Precision precision;
  std::unique_ptr<Model> model;
  std::unique_ptr<MixedPrecision> mixed;
  parallel::LocalGradients sync;
  std::unique_ptr<TrainStep> stepper;
  std::vector<double> step_s, fwd_s, bwd_s, opt_s, cpu_s;
  float loss = 0;

  Side(const ModelSpec& spec, Precision p, const Recompute& rc) : precision(p) {
    model = spec.build();
    model->set_recompute(rc);
    model->init_weights(1);
    mixed = std::make_unique<MixedPrecision>(*model, MixedPrecisionOptions{p, {}});
    LrSchedule sched;
    sched.max_lr = 3e-4f;
    sched.kind = "constant";
    sync.attach(*model);
    stepper = std::make_unique<TrainStep>(*model, sync, OptimizerConfig{}, sched, 1.0f);
    stepper->set_mixed_precision(mixed.get());
  }

  void step(const MicroBatch& mb, int s, bool timed) {
    const double c0 = process_cpu_s();
    const StepStats st = stepper->run({mb}, s);
    const double c1 = process_cpu_s();
    loss = st.loss;
    if (!timed) return;
    cpu_s.push_back(c1 - c0);
    step_s.push_back(st.forward_s + st.backward_s + st.optimizer_s);
    fwd_s.push_back(st.forward_s);
    bwd_s.push_back(st.backward_s);
    opt_s.push_back(st.optimizer_s);
  }
};

}  // namespace

void run_bench_precision(const PrecisionBenchArgs& a) {
  const std::shared_ptr<const ModelSpec> spec = model_preset(a.preset);
  const int T = a.seq > 0 ? a.seq : spec->seq_len();
  if (T > spec->seq_len())
    throw UsageError(fmt::format("--seq {} exceeds the model context {}", T, spec->seq_len()));
  if (a.batch < 1 || a.steps < 1) throw UsageError("--batch and --steps must be >= 1");
  const Precision mixed = precision_from_name(a.precision);
  if (!is_mixed(mixed)) throw UsageError("--precision: compare bf16 or fp16 with fp32");
  const Recompute rc = recompute_from_config(a.recompute);
  set_thread_count(a.threads > 0 ? a.threads : default_thread_count());

  Side f32(*spec, Precision::FP32, rc), half(*spec, mixed, rc);
  Rng rng(1234);
  std::vector<int32_t> in(static_cast<size_t>(a.batch) * T), tg(in.size());
  // A model of dense samples (images) takes random values and labels instead.
  const bool dense = spec->input() == ModelSpec::Input::Dense;
  int64_t sample = 1;
  for (int64_t d : spec->sample_shape()) sample *= d;
  std::vector<float> features(dense ? static_cast<size_t>(a.batch * sample) : 0);
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    MicroBatch mb{in.data(), tg.data(), a.batch, T};
    if (dense) {
      for (auto& v : features) v = rng.normal();
      for (int b = 0; b < a.batch; ++b) tg[b] = static_cast<int32_t>(rng.below(spec->vocab_size()));
      mb = MicroBatch{nullptr, tg.data(), a.batch, 1, features.data()};
    } else {
      for (size_t i = 0; i < in.size(); ++i) {
        in[i] = static_cast<int32_t>(rng.below(spec->vocab_size()));
        tg[i] = static_cast<int32_t>(rng.below(spec->vocab_size()));
      }
    }
    const bool timed = s >= a.warmup;
    // Interleaved, alternating which side goes first, so drifting outside load
    // falls on both alike.
    if (s % 2 == 0) {
      f32.step(mb, s, timed);
      half.step(mb, s, timed);
    } else {
      half.step(mb, s, timed);
      f32.step(mb, s, timed);
    }
  }
  // Tokens for a decoder, images for a dense model (T is then 1).
  const double tokens = static_cast<double>(a.batch) * (dense ? 1 : T);
  const double tok32 = tokens / median_of(f32.step_s), tok16 = tokens / median_of(half.step_s);
  const char* unit = dense ? "samples" : "tokens";
  // A dense model's products are convolutions: the path of a typical one
  // (3x3, 64 channels, 56x56) stands for them.
  const cpu::ConvData conv_data = mixed == Precision::BF16 ? cpu::ConvData::BF16 : cpu::ConvData::F16;
  const std::string path =
      dense ? "3x3 64-channel convolution: " +
                  cpu::conv2d_path(cpu::ConvPass::Forward, conv_data, {a.batch, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1})
            : cpu::half_gemm_description(half_of(mixed));
  const int64_t act32 = spec->memory(a.batch, T, thread_count(), rc, Precision::FP32).activations;
  const int64_t act16 = spec->memory(a.batch, T, thread_count(), rc, mixed).activations;
  if (a.json) {
    auto side = [&](const Side& s, double tok_s, int64_t act) {
      return nlohmann::json{{"precision", precision_name(s.precision)},
                            {"ms_per_step", median_of(s.step_s) * 1e3},
                            {"forward_ms", median_of(s.fwd_s) * 1e3},
                            {"backward_ms", median_of(s.bwd_s) * 1e3},
                            {"optimizer_ms", median_of(s.opt_s) * 1e3},
                            {std::string(unit) + "_per_s", tok_s},
                            {"cpu_ms_per_step", median_of(s.cpu_s) * 1e3},
                            {"loss", s.loss}, {"activation_mb", act / 1e6}};
    };
    fmt::print("{}\n", nlohmann::json{{"preset", a.preset}, {"batch", a.batch}, {"seq", T},
                                      {"threads", thread_count()}, {"steps", a.steps},
                                      {"recompute", rc.name()}, {dense ? "conv_path" : "gemm_path", path},
                                      {"fp32", side(f32, tok32, act32)},
                                      {a.precision, side(half, tok16, act16)},
                                      {"speedup", tok16 / tok32}, {"unit", unit},
                                      {"speedup_cpu_time", median_of(f32.cpu_s) / median_of(half.cpu_s)}}.dump());
    return;
  }
  fmt::print("bench train: {} | batch {} x seq {} | {} thread(s) | recompute {} | {} vs fp32, "
             "{} steps each, interleaved, medians\n", spec->describe(), a.batch, T, thread_count(),
             rc.name(), a.precision, a.steps);
  fmt::print("  {} path: {}\n", a.precision, path);
  for (const auto* s : {&f32, &half}) {
    const double tok = s == &f32 ? tok32 : tok16;
    fmt::print("  {:<5} step {:8.2f} ms (fwd {:.2f}, bwd {:.2f}, optim {:.2f})  {:8.1f} {}/s  "
               "CPU {:.2f} ms/step  loss {:.4f}  activations {:.1f} MB\n",
               precision_name(s->precision), median_of(s->step_s) * 1e3, median_of(s->fwd_s) * 1e3,
               median_of(s->bwd_s) * 1e3, median_of(s->opt_s) * 1e3, tok, unit, median_of(s->cpu_s) * 1e3,
               s->loss, (s == &f32 ? act32 : act16) / 1e6);
  }
  fmt::print("  speedup {} / fp32          {:8.2f}x {}/s ({:.2f}x in CPU time per step)\n",
             a.precision, tok16 / tok32, unit, median_of(f32.cpu_s) / median_of(half.cpu_s));
}

}  // namespace meshtrain::cli
