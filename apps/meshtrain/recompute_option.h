// The config's `recompute` string (none | full | every:K | selective) as the
// model's policy: config does not know nn, so the commands convert.
#pragma once
#include <string>

#include "meshtrain/config/train_config.h"
#include "meshtrain/nn/recompute.h"

namespace meshtrain::cli {

// Throws meshtrain::Error (from parse_recompute) for an unknown spelling.
inline Recompute recompute_from_config(const std::string& value) {
  const RecomputePolicy p = parse_recompute(value);
  switch (p.kind) {
    case RecomputePolicy::Kind::None: return Recompute::none();
    case RecomputePolicy::Kind::Full: return Recompute::full();
    case RecomputePolicy::Kind::EveryK: return Recompute::every_k(p.every);
    case RecomputePolicy::Kind::Selective: return Recompute::selective();
  }
  return Recompute::none();
}

}  // namespace meshtrain::cli
