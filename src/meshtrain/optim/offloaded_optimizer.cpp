#include "meshtrain/optim/offloaded_optimizer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {
namespace {

OptimizerConfig in_memory(OptimizerConfig cfg) {
  cfg.offload.optimizer_state = "none";
  return cfg;
}

// Unit boundaries over [begin, end): whole layers up to `unit` elements,
// a larger layer alone (per-layer optimizers) or in pieces of `unit`.
std::vector<std::pair<int64_t, int64_t>> unit_spans(const std::vector<ParamSegment>& layers,
                                                    int64_t unit, bool whole_layers) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t open = -1, close = -1;
  auto flush = [&] {
    if (open >= 0) spans.emplace_back(open, close);
    open = -1;
  };
  for (const ParamSegment& s : layers) {
    const int64_t len = s.end - s.begin;
    if (open >= 0 && close - open + len > unit) flush();
    if (!whole_layers && len > unit) {
      for (int64_t b = s.begin; b < s.end; b += unit) spans.emplace_back(b, std::min(s.end, b + unit));
      continue;
    }
    if (open < 0) open = s.begin;
    close = s.end;
  }
  flush();
  return spans;
}

}  // namespace

OffloadPlan plan_offload(const OptimizerConfig& cfg, int64_t begin, int64_t end,
                         const ParamLayout& layout) {
  const OffloadConfig& o = cfg.offload;
  MT_CHECK(o.unit_mb > 0, "offload.unit_mb = {}: must be above 0", o.unit_mb);
  MT_CHECK(o.prefetch >= 0, "offload.prefetch = {}: must be 0 or more", o.prefetch);
  OffloadPlan p;
  p.states = cfg.states_per_param();
  // Elements per unit, a multiple of a block's floats.
  const int64_t per_block = StateFile::kAlign / 4;
  const int64_t unit = std::max<int64_t>(
      per_block, static_cast<int64_t>(o.unit_mb * 1e6 / (4.0 * p.states)) / per_block * per_block);
  const bool whole = cfg.type == "lars" || cfg.type == "lamb";
  int64_t largest = 0;
  for (auto [b, e] : unit_spans(clip_segments(tensor_segments(layout), begin, end), unit, whole)) {
    OffloadUnit u{b, e, p.file_bytes, round_up_to_block(4 * (e - b))};
    p.file_bytes += p.states * u.padded;
    largest = std::max(largest, u.padded);
    p.units.push_back(u);
  }
  p.slots = static_cast<int>(std::clamp<size_t>(p.units.size(), 1, static_cast<size_t>(o.prefetch) + 1));
  p.staging_bytes = static_cast<int64_t>(p.slots) * p.states * largest;
  return p;
}

// prefetch + 1 block-aligned buffers, each the largest unit's states.
struct OffloadedOptimizer::Staging {
  Staging(size_t n, int64_t bytes) : slot_bytes(bytes), counted(MemCategory::OptimizerState) {
    for (size_t i = 0; i < n; ++i) {
      void* p = bytes > 0 ? std::aligned_alloc(StateFile::kAlign, static_cast<size_t>(bytes)) : nullptr;
      MT_CHECK(bytes == 0 || p, "cannot allocate {:.1f} MB of optimizer-state staging", bytes / 1e6);
      if (p) std::memset(p, 0, static_cast<size_t>(bytes));
      bufs.push_back(static_cast<float*>(p));
      storages.push_back(Storage::borrow(p, static_cast<size_t>(bytes)));
    }
    counted.set(static_cast<int64_t>(n) * bytes);
  }
  ~Staging() {
    for (float* p : bufs) std::free(p);
  }
  int64_t slot_bytes;
  std::vector<float*> bufs;
  std::vector<std::shared_ptr<Storage>> storages;
  ExternalBytes counted;
};

OffloadedOptimizer::OffloadedOptimizer(const OptimizerConfig& cfg, int64_t begin, int64_t end,
                                       const ParamLayout& layout, Device device)
    : Optimizer(begin, end, tensor_segments(layout), device),
      plan_(plan_offload(cfg, begin, end, layout)) {
  MT_CHECK(device.is_cpu(), "offload.optimizer_state = \"{}\" updates on the CPU; the model is on "
           "{}, whose optimizer state stays in its memory for now", cfg.offload.optimizer_state,
           device.str());
  MT_CHECK(cfg.offload.optimizer_state == "disk", "offload.optimizer_state = \"{}\": not a tier "
           "(none or disk)", cfg.offload.optimizer_state);
  const OptimizerConfig mem = in_memory(cfg);
  prototype_ = make_optimizer(mem, begin, begin, layout, device);
  StateElsewhere in_the_file;  // bound to a staging buffer before each update
  for (const OffloadUnit& u : plan_.units) inner_.push_back(make_optimizer(mem, u.begin, u.end, layout, device));
  file_ = std::make_unique<StateFile>(cfg.offload.path, plan_.file_bytes);
  staging_ = std::make_unique<Staging>(static_cast<size_t>(plan_.slots),
                                       plan_.staging_bytes / plan_.slots);
  io_ = std::make_unique<StateTransfers>(*file_);
}

OffloadedOptimizer::~OffloadedOptimizer() {
  io_.reset();  // queued writes finish while the buffers exist
}

float* OffloadedOptimizer::slot(size_t s) const { return staging_->bufs[s]; }

void OffloadedOptimizer::bind(size_t unit, size_t s) {
  const OffloadUnit& u = plan_.units[unit];
  const std::vector<OptimizerState> st = inner_[unit]->state();
  for (size_t k = 0; k < st.size(); ++k)
    *st[k].tensor = Tensor(staging_->storages[s], static_cast<int64_t>(k) * u.padded / 4,
                           {u.end - u.begin}, DType::F32);
}

void OffloadedOptimizer::step(float* params, const float* grads, float lr, float grad_scale) {
  ++t_;
  store_materialized();
  const size_t n = plan_.units.size(), w = staging_->bufs.size();
  std::vector<StateTransfers::Ticket> ready(n, 0);
  auto fetch = [&](size_t u) {
    ready[u] = io_->read(plan_.units[u].offset, slot(u % w), plan_.states * plan_.units[u].padded);
  };
  for (size_t u = 0; u + 1 < w && u < n; ++u) fetch(u);
  for (size_t u = 0; u < n; ++u) {
    // Into the buffer unit u - 1 used: queued after its write, so read after it.
    if (u + w - 1 < n && w > 1) fetch(u + w - 1);
    if (w == 1) fetch(u);
    io_->wait(ready[u]);
    bind(u, u % w);
    inner_[u]->step(params, grads, lr, grad_scale);
    io_->write(plan_.units[u].offset, slot(u % w), plan_.states * plan_.units[u].padded);
  }
}

std::vector<OptimizerState> OffloadedOptimizer::state() {
  std::vector<OptimizerState> names = prototype_->state();
  if (materialized_.empty()) {
    io_->drain();
    for (size_t k = 0; k < names.size(); ++k)
      materialized_.push_back(Tensor::zeros({end() - begin()}, DType::F32,
                                            MemCategory::OptimizerState, device()));
    for (const OffloadUnit& u : plan_.units) {
      io_->wait(io_->read(u.offset, slot(0), plan_.states * u.padded));
      for (size_t k = 0; k < names.size(); ++k)
        std::memcpy(materialized_[k].data<float>() + (u.begin - begin()),
                    slot(0) + static_cast<int64_t>(k) * u.padded / 4, 4 * (u.end - u.begin));
    }
  }
  for (size_t k = 0; k < names.size(); ++k) names[k].tensor = &materialized_[k];
  return names;
}

void OffloadedOptimizer::store_materialized() {
  if (materialized_.empty()) return;
  io_->drain();
  for (const OffloadUnit& u : plan_.units) {
    for (size_t k = 0; k < materialized_.size(); ++k)
      std::memcpy(slot(0) + static_cast<int64_t>(k) * u.padded / 4,
                  materialized_[k].data<float>() + (u.begin - begin()), 4 * (u.end - u.begin));
    io_->wait(io_->write(u.offset, slot(0), plan_.states * u.padded));
  }
  materialized_.clear();
}

void OffloadedOptimizer::set_norm_group(NormGroup g) {
  const bool talks = (g.own >= 0 && g.shards && g.shards->size() > 1) || (g.tp && g.tp->size() > 1);
  MT_CHECK(!per_layer() || !talks, "offload.optimizer_state = \"disk\" with train.optimizer = "
           "\"{}\" under ZeRO or tensor parallelism is not available: each layer's trust ratio "
           "needs norms summed across ranks, which the unit-by-unit update would ask for in a "
           "different order on each rank; use plain data parallelism, or adamw or sgd", type());
  for (auto& o : inner_) o->set_norm_group(g);
  Optimizer::set_norm_group(std::move(g));
}

void OffloadedOptimizer::set_steps_taken(int64_t t) {
  for (auto& o : inner_) o->set_steps_taken(t);
  Optimizer::set_steps_taken(t);
}

}  // namespace meshtrain
