#include "meshtrain/ckpt/model_checkpoint.h"

#include <algorithm>

namespace meshtrain::ckpt {

std::vector<TensorEntry> model_tensor_entries(const ParamLayout& layout) {
  std::vector<TensorEntry> out;
  for (const ParamInfo& p : layout.params)
    out.push_back({p.name, p.shape, DType::F32, kParams, {p.begin, p.end()}});
  return out;
}

SaveRequest model_save_request(int64_t step, const Model& model, AdamW* opt) {
  return model_save_request(step, model.spec(), model.param_buffer(), opt);
}

SaveRequest model_save_request(int64_t step, const ModelSpec& spec, const Tensor& flat, AdamW* opt) {
  MT_CHECK(flat.numel() == spec.num_params(), "parameter buffer of {} elements for a model of {}",
           flat.numel(), spec.num_params());
  SaveRequest r;
  r.step = step;
  r.model = spec.to_json();
  r.tensors = model_tensor_entries(spec.layout());
  const int64_t n = flat.numel();
  r.buffers.push_back({kParams, flat.dtype(), n, flat.raw(), {0, n}, flat.device()});
  if (opt) {
    const ElemRange own{opt->begin(), opt->end()};
    r.buffers.push_back({kExpAvg, DType::F32, n, opt->exp_avg().raw(), own, opt->exp_avg().device()});
    r.buffers.push_back({kExpAvgSq, DType::F32, n, opt->exp_avg_sq().raw(), own, opt->exp_avg_sq().device()});
    r.optimizer_steps = opt->steps_taken();
    const auto& c = opt->config();
    r.optimizer = {{"type", "adamw"},
                   {"range", {opt->begin(), opt->end()}},
                   {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps},
                   {"weight_decay", c.weight_decay}};
  }
  return r;
}

std::vector<FillRequest> model_fill_requests(const Model& model, AdamW* opt) {
  return model_fill_requests(model.param_buffer(), opt);
}

std::vector<FillRequest> model_fill_requests(const Tensor& flat, AdamW* opt) {
  std::vector<FillRequest> f;
  f.push_back({kParams, {0, flat.numel()}, flat.raw(), false, flat.device()});
  if (opt) {
    const ElemRange own{opt->begin(), opt->end()};
    f.push_back({kExpAvg, own, opt->exp_avg().raw(), true, opt->exp_avg().device()});
    f.push_back({kExpAvgSq, own, opt->exp_avg_sq().raw(), true, opt->exp_avg_sq().device()});
  }
  return f;
}

void apply_optimizer_state(const ResumeResult& result, AdamW* opt) {
  if (!opt) return;
  const bool absent = std::find(result.absent_buffers.begin(), result.absent_buffers.end(),
                                kExpAvg) != result.absent_buffers.end();
  opt->set_steps_taken(absent ? 0 : result.index.optimizer_steps);
}

}  // namespace meshtrain::ckpt
