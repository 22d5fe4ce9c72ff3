#include "meshtrain/nn/model.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

std::vector<ElemSpan> ParamLayout::f32_read_ranges() const {
  std::vector<ElemSpan> out;
  for (const ParamInfo& p : params) {
    if (p.half_weight) continue;
    if (!out.empty() && out.back().end == p.begin) out.back().end = p.end();
    else out.push_back({p.begin, p.end()});
  }
  return out;
}

std::vector<int64_t> ParamLayout::unit_sizes() const {
  std::vector<int64_t> out;
  for (const ParamUnit& u : units) out.push_back(u.count());
  return out;
}

void ParamLayout::validate() const {
  int64_t at = 0;
  for (const ParamInfo& p : params) {
    MT_CHECK(p.begin == at, "parameter {} starts at element {}, expected {} (parameters must tile "
             "the flat buffer in order)", p.name, p.begin, at);
    MT_CHECK(p.unit >= 0 && p.unit < num_units(), "parameter {} names unit {} of {}", p.name,
             p.unit, num_units());
    MT_CHECK(p.trained || (!p.decay && !p.half_weight && !p.adaptable), "parameter {} is model "
             "state (not trained): it cannot be decayed, read in 16 bits or adapted", p.name);
    at = p.end();
  }
  MT_CHECK(at == numel, "parameters cover {} of {} elements", at, numel);
  at = 0;
  for (const ParamUnit& u : units) {
    MT_CHECK(u.begin == at && u.end >= u.begin, "parameter unit {} is [{}, {}), expected to start "
             "at {}", u.name, u.begin, u.end, at);
    at = u.end;
  }
  MT_CHECK(at == numel, "parameter units cover {} of {} elements", at, numel);
  for (const ParamUse& e : order)
    MT_CHECK(e.unit >= 0 && e.unit < num_units(), "parameter order names unit {} of {}", e.unit,
             num_units());
  MT_CHECK(bracketed_grad_unit < num_units(), "bracketed gradient unit {} of {}",
           bracketed_grad_unit, num_units());
}

ModelBuffers adopt_buffers(ModelBuffers b, int64_t numel) {
  for (const Tensor* t : {&b.params, &b.grads})
    MT_CHECK(!t->defined() || (t->dtype() == DType::F32 && t->numel() == numel),
             "external parameter/gradient buffer must hold {} f32 values, got {} {}", numel,
             t->numel(), dtype_name(t->dtype()));
  if (!b.params.defined()) b.params = Tensor::zeros({numel}, DType::F32, MemCategory::Parameters);
  if (b.frozen) {
    MT_CHECK(!b.grads.defined(), "a frozen model takes no gradient buffer");
    return b;
  }
  if (!b.grads.defined()) b.grads = Tensor::zeros({numel}, DType::F32, MemCategory::Gradients);
  else if (b.zero_grads) b.grads.zero_();
  return b;
}

}  // namespace meshtrain

namespace meshtrain {

std::shared_ptr<const ModelSpec> ModelSpec::sharded(const ModelShard& shard) const {
  fail("model family '{}' has no tensor or pipeline parallelism yet (asked for tp {} of {}); "
       "use parallel.tp = 1", family(), shard.tp_rank, shard.tp_size);
}

void ModelShard::check_tensor_parallel_only(const char* family) const {
  MT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size,
           "tensor-parallel rank {} of {} is out of range", tp_rank, tp_size);
  MT_CHECK(layer_begin == 0 && layer_end < 0 && first_stage && last_stage,
           "{}: pipeline stages are not supported yet", family);
}

int ModelShard::check_stage(int n_layer) const {
  MT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size,
           "tensor-parallel rank {} of {} is out of range", tp_rank, tp_size);
  const int end = layer_end < 0 ? n_layer : layer_end;
  MT_CHECK(layer_begin >= 0 && layer_begin < end && end <= n_layer,
           "pipeline stage layers [{}, {}) are not a non-empty part of the model's {} layers",
           layer_begin, end, n_layer);
  MT_CHECK(first_stage == (layer_begin == 0) && last_stage == (end == n_layer),
           "pipeline stage layers [{}, {}) of {}: the first stage must start at layer 0 and the "
           "last end at layer {} (first_stage {}, last_stage {})", layer_begin, end, n_layer,
           n_layer, first_stage, last_stage);
  return end;
}

void ModelShard::check_tp_divides(int64_t n, const char* what) const {
  MT_CHECK(n % tp_size == 0, "parallel.tp = {} must divide the model's {} ({}): choose a tp that "
           "divides it", tp_size, what, n);
}

std::unique_ptr<Decoder> ModelSpec::make_decoder(const Tensor&) const { return nullptr; }

bool ModelSpec::initial_weights(uint64_t, ElemSpan, float*) const { return false; }

void Model::freeze(std::shared_ptr<LinearAdapters>) {
  fail("model family '{}' cannot be frozen under LoRA adapters (it has no adapter hooks)",
       spec().family());
}

int64_t Model::release_f32_matrices() {
  fail("model family '{}' cannot hold its frozen matrices in 16 bits only", spec().family());
}

void Model::widen_released_matrices(float*) const {
  fail("model family '{}' has no released matrices", spec().family());
}

void Model::set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group) {
  MT_CHECK(spec().shard().tp_size == 1 || !group,
           "model family '{}' has no tensor parallelism", spec().family());
}

float Model::forward_stage(const MicroBatch& batch, const float* input) {
  MT_CHECK(!spec().shard().is_stage() && !input, "model family '{}' has no pipeline stages yet",
           spec().family());
  return forward(batch);
}

void Model::backward_stage(const float* output_grad, float loss_scale) {
  MT_CHECK(!spec().shard().is_stage() && !output_grad, "model family '{}' has no pipeline stages "
           "yet", spec().family());
  backward(loss_scale);
}

void Model::backward_stage_input(const float*, float) {
  fail("model family '{}' cannot split its backward into input- and weight-gradient parts (the "
       "zb-h1 schedule); use gpipe, 1f1b or interleaved", spec().family());
}

void Model::backward_stage_weights() {
  fail("model family '{}' cannot split its backward (zb-h1)", spec().family());
}

void Model::set_activation_slots(int n) {
  MT_CHECK(n == 1, "model family '{}' keeps one micro-batch's activations (asked for {})",
           spec().family(), n);
}

void Model::select_slot(int slot) {
  MT_CHECK(slot == 0, "model family '{}' has one activation set (asked for slot {})",
           spec().family(), slot);
}

const float* Model::stage_output() const { return nullptr; }
const float* Model::stage_input_grad() const { return nullptr; }
int64_t Model::stage_width() const { return 0; }

}  // namespace meshtrain
