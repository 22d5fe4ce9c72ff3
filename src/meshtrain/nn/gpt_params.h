// Named views of a GPT's parameters (or gradients) inside one flat buffer.
//
// Layout is layer-major so that backward, which walks layers from last to
// first, finishes contiguous ranges of the gradient buffer one after another
// (data-parallel buckets and pipeline stages are contiguous ranges):
//   wte (Vp,C) | wpe (T,C) | layer 0 | layer 1 | ... | ln_f.weight (C) | ln_f.bias (C)
//   layer l = ln_1.{weight,bias} (C), attn.c_attn.weight (3C,C), .bias (3C),
//             attn.c_proj.weight (C,C), .bias (C), ln_2.{weight,bias} (C),
//             mlp.c_fc.weight (4C,C), .bias (4C), mlp.c_proj.weight (C,4C), .bias (C)
// Matrices are stored (out, in) like torch.nn.Linear; Hugging Face GPT-2
// checkpoints store Conv1D weights (in, out) and are transposed on import.
// Names follow Hugging Face GPT-2 without the "transformer." prefix.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/gpt_config.h"

namespace meshtrain {

struct GPTLayerParams {
  Tensor ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

struct GPTParams {
  Tensor wte, wpe;  // undefined where a pipeline stage does not hold them
  std::vector<GPTLayerParams> layers;
  int layer0 = 0;   // the model layer of layers[0] (a pipeline stage's first)
  Tensor lnfw, lnfb;
  Tensor flat;  // the whole buffer, 1-D

  // Views into `flat`, which must hold exactly cfg.num_params() elements.
  static GPTParams view(const GPTConfig& cfg, const Tensor& flat);
  // A tensor-parallel shard's views (d.num_params() elements; shapes: gpt_spec.cpp).
  static GPTParams view(const GPTDims& d, const Tensor& flat);
  // Every parameter with its name, in buffer order.
  std::vector<std::pair<std::string, Tensor>> named() const;
  // Element range [begin, end) of layer l inside the flat buffer.
  std::pair<int64_t, int64_t> layer_range(int l) const;

  // Parameter units: the groups whose parameters a forward or backward step
  // uses together (ZeRO-3 gathers one unit at a time). Unit 0 = embeddings
  // (wte, wpe; wte is also the tied output projection), units 1..L = layers
  // 0..L-1, unit L+1 = the final LayerNorm. They tile the flat buffer in
  // order. A pipeline stage has unit 0 only if it holds wte (first: wte and
  // wpe; last: wte for the head) and the final LayerNorm only if last.
  int num_units() const {
    return (wte.defined() ? 1 : 0) + static_cast<int>(layers.size()) + (lnfw.defined() ? 1 : 0);
  }
  std::pair<int64_t, int64_t> unit_range(int unit) const;
};

}  // namespace meshtrain
