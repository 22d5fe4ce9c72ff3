// Alpha-beta cost model that picks an algorithm per (op, bytes, ranks,
// transport): time = alpha * sync_steps + beta * bytes_moved_per_rank, with
// alpha (us per step) and beta (us per byte) measured per algorithm and
// transport by `meshtrain bench comm --calibrate`, or the defaults below.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

struct AlphaBeta {
  double alpha_us = 1.0;          // per synchronisation step
  double beta_us_per_byte = 2e-4; // per byte each rank moves (5 GB/s)
};

// Steps and bytes per rank an algorithm needs; the shapes the model scales.
struct CostShape {
  double steps = 0;
  double bytes = 0;
};
CostShape cost_shape(std::string_view algo, CollOp op, size_t bytes, int ranks);

class CostModel {
 public:
  static CostModel defaults();
  // Defaults overlaid with a calibration file (missing file: defaults).
  static CostModel load(const std::string& path);
  void save(const std::string& path) const;
  // The file a communicator reads: MESHTRAIN_COMM_COST_FILE or the cache path.
  static std::string default_path();

  void set(std::string_view transport, std::string_view algo, AlphaBeta ab);
  AlphaBeta get(std::string_view transport, std::string_view algo) const;
  double predict_us(std::string_view transport, std::string_view algo, CollOp op, size_t bytes,
                    int ranks) const;
  // Cheapest of `candidates`; ties keep the earlier one.
  std::string choose(std::string_view transport, CollOp op, size_t bytes, int ranks,
                     const std::vector<std::string>& candidates) const;
  std::string to_json() const;

 private:
  std::map<std::pair<std::string, std::string>, AlphaBeta> table_;
};

}  // namespace meshtrain::comm
