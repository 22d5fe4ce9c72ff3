#include "meshtrain/comm/algorithm_selector.h"

#include <fmt/format.h>

#include <vector>

#include "meshtrain/core/debug_log.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

AlgorithmSelector::AlgorithmSelector(const AlgorithmSelector& parent)
    : configured_(parent.configured_), pinned_(parent.pinned_), cost_(parent.cost_),
      kind_(parent.kind_), size_(parent.size_), num_nodes_(parent.num_nodes_) {}

void AlgorithmSelector::set_group(std::string_view transport_kind, int size, const Placement& placement) {
  std::lock_guard lock(mu_);
  kind_ = std::string(transport_kind);
  size_ = size;
  num_nodes_ = placement.num_nodes;
  for (auto& c : cache_) c.clear();
}

std::string AlgorithmSelector::choose(CollOp op, size_t bytes) const {
  const size_t i = static_cast<size_t>(op);
  const std::string& pin = !pinned_[i].empty() ? pinned_[i] : configured_[i];
  if (!pin.empty() && pin != "auto") {
    const Algorithm* a = find_algorithm(pin);
    if (!a) {
      std::string names;
      for (const auto& x : all_algorithms()) names += (names.empty() ? "" : ", ") + std::string(x.name);
      throw UsageError(fmt::format("unknown algorithm '{}' (known: {})", pin, names));
    }
    if (!a->supports(op, kind_))
      throw UsageError(fmt::format("algorithm '{}' cannot run {} over the {} transport", pin,
                                   coll_op_name(op), kind_));
    return pin;
  }
  const std::vector<std::string> cands = candidates(op);
  MT_CHECK(!cands.empty(), "no algorithm can run {} over {}", coll_op_name(op), kind_);
  if (cands.size() == 1 || size_ == 1) return cands.front();
  return cost_.choose(kind_, op, bytes, size_, cands);
}

std::vector<std::string> AlgorithmSelector::candidates(CollOp op) const {
  std::vector<std::string> out;
  for (const auto& a : all_algorithms()) {
    if (!a.supports(op, kind_)) continue;
    // Two levels only help when some node holds several ranks and there are several nodes.
    if (a.name == "hierarchical" && (num_nodes_ <= 1 || num_nodes_ >= size_)) continue;
    out.emplace_back(a.name);
  }
  return out;
}

void AlgorithmSelector::log_choice(CollOp op, size_t bytes, const std::string& chosen) const {
  std::string costs;
  for (const std::string& c : candidates(op))
    costs += fmt::format("{}{} {:.1f} us", costs.empty() ? "" : ", ", c,
                         cost_.predict_us(kind_, c, op, bytes, size_));
  const AlgorithmSelector& me = *this;
  const size_t i = static_cast<size_t>(op);
  const bool pinned = !me.pinned_[i].empty() || (!me.configured_[i].empty() && me.configured_[i] != "auto");
  MT_LOG(Info, Algo, "{} {} B on {} ranks over {}: {}{} (alpha-beta model: {})", coll_op_name(op),
         bytes, size_, kind_, chosen, pinned ? " (pinned)" : "", costs);
}

const Algorithm* AlgorithmSelector::select(CollOp op, size_t bytes) {
  auto& cache = cache_[static_cast<size_t>(op)];
  std::lock_guard lock(mu_);
  auto it = cache.find(bytes);
  if (it != cache.end()) return it->second;
  const std::string chosen = choose(op, bytes);
  const Algorithm* a = find_algorithm(chosen);
  if (log_enabled(LogLevel::Info, LogSubsys::Algo)) log_choice(op, bytes, chosen);
  if (cache.size() > 4096) cache.clear();
  cache[bytes] = a;
  return a;
}

void AlgorithmSelector::pin(CollOp op, const std::string& name) {
  const size_t i = static_cast<size_t>(op);
  std::string n = name == "auto" ? "" : name;
  std::lock_guard lock(mu_);
  std::string saved = pinned_[i];
  pinned_[i] = n;
  cache_[i].clear();
  try {
    if (!n.empty()) (void)choose(op, 0);  // validates the name
  } catch (...) {
    pinned_[i] = saved;
    throw;
  }
}

void AlgorithmSelector::unpin_all() {
  std::lock_guard lock(mu_);
  pinned_ = {};
  configured_ = {};
  for (auto& c : cache_) c.clear();
}

}  // namespace meshtrain::comm
