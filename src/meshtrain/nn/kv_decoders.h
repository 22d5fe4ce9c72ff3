// The KV-cache decoders of the two transformer families (nn/decoder.h):
// the same layers as GPT::forward and Llama::forward, run for new positions
// only, with each layer's keys and values kept for the positions before.
#pragma once
#include <memory>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/decoder.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/llama_spec.h"

namespace meshtrain {

// `params` is the model's flat f32 buffer (read, not copied).
std::unique_ptr<Decoder> make_gpt_decoder(const GPTConfig& cfg, const Tensor& params);
// A whole Llama (no tensor-parallel shard); an Error otherwise.
std::unique_ptr<Decoder> make_llama_decoder(std::shared_ptr<const LlamaSpec> spec,
                                            const Tensor& params);

}  // namespace meshtrain
