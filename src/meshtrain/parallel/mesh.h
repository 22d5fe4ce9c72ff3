// The device mesh: the job's ranks arranged as pp x dp x tp, tensor-parallel
// innermost (consecutive ranks, so a tp group stays on one node's fastest
// links), pipeline outermost:
//
//   rank = (pp * dp_size + dp) * tp_size + tp
//
// Each rank knows its coordinates and holds one communicator per axis of
// more than one rank (Communicator::split of the world, made once, passed
// explicitly; no globals). The data-parallel coordinate is what slices the
// data, names checkpoint shards and groups gradient synchronization; tp and
// pp are where tensor and pipeline parallelism attach.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel {

enum class Axis { DP = 0, TP = 1, PP = 2 };
const char* axis_name(Axis a);

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  int size() const { return dp * tp * pp; }
  int of(Axis a) const { return a == Axis::DP ? dp : a == Axis::TP ? tp : pp; }
  bool operator==(const MeshShape&) const = default;
};

struct MeshCoords {
  int dp = 0, tp = 0, pp = 0;
  int of(Axis a) const { return a == Axis::DP ? dp : a == Axis::TP ? tp : pp; }
  bool operator==(const MeshCoords&) const = default;
};

// Pure functions of the layout above (tested without processes).
MeshCoords mesh_coords(const MeshShape& shape, int rank);
int mesh_rank(const MeshShape& shape, const MeshCoords& c);
// The world ranks of `rank`'s group along `axis`, in axis order.
std::vector<int> mesh_group(const MeshShape& shape, int rank, Axis axis);
// Throws naming the numbers unless every axis is >= 1 and they multiply to `world`.
void check_mesh(const MeshShape& shape, int world);

class Mesh {
 public:
  // One rank, no communication.
  Mesh() = default;
  // Collective on `world` (invalid = one rank): splits the axis communicators.
  Mesh(const comm::Communicator& world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoords& coords() const { return coords_; }
  int rank(Axis a) const { return coords_.of(a); }
  int size(Axis a) const { return shape_.of(a); }
  int world_rank() const { return world_rank_; }
  int world_size() const { return shape_.size(); }
  // The communicator of `rank`'s group along `a`; invalid when the axis has
  // one rank (nothing to communicate).
  const comm::Communicator& comm(Axis a) const { return comms_[static_cast<int>(a)]; }
  const comm::Communicator& world() const { return world_; }
  // "rank 3 = dp 1 x tp 1 x pp 0 of dp 2 x tp 2 x pp 1"
  std::string describe() const;

 private:
  MeshShape shape_;
  MeshCoords coords_;
  int world_rank_ = 0;
  comm::Communicator world_;
  std::array<comm::Communicator, 3> comms_;
};

}  // namespace meshtrain::parallel
