// ZeRO-2/3 gradients: a rank keeps only its own range, in an fp32 shard.
// Backward writes full gradients into a reserved (virtual) buffer; each range
// the model reports finished (its grad-ready hook: GPT's final LayerNorm, each
// layer, the embeddings) is reduced to its owners right away (one Avg reduce
// per owner piece, async, overlapping the rest of backward). When a range's
// reduces complete, the owner adds its piece into the shard and every rank
// returns the range's pages (they read as zero again, ready for the next
// micro-batch). With gradient accumulation this happens every micro-batch.
// The bracketed unit's gradient (nn/model.h; GPT's embeddings) is reduced
// twice per backward (the tied weight's at the head, and the encoder's rows
// after the layers), see on_grad_end().
// The transient full gradients are counted as communication buffers from the
// moment backward starts writing a unit (on_grad_begin: a layer's backward
// Need, the tied embedding's GradBegin, nn/gpt.h) until they are returned.
// At most kMaxPending reported ranges wait for their reduces: backward blocks
// on the oldest beyond that, which bounds the transient memory to the
// bracketed unit, the unit being written and kMaxPending reported ranges.
// With `isolate_bracketed` (stage 3) the bracketed unit's reduce is also
// waited for before backward starts writing another unit, so the largest
// transient gradient is never held together with a layer's gradient and
// gathered parameters. Every reduce is watched by a CompletionClock, so the
// step's total reduction time is known (telemetry's comm_total).
// bf16 wire format (set_wire_dtype(BF16), config comm.grad_dtype = bf16): a
// reported range is rounded to bf16 into a second reserved buffer (the
// wire) chunk by chunk, its f32 pages returned as each chunk is rounded, and
// each owner piece is reduced (Avg) there; the owner widens its piece into
// the f32 shard when the reduce completes, and the wire pages are returned.
// Pending ranges then hold 2 bytes per element instead of 4, and half the
// bytes cross the wire.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/parallel/completion_clock.h"
#include "meshtrain/parallel/reserved_buffer.h"
#include "meshtrain/parallel/zero_layout.h"

namespace meshtrain::parallel {

class ZeroGradients {
 public:
  static constexpr size_t kMaxPending = 2;
  // `bracketed_unit`: the unit whose gradient comes between GradBegin and
  // GradEnd (-1: none).
  ZeroGradients(comm::Communicator comm, ZeroLayout layout, std::vector<ElemSpan> units,
                ReservedBuffer& grads, int bracketed_unit = -1, bool isolate_bracketed = false);
  ~ZeroGradients();

  // F32 (default: the f32 gradients reduced in place) or BF16 (see above).
  // Call before the first backward.
  void set_wire_dtype(DType wire);
  void begin_backward();
  // The next backward writes only `span` (a pipeline chunk's part of the
  // buffer): its ranges are reported from span.end down, and end_backward
  // reduces what is left of it. Reset to the whole buffer by end_backward.
  void set_backward_span(ElemSpan span);
  // Backward is about to write the gradients of `unit` (its backward Need;
  // the bracketed unit's GradBegin). With isolate_bracketed, first waits for
  // the bracketed unit's reduce if pending.
  void on_grad_begin(int unit);
  // Backward has written the bracketed unit's gradient (GPT: the tied
  // embedding's weight gradient; other units' ranges come through on_ready): it
  // is reduced right away and its pages returned, instead of being held
  // through the whole backward. The encoder's contribution (the rows of the
  // batch's tokens and the positions) follows in the final range and is
  // added to the shard separately (the sum is the same; it is not counted as
  // transient, being a few rows).
  void on_grad_end(int unit);
  // The model's grad-ready hook.
  void on_ready(int64_t begin, int64_t end);
  // After each backward: reduces anything not yet reported, waits for all,
  // accumulates into the shard. Returns the seconds spent waiting.
  double end_backward();
  // Zeroes the shard (start of a step) and starts the step's timing.
  void zero();
  // This step's reductions: when the first was launched (steady clock, 0 =
  // none), and the time the progress engine spent on them (waits for every
  // one to be stamped; call after end_backward()).
  // Reduces watched so far this step (each owner piece counts), and when the i-th launched.
  size_t watched() const { return launched_at_.size(); }
  double launched_at(size_t i) const { return launched_at_.at(i); }
  double busy_seconds();
  // The own range's averaged gradients (layout.own().count() elements).
  float* shard() const { return shard_.data<float>(); }
  int64_t reductions() const { return reductions_; }

 private:
  struct Pending {
    ElemSpan span;
    std::vector<comm::Work> works;
  };
  void launch(ElemSpan span);
  void poll();
  void finish(Pending& p);
  // bf16 wire: rounds `span` into the wire and returns its f32 pages.
  void narrow_to_wire(ElemSpan span);
  // The staged units inside `span` stop counting as transient; their bytes.
  int64_t release_staged(ElemSpan span);

  comm::Communicator comm_;
  ZeroLayout layout_;
  std::vector<ElemSpan> units_;
  ReservedBuffer& grads_;
  Tensor shard_;
  std::deque<Pending> pending_;
  std::vector<bool> staged_;
  int bracketed_ = -1;
  bool isolate_bracketed_ = false;
  std::vector<double> launched_at_;  // per watched reduce, this step
  std::unique_ptr<CompletionClock> clock_;
  int64_t frontier_ = 0, reductions_ = 0;
  std::optional<ElemSpan> span_;  // set_backward_span's, for the next backward
  ExternalBytes staging_{MemCategory::CommBuffers};
  std::unique_ptr<ReservedBuffer> wire_;  // bf16 wire format only
  ExternalBytes wire_bytes_{MemCategory::CommBuffers};  // pending ranges in the wire
  ExternalBytes narrowing_{MemCategory::CommBuffers};   // f32 of a range being rounded
};

}  // namespace meshtrain::parallel
