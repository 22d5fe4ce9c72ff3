// The GPT + AdamW glue the trainer calls: build a SaveRequest from the model's
// flat buffer and the optimizer's state, and the fill requests that restore
// them. Training state that is not tensors (data position, RNG blob, loss
// scaler, configuration) is set on the returned request by the caller.
#pragma once
#include <vector>

#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/resume.h"
#include "meshtrain/nn/gpt_params.h"
#include "meshtrain/optim/adamw.h"

namespace meshtrain::ckpt {

// Global names, shapes and flat-buffer ranges of every parameter.
std::vector<TensorEntry> gpt_tensor_entries(const GPTParams& params);

// params: the whole flat buffer (replicated); opt (may be null): m and v over
// [opt->begin(), opt->end()). Sets step, model, tensors, optimizer fields.
SaveRequest gpt_save_request(int64_t step, const GPTParams& params, const GPTConfig& model,
                             AdamW* opt);

// Restores the whole parameter buffer and the optimizer's own range; absent
// optimizer state (an imported model) is zero-filled.
std::vector<FillRequest> gpt_fill_requests(const GPTParams& params, AdamW* opt);

// After a successful resume: opt->set_steps_taken(result.index.optimizer_steps)
// (0 when the checkpoint had no optimizer state).
void apply_optimizer_state(const ResumeResult& result, AdamW* opt);

}  // namespace meshtrain::ckpt
