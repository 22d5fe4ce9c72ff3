// The model a training configuration describes (config `model.*` and
// `init_from`): its family, a preset, explicit dimensions overriding it, or
// the shape recorded in the init_from file or checkpoint. The one place above
// nn/ that knows the families' config fields.
#pragma once
#include <memory>

#include "meshtrain/config/train_config.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

// Throws naming the key for an inconsistent shape.
// The model a config trains: its base (model.*, init_from) or, with
// lora.rank > 0, LoRA adapters on that base (nn/lora_spec.h).
std::shared_ptr<const ModelSpec> model_from_config(const TrainConfig& c);
// The model model.* and init_from describe, without LoRA.
std::shared_ptr<const ModelSpec> base_model_from_config(const TrainConfig& c);

}  // namespace meshtrain
