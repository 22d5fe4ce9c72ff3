// A model's initial weights as a pure function of (seed, parameter, element):
// a rank fills any part of its buffer (its ZeRO range, its tensor-parallel
// slices) with exactly the values the whole model gets, without building the
// whole model first. Families describe their initialization as one rule per
// logical parameter (GPT: nn/gpt_spec.cpp, Llama: nn/llama_spec.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/elem_span.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

struct InitRule {
  enum class Kind { Zero, Constant, Normal };
  Kind kind = Kind::Zero;
  float value = 0.f;   // Constant: the value; Normal: the standard deviation
  int64_t drawn = -1;  // Normal: elements drawn from the tensor's start (the rest 0); -1: all
};

// Standard normal number `index` of stream `stream`: Box-Muller on a hash of
// the pair index / 2, so no element depends on the ones before it.
float counter_normal(uint64_t stream, int64_t index);

// The stream of logical parameter `param` under `seed`.
uint64_t init_stream(uint64_t seed, int param);

// Elements [range) of a buffer in `shard`'s layout: tensor-parallel rank
// `tp_rank`'s slices of the logical layout `full` (pass full twice for a
// whole model); rules[i] initializes full.params[i].
void fill_initial_weights(const ParamLayout& full, const ParamLayout& shard, int tp_rank,
                          const std::vector<InitRule>& rules, uint64_t seed, ElemSpan range,
                          float* buffer);

}  // namespace meshtrain
