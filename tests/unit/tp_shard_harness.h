// Shared by the tensor-parallel model tests (llama_tp_mp_test, gpt_tp_mp_test):
// every rank of a real tp group builds its shard of a model (ModelSpec::
// sharded) next to the whole model, and both train a few steps of SGD on the
// same batches; the shard's loss and every gradient element must equal the
// whole model's slices within a tolerance (relative to the largest element
// of each tensor).
// The callers' tolerances: f32, 1e-5. The shard sums its split GEMMs in
// parts and adds them over the group: another order, a few 2^-24 of the
// terms per sum, compounding over the layers and SGD steps; measured at most
// 1.04e-6 (GPT and Llama, tp 2-4, every recompute mode, sequence parallel).
// 16-bit, 2e-3: when the split f32 sums differ in their last bit, the 16-bit
// rounding of an activation can flip to the neighbouring value, a jump of
// one 16-bit ulp (2^-7 of it in bf16, 2^-10 in fp16), which a gradient
// element sees diluted over the rows it sums; measured 1.2e-6 (bf16: no
// flip), 1.1e-4 (fp16, full recompute), 3.6e-7 (bf16, sequence parallel).
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
#include "test_seed.h"

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

// Largest |a - b| over each tensor, against the tensor's largest |b|;
// `largest` (if given) keeps the largest such ratio seen.
inline std::string compare(const ParamLayout& shard_layout, const std::vector<float>& got,
                           const std::vector<float>& want, double tol, const char* what,
                           double* largest = nullptr) {
  std::string e;
  for (const ParamInfo& p : shard_layout.params) {
    double worst = 0, scale = 1e-12;
    for (int64_t i = p.begin; i < p.end(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    if (largest) *largest = std::max(*largest, worst / scale);
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
    m->init_weights(10 + test_seed());
    m->set_recompute(rc);
    m->set_precision(prec);
  }
  const ParamLayout& fl = full_spec->layout();
  const ParamLayout& sl = shard_spec->layout();
  std::vector<float> sliced(static_cast<size_t>(sl.numel));
  copy_logical_to_shard(fl, sl, c.rank(), whole->param_buffer().data<float>(), sliced.data());
  std::string e = compare(sl, to_vector(shard->param_buffer()), sliced, 0, "initial weight");
  double largest = 0;  // relative gradient difference, printed as the tolerance's margin
  for (int step = 0; step < steps && e.empty(); ++step) {
    Batch b = batch(*full_spec, 100 * test_seed() + step, last_row);
    whole->zero_grad();
    shard->zero_grad();
    const float lw = whole->forward(b.view());
    const float ls = shard->forward(b.view());
    largest = std::max(largest, static_cast<double>(std::fabs(lw - ls) / std::fabs(lw)));
    if (!(std::fabs(lw - ls) <= tol * std::fabs(lw)))
      e += fmt::format("step {}: loss {} on the shard, {} whole; ", step, ls, lw);
    whole->backward(1.f);
    shard->backward(1.f);
    copy_logical_to_shard(fl, sl, c.rank(), whole->grad_buffer().data<float>(), sliced.data());
    e += compare(sl, to_vector(shard->grad_buffer()), sliced, tol, "gradient", &largest);
    // SGD on both, so later steps start from the (slightly different) trained weights.
    for (Model* m : {whole.get(), shard.get()}) {
      float* p = m->param_buffer().data<float>();
      const float* g = m->grad_buffer().data<float>();
      for (int64_t i = 0; i < m->param_buffer().numel(); ++i) p[i] -= 0.5f * g[i];
    }
  }
  if (c.rank() == 0)
    fmt::print("tp shard vs whole model: largest relative loss or gradient difference {:.3g}, "
               "tolerance {:.3g}\n", largest, tol);
  return e;
}

// The tp group's traffic for one forward and backward of this rank's shard
// of `full` (a 2-rank group), counted by the Communicator, against the
// Megatron formulas for N = B x T tokens of width C and L layers: per layer
// 2 allreduces of N x C forward (after the row-parallel projections) and 2
// backward (the column-parallel GEMMs' input gradients); plus the
// embedding's, the head's input gradient, and the loss (a max over N rows,
// then N sums and N target logits). With sequence parallelism those become
// reduce-scatters of N x C, the allgathers come before each column-parallel
// GEMM (forward, and again in backward for its weight gradient) and before
// each row-parallel one's backward, and each norm's parameter gradients
// (`norm_floats` per norm: C for RMSNorm, 2C for LayerNorm) are summed over
// tp. Returns "" or what differed.
inline std::string traffic_matches_megatron(comm::Communicator& c,
                                            const std::shared_ptr<const ModelSpec>& full,
                                            int64_t C, int64_t L, bool sp, uint64_t norm_floats) {
  ModelShard which{c.rank(), c.size()};
  which.sequence_parallel = sp;
  auto m = full->sharded(which)->build();
  m->set_tensor_parallel_group(parallel::make_tp_group(c));
  m->init_weights(3);
  Batch b = batch(*full, 9, true);
  const comm::CommCounters before = c.counters();
  m->forward(b.view());
  m->backward(1.f);
  const comm::CommCounters after = c.counters();
  using comm::CollOp;
  auto calls = [&](CollOp op) { return after.calls_of(op) - before.calls_of(op); };
  auto bytes = [&](CollOp op) { return after.bytes_of(op) - before.bytes_of(op); };
  const uint64_t N = static_cast<uint64_t>(b.B) * b.T, l = static_cast<uint64_t>(L);
  const uint64_t NC = N * static_cast<uint64_t>(C) * 4;  // one N x C activation, f32
  const uint64_t loss = N * 4 + 2 * N * 4;                  // max, then (sum, target logit)
  std::string e;
  auto expect = [&](const char* what, uint64_t got, uint64_t want) {
    if (got != want) e += fmt::format("{}: {} (want {}); ", what, got, want);
  };
  if (!sp) {
    expect("allreduce calls", calls(CollOp::Allreduce), 4 * l + 2 + 2);
    expect("allreduce bytes", bytes(CollOp::Allreduce), (4 * l + 2) * NC + loss);
    expect("allgather calls", calls(CollOp::Allgather), 0);
    expect("reduce_scatter calls", calls(CollOp::ReduceScatter), 0);
  } else {
    expect("reduce_scatter calls", calls(CollOp::ReduceScatter), 4 * l + 2);
    expect("reduce_scatter bytes", bytes(CollOp::ReduceScatter), (4 * l + 2) * NC);
    expect("allgather calls", calls(CollOp::Allgather), 6 * l + 3);
    expect("allgather bytes", bytes(CollOp::Allgather), (6 * l + 3) * NC);
    expect("allreduce calls", calls(CollOp::Allreduce), 2 + 2 * l + 1);
    expect("allreduce bytes", bytes(CollOp::Allreduce), loss + (2 * l + 1) * norm_floats * 4);
  }
  return e;
}

}  // namespace tp_test
