// Llama's ModelSpec (nn/model.h): the parameter layout as data, the
// parameter-hook order, FLOPs and memory, the description checkpoints store.
//
// Flat buffer, in Hugging Face LlamaForCausalLM names:
//   model.embed_tokens.weight (Vp, C)                         unit 0
//   layer l (unit 1 + l): input_layernorm.weight (C),
//     self_attn.{q_proj (C, C), k_proj (KV, C), v_proj (KV, C)}.weight
//       (adjacent: one GEMM with the stacked (C + 2 KV, C) matrix),
//     self_attn.o_proj.weight (C, C), post_attention_layernorm.weight (C),
//     mlp.{gate_proj (H, C), up_proj (H, C)}.weight (adjacent: one GEMM),
//     mlp.down_proj.weight (C, H)
//   model.norm.weight (C), lm_head.weight (Vp, C)             unit L + 1
// Parameter hooks: forward Need/Done 0, 1..L, L+1; backward L+1, L..1 (the
// embedding's backward reads no parameters and is reported by the grad-ready
// hook only).
//
// A tensor-parallel shard (sharded()) has the same names and order with its
// slices (LlamaDims): q/k/v, gate/up, the embedding and lm_head split by rows
// (column-parallel GEMMs, a vocabulary-parallel embedding and head), o_proj
// and down_proj by columns (row-parallel); the norms whole.
#pragma once
#include <memory>

#include "meshtrain/nn/decoder_spec_base.h"
#include "meshtrain/nn/llama_config.h"

namespace meshtrain {

class LlamaSpec final : public DecoderSpecBase<LlamaConfig, LlamaDims>,
                        public std::enable_shared_from_this<LlamaSpec> {
 public:
  static constexpr const char* kFamily = "llama";
  static std::shared_ptr<const LlamaSpec> make(const LlamaConfig& cfg, const ModelShard& shard = {});
  static LlamaConfig config_from_json(const nlohmann::json& j, const std::string& where);

  LlamaSpec(const LlamaConfig& cfg, const ModelShard& shard);  // use make()
  std::shared_ptr<const ModelSpec> sharded(const ModelShard& shard) const override;
  std::string family() const override { return kFamily; }
  nlohmann::json to_json() const override;
  ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                     Precision precision) const override;
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;
  bool initial_weights(uint64_t seed, ElemSpan range, float* buffer) const override;
  std::unique_ptr<Decoder> make_decoder(const Tensor& params) const override;

  // Offsets into the flat buffer (elements).
  struct LayerOffsets {
    int64_t ln1, qkv, o, ln2, gate_up, down;
  };
  int64_t embed_offset() const { return 0; }
  const LayerOffsets& layer(int l) const { return layers_[l]; }
  int64_t norm_offset() const { return norm_; }
  int64_t head_offset() const { return head_; }

 private:
  std::vector<LayerOffsets> layers_;
  int64_t norm_ = 0, head_ = 0;
};

}  // namespace meshtrain
