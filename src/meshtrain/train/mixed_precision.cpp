#include "meshtrain/train/mixed_precision.h"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <string_view>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"

namespace meshtrain {

MixedPrecision::MixedPrecision(Model& model, MixedPrecisionOptions opt)
    : opt_(opt), device_(model.param_buffer().device()) {
  model.set_precision(opt.precision);
  if (opt.precision == Precision::FP16) scaler_ = std::make_unique<LossScaler>(opt.loss_scale);
  if (const char* s = std::getenv("MESHTRAIN_TEST_INJECT_INF"); s && *s) {
    const std::string_view v(s);
    const size_t colon = v.find(':');
    char* end = nullptr;
    inject_step_ = std::strtoll(s, &end, 10);
    MT_CHECK(end != s && (*end == 0 || *end == ':') && inject_step_ >= 0,
             "MESHTRAIN_TEST_INJECT_INF = \"{}\": expected STEP or STEP:RANK", v);
    if (colon != std::string_view::npos) inject_rank_ = std::atoi(s + colon + 1);
  }
}

bool MixedPrecision::decide(bool finite_on_every_rank) {
  last_overflow_ = false;
  if (!scaler_) return finite_on_every_rank;
  const bool apply = scaler_->update(!finite_on_every_rank);
  last_overflow_ = !apply;
  return apply;
}

void MixedPrecision::maybe_inject_overflow(int64_t step, int rank, float* grads, int64_t begin,
                                           int64_t end, Device device) const {
  if (step != inject_step_ || rank != inject_rank_ || end <= begin) return;
  const float inf = std::numeric_limits<float>::infinity();
  if (device.is_cpu()) grads[begin] = inf;
  else runtime_for(device).copy(grads + begin, device, &inf, Device::cpu(), sizeof inf, default_stream(device));
}

nlohmann::json MixedPrecision::state() const {
  return scaler_ ? scaler_->to_json() : nlohmann::json();
}

void MixedPrecision::load_state(const nlohmann::json& j) {
  if (j.is_null()) return;  // saved without fp16 loss scaling: keep the initial scale
  if (scaler_) scaler_->load_json(j);
}

namespace {
// The 16-bit GEMMs' engine: the CPU's library and path, or a GPU's.
std::string half_gemms(Device device, HalfFormat fmt) {
  // The guarded test device runs the CPU's kernels.
  if (device.type != DeviceType::CUDA) return cpu::half_gemm_description(fmt);
  const char* name = fmt == HalfFormat::BF16 ? "bf16" : "fp16";
  return fmt::format("{} GEMMs and attention products on {}'s tensor cores (cuBLASLt, WMMA)", name,
                     device.str());
}
}  // namespace

std::string MixedPrecision::describe() const {
  switch (opt_.precision) {
    case Precision::FP32:
      return "precision: fp32";
    case Precision::BF16:
      return fmt::format("precision: bf16 mixed (f32 master weights, Adam state and gradients; "
                         "bf16 GEMM operands) | {}", half_gemms(device_, HalfFormat::BF16));
    case Precision::FP16: {
      const LossScalerConfig& c = scaler_->config();
      return fmt::format("precision: fp16 mixed (f32 master weights, Adam state and gradients; "
                         "fp16 storage) | {} | dynamic loss scale {:g}, x{:g} after {} good "
                         "steps, x{:g} on overflow (hysteresis {}, min {:g})",
                         half_gemms(device_, HalfFormat::F16), scaler_->scale(),
                         c.growth_factor, c.growth_interval, c.backoff_factor, c.hysteresis,
                         c.min_scale);
    }
  }
  return "";
}

}  // namespace meshtrain
