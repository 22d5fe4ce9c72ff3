// LoRA (low-rank adaptation) as a ModelSpec: the trained model is a set of
// adapters, each a pair A (r, in) and B (out, r) on one linear-layer matrix
// W (out, in) of a frozen base model, so that the layer computes
//   out = inp W^T + (alpha / r) (inp A^T) B^T.
// The flat parameter buffer the engine sees (data parallelism, ZeRO 1-3,
// AdamW, checkpoints) holds the adapters only; the base lives beside it,
// frozen (nn/lora_model.h). Hugging Face PEFT names: an adapter on
// "model.layers.0.self_attn.q_proj.weight" is
// "model.layers.0.self_attn.q_proj.lora_A.weight" and ".lora_B.weight".
//
// Layout: one unit per base unit that holds adapters (a block's adapters,
// in buffer order), and the base's Need/Done order restricted to those
// units, so ZeRO-3 gathers a block's adapters exactly while the block runs.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/nn/model.h"

namespace meshtrain {

struct LoraConfig {
  int rank = 0;         // r; 0 = no LoRA
  double alpha = 16;    // the adapters' output is scaled by alpha / r
  // Which adaptable matrices get adapters: "all" (every linear layer of the
  // blocks), or names a parameter name ends with before ".weight" at a dot
  // boundary ("q_proj", "mlp.c_proj", "c_attn").
  std::vector<std::string> targets = {"all"};
  // Where the frozen base's weights come from (the run's init_from; "" =
  // the seeded random base), recorded so a resume or an export finds them.
  std::string base_from;
  // Under mixed precision the frozen base computes with its 16-bit copy of
  // the matrices only: BF16/FP16 holds just that copy (config
  // lora.base_dtype, the run's precision), 2 bytes per matrix element
  // instead of 6. Merges and exports then read the matrices' 16-bit values,
  // exact for a base that came in 16 bits (most published checkpoints).
  // FP32: the base keeps its f32 values.
  Precision base_precision = Precision::FP32;
  bool half_base() const { return is_mixed(base_precision); }
  float scale() const { return static_cast<float>(alpha / rank); }
  // "all" | "q_proj,v_proj" -> targets; throws on an empty name.
  static std::vector<std::string> parse_targets(const std::string& list);
};

class LoraSpec final : public ModelSpec, public std::enable_shared_from_this<LoraSpec> {
 public:
  static constexpr const char* kFamily = "lora";
  // Throws a clear error for a base with tensor parallelism, a rank < 1, or
  // targets that match no adaptable matrix of the base (naming those it has).
  // A pipeline stage of a base is accepted: its adapters are the whole
  // model's on the stage's layers (sharded()).
  static std::shared_ptr<const LoraSpec> make(std::shared_ptr<const ModelSpec> base,
                                              const LoraConfig& cfg);
  // {"family": "lora", "rank", "alpha", "targets", "base_from", "base": {...}}.
  static std::shared_ptr<const ModelSpec> from_json(const nlohmann::json& j, const std::string& where);

  // One adapted matrix of the base.
  struct Site {
    std::string name;       // the base parameter's name
    int64_t w_begin = 0;    // its first element in the base's flat buffer
    int64_t rows = 0, cols = 0;  // W is (rows, cols) = (out, in)
    int64_t a = 0, b = 0;   // A (rank, cols) and B (rows, rank) in the adapter buffer
    int unit = 0;           // adapter unit
  };

  LoraSpec(std::shared_ptr<const ModelSpec> base, const LoraConfig& cfg);  // use make()
  const LoraConfig& config() const { return cfg_; }
  const ModelSpec& base() const { return *base_; }
  const std::vector<Site>& sites() const { return sites_; }
  // The adapter unit of a base unit (-1: the base unit has no adapters).
  int unit_of_base(int base_unit) const { return unit_of_base_[base_unit]; }
  // Index of the first site at or after base element `w_begin`.
  size_t first_site_at(int64_t w_begin) const;

  std::string family() const override { return kFamily; }
  nlohmann::json to_json() const override;
  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }
  // A pipeline stage (no tensor parallelism): the adapters of the base's
  // stage, named as in the whole model, initialised as the whole model's.
  std::shared_ptr<const ModelSpec> sharded(const ModelShard& shard) const override;
  ModelShard shard() const override { return base_->shard(); }
  int num_layers() const override { return base_->num_layers(); }
  // The base's (the frozen GEMMs skip their weight gradients in every part alike).
  StageCosts stage_costs(int T) const override { return base_->stage_costs(T); }
  int seq_len() const override { return base_->seq_len(); }
  int vocab_size() const override { return base_->vocab_size(); }
  // The base's training FLOPs less its weight-gradient GEMMs (about a third),
  // plus the adapters' (6 per adapter parameter per token): an estimate.
  double flops_per_token(int T) const override;
  // The base's activations and workspace, the adapters' saved products and
  // scratch, and the frozen base as frozen_params.
  ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                     Precision precision) const override;
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;
  std::shared_ptr<const ModelSpec> frozen_base() const override { return base_; }
  Precision frozen_precision() const override { return cfg_.base_precision; }

  // The adapters' memory for micro-batch rows N (= B x T): saved products
  // (activations) and scratch (workspace).
  ModelMemory adapter_memory(int64_t N, Precision precision) const;
  // Uniform draws of the whole model's A matrices before this spec's first
  // site (a pipeline stage's), so a stage initialises its adapters as the
  // whole model does.
  int64_t init_draws_before() const { return init_draws_before_; }

 private:
  std::shared_ptr<const ModelSpec> base_;
  LoraConfig cfg_;
  ParamLayout layout_;
  std::vector<Site> sites_;
  std::vector<int> unit_of_base_;
  int64_t init_draws_before_ = 0;
};

// W += (alpha / r) B A for every site: `merged` holds the base's parameters
// on entry (base layout) and the merged ones on return; `adapters` is the
// whole adapter buffer (LoRA layout).
void merge_lora(const LoraSpec& spec, const float* adapters, float* merged,
                Device device = Device::cpu());

}  // namespace meshtrain
