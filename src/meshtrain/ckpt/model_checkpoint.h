// The Model + Optimizer glue the trainer calls: build a SaveRequest from a
// model's flat buffer, its layout (nn/model.h: every tensor's name, shape and
// range) and description, and the optimizer's state; and the fill requests
// that restore them. Training state that is not tensors (data position, RNG
// blob, loss scaler, configuration) is set on the returned request by the
// caller.
#pragma once
#include <vector>

#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/resume.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/optim/optimizer.h"

namespace meshtrain::ckpt {

// Global names, shapes and flat-buffer ranges of every parameter.
std::vector<TensorEntry> model_tensor_entries(const ParamLayout& layout);

// The whole flat parameter buffer (replicated); opt (may be null): its state
// tensors, each by its name, over [opt->begin(), opt->end()). Sets step,
// model, tensors, optimizer fields.
SaveRequest model_save_request(int64_t step, const Model& model, Optimizer* opt);
// The same from a spec and its flat f32 parameter buffer (no model built).
SaveRequest model_save_request(int64_t step, const ModelSpec& spec, const Tensor& flat, Optimizer* opt);

// Restores the whole parameter buffer and the optimizer's own range; absent
// optimizer state (an imported model) is zero-filled.
std::vector<FillRequest> model_fill_requests(const Model& model, Optimizer* opt);
// The same into a flat f32 parameter buffer.
std::vector<FillRequest> model_fill_requests(const Tensor& params, Optimizer* opt);

// The index's description of `opt`: {"type", "range": [b, e], hyperparameters...}.
nlohmann::json optimizer_record(const Optimizer& opt, int64_t begin, int64_t end);

// After a successful resume: opt->set_steps_taken(result.index.optimizer_steps)
// (0 when the checkpoint had no optimizer state). A checkpoint whose state
// another optimizer wrote is refused (its state tensors mean something else).
void apply_optimizer_state(const ResumeResult& result, Optimizer* opt);

}  // namespace meshtrain::ckpt
