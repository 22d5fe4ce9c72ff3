// The Model interface: what the engine above nn/ (data parallelism, ZeRO, the
// training step, checkpoints, the memory report, telemetry) knows about a
// model. A model family (GPT, and next Llama-style decoders, ResNet) provides
// two classes:
//
//   ModelSpec  the shape, without buffers: parameter layout, FLOPs, predicted
//              activation/workspace bytes, its description for checkpoints,
//              and build() to make a Model on given buffers. The planner, the
//              memory check and ZeRO read it before any model exists.
//   Model      one instance on flat buffers: forward/backward on a batch, the
//              gradient-ready and parameter hooks, recompute and precision.
//
// Parameters live in one flat f32 buffer (per shard), gradients in another
// of the same size; each parameter is a view (ParamInfo). Parameter units
// (ParamUnit) are the groups forward/backward use together, tiling the
// buffer; ParamLayout::order is the sequence of parameter-hook events one
// training micro-step produces, so ZeRO-3's gather/release, buckets and
// checkpoints read the order instead of spelling it out per model.
//
// Models register by family name in nn/model_registry.h; nothing above nn/
// names a concrete family.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/core/elem_span.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"
#include "meshtrain/nn/tensor_parallel.h"
#include "meshtrain/nn/decoder.h"
#include "meshtrain/nn/linear_adapters.h"

namespace meshtrain {

class Model;

// One parameter tensor: a view of the flat buffer.
struct ParamInfo {
  std::string name;      // global name (checkpoints, exports), e.g. "h.0.attn.c_attn.weight"
  Shape shape;           // the part this shard holds (the logical shape for a full replica)
  int64_t begin = 0;     // first element in the flat buffer
  int unit = 0;          // the parameter unit it belongs to
  bool decay = true;     // AdamW weight decay applies (matrices, embeddings)
  // Mixed precision: the model reads it through its 16-bit compute copy (a
  // GEMM operand). false: read in f32 (biases, norms, position tables).
  bool half_weight = false;
  // Tensor parallelism: the logical (unsharded) shape, and the dimension
  // split into tp equal slices, shard tp_rank holding slice tp_rank (-1:
  // replicated, every shard holds it whole). Checkpoints and imports map
  // shards to logical tensors through these.
  Shape full_shape{};  // empty: same as shape
  int split_dim = -1;
  // The split dimension is `split_parts` equal blocks, each split into tp
  // slices; the shard holds slice tp_rank of every block, in block order
  // (GPT's fused q|k|v: 3 blocks, so each shard keeps its heads' q, k and v).
  int split_parts = 1;
  // A block's linear-layer matrix (out, in) that a GEMM multiplies its input
  // by (out = inp W^T): LoRA may add an adapter to it (nn/lora_spec.h).
  // Embeddings and the output head are not.
  bool adaptable = false;
  // false: state the model keeps itself in the flat buffer (batch norm's
  // running statistics, updated by its training forward): saved, loaded and
  // resharded with the parameters, but never given a gradient, decayed or
  // stepped by the optimizer.
  bool trained = true;
  const Shape& logical_shape() const { return full_shape.empty() ? shape : full_shape; }
  int64_t numel() const { return shape_numel(shape); }
  int64_t end() const { return begin + numel(); }
};

// A group of parameters used together; units tile the flat buffer in order.
struct ParamUnit {
  std::string name;  // "embeddings", "layer 3", "final norm"
  int64_t begin = 0, end = 0;
  int64_t count() const { return end - begin; }
};

// Parameter-hook events. Need/Done bracket a use of a unit's parameters
// (ZeRO-3 gathers on Need and may free on Done); GradBegin/GradEnd bracket a
// gradient write made outside the unit's backward Need/Done (GPT's tied
// embedding: its weight gradient at the backward head).
enum class ParamEvent { Need, Done, GradBegin, GradEnd };

struct ParamUse {
  bool need = true;   // Need (true) or Done
  int unit = 0;
  bool backward = false;
  bool operator==(const ParamUse&) const = default;
};

// Which part of the logical model an instance holds. A full replica today;
// tensor parallelism sets tp_rank/tp_size (each rank holds a slice of every
// split tensor), pipeline parallelism a layer range with first/last-stage
// flags (only the first stage embeds, only the last computes the loss).
struct ModelShard {
  int tp_rank = 0, tp_size = 1;
  // Sequence parallelism (tp > 1): the rows between the tensor-parallel
  // GEMMs (norms, residual stream) are split over the tp group too.
  bool sequence_parallel = false;
  int layer_begin = 0, layer_end = -1;  // [begin, end); -1 = through the last layer
  bool first_stage = true, last_stage = true;
  bool is_full() const {
    return tp_size == 1 && !sequence_parallel && layer_begin == 0 && layer_end < 0 && first_stage && last_stage;
  }
  // For a family with tensor parallelism only: throws unless tp_rank is in
  // [0, tp_size) and the shard spans every layer (`family` names the model).
  void check_tensor_parallel_only(const char* family) const;
  // For a family with pipeline stages: throws unless tp_rank is in range and
  // the layer range is a non-empty part of [0, n_layer) whose first/last
  // flags agree with where it sits (the first stage starts at layer 0...).
  // Returns the range's end (layer_end, or n_layer for -1).
  int check_stage(int n_layer) const;
  bool is_stage() const { return layer_begin != 0 || layer_end >= 0 || !first_stage || !last_stage; }
  // Throws a clear error naming the numbers unless tp_size divides the
  // model's `what` (n).
  void check_tp_divides(int64_t n, const char* what) const;
};

// Everything the engine needs to know about a model's buffers, as data.
struct ParamLayout {
  int64_t numel = 0;                 // elements of the flat buffer
  std::vector<ParamInfo> params;     // buffer order, tiling [0, numel)
  std::vector<ParamUnit> units;      // buffer order, tiling [0, numel)
  // One training micro-step's Need/Done sequence (forward, then backward).
  std::vector<ParamUse> order;
  // The unit whose gradient backward writes between GradBegin and GradEnd,
  // outside its backward Need/Done (-1: none). ZeRO-2/3 reduce it at GradEnd.
  int bracketed_grad_unit = -1;

  int num_units() const { return static_cast<int>(units.size()); }
  // Sorted, merged ranges of the parameters read in f32 under mixed precision.
  std::vector<ElemSpan> f32_read_ranges() const;
  // Element counts of the units.
  std::vector<int64_t> unit_sizes() const;
  // Throws unless params and units tile [0, numel) and order names real units.
  void validate() const;
};

// The memory a model's training step allocates besides parameter state.
struct ModelMemory {
  int64_t activations = 0;  // MemCategory::Activations
  int64_t workspace = 0;    // MemCategory::Workspace, on the model's device
  // Of workspace: what a model allocates once however many activation slots
  // it holds (Llama's rotary angles); the rest is per slot.
  int64_t shared_workspace = 0;
  // Per activation slot, when the backward is split (backward_stage_input):
  // the copies of the deferred weight GEMMs' operands (MemCategory::Activations).
  int64_t deferred_weights = 0;
  // The CPU GEMMs' f32 copies of 16-bit operands (kernels/cpu/gemm_bf16.h):
  // Workspace in host memory whatever the model's device (the guarded
  // device runs the CPU kernels; a GPU's GEMMs need none).
  int64_t host_gemm_scratch = 0;
  // Parameters outside the trained flat buffer (LoRA's frozen base: its f32
  // values and, under mixed precision, its 16-bit copy), MemCategory::Parameters.
  int64_t frozen_params = 0;
};

// Buffers a model is built on. An empty tensor: the model allocates it
// (f32, counted as Parameters / Gradients). Given: numel() f32 elements that
// outlive the model (shared memory, ZeRO's reserved buffers).
struct ModelBuffers {
  Tensor params, grads;
  bool zero_grads = true;  // zero a given gradient buffer
  // A frozen model (LoRA's base): no gradient buffer at all; the model must
  // be frozen (Model::freeze) before backward.
  bool frozen = false;
};
// For a model's constructor: checks given buffers (numel f32 each), zeroes a
// given gradient buffer when asked, and allocates what is missing.
ModelBuffers adopt_buffers(ModelBuffers buffers, int64_t numel);

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;
  virtual std::string family() const = 0;
  // The description checkpoints store: {"family": ..., family fields...}.
  virtual nlohmann::json to_json() const = 0;
  // One line for logs ("GPT L6 H6 C384 T256 V65: 10.7M parameters").
  virtual std::string describe() const = 0;
  virtual const ParamLayout& layout() const = 0;
  int64_t num_params() const { return layout().numel; }
  virtual ModelShard shard() const { return {}; }
  // The spec of one shard of this (full) model (call only for a shard that
  // is not full); throws a clear error naming the numbers when the family or
  // its shape cannot be split this way.
  virtual std::shared_ptr<const ModelSpec> sharded(const ModelShard& shard) const;
  // What a sample is: token ids (B, T) (MicroBatch::inputs), or a dense
  // f32 array of sample_shape() per sample (MicroBatch::features: images as
  // C x H x W) with one class label each (T = 1).
  enum class Input { Tokens, Dense };
  virtual Input input() const { return Input::Tokens; }
  // The model calls Model::set_replica_group's collectives (synchronized
  // batch norm): the trainer gives it the data-parallel group.
  virtual bool uses_replica_group() const { return false; }
  virtual Shape sample_shape() const { return {}; }  // Dense: one sample's shape
  virtual int seq_len() const = 0;       // longest context (token models; 1 for Dense)
  // Layers pipeline stages split (the whole model's; 0: none to split).
  virtual int num_layers() const { return 0; }
  // What pipeline stages cost, in model FLOPs per token at context T: each
  // layer, and what the first stage (the embedding) and the last (the head
  // and its loss) add. All zero: no estimate (stages split evenly).
  struct StageCosts {
    double layer = 0, first = 0, last = 0;
  };
  virtual StageCosts stage_costs(int /*T*/) const { return {}; }
  virtual int vocab_size() const = 0;    // real vocabulary (token models); classes (Dense)
  // Model FLOPs per token (per sample for Dense) of one training step
  // (forward + backward) at context T; the convention is documented in
  // docs/ARCHITECTURE.md.
  virtual double flops_per_token(int T) const = 0;
  // Exactly what the allocator will count for micro-batch (B, T).
  virtual ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                             Precision precision) const = 0;
  virtual std::unique_ptr<Model> build(ModelBuffers buffers = {}) const = 0;
  // Initial weights as a pure function of the seed (nn/initial_weights.h):
  // writes elements [range) of a buffer in this layout with exactly what
  // Model::init_weights(seed) gives them, so a rank initializes only the part
  // it keeps (ZeRO) without building the whole model. False, writing
  // nothing, for a family that initializes whole models only; an empty range
  // only asks.
  virtual bool initial_weights(uint64_t seed, ElemSpan range, float* buffer) const;
  // A KV-cache decoder (nn/decoder.h) over a whole model's parameters in
  // this (full) spec's layout, e.g. a tensor-parallel run's gathered
  // parameters; null when the family has none. It reads `params` at each
  // feed, so they must outlive it.
  virtual std::unique_ptr<Decoder> make_decoder(const Tensor& params) const;
  // A spec that trains additions to a frozen model (LoRA) returns the frozen
  // model's spec: the layout a run saves, samples from and exports (with the
  // additions merged; Model::merged_parameters). Null for ordinary models.
  virtual std::shared_ptr<const ModelSpec> frozen_base() const { return nullptr; }
  // The precision that frozen model is held in: FP32, or BF16/FP16 when only
  // the 16-bit copy of its matrices is kept (Model::release_f32_matrices;
  // merges and exports read those values).
  virtual Precision frozen_precision() const { return Precision::FP32; }
};

// A micro-batch of B samples, each with T targets: token sequences (inputs
// (B, T) ids, targets (B, T)) or, for a ModelSpec::Input::Dense model, dense
// samples (features: B x sample_shape() f32, targets (B), T = 1). targets may
// be null (no loss); targets < 0 are ignored by the loss.
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
  int B = 0, T = 0;
  const float* features = nullptr;
};

// A measure of the last forward other than the loss, as a sum over its
// samples and the count it is out of (top-1: correct predictions of B), so
// batches and ranks add up exactly before the one division.
struct MetricSum {
  std::string name;  // "top1", "top5"
  double sum = 0, count = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelSpec& spec() const = 0;
  const ParamLayout& layout() const { return spec().layout(); }

  // The flat f32 buffers (layout().numel elements each).
  virtual const Tensor& param_buffer() const = 0;
  virtual const Tensor& grad_buffer() const = 0;
  // The view of one parameter (ParamInfo of layout().params).
  Tensor param(const ParamInfo& p) const { return param_buffer().slice_flat(p.begin, p.numel()).reshape(p.shape); }
  Tensor grad(const ParamInfo& p) const { return grad_buffer().slice_flat(p.begin, p.numel()).reshape(p.shape); }

  virtual void init_weights(uint64_t seed) = 0;
  // Mean loss over the targets not ignored (NaN without targets: only
  // logits computed; 0 when every target is ignored, and backward then adds
  // nothing).
  virtual float forward(const MicroBatch& batch) = 0;
  // Accumulates d(loss * loss_scale)/d(params) into the gradient buffer for
  // the last forward (which must have had targets).
  virtual void backward(float loss_scale) = 0;

  // Pipeline stages (a spec sharded with a layer range, ModelShard): the
  // first stage reads batch.inputs; any other reads `input`, the previous
  // stage's output (B, T, stage_width()) in this model's memory. The last
  // stage reads batch.targets and returns the loss; any other returns NaN
  // and leaves its output in stage_output() until the next forward.
  // backward_stage() starts from the loss (last stage) or from
  // `output_grad`, the next stage's stage_input_grad(); it accumulates the
  // stage's parameter gradients and, unless first, leaves the gradient of
  // its input in stage_input_grad(). On a whole model they are forward()
  // and backward(). Families without stages throw.
  virtual float forward_stage(const MicroBatch& batch, const float* input);
  virtual void backward_stage(const float* output_grad, float loss_scale);
  // Zero-bubble schedules split a stage's backward in two.
  // backward_stage_input() is backward_stage() without the weight-gradient
  // GEMMs: it leaves the input gradient (and the cheap bias, norm and
  // embedding gradients) and queues each weight GEMM with copies of its
  // operands in the selected activation slot (ModelMemory::deferred_weights).
  // backward_stage_weights() runs the slot's queue into the gradient buffer
  // and reports the ranges finished (the grad-ready hook), the same floats
  // backward_stage() writes. Families without the split throw.
  virtual void backward_stage_input(const float* output_grad, float loss_scale);
  virtual void backward_stage_weights();
  virtual const float* stage_output() const;
  virtual const float* stage_input_grad() const;
  // Floats per token of a stage's input and output (the residual stream's width).
  virtual int64_t stage_width() const;
  // Floats of a stage's input or output for a (B, T) micro-batch on this
  // shard: B x T x stage_width(), or this rank's rows of them under sequence
  // parallelism.
  virtual int64_t stage_floats(int B, int T) const {
    return static_cast<int64_t>(B) * T * stage_width();
  }
  // Several micro-batches in flight (pipeline schedules hold up to the
  // stages' count between a micro-batch's forward and its backward): n
  // activation sets, each allocated at its first forward; select_slot(k)
  // makes set k the one forward_stage/backward_stage and stage_output/
  // stage_input_grad use. Setting the count frees every set. Families
  // without slots take n = 1 only.
  virtual void set_activation_slots(int n);
  virtual void select_slot(int slot);
  virtual int activation_slots() const { return 1; }
  // The pipeline chunks (virtual stages) this model holds, in chunk order:
  // itself, or for a rank of an interleaved schedule one model per chunk on
  // views of this model's buffers (nn/chunked_model.h).
  virtual std::vector<Model*> pipeline_chunks() { return {this}; }

  // Training (the default) or evaluation mode: layers whose forward differs
  // (batch norm: the batch's statistics and updates of the running ones in
  // training, the running ones in evaluation) follow it; others ignore it.
  virtual void set_training(bool /*training*/) {}
  virtual bool training() const { return true; }
  // Measures of the last forward with targets besides its loss (none for
  // the language models; top-1/top-5 for a classifier).
  virtual std::vector<MetricSum> metrics() const { return {}; }

  virtual void zero_grad() = 0;
  // Logits of the last forward, (B, T, logits_stride()); the first
  // spec().vocab_size() of each row are real.
  virtual const float* logits() const = 0;
  virtual int logits_stride() const = 0;

  // Called during backward each time [begin, end) of the gradient buffer has
  // received its last contribution, from the top of the buffer down.
  using GradReadyHook = std::function<void(int64_t begin, int64_t end)>;
  virtual void set_grad_ready_hook(GradReadyHook hook) = 0;
  // Parameter events in layout().order (plus GradBegin/GradEnd of the
  // bracketed unit); see ParamEvent.
  using ParamHook = std::function<void(ParamEvent event, int unit, bool backward)>;
  virtual void set_param_hook(ParamHook hook) = 0;

  virtual void set_recompute(const Recompute& recompute) = 0;
  virtual const Recompute& recompute() const = 0;
  // Mixed precision: f32 master parameters, a 16-bit copy of the
  // half_weight parameters for the GEMMs.
  virtual void set_precision(Precision p) = 0;
  virtual Precision precision() const = 0;
  // The 16-bit copy in `buffer` (numel elements), kept current by the caller
  // (ZeRO gathers it from the owners of the f32 masters).
  virtual void use_external_half_copy(Tensor buffer) = 0;
  virtual bool external_half_copy() const = 0;

  // A tensor-parallel shard (spec().shard().tp_size > 1) needs its tp group
  // before forward(); a full replica ignores it.
  virtual void set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group);
  // The data-parallel replicas of this model (the ranks holding the same
  // part on other data), for layers whose forward needs the whole batch's
  // statistics (synchronized batch norm); null or size 1: this rank alone.
  // Every replica calls the group's collectives in the same order. Families
  // without such layers ignore it (ModelSpec::uses_replica_group).
  virtual void set_replica_group(std::shared_ptr<TensorParallelGroup> /*group*/) {}

  // A KV-cache decoder over this model's parameters (nn/decoder.h), or null
  // when the model has none (generation then recomputes the prefix); a
  // tensor-parallel shard refuses (decode from the gathered whole model).
  std::unique_ptr<Decoder> make_decoder() const { return spec().make_decoder(param_buffer()); }

  // Freezes this model under trainable additions to its linear layers
  // (LoRA, nn/lora_model.h): backward writes no gradient of its own
  // parameters (it may have no gradient buffer: ModelBuffers::frozen), each
  // adaptable GEMM calls `adapters` after its forward and in its backward,
  // and the parameters must not change after the first forward (the 16-bit
  // copy is made once). A family without the hooks refuses.
  virtual void freeze(std::shared_ptr<LinearAdapters> adapters);
  // LoRA: the frozen model the additions apply to (init_from loads into
  // it); null for an ordinary model.
  virtual Model* frozen_base() { return nullptr; }
  // The parameters of spec().frozen_base() with the additions merged in,
  // given this model's whole parameters `params` (e.g. ZeRO-3's gathered
  // ones); an ordinary model returns `params`.
  virtual Tensor merged_parameters(const Tensor& params) const { return params; }
  // Between hold_parameters(true) and (false) nothing writes the parameters
  // (a step's micro-batches): a mixed-precision model rounds its 16-bit copy
  // once per unit instead of at every forward. Letting go makes the next
  // forward round again.
  virtual void hold_parameters(bool /*held*/) {}
  // Frees the activations of the last forward (and their scratch) until the
  // next forward allocates them again: room for a whole-model copy between
  // steps (LoRA's merged model, tensor parallelism's assembled one).
  virtual void release_activations() {}
  // The weights are in place (seeded or loaded) and training is about to
  // start: a LoRA model whose config holds the frozen base in 16 bits
  // releases the base's f32 matrices here. Nothing for other models.
  virtual void weights_loaded() {}

  // A frozen model under mixed precision computes with its 16-bit copy of
  // the matrices (ParamInfo::half_weight) only: this rounds them all now
  // and hands their f32 pages back to the system (param_buffer() reads zero
  // there afterwards). Returns the bytes released. A family without a
  // 16-bit copy refuses.
  virtual int64_t release_f32_matrices();
  virtual bool f32_matrices_released() const { return false; }
  // After release_f32_matrices: the matrices' values widened from the
  // 16-bit copy, written into `dst` (a layout-sized f32 buffer).
  virtual void widen_released_matrices(float* dst) const;
};

}  // namespace meshtrain
