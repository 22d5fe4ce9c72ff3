// ZeRO's parameter side: after each optimizer step a rank's own range of the
// flat parameter buffer is current and the rest is stale. Units
// (GPTParams::unit_range: embeddings, each layer, the final LayerNorm) are
// brought up to date by broadcasting each of their pieces from its owner,
// driven by the model's parameter hook (GPT::set_param_hook):
//   - stages 1 and 2 keep every unit resident: all gathers are launched right
//     after the update (async) and Need(unit) waits only for its own unit, so
//     the next forward starts on the embeddings while later layers arrive;
//   - stage 3 (sharded) holds only its own range plus the persistent units
//     (smaller than the threshold); Need(unit) gathers the unit (or waits for
//     its prefetch), prefetches the next unit of the documented order (not
//     while backward still holds the embedding unit: that is the peak), and
//     Done(unit) returns its pages unless the unit is needed again within the
//     next two uses (the head's embedding between forward and backward).
// Every decision depends only on the sequence of hook events, which is the
// same on every rank, so the collectives match across ranks.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/nn/gpt.h"
#include "meshtrain/parallel/reserved_buffer.h"
#include "meshtrain/parallel/zero_layout.h"

namespace meshtrain::parallel {

class ZeroParameters {
 public:
  // `units` tile the buffer in order. `reserved` (stage 3) holds the
  // parameters and lets foreign pages go; null for stages 1 and 2, whose
  // parameters live in `params` (counted by the allocator).
  ZeroParameters(comm::Communicator comm, ZeroLayout layout, std::vector<ElemSpan> units,
                 float* params, ReservedBuffer* reserved, int64_t persist_threshold);
  ~ZeroParameters();

  // The model's parameter hook.
  void on_event(GPT::ParamEvent event, int unit, bool backward);
  // While disabled, hook events are ignored (after gather_all(), for
  // rank-0-only generation).
  void set_enabled(bool on) { enabled_ = on; }
  // Whether more micro-batches follow this backward (then the next forward's
  // first unit may be prefetched while backward finishes).
  void set_more_micro_batches(bool more) { more_micro_batches_ = more; }

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
  // Stage 3: return the pages of every non-persistent unit (after gather_all()).
  void release_transient();

  bool sharded() const { return reserved_ != nullptr; }
  bool persistent(int unit) const { return persistent_[unit]; }
  // Elements of the persistent units (all of them in stages 1 and 2).
  int64_t persistent_elements() const;
  int64_t gathers_launched() const { return gathers_; }

 private:
  struct Event {
    bool need;
    int unit;
    bool backward;
    bool operator==(const Event&) const = default;
  };
  void advance(const Event& e);
  // The unit of the next `k`-th Need after the cursor (-1 when none).
  int next_need(int k, bool wrap) const;
  bool needed_soon(int unit, int within) const;
  void launch(int unit);
  void wait(int unit);
  void release(int unit);

  comm::Communicator comm_;
  ZeroLayout layout_;
  std::vector<ElemSpan> units_;
  float* params_;
  ReservedBuffer* reserved_;
  std::vector<bool> persistent_, resident_, valid_;
  std::vector<std::vector<comm::Work>> works_;
  std::vector<Event> order_;  // one step's documented hook sequence
  size_t cursor_ = 0;
  bool enabled_ = true, more_micro_batches_ = false;
  int64_t gathers_ = 0;
  ExternalBytes held_params_{MemCategory::Parameters};    // stage 3: own + persistent
  ExternalBytes gathered_{MemCategory::CommBuffers};      // stage 3: foreign parts in use
};

}  // namespace meshtrain::parallel
