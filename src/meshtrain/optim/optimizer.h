// The optimizer seam: one interface over a range of the flat parameter
// buffer (ZeRO gives each rank its own range), with its state as named
// tensors over the same range, which checkpoints save, reshard and restore
// by name without knowing the optimizer (ckpt/model_checkpoint.h).
//
//   AdamW   optim/adamw.h   exp_avg, exp_avg_sq
//   SGD     optim/sgd.h     momentum (PyTorch's form, Nesterov optional)
//   LARS    optim/lars.h    momentum; a trust ratio per layer
//   LAMB    optim/lamb.h    exp_avg, exp_avg_sq; a trust ratio per layer
//
// LARS and LAMB need each layer's norms although a ZeRO range may cut a
// layer: they sum per-layer partial squares across the ranks that hold its
// pieces (optim/tensor_norms.h, set with set_norm_group).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/core/tensor.h"
#include "meshtrain/optim/param_segments.h"
#include "meshtrain/optim/tensor_norms.h"

namespace meshtrain {

// Where the optimizer state lives (config section `offload`): "none" keeps
// it in memory; "disk" keeps it in a file and steps the parameters one unit
// at a time, reading the next units' state while one is updated
// (optim/offloaded_optimizer.h).
struct OffloadConfig {
  std::string optimizer_state = "none";  // none | disk
  std::string path;      // disk: the directory of the state file ("" = $TMPDIR or /tmp)
  double unit_mb = 32;   // optimizer state per unit (whole layers, or pieces of a larger one)
  int prefetch = 2;      // units read ahead of the one being updated
  bool enabled() const { return optimizer_state != "none"; }
};

// Every optimizer's settings (config keys train.optimizer, train.beta1, ...).
struct OptimizerConfig {
  std::string type = "adamw";  // adamw | sgd | lars | lamb
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // AdamW, LAMB (eps also LARS's)
  float weight_decay = 0.1f;
  float momentum = 0.9f;   // SGD, LARS
  bool nesterov = false;   // SGD, LARS
  float trust_coefficient = 0.001f;  // LARS's eta
  float trust_clip = 10.0f;          // LAMB: the trust ratio's upper bound; 0 = none
  // false: norms and biases are decayed (and adapted, LARS/LAMB) like matrices.
  bool exclude_norms_and_biases = true;
  OffloadConfig offload;
  // Optimizer state elements per parameter (the memory model's count).
  int states_per_param() const { return type == "sgd" || type == "lars" ? 1 : 2; }
};
// The names train.optimizer accepts.
const std::vector<std::string>& optimizer_types();

// A named state tensor over [begin, end) (f32).
struct OptimizerState {
  std::string name;
  Tensor* tensor = nullptr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string type() const = 0;
  // One update of params[begin:end) from grads[begin:end) (pointers to the
  // start of the whole flat buffers); grad_scale multiplies gradients first.
  virtual void step(float* params, const float* grads, float lr, float grad_scale = 1.0f) = 0;
  virtual std::vector<OptimizerState> state() = 0;
  // The tensors state() returned are done with (a resume filled them); an
  // optimizer that keeps its state elsewhere takes the values back now.
  virtual void release_state() {}
  // The hyperparameters a checkpoint records beside the type.
  virtual nlohmann::json hyperparameters() const = 0;
  // Where the other pieces of each layer are (LARS, LAMB); others ignore it.
  virtual void set_norm_group(NormGroup g) { norm_group_ = std::move(g); }
  // Whether the step needs each layer's norms (LARS, LAMB).
  virtual bool per_layer() const { return false; }

  // While one exists on this thread, optimizers constructed allocate no
  // state: their state() tensors stay empty until the constructing code binds
  // them to memory it owns (optim/offloaded_optimizer.h's staging buffers).
  class StateElsewhere {
   public:
    StateElsewhere();
    ~StateElsewhere();
    StateElsewhere(const StateElsewhere&) = delete;
    StateElsewhere& operator=(const StateElsewhere&) = delete;
  };

  int64_t steps_taken() const { return t_; }
  virtual void set_steps_taken(int64_t t) { t_ = t; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  Device device() const { return device_; }

 protected:
  // segments must cover [begin, end) (they may extend beyond; they are clipped).
  Optimizer(int64_t begin, int64_t end, std::vector<ParamSegment> segments, Device device);
  // Zeros over [begin, end) on the optimizer's device (none under StateElsewhere).
  Tensor new_state() const;
  // The run's element offset of segment s in the state tensors.
  int64_t offset(const ParamSegment& s) const { return s.begin - begin_; }
  const std::vector<ParamSegment>& segments() const { return segments_; }
  // LARS, LAMB: per-layer sums of k values over the layers `of` (this
  // rank's, one segment per tensor), the pieces' partials from `f`
  // (TensorNorms::sums); indexed [tensor * k + j].
  std::vector<double> tensor_sums(const std::vector<ParamSegment>& of, int k,
                                  const TensorNorms::PieceSums& f) const;
  int64_t t_ = 0;

 private:
  int64_t begin_, end_;
  int ntensors_ = 0;  // the layout's tensor count (per-tensor segments), 0 = merged runs
  std::vector<ParamSegment> segments_;
  Device device_;
  NormGroup norm_group_;
};

// The optimizer `cfg.type` names over [begin, end) of a model with `layout`.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, int64_t begin, int64_t end,
                                          const ParamLayout& layout, Device device);

}  // namespace meshtrain
