// GPT-2's ModelSpec (nn/model.h): the parameter layout of gpt_params.h as
// data, its parameter-hook order (nn/gpt.h), FLOPs and memory, and build().
#pragma once
#include <memory>

#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

class GPTSpec final : public ModelSpec, public std::enable_shared_from_this<GPTSpec> {
 public:
  static constexpr const char* kFamily = "gpt";
  static std::shared_ptr<const GPTSpec> make(const GPTConfig& cfg, const ModelShard& shard = {});

  const GPTConfig& config() const { return cfg_; }
  const GPTDims& dims() const { return dims_; }
  ModelShard shard() const override { return shard_; }
  // A tensor-parallel shard (gpt_layout in gpt_spec.cpp names the splits).
  std::shared_ptr<const ModelSpec> sharded(const ModelShard& shard) const override;
  std::string family() const override { return kFamily; }
  nlohmann::json to_json() const override;
  std::string describe() const override { return cfg_.describe(); }
  const ParamLayout& layout() const override { return layout_; }
  int seq_len() const override { return cfg_.seq_len; }
  int vocab_size() const override { return cfg_.vocab_size; }
  double flops_per_token(int T) const override { return cfg_.flops_per_token(T); }
  ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                     Precision precision) const override;
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;
  std::unique_ptr<Decoder> make_decoder(const Tensor& params) const override;

  // The config from a description written by to_json() (or a checkpoint of
  // an earlier version: the GPTConfig fields without "family").
  static GPTConfig config_from_json(const nlohmann::json& j, const std::string& where);

  GPTSpec(const GPTConfig& cfg, const ModelShard& shard);  // use make()

 private:
  GPTConfig cfg_;
  ModelShard shard_;
  GPTDims dims_;
  ParamLayout layout_;
};

}  // namespace meshtrain
