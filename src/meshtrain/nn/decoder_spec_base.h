// What the token-decoder families' ModelSpecs (GPTSpec, LlamaSpec) share: the
// config, the shard, the dimensions of that shard and the parameter layout,
// with the ModelSpec answers that come straight from them. Config provides
// describe(), seq_len, vocab_size and flops_per_token(T); Dims is the
// family's per-shard sizes. The family builds dims_ and layout_ in its
// constructor and answers the rest (family, to_json, memory, build, ...).
#pragma once
#include <string>

#include "meshtrain/nn/model.h"

namespace meshtrain {

template <class Config, class Dims>
class DecoderSpecBase : public ModelSpec {
 public:
  const Config& config() const { return cfg_; }
  const Dims& dims() const { return dims_; }
  ModelShard shard() const override { return shard_; }
  std::string describe() const override { return cfg_.describe(); }
  const ParamLayout& layout() const override { return layout_; }
  int seq_len() const override { return cfg_.seq_len; }
  int num_layers() const override { return cfg_.n_layer; }
  int vocab_size() const override { return cfg_.vocab_size; }
  double flops_per_token(int T) const override { return cfg_.flops_per_token(T); }
  // The head's GEMMs (logits and both their gradients over the padded
  // vocabulary) are its FLOPs; the embedding lookup has none to speak of.
  StageCosts stage_costs(int T) const override {
    const double head = 6.0 * static_cast<double>(cfg_.padded_vocab) * cfg_.n_embd;
    return {(cfg_.flops_per_token(T) - head) / cfg_.n_layer, 0.0, head};
  }

 protected:
  DecoderSpecBase(const Config& cfg, const ModelShard& shard) : cfg_(cfg), shard_(shard) {}
  Config cfg_;
  ModelShard shard_;
  Dims dims_;
  ParamLayout layout_;
};

}  // namespace meshtrain
