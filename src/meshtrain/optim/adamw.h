// AdamW over a range of a flat parameter buffer. The range lets ZeRO give each
// rank its own shard; the segments say which parameters get weight decay.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/tensor.h"

namespace meshtrain {

// A contiguous run of the flat buffer with one weight-decay setting.
struct ParamSegment {
  int64_t begin = 0, end = 0;
  bool decay = true;
  bool trained = true;  // false: model state the optimizer leaves alone (ParamInfo::trained)
};

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
 public:
  // Optimizer state (m, v) for elements [begin, end) of the flat buffers.
  // segments must cover [begin, end) (they may extend beyond; they are clipped).
  // The state lives on `device`, that of the parameters it updates, and the
  // step runs there (kernels/kernel_table.h).
  AdamW(int64_t begin, int64_t end, std::vector<ParamSegment> segments, AdamWConfig cfg,
        Device device = Device::cpu());

  // One update of params[begin:end) from grads[begin:end) (pointers to the
  // start of the whole flat buffers). grad_scale multiplies gradients first.
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f);

  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  int64_t begin_, end_;
  std::vector<ParamSegment> segments_;
  AdamWConfig cfg_;
  Tensor m_, v_;
  int64_t t_ = 0;
};

}  // namespace meshtrain
