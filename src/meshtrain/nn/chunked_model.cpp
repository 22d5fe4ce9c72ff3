#include "meshtrain/nn/chunked_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

// The chunks' layouts in one buffer, chunk v-1 first (at element 0), chunk 0
// last (at the top); `offsets` and `unit_offsets` get each chunk's start.
ParamLayout compose(const std::vector<std::shared_ptr<const ModelSpec>>& chunks,
                    std::vector<int64_t>& offsets, std::vector<int>& unit_offsets) {
  const int v = static_cast<int>(chunks.size());
  offsets.assign(static_cast<size_t>(v), 0);
  unit_offsets.assign(static_cast<size_t>(v), 0);
  ParamLayout out;
  std::set<std::string> names;
  for (int c = v - 1; c >= 0; --c) {
    const ParamLayout& l = chunks[static_cast<size_t>(c)]->layout();
    offsets[static_cast<size_t>(c)] = out.numel;
    unit_offsets[static_cast<size_t>(c)] = out.num_units();
    for (ParamInfo p : l.params) {
      MT_CHECK(names.insert(p.name).second, "pipeline chunks of one rank both hold parameter {}", p.name);
      p.begin += out.numel;
      p.unit += unit_offsets[static_cast<size_t>(c)];
      out.params.push_back(std::move(p));
    }
    for (ParamUnit u : l.units) {
      u.begin += out.numel;
      u.end += out.numel;
      out.units.push_back(std::move(u));
    }
    if (l.bracketed_grad_unit >= 0) {
      MT_CHECK(out.bracketed_grad_unit < 0, "two pipeline chunks of one rank write a gradient "
               "outside their backward");
      out.bracketed_grad_unit = l.bracketed_grad_unit + unit_offsets[static_cast<size_t>(c)];
    }
    out.numel += l.numel;
  }
  // One micro-step: the chunks' forwards in pipeline order, then their
  // backwards in reverse.
  for (int pass = 0; pass < 2; ++pass)
    for (int k = 0; k < v; ++k) {
      const int c = pass == 0 ? k : v - 1 - k;
      for (ParamUse use : chunks[static_cast<size_t>(c)]->layout().order)
        if (use.backward == (pass == 1)) {
          use.unit += unit_offsets[static_cast<size_t>(c)];
          out.order.push_back(use);
        }
    }
  out.validate();
  return out;
}

}  // namespace

ChunkedSpec::ChunkedSpec(std::vector<std::shared_ptr<const ModelSpec>> chunks, std::vector<int> slots)
    : chunks_(std::move(chunks)), slots_(std::move(slots)) {
  MT_CHECK(!chunks_.empty() && slots_.size() == chunks_.size(), "{} pipeline chunk(s) with {} "
           "activation slot count(s)", chunks_.size(), slots_.size());
  for (int s : slots_) MT_CHECK(s >= 1, "a pipeline chunk needs at least one activation slot, got {}", s);
  layout_ = compose(chunks_, offsets_, unit_offsets_);
  if (chunks_[0]->frozen_base()) {
    std::vector<std::shared_ptr<const ModelSpec>> bases;
    for (const auto& c : chunks_) {
      MT_CHECK(c->frozen_base(), "pipeline chunks of one rank: some frozen under adapters, some not");
      bases.push_back(c->frozen_base());
    }
    frozen_ = std::make_shared<ChunkedSpec>(std::move(bases), slots_);
  }
}

std::string ChunkedSpec::describe() const {
  std::string ranges;
  for (const auto& c : chunks_) {
    const ModelShard s = c->shard();
    ranges += fmt::format("{}[{}, {})", ranges.empty() ? "" : ", ", s.layer_begin, s.layer_end);
  }
  return fmt::format("{} chunks of layers {} of: {}", chunks_.size(), ranges, chunks_[0]->describe());
}

ModelMemory ChunkedSpec::memory(int B, int T, int nthreads, const Recompute& recompute,
                                Precision precision) const {
  ModelMemory out;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const ModelMemory m = chunks_[c]->memory(B, T, nthreads, recompute, precision);
    const int64_t slots = slots_[c];
    out.activations += slots * m.activations;
    out.workspace += slots * (m.workspace - m.shared_workspace) + m.shared_workspace;
    // The GEMMs' scratch is per thread, shared by every model of the process.
    out.host_gemm_scratch = std::max(out.host_gemm_scratch, m.host_gemm_scratch);
    out.frozen_params += m.frozen_params;
  }
  out.shared_workspace = out.workspace;  // already counted per slot above
  return out;
}

std::unique_ptr<Model> ChunkedSpec::build(ModelBuffers buffers) const {
  // The model keeps the spec alive: a copy sharing the chunks' specs.
  return std::make_unique<ChunkedModel>(std::make_shared<ChunkedSpec>(*this), std::move(buffers));
}

bool ChunkedSpec::initial_weights(uint64_t seed, ElemSpan range, float* buffer) const {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int64_t off = offsets_[c];
    const int64_t n = chunks_[c]->num_params();
    const int64_t b = std::clamp(range.begin - off, int64_t{0}, n), e = std::clamp(range.end - off, int64_t{0}, n);
    const ElemSpan local = e > b ? ElemSpan{b, e} : ElemSpan{0, 0};
    if (!chunks_[c]->initial_weights(seed, local, buffer + off)) return false;
  }
  return true;
}

ChunkedModel::ChunkedModel(std::shared_ptr<const ChunkedSpec> spec, ModelBuffers buffers)
    : spec_(std::move(spec)) {
  MT_CHECK(!buffers.frozen, "a frozen model of several pipeline chunks: each chunk model holds "
           "its own frozen base (LoRA)");
  buffers = adopt_buffers(std::move(buffers), spec_->num_params());
  params_ = buffers.params;
  grads_ = buffers.grads;
  for (int c = 0; c < spec_->num_chunks(); ++c) {
    const int64_t off = spec_->offset(c), n = spec_->chunk(c).num_params();
    chunks_.push_back(spec_->chunk(c).build(
        ModelBuffers{params_.slice_flat(off, n), grads_.slice_flat(off, n), /*zero_grads=*/false}));
  }
}

void ChunkedModel::init_weights(uint64_t seed) {
  for (auto& c : chunks_) c->init_weights(seed);
}

float ChunkedModel::forward(const MicroBatch&) {
  fail("this rank holds {} pipeline chunks ({}): they run through the pipeline executor, not as "
       "one model", chunks_.size(), spec_->describe());
}

void ChunkedModel::backward(float) {
  fail("this rank holds {} pipeline chunks: backward runs through the pipeline executor",
       chunks_.size());
}

std::vector<Model*> ChunkedModel::pipeline_chunks() {
  std::vector<Model*> out;
  for (auto& c : chunks_) out.push_back(c.get());
  return out;
}

void ChunkedModel::zero_grad() {
  for (auto& c : chunks_) c->zero_grad();
}

const float* ChunkedModel::logits() const {
  fail("a rank of several pipeline chunks has no logits of its own");
}

int ChunkedModel::logits_stride() const { return chunks_.back()->logits_stride(); }

void ChunkedModel::set_grad_ready_hook(GradReadyHook hook) {
  for (int c = 0; c < spec_->num_chunks(); ++c) {
    if (!hook) {
      chunks_[static_cast<size_t>(c)]->set_grad_ready_hook(nullptr);
      continue;
    }
    const int64_t off = spec_->offset(c);
    chunks_[static_cast<size_t>(c)]->set_grad_ready_hook(
        [hook, off](int64_t b, int64_t e) { hook(b + off, e + off); });
  }
}

void ChunkedModel::set_param_hook(ParamHook hook) {
  for (int c = 0; c < spec_->num_chunks(); ++c) {
    if (!hook) {
      chunks_[static_cast<size_t>(c)]->set_param_hook(nullptr);
      continue;
    }
    const int off = spec_->unit_offset(c);
    chunks_[static_cast<size_t>(c)]->set_param_hook(
        [hook, off](ParamEvent ev, int unit, bool backward) { hook(ev, unit + off, backward); });
  }
}

void ChunkedModel::set_recompute(const Recompute& recompute) {
  for (auto& c : chunks_) c->set_recompute(recompute);
}

void ChunkedModel::set_precision(Precision p) {
  for (auto& c : chunks_) c->set_precision(p);
}

void ChunkedModel::use_external_half_copy(Tensor buffer) {
  for (int c = 0; c < spec_->num_chunks(); ++c)
    chunks_[static_cast<size_t>(c)]->use_external_half_copy(
        buffer.slice_flat(spec_->offset(c), spec_->chunk(c).num_params()));
}

void ChunkedModel::set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group) {
  for (auto& c : chunks_) c->set_tensor_parallel_group(group);
}

void ChunkedModel::hold_parameters(bool held) {
  for (auto& c : chunks_) c->hold_parameters(held);
}

void ChunkedModel::release_activations() {
  for (auto& c : chunks_) c->release_activations();
}

void ChunkedModel::weights_loaded() {
  for (auto& c : chunks_) c->weights_loaded();
}

}  // namespace meshtrain
