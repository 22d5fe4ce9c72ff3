// Per-rank memory: the prediction from the formulas (model states per ZeRO
// stage, activations from the model shape, communication buffers) next to
// the allocator's measured per-category peaks, and the refusal of a
// configuration that cannot fit a memory limit.
//
// Model states per rank for Ψ parameters on N ranks (the ZeRO paper's):
//   stage 0: (p + g + o)Ψ      stage 1: (p + g)Ψ + oΨ/N
//   stage 2: pΨ + (g + o)Ψ/N   stage 3: (p + g + o)Ψ/N  (+ p x persistent units)
// where Ψ/N is the rank's own range. fp32 training: p = g = 4, o = 8 (Adam m,
// v; the fp32 parameters are the master weights).
// Mixed precision (p_full = 2, the 16-bit compute copy): at stage 0 the
// model holds both, (4 + 2 + 4 + 8)Ψ. Under ZeRO the f32 parameters are the
// master weights, kept for the own range only and counted as optimizer state
// (o = 12), and the 16-bit copy is the parameter copy (p = 2): stage 1
// (2 + 4)Ψ + 12Ψ/N, stage 2 2Ψ + 16Ψ/N, stage 3 18Ψ/N — the ZeRO paper's
// 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N with meshtrain's f32 gradients (g = 4, not
// 2). On top, the foreign parts of the parameters the model reads in f32
// (position embeddings, biases, LayerNorm: a few % of Ψ) at 4 bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/memory.h"
#include <memory>

#include "meshtrain/nn/model.h"
#include "meshtrain/optim/optimizer.h"
#include "meshtrain/train/memory_model.h"

namespace meshtrain {

// Bytes per parameter of each kind of model state.
struct StateBytes {
  int64_t p = 4;  // parameters the model computes with
  int64_t g = 4;  // gradients (as held for the optimizer)
  int64_t o = 8;  // optimizer state: AdamW/LAMB m, v (8), SGD/LARS momentum (4)
  // Mixed precision's 16-bit compute copy (2; nn/gpt.h; 0 for fp32). Stage 0:
  // beside the f32 parameters `p`; stages 1-3: the parameter copy, and `p`
  // is the f32 master counted in the sharded optimizer state (see above).
  int64_t p_full = 0;
};

struct MemoryPlan {
  std::shared_ptr<const ModelSpec> model;
  int B = 1, T = 1, threads = 1;
  int world = 1, rank = 0;
  int zero_stage = 0;               // 0..3 (a single rank is stage 0)
  int64_t persist_threshold = 0;    // stage 3
  StateBytes bytes;
  // The gradient reduction's wire format (comm.grad_dtype): 0 = f32, reduced
  // in place; 2 = bf16: stages 0-1 hold a shared bf16 copy of the whole
  // gradient (2Ψ more comm buffers), stages 2-3 hold the ranges waiting for
  // their reduce in bf16 instead of f32 (parallel/zero_gradients.h); 4 =
  // a lossy codec's error-feedback residual (comm.compression, stages 0-1).
  int64_t grad_wire = 0;
  MemoryPrediction base;            // activations and workspace (predict_training_memory)
  // A zero-bubble pipeline stage (zb-h1): each backward's input part
  // stages every unit's gradient before its weight part reports any, so
  // ZeRO-2/3 hold the stage's whole gradient as transient at once.
  bool split_backward = false;
  // The optimizer and where its state lives: with offload.optimizer_state =
  // disk the rank's state is in a file and only the staging buffers are
  // resident (optim/offloaded_optimizer.h, plan_offload).
  OptimizerConfig optimizer;
  // The whole-model f32 copy saving and sampling make after training (the
  // activations freed first): LoRA's merged model on rank 0, or tensor
  // parallelism's allgathered shards and assembled model on every rank; 0
  // when the run saves its own buffer. `product_copy_what` names it. (ZeRO's
  // gather onto rank 0 is derived from the stage: RankMemory::zero_gather.)
  int64_t product_copy = 0;
  std::string product_copy_what;
  // ZeRO initializes only each rank's own range (parallel/zero.h,
  // starts_from_own_range): setup never holds the whole model.
  bool setup_own_range = false;
  // A start from a file: what its reader may stage beside the buffers, a
  // bound (file_staging_bytes).
  int64_t setup_staging = 0;
};

// Whether setup can write just a range of `model`'s parameters: from the
// seed when the family's initial weights are a function of the element,
// from init_from when the file is read by range (ckpt::can_load_range, for a
// tp shard too); never under LoRA (the frozen base loads whole).
bool setup_writes_ranges(const std::string& init_from, const ModelSpec& model);
// MemoryPlan::setup_staging for init_from (empty: none) into `logical` (the
// whole model; under LoRA its frozen base is what is read): the readers stage
// one tensor at a time, in at most three f32 copies (the read, a transpose
// of it, and the window's staging of a tensor a range cuts), so three times
// the largest tensor.
int64_t file_staging_bytes(const std::string& init_from, const ModelSpec& logical);
// MemoryPlan::setup_own_range for a run with this ZeRO stage (0: none),
// precision and init_from (empty: from the seed) on `model` (parallel/zero.h).
bool setup_from_own_range(int zero_stage, Precision precision, const std::string& init_from,
                          const ModelSpec& model);

// Predicted peak bytes per category for one rank.
struct RankMemory {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm = 0, workspace = 0;
  int64_t product_copy = 0;  // MemoryPlan::product_copy
  // Rank 0 under ZeRO, saving or sampling: the other ranks' f32 parameters it
  // does not hold otherwise (parallel/zero_parameters.h, gather_to_root).
  int64_t zero_gather = 0;
  // Before the first step: the whole f32 model built once on every rank
  // (with mixed precision's 16-bit copy) beside the gradients, or the model
  // states, whichever is larger; only the latter when each rank initializes
  // its own range (predict_rank_memory says why).
  int64_t setup = 0;
  // Optimizer state in the second tier (a file on disk), not resident and not
  // in any total; `optimizer` then counts the staging buffers.
  int64_t offloaded = 0;
  int64_t model_states() const { return params + grads + optimizer; }
  int64_t total() const { return model_states() + activations + comm + workspace; }
  // At the end of the run: the activations freed, the copies for saving made.
  int64_t finish_total() const {
    return model_states() + comm + workspace + product_copy + zero_gather;
  }
};

RankMemory predict_rank_memory(const MemoryPlan& plan);

// Throws an Error naming the predicted bytes per category, the limit and
// what each ZeRO stage would need when rank 0 (the largest shard) is
// predicted above `limit_bytes` (<= 0: no limit), during training or at its
// end (the product copy, RankMemory::finish_total), so a run that could not
// save its model is refused before it trains.
void check_memory_limit(const MemoryPlan& plan, double limit_bytes);

// The report `meshtrain train` prints: for each category the prediction and
// the measured peaks of every rank (`peaks[rank][category]`, optionally
// followed by the training's and the setup's total peaks).
std::string memory_report_text(const std::vector<RankMemory>& predicted,
                               const std::vector<std::vector<double>>& peaks);

}  // namespace meshtrain
