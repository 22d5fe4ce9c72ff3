// One rank's part of a pipeline-parallel step: it runs this rank's
// instruction list (plan/pipeline_instructions.h, the same lists the planner
// replays) over its stage models, one per model chunk, with the activations
// and their gradients moving to and from the neighbouring stages by
// point-to-point sends and receives on the pipeline communicator (the pp
// axis of the mesh: rank s holds stage s). Receives block (with the
// communicator's timeout, naming the peer); sends are asynchronous and
// complete by the end of the step.
//
// Each chunk keeps its in-flight micro-batches in activation slots
// (Model::set_activation_slots): a slot is taken by a micro-batch's forward
// and given back after its backward, as many as the schedule ever holds.
// Parameters held by two virtual stages (GPT's tied embedding: the first
// stage's lookup, the last stage's head) get the sum of both gradients on
// both holders after the step, so both copies take the same update.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/plan/pipeline_instructions.h"

namespace meshtrain::parallel {

// The layer ranges of `stages` x `chunks` virtual stages over n_layer
// layers, as even as possible (the first ranges one layer longer); virtual
// stage vs = chunk * stages + stage holds ranges[vs]. Throws when there
// are fewer layers than virtual stages.
std::vector<ModelShard> pipeline_shards(int n_layer, int64_t stages, int64_t chunks);

// The activation slots each of `stage`'s chunks holds under a schedule: the
// most micro-batches it keeps between a forward and the backward that frees
// it (GPipe m; 1F1B p - stage; the executor allocates exactly these).
std::vector<int> pipeline_activation_slots(plan::PipeSchedule kind, int64_t stages,
                                           int64_t micro_batches, int64_t chunks, int64_t stage);

struct PipelineTiming {
  double compute_s = 0;   // forward and backward
  double sync_wait_s = 0;  // waited for the data-parallel gradient reductions
  double recv_wait_s = 0;  // blocked in receives (the bubble and the transfers)
  double tied_s = 0;       // the tied parameters' gradient exchange
};

class PipelineExecutor {
 public:
  // `pp`: the pipeline group (size = stages, rank = this stage).
  // `virtual_stages`: every virtual stage's spec (stages x chunks, e.g. the
  // whole model sharded by pipeline_shards); `chunks[c]` this rank's model
  // of virtual stage c * stages + rank. The schedule is fixed for
  // micro_batches micro-batches per step.
  PipelineExecutor(comm::Communicator pp,
                   std::vector<std::shared_ptr<const ModelSpec>> virtual_stages,
                   std::vector<Model*> chunks, plan::PipeSchedule kind, int64_t micro_batches);

  // One step's forwards and backwards over `micro` (every rank gets the
  // same micro-batches; the first virtual stage reads their inputs, the
  // last their targets), each backward scaled by loss_scale; gradients
  // accumulate into the chunks' buffers (zero them before). Then the tied
  // parameters' gradients are summed. Returns the micro-batches' losses on
  // the rank of the last virtual stage, NaN elsewhere.
  std::vector<float> run(const std::vector<MicroBatch>& micro, float loss_scale);
  // The same with each micro-batch's backward scaled by its own factor
  // (token-weighted losses of masked data).
  std::vector<float> run(const std::vector<MicroBatch>& micro, const std::vector<float>& loss_scales);

  // Data parallelism over each stage's replicas: called around every
  // backward of the step, `last` on the stage's final one, which is chunk
  // 0's (the gradient sync's begin_backward/end_backward,
  // parallel/gradient_sync.h); `end` returns the seconds it waited. `begin`
  // gets the chunk whose backward runs (its gradients are that part of the
  // rank's buffer). `pass` is told each pass that reads parameters before it
  // runs (chunk index; a forward, or a backward or its input part), so
  // ZeRO-3 gathers in the schedule's order. Each optional.
  struct BackwardHooks {
    std::function<void(bool last, const Model& chunk)> begin;
    std::function<double(bool last)> end;
    std::function<void(int chunk, bool backward)> pass;
  };
  void set_backward_hooks(BackwardHooks hooks) { hooks_ = std::move(hooks); }

  // Where the reduced gradients are when each data-parallel rank keeps only
  // its own ZeRO range of them (parallel/zero_layout.h; ZeRO-2 reduces to the
  // owners): a tied parameter's sum then pairs this rank's range of it with
  // the ranks of the other holder's stage that hold the same elements, since
  // the two stages' buffers, and so their ranges, differ. Without it the
  // reduced gradients are whole on every rank and the holders of one
  // data-parallel replica exchange them whole.
  struct ShardedGradients {
    std::function<float*()> grads;  // element i of this rank's buffer at grads()[i], in its own range
    int dp_rank = 0, dp_size = 1;
    comm::Communicator world;       // reaches every stage's data-parallel ranks
    std::function<int(int dp, int64_t stage)> world_rank;  // this rank's tp coordinate
    // Per pipeline rank (stage): what its ranks hold at this tp coordinate,
    // all its chunks in one buffer (the layout the ZeRO ranges cut).
    std::vector<std::shared_ptr<const ModelSpec>> rank_specs;
  };
  void set_sharded_gradients(ShardedGradients g);

  // One micro-batch's forward through every virtual stage, no backward
  // (evaluation): the loss on the rank of the last virtual stage, NaN
  // elsewhere. Uses each chunk's slot 0; call between steps.
  float forward_only(const MicroBatch& mb);

  const std::vector<std::vector<plan::PipeInstr>>& instructions() const { return instrs_; }
  const PipelineTiming& timing() const { return timing_; }
  // Whether parameter `name` of this rank is also held by a lower virtual
  // stage (which then counts it, e.g. in the gradient norm).
  bool tied_elsewhere_first(const std::string& name) const;
  // Whether parameter `name` of this rank is also held by another virtual stage.
  bool tied(const std::string& name) const;
  int64_t stages() const { return p_; }

 private:
  struct TiedParam {  // a parameter also held by another virtual stage
    std::string name;
    int chunk = 0;          // this rank's chunk holding it
    int64_t begin = 0, n = 0;  // in that chunk's buffers
    int64_t other_vs = 0;   // the other holder
    bool first = true;      // this holder's gradient is the sum's first term
  };
  void find_tied_params();
  void sum_tied_gradients();
  void sum_tied_sharded();
  int64_t virtual_stage(int chunk) const { return chunk * p_ + rank_; }

  comm::Communicator pp_;
  std::vector<std::shared_ptr<const ModelSpec>> specs_;  // per virtual stage
  std::vector<Model*> chunks_;
  int64_t p_ = 1, v_ = 1, m_ = 1;
  int rank_ = 0;
  std::vector<std::vector<plan::PipeInstr>> instrs_;
  int64_t final_backward_ = -1;  // index of this rank's last backward instruction
  std::vector<TiedParam> tied_;
  PipelineTiming timing_;
  BackwardHooks hooks_;
  std::optional<ShardedGradients> sharded_;
};

}  // namespace meshtrain::parallel
