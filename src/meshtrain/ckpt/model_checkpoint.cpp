#include "meshtrain/ckpt/model_checkpoint.h"

#include <algorithm>

namespace meshtrain::ckpt {

std::vector<TensorEntry> model_tensor_entries(const ParamLayout& layout) {
  std::vector<TensorEntry> out;
  for (const ParamInfo& p : layout.params)
    out.push_back({p.name, p.shape, DType::F32, kParams, {p.begin, p.end()}});
  return out;
}

nlohmann::json optimizer_record(const Optimizer& opt, int64_t begin, int64_t end) {
  nlohmann::json j = opt.hyperparameters();
  j["type"] = opt.type();
  j["range"] = {begin, end};
  return j;
}

SaveRequest model_save_request(int64_t step, const Model& model, Optimizer* opt) {
  return model_save_request(step, model.spec(), model.param_buffer(), opt);
}

SaveRequest model_save_request(int64_t step, const ModelSpec& spec, const Tensor& flat,
                               Optimizer* opt) {
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
    for (const OptimizerState& s : opt->state())
      r.buffers.push_back({s.name, DType::F32, n, s.tensor->raw(), own, s.tensor->device()});
    r.optimizer_steps = opt->steps_taken();
    r.optimizer = optimizer_record(*opt, opt->begin(), opt->end());
  }
  return r;
}

std::vector<FillRequest> model_fill_requests(const Model& model, Optimizer* opt) {
  return model_fill_requests(model.param_buffer(), opt);
}

std::vector<FillRequest> model_fill_requests(const Tensor& flat, Optimizer* opt) {
  std::vector<FillRequest> f;
  f.push_back({kParams, {0, flat.numel()}, flat.raw(), false, flat.device()});
  if (opt) {
    const ElemRange own{opt->begin(), opt->end()};
    for (const OptimizerState& s : opt->state())
      f.push_back({s.name, own, s.tensor->raw(), true, s.tensor->device()});
  }
  return f;
}

void apply_optimizer_state(const ResumeResult& result, Optimizer* opt) {
  if (!opt) return;
  const nlohmann::json& saved = result.index.optimizer;
  if (saved.is_object() && saved.contains("type") && saved["type"].is_string()) {
    const std::string type = saved["type"].get<std::string>();
    MT_CHECK(type == opt->type(), "checkpoint {} holds the state of the {} optimizer, and this "
             "run's train.optimizer is \"{}\": resuming with another optimizer is refused (its "
             "state would not carry over). Resume with train.optimizer = \"{}\", or start from "
             "the weights alone with init_from = \"{}\" and checkpoint.resume = \"never\"",
             result.dir, type, opt->type(), type, result.dir);
  }
  bool absent = false;
  for (const OptimizerState& s : opt->state())
    absent |= std::find(result.absent_buffers.begin(), result.absent_buffers.end(), s.name) !=
              result.absent_buffers.end();
  opt->set_steps_taken(absent ? 0 : result.index.optimizer_steps);
}

}  // namespace meshtrain::ckpt
