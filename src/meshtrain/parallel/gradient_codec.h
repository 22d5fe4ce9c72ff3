// How the data-parallel gradient reduction encodes what it sends: the codec
// seam inside the replicated strategy (data_parallel.h) and, for the codecs
// whose encoded gradients can be added, ZeRO's reduce-to-owner.
//
//   f32       the gradients themselves (exact)
//   bf16      rounded to bf16, reduced in bf16, widened back (comm.grad_dtype)
//   powersgd  rank-r factors P, Q per matrix, warm-started (powersgd_codec.h)
//   topk      the k largest magnitudes per bucket, as (index, value) pairs
//   sign      1 bit per element and one scale per bucket (sign_codec.h)
//
// A codec reduces one bucket (a range of the flat gradient buffer) at a time,
// asynchronously: start() launches its first round of communication and
// returns a BucketReduction that runs beside backward; a codec with several
// rounds (powersgd) launches the next when the strategy launches its next
// bucket, and all finish after backward. When it finishes, the bucket holds
// the average over ranks of what the codec decoded, identical on every rank.
//
// The lossy codecs keep error feedback (error_feedback.h): what a rank did
// not send this step is added to its next step's gradient, so nothing is
// lost, only delayed (Seide et al. 2014; Karimireddy et al. 2019). They run
// `warmup_steps` steps uncompressed first (1-bit Adam's warmup; PowerSGD's
// start iteration).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/elem_span.h"
#include "meshtrain/parallel/sync_state.h"

namespace meshtrain {
struct ParamLayout;
}

namespace meshtrain::parallel {

// Config "comm.compression" (docs/CONFIG.md).
struct CompressionOptions {
  std::string type = "none";  // none | powersgd | topk | sign
  int rank = 4;               // powersgd: factors' rank (clamped to each matrix's smaller side)
  double ratio = 0.01;        // topk: fraction of each bucket's elements sent
  int64_t warmup_steps = 0;   // steps reduced uncompressed (f32) before compressing
  bool error_feedback = true; // keep what was not sent and add it to the next step
  uint64_t seed = 20191101;   // powersgd's initial Q (the same on every rank)
  bool compressing() const { return type != "none"; }
};

// The names make_gradient_codec accepts for CompressionOptions::type.
const std::vector<std::string>& compression_types();

// One bucket's reduction in flight. Every rank must issue the same
// collectives in the same order, so a codec with several rounds launches a
// later round only when the strategy says so, at points every rank reaches
// in the same order (the next bucket's launch, the end of backward), never
// when a round happens to complete.
class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  // Several rounds: waits for the round in flight and launches the next
  // (a no-op for single-round codecs and once the last round is launched).
  virtual void launch_next_round() {}
  // Blocks until the averaged gradients are in place (every round done);
  // rethrows a failed collective.
  virtual void finish() = 0;
};

// What a codec is built with.
struct CodecContext {
  comm::Communicator* comm = nullptr;  // the data-parallel group (outlives the codec)
  const ParamLayout* layout = nullptr; // tensor shapes (powersgd); may be null for the others
  int64_t num_params = 0;
  // Called with each collective a reduction launches (the strategy's timing).
  std::function<void(const comm::Work&)> watch;
};

class GradientCodec {
 public:
  virtual ~GradientCodec() = default;
  virtual std::string name() const = 0;      // "f32", "bf16", "powersgd", ...
  virtual std::string describe() const = 0;  // for the training log
  // The dtype a codec's encoded gradients are added in (f32, bf16): ZeRO-2/3
  // reduce each piece to its owner in it. nullopt: the encoded form does not
  // add up (a sum of rank-r factorizations or of sparse picks is not one).
  virtual std::optional<DType> summable_dtype() const { return std::nullopt; }
  // True when a bucket must hold whole tensors (powersgd factors matrices).
  virtual bool whole_tensors() const { return false; }
  // Start of each step's reduction (the warmup counts these).
  virtual void begin_step() {}
  // Starts averaging grads[span] over the group; grads[span] is the codec's
  // until the returned reduction finishes.
  virtual std::unique_ptr<BucketReduction> start(float* grads, ElemSpan span) = 0;
  // Host memory the codec keeps between steps (error feedback, factors).
  virtual int64_t state_bytes() const { return 0; }
  // fp16 loss scaling: the gradients this step are the true ones times
  // `scale`; a residual kept at another scale is rescaled to it.
  virtual void set_gradient_scale(float) {}
  // The step was skipped (inf/NaN gradients): what the residual holds now
  // came from them and is dropped.
  virtual void discard_feedback() {}
  // What a checkpoint carries (sync_state.h), and its counters put back
  // after the tensors were filled.
  virtual SyncState checkpoint_state() { return {}; }
  virtual void restore_counters(const nlohmann::json&) {}
};

// The codec for `opts` (type "none": f32 or bf16 by `grad_dtype`). Collective
// when it allocates shared memory (bf16): every rank of ctx.comm calls it.
std::unique_ptr<GradientCodec> make_gradient_codec(const CompressionOptions& opts, DType grad_dtype,
                                                   CodecContext ctx);

// The uncompressed f32 average of grads[span] (in place): the exact codec's
// reduction, and the lossy codecs' during warmup.
std::unique_ptr<BucketReduction> allreduce_f32(const CodecContext& ctx, float* grads, ElemSpan span);

}  // namespace meshtrain::parallel

namespace meshtrain::parallel {

// A reduction that is done when `works` are, then runs `then` (decode) once.
std::unique_ptr<BucketReduction> reduction_of(std::vector<comm::Work> works,
                                              std::function<void()> then = {});

}  // namespace meshtrain::parallel
