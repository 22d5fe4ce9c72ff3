// ZeRO's parameter side: after each optimizer step a rank's own range of the
// flat parameter buffer is current and the rest is stale. Units
// (ParamLayout::units, nn/model.h; GPT: embeddings, each layer, the final
// LayerNorm) are brought up to date by broadcasting each of their pieces from
// its owner, driven by the model's parameter hook (Model::set_param_hook) and
// the order it documents as data (ParamLayout::order):
//   - stages 1 and 2 keep every unit resident: all gathers are launched right
//     after the update (async) and Need(unit) waits only for its own unit, so
//     the next forward starts on the embeddings while later layers arrive;
//   - stage 3 (sharded) holds only its own range plus the persistent units
//     (smaller than the threshold); Need(unit) gathers the unit (or waits for
//     its prefetch), prefetches the next unit of the documented order (not
//     while the whole tied embedding is gathered: with its gradient written
//     after its backward Done, those are the peaks), and Done(unit) returns
//     its pages unless the unit is needed again within the next two uses
//     (GPT: the head's embedding between forward and backward). Prefetch
//     stays within a micro-batch: the next one's first unit is gathered at
//     its Need rather than beside the last layer's backward.
//     GradBegin and GradEnd events are ignored (they read no parameters).
// Every decision depends only on the sequence of hook events, which is the
// same on every rank, so the collectives match across ranks.
//
// Mixed precision (HalfCopy): the f32 buffer is the master copy and only the
// own range of it stays resident (it is the optimizer's, counted as
// optimizer state), at every stage. What is gathered is the model's 16-bit
// compute copy (each owner rounds its range after the update: half the bytes
// of an f32 gather) plus, in f32, the few parameters the model reads in f32
// (position embeddings, biases, LayerNorm: HalfCopy::f32_spans).
//
// A save or a sample reads the whole f32 model on rank 0 only:
// gather_to_root() sends every other rank's stale-on-root pieces there and
// leaves the other ranks as they are, so only rank 0 grows by the model
// (gather_all() grows every rank); release_transient() drops it again.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/parallel/reserved_buffer.h"
#include "meshtrain/parallel/zero_layout.h"

namespace meshtrain::parallel {

// Mixed precision's 16-bit compute copy (one element per parameter).
struct HalfCopy {
  uint16_t* data = nullptr;
  ReservedBuffer* reserved = nullptr;  // holds `data`: foreign pages go on release
  DType dtype = DType::BF16;
  // Sorted, disjoint: the parameters the model reads in f32 (not GEMM weights).
  std::vector<ElemSpan> f32_spans;
};

class ZeroParameters {
 public:
  // `units` tile the buffer in order. `reserved` (stage 3, and every stage
  // with `half`) holds the f32 parameters and lets foreign pages go; null for
  // fp32 stages 1 and 2, whose parameters live in `params` (counted by the
  // allocator). `shard_units`: stage 3 (units below `persist_threshold`
  // elements stay resident). `half`: mixed precision (null for fp32).
  // `order`: one micro-step's Need/Done sequence (ParamLayout::order).
  // `exclusive_unit` (-1: none): while it is gathered nothing is prefetched
  // (the bracketed unit: GPT's tied embedding, see on_event).
  // `own_range_start`: setup writes only the own range (initial weights
  // from the seed, or a load by range), so no foreign part is resident before start(), which
  // gathers them; otherwise the whole buffer is (initialization, loading)
  // until shard().
  ZeroParameters(comm::Communicator comm, ZeroLayout layout, std::vector<ElemSpan> units,
                 std::vector<ParamUse> order, int exclusive_unit, float* params,
                 ReservedBuffer* reserved,
                 bool shard_units,
                 int64_t persist_threshold, const HalfCopy* half = nullptr,
                 bool own_range_start = false);
  ~ZeroParameters();

  // The model's parameter hook.
  void on_event(ParamEvent event, int unit, bool backward);
  // A pipeline rank runs passes in its schedule's order instead of one
  // micro-step's forward-then-backward: each pass (one chunk's forward or
  // backward) sets its own Need/Done sequence before it runs, prefetching
  // stays inside it, and after_update() gathers nothing ahead.
  void set_pass(std::vector<ParamUse> order);
  // While disabled, hook events are ignored (after gather_all(), for
  // rank-0-only generation).
  void set_enabled(bool on) { enabled_ = on; }

  // Stage 3: returns the foreign pages of the sharded units (after the
  // initial weights are in place, before the optimizer state is allocated).
  void shard();
  // Every rank's own range is current (start of training, after resume):
  // as after_update().
  void start();
  // Waits for gathers in flight: call before the optimizer writes the own range.
  void before_update();
  // The own range changed: every unit's foreign part is stale. Stages 1/2
  // launch the gathers of all units now.
  void after_update();
  // Collective: every unit current and resident (a full-model save, sampling).
  void gather_all();
  // Collective: rank 0 of the group holds the whole current f32 buffer (the
  // 16-bit copy is not gathered: the model's forward is not for use there);
  // the other ranks send their own pieces and keep their memory as it is.
  void gather_to_root();
  // Stage 3: return the pages of every non-persistent unit (after gather_all());
  // on rank 0, also what gather_to_root() brought in.
  void release_transient();

  bool sharded() const { return shard_units_; }
  bool mixed() const { return half_.data != nullptr; }
  bool persistent(int unit) const { return persistent_[unit]; }
  // Elements of the persistent units (all of them in stages 1 and 2).
  int64_t persistent_elements() const;
  int64_t gathers_launched() const { return gathers_; }

 private:
  using Event = ParamUse;
  void advance(const Event& e);
  // The unit of the `k`-th Need after the cursor in this step's sequence
  // (-1 when none).
  int next_need(int k) const;
  bool needed_soon(int unit, int within) const;
  void launch(int unit);
  void wait(int unit);
  void release(int unit);
  // Bytes a unit's foreign part takes when resident: f32, or mixed
  // precision's 16-bit copy plus its f32-read parameters.
  int64_t foreign_bytes(int unit) const;
  // Calls fn(begin, end, in_f32_spans) for the parts of `s`, in order.
  template <class Fn>
  void split_by_f32_spans(ElemSpan s, Fn&& fn) const;
  // Mixed precision: the foreign f32 elements outside f32_spans (the GEMM
  // weights' masters of other ranks), dropped or counted.
  void release_foreign_masters();
  // Mixed precision: rounds the own f32 range into the 16-bit copy.
  void round_own_range();
  // Rank 0: discards the f32 ranges gather_to_root() brought in.
  void release_root_copy();

  comm::Communicator comm_;
  ZeroLayout layout_;
  std::vector<ElemSpan> units_;
  float* params_;
  ReservedBuffer* reserved_;
  bool shard_units_;
  HalfCopy half_;
  std::vector<int64_t> foreign_f32_;  // per unit: foreign elements in f32_spans
  bool full_masters_ = true;          // mixed: foreign f32 weights resident (setup, gather_all)
  std::vector<bool> persistent_, resident_, valid_;
  std::vector<std::vector<comm::Work>> works_;
  std::vector<Event> order_;  // one micro-step's documented hook sequence (or the pass's)
  bool passes_ = false;       // set_pass drives order_
  int exclusive_ = -1;
  size_t cursor_ = 0;
  bool enabled_ = true;
  int64_t gathers_ = 0;
  ExternalBytes held_params_{MemCategory::Parameters};    // stage 3: own + persistent
  ExternalBytes gathered_{MemCategory::CommBuffers};      // stage 3: foreign parts in use
  ExternalBytes master_{MemCategory::OptimizerState};     // mixed: the own f32 range
  ExternalBytes full_masters_bytes_{MemCategory::CommBuffers};  // mixed: foreign f32 weights
  std::vector<ElemSpan> root_copy_;                        // rank 0: brought in by gather_to_root
  ExternalBytes root_copy_bytes_{MemCategory::CommBuffers};
};

}  // namespace meshtrain::parallel
