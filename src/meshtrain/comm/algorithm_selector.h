// Which algorithm runs a collective of a given size: the algorithm pinned
// for that op (set_algorithm, else the options), or the cheapest candidate
// under the alpha-beta cost model among those the transport can run.
// Selection is pure in (op, bytes, pins), so it is cached per op and size.
#pragma once
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "meshtrain/comm/algorithms/algorithm.h"
#include "meshtrain/comm/cost_model.h"
#include "meshtrain/comm/options.h"
#include "meshtrain/comm/placement.h"

namespace meshtrain::comm {

class AlgorithmSelector {
 public:
  AlgorithmSelector() = default;
  AlgorithmSelector(const CommOptions& opts, CostModel cost) : configured_(opts.algorithm), cost_(std::move(cost)) {}
  // A sub-group's selector starts with the parent's pins and cost model.
  AlgorithmSelector(const AlgorithmSelector& parent);
  AlgorithmSelector& operator=(const AlgorithmSelector&) = delete;
  // What the candidates depend on: the transport and the group's shape.
  void set_group(std::string_view transport_kind, int size, const Placement& placement);

  // The algorithm's name; throws UsageError for an unknown or unsupported pin.
  std::string choose(CollOp op, size_t bytes) const;
  // Cached choose(); thread-safe.
  const Algorithm* select(CollOp op, size_t bytes);

  // Pins an algorithm for an op ("" or "auto": the cost model); validates
  // it and keeps the old pin when invalid.
  void pin(CollOp op, const std::string& name);
  // Forgets every pin and configured choice (the node-level groups of the
  // two-level algorithm choose their own; a pinned "hierarchical" would recurse).
  void unpin_all();
  const CostModel& cost_model() const { return cost_; }

 private:
  // The algorithms the cost model may pick from for `op` on this group.
  std::vector<std::string> candidates(CollOp op) const;
  // MESHTRAIN_DEBUG=INFO, ALGO: the choice and every candidate's predicted time.
  void log_choice(CollOp op, size_t bytes, const std::string& chosen) const;
  std::array<std::string, kCollOpCount> configured_{};  // from the options
  std::array<std::string, kCollOpCount> pinned_{};      // set_algorithm
  CostModel cost_;
  std::string kind_ = "shm";
  int size_ = 1, num_nodes_ = 1;
  std::mutex mu_;
  std::array<std::map<size_t, const Algorithm*>, kCollOpCount> cache_;
};

}  // namespace meshtrain::comm
