// GPT-2's ModelSpec (nn/model.h): the parameter layout of gpt_params.h as
// data, its parameter-hook order (nn/gpt.h), FLOPs and memory, and build().
#pragma once
#include <memory>

#include "meshtrain/nn/decoder_spec_base.h"
#include "meshtrain/nn/gpt_config.h"

namespace meshtrain {

class GPTSpec final : public DecoderSpecBase<GPTConfig, GPTDims>,
                      public std::enable_shared_from_this<GPTSpec> {
 public:
  static constexpr const char* kFamily = "gpt";
  static std::shared_ptr<const GPTSpec> make(const GPTConfig& cfg, const ModelShard& shard = {});

  // A tensor-parallel shard (gpt_layout in gpt_spec.cpp names the splits).
  std::shared_ptr<const ModelSpec> sharded(const ModelShard& shard) const override;
  std::string family() const override { return kFamily; }
  nlohmann::json to_json() const override;
  ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                     Precision precision) const override;
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;
  bool initial_weights(uint64_t seed, ElemSpan range, float* buffer) const override;
  std::unique_ptr<Decoder> make_decoder(const Tensor& params) const override;

  // The config from a description written by to_json() (or a checkpoint of
  // an earlier version: the GPTConfig fields without "family").
  static GPTConfig config_from_json(const nlohmann::json& j, const std::string& where);

  GPTSpec(const GPTConfig& cfg, const ModelShard& shard);  // use make()
};

}  // namespace meshtrain
