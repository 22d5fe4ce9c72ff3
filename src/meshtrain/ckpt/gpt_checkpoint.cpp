#include "meshtrain/ckpt/gpt_checkpoint.h"

#include <algorithm>

namespace meshtrain::ckpt {

std::vector<TensorEntry> gpt_tensor_entries(const GPTParams& params) {
  std::vector<TensorEntry> out;
  const char* base = static_cast<const char*>(params.flat.raw());
  const size_t es = dtype_size(params.flat.dtype());
  for (const auto& [name, t] : params.named()) {
    const int64_t begin = static_cast<int64_t>((static_cast<const char*>(t.raw()) - base) / es);
    out.push_back({name, t.shape(), t.dtype(), kParams, {begin, begin + t.numel()}});
  }
  return out;
}

SaveRequest gpt_save_request(int64_t step, const GPTParams& params, const GPTConfig& model,
                             AdamW* opt) {
  SaveRequest r;
  r.step = step;
  r.model = model;
  r.tensors = gpt_tensor_entries(params);
  const int64_t n = params.flat.numel();
  r.buffers.push_back({kParams, params.flat.dtype(), n, params.flat.raw(), {0, n}});
  if (opt) {
    r.buffers.push_back({kExpAvg, DType::F32, n, opt->exp_avg().raw(), {opt->begin(), opt->end()}});
    r.buffers.push_back({kExpAvgSq, DType::F32, n, opt->exp_avg_sq().raw(), {opt->begin(), opt->end()}});
    r.optimizer_steps = opt->steps_taken();
    const auto& c = opt->config();
    r.optimizer = {{"type", "adamw"},
                   {"range", {opt->begin(), opt->end()}},
                   {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps},
                   {"weight_decay", c.weight_decay}};
  }
  return r;
}

std::vector<FillRequest> gpt_fill_requests(const GPTParams& params, AdamW* opt) {
  std::vector<FillRequest> f;
  f.push_back({kParams, {0, params.flat.numel()}, params.flat.raw(), false});
  if (opt) {
    f.push_back({kExpAvg, {opt->begin(), opt->end()}, opt->exp_avg().raw(), true});
    f.push_back({kExpAvgSq, {opt->begin(), opt->end()}, opt->exp_avg_sq().raw(), true});
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
