// Shared by the tensor-parallel model tests (llama_tp_mp_test, gpt_tp_mp_test):
// every rank of a real tp group builds its shard of a model (ModelSpec::
// sharded) next to the whole model, and both train a few steps of SGD on the
// same batches; the shard's loss and every gradient element must equal the
// whole model's slices within a tolerance (relative to the largest element
// of each tensor).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/nn/shard_slicing.h"
#include "meshtrain/parallel/tp_group.h"

namespace tp_test {

using namespace meshtrain;

inline comm::CommOptions opts() {
  comm::CommOptions o = comm::CommOptions::from_env();
  o.timeout_s = 60;
  return o;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  int B = 2, T = 16;
  MicroBatch view() const { return {inputs.data(), targets.data(), B, T}; }
};

// B x the model's context of random tokens; every 7th target ignored; with
// `last_row`, the last real vocabulary row as an input and a target.
inline Batch batch(const ModelSpec& spec, uint64_t seed, bool last_row = false, int B = 2) {
  Batch b;
  b.B = B;
  b.T = spec.seq_len();
  const int V = spec.vocab_size();
  Rng rng(seed);
  for (int i = 0; i < b.B * b.T; ++i) {
    b.inputs.push_back(static_cast<int32_t>(rng.next_u64() % V));
    b.targets.push_back(i % 7 == 3 ? -1 : static_cast<int32_t>(rng.next_u64() % V));
  }
  if (last_row) b.inputs[1] = b.targets[2] = V - 1;
  return b;
}

// Largest |a - b| over each tensor, against the tensor's largest |b|.
inline std::string compare(const ParamLayout& shard_layout, const std::vector<float>& got,
                           const std::vector<float>& want, double tol, const char* what) {
  std::string e;
  for (const ParamInfo& p : shard_layout.params) {
    double worst = 0, scale = 1e-12;
    for (int64_t i = p.begin; i < p.end(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    if (worst > tol * scale)
      e += fmt::format("{} {}: off by {:.3g} (largest {:.3g}); ", what, p.name, worst, scale);
  }
  return e;
}

inline std::vector<float> to_vector(const Tensor& t) {
  return {t.data<float>(), t.data<float>() + t.numel()};
}

// Trains `steps` of plain SGD on both the whole model and this rank's shard;
// returns "" or what differed.
inline std::string shard_matches_whole(comm::Communicator& c,
                                       const std::shared_ptr<const ModelSpec>& full_spec,
                                       const Recompute& rc, Precision prec, int steps, double tol,
                                       bool sp, bool last_row = false) {
  ModelShard which{c.rank(), c.size()};
  which.sequence_parallel = sp;
  auto shard_spec = full_spec->sharded(which);
  auto whole = full_spec->build();
  auto shard = shard_spec->build();
  shard->set_tensor_parallel_group(parallel::make_tp_group(c));
  for (Model* m : {whole.get(), shard.get()}) {
    m->init_weights(11);
    m->set_recompute(rc);
    m->set_precision(prec);
  }
  const ParamLayout& fl = full_spec->layout();
  const ParamLayout& sl = shard_spec->layout();
  std::vector<float> sliced(static_cast<size_t>(sl.numel));
  copy_logical_to_shard(fl, sl, c.rank(), whole->param_buffer().data<float>(), sliced.data());
  std::string e = compare(sl, to_vector(shard->param_buffer()), sliced, 0, "initial weight");
  for (int step = 0; step < steps && e.empty(); ++step) {
    Batch b = batch(*full_spec, 100 + step, last_row);
    whole->zero_grad();
    shard->zero_grad();
    const float lw = whole->forward(b.view());
    const float ls = shard->forward(b.view());
    if (!(std::fabs(lw - ls) <= tol * std::fabs(lw)))
      e += fmt::format("step {}: loss {} on the shard, {} whole; ", step, ls, lw);
    whole->backward(1.f);
    shard->backward(1.f);
    copy_logical_to_shard(fl, sl, c.rank(), whole->grad_buffer().data<float>(), sliced.data());
    e += compare(sl, to_vector(shard->grad_buffer()), sliced, tol, "gradient");
    // SGD on both, so later steps start from the (slightly different) trained weights.
    for (Model* m : {whole.get(), shard.get()}) {
      float* p = m->param_buffer().data<float>();
      const float* g = m->grad_buffer().data<float>();
      for (int64_t i = 0; i < m->param_buffer().numel(); ++i) p[i] -= 0.5f * g[i];
    }
  }
  return e;
}

}  // namespace tp_test
