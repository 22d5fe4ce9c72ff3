// Activation checkpointing policy of a GPT: which activations a forward keeps
// for backward and which backward recomputes. The config's `recompute` string
// (config/train_config.h, parse_recompute) converts to this; nn does not
// depend on config. What each mode stores: docs/ARCHITECTURE.md (nn).
#pragma once
#include <string>

#include "meshtrain/core/error.h"

namespace meshtrain {

struct Recompute {
  enum class Mode {
    None,       // every block keeps all its activations
    Full,       // every block keeps only the residual stream; backward re-runs it
    EveryK,     // blocks 0, K, 2K, ... as Full, the others as None
    Selective,  // blocks keep all but the attention core's output and log-sum-exp
  };
  Mode mode = Mode::None;
  int every = 0;  // K for EveryK (>= 1)

  static Recompute none() { return {}; }
  static Recompute full() { return {Mode::Full, 0}; }
  static Recompute every_k(int k) {
    MT_CHECK(k >= 1, "recompute every:K needs K >= 1 (got {})", k);
    return {Mode::EveryK, k};
  }
  static Recompute selective() { return {Mode::Selective, 0}; }

  // True when block `layer` keeps only its input and is re-run in backward.
  bool recomputes_block(int layer) const {
    return mode == Mode::Full || (mode == Mode::EveryK && layer % every == 0);
  }
  // True when blocks recompute only their attention core in backward.
  bool recomputes_attention() const { return mode == Mode::Selective; }

  // The config spelling: none | full | every:K | selective.
  std::string name() const {
    switch (mode) {
      case Mode::None: return "none";
      case Mode::Full: return "full";
      case Mode::EveryK: return "every:" + std::to_string(every);
      case Mode::Selective: return "selective";
    }
    return "?";
  }
  bool operator==(const Recompute&) const = default;
};

}  // namespace meshtrain
