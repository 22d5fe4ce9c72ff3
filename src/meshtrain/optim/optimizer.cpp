#include "meshtrain/optim/optimizer.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/optim/lamb.h"
#include "meshtrain/optim/lars.h"
#include "meshtrain/optim/offloaded_optimizer.h"
#include "meshtrain/optim/sgd.h"

namespace meshtrain {

const std::vector<std::string>& optimizer_types() {
  static const std::vector<std::string> types{"adamw", "sgd", "lars", "lamb"};
  return types;
}

Optimizer::Optimizer(int64_t begin, int64_t end, std::vector<ParamSegment> segments, Device device)
    : begin_(begin), end_(end), device_(device) {
  MT_CHECK(begin >= 0 && end >= begin, "bad optimizer range [{}, {})", begin, end);
  for (const ParamSegment& s : segments) ntensors_ = std::max(ntensors_, s.tensor + 1);
  segments_ = clip_segments(segments, begin, end);
  int64_t covered = 0;
  for (auto& s : segments_) covered += s.end - s.begin;
  MT_CHECK(covered == end - begin, "parameter segments cover {} of the {} optimizer elements",
           covered, end - begin);
}

namespace {
thread_local int state_elsewhere = 0;
}

Optimizer::StateElsewhere::StateElsewhere() { ++state_elsewhere; }
Optimizer::StateElsewhere::~StateElsewhere() { --state_elsewhere; }

Tensor Optimizer::new_state() const {
  if (state_elsewhere > 0) return Tensor();
  return Tensor::zeros({end_ - begin_}, DType::F32, MemCategory::OptimizerState, device_);
}

std::vector<double> Optimizer::tensor_sums(const std::vector<ParamSegment>& segments, int k,
                                           const TensorNorms::PieceSums& f) const {
  return TensorNorms::sums(norm_group_, segments, {begin_, end_}, ntensors_, k, f);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, int64_t begin, int64_t end,
                                          const ParamLayout& layout, Device device) {
  if (cfg.offload.enabled())
    return std::make_unique<OffloadedOptimizer>(cfg, begin, end, layout, device);
  // Per-layer optimizers keep one segment per tensor (their norms are a
  // layer's); the others take merged runs (fewer, longer kernel calls).
  const bool per_layer = cfg.type == "lars" || cfg.type == "lamb";
  std::vector<ParamSegment> segs = per_layer ? tensor_segments(layout) : param_segments(layout);
  if (!cfg.exclude_norms_and_biases)
    for (ParamSegment& s : segs) s.decay = s.trained;
  if (cfg.type == "adamw") {
    AdamWConfig a{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
    return std::make_unique<AdamW>(begin, end, std::move(segs), a, device);
  }
  if (cfg.type == "sgd") return std::make_unique<Sgd>(begin, end, std::move(segs), cfg, device);
  if (cfg.type == "lars") return std::make_unique<Lars>(begin, end, std::move(segs), cfg, device);
  if (cfg.type == "lamb") return std::make_unique<Lamb>(begin, end, std::move(segs), cfg, device);
  fail("train.optimizer = \"{}\": not an optimizer (adamw, sgd, lars or lamb)", cfg.type);
}

}  // namespace meshtrain
