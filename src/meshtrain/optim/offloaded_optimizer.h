// Optimizer state offloaded to disk (ZeRO-Infinity's idea on one tier): the
// state of the range [begin, end) lives in a StateFile, and the update walks
// the range one unit at a time. A unit's state is read into one of
// prefetch + 1 staging buffers, the wrapped optimizer (AdamW, SGD, LARS,
// LAMB, unchanged) updates the unit from it, and it is written back, while
// the transfers of the units around it run on their own thread
// (optim/state_transfers.h). Only the staging buffers are resident.
//
// Units hold whole layers (a trust ratio needs the layer's norms); a layer
// larger than a unit is cut into unit-sized pieces for the optimizers that
// update element by element (AdamW, SGD). Each element sees the same
// arithmetic as in memory, so training is bit-identical with and without.
//
// Checkpoints read and fill state() as for any optimizer: it reads the whole
// state into memory for that moment (the checkpoint's snapshot copies it
// anyway); release_state() (after a resume) or the next step writes it back
// and frees it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "meshtrain/core/memory.h"
#include "meshtrain/optim/optimizer.h"
#include "meshtrain/optim/state_file.h"
#include "meshtrain/optim/state_transfers.h"

namespace meshtrain {

// One unit: elements [begin, end) and where its states lie in the file
// (state k at `offset + k * padded` bytes; padded is whole blocks).
struct OffloadUnit {
  int64_t begin = 0, end = 0;
  int64_t offset = 0, padded = 0;
};

// How `cfg.offload` cuts [begin, end) of `layout` into units, with the file
// and staging sizes (what the memory plan counts).
struct OffloadPlan {
  std::vector<OffloadUnit> units;
  int states = 0;             // state tensors per element
  int64_t file_bytes = 0;     // the second tier
  int slots = 1;              // staging buffers: prefetch + 1, at most one per unit
  int64_t staging_bytes = 0;  // resident: `slots` buffers of the largest unit
};
OffloadPlan plan_offload(const OptimizerConfig& cfg, int64_t begin, int64_t end,
                         const ParamLayout& layout);

class OffloadedOptimizer final : public Optimizer {
 public:
  OffloadedOptimizer(const OptimizerConfig& cfg, int64_t begin, int64_t end,
                     const ParamLayout& layout, Device device);
  ~OffloadedOptimizer() override;

  std::string type() const override { return prototype_->type(); }
  bool per_layer() const override { return prototype_->per_layer(); }
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f) override;
  std::vector<OptimizerState> state() override;
  void release_state() override { store_materialized(); }
  nlohmann::json hyperparameters() const override { return prototype_->hyperparameters(); }
  void set_norm_group(NormGroup g) override;
  void set_steps_taken(int64_t t) override;

  const OffloadPlan& plan() const { return plan_; }
  const StateFile& file() const { return *file_; }
  const StateTransfers& transfers() const { return *io_; }

 private:
  struct Staging;
  void bind(size_t unit, size_t slot);
  float* slot(size_t s) const;
  void store_materialized();  // state() copies back to the file, then freed

  OffloadPlan plan_;
  std::unique_ptr<Optimizer> prototype_;          // over no elements: type, names, settings
  std::vector<std::unique_ptr<Optimizer>> inner_;  // one per unit
  std::unique_ptr<StateFile> file_;
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<StateTransfers> io_;  // last: stops before the buffers go
  std::vector<Tensor> materialized_;    // state() between a checkpoint and the next step
};

}  // namespace meshtrain
