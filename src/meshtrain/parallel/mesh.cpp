#include "meshtrain/parallel/mesh.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

const char* axis_name(Axis a) { return a == Axis::DP ? "dp" : a == Axis::TP ? "tp" : "pp"; }

void check_mesh(const MeshShape& s, int world) {
  MT_CHECK(s.dp >= 1 && s.tp >= 1 && s.pp >= 1, "mesh dp {} x tp {} x pp {}: every axis needs at "
           "least one rank", s.dp, s.tp, s.pp);
  MT_CHECK(s.size() == world, "mesh dp {} x tp {} x pp {} = {} ranks, but the job has {}", s.dp,
           s.tp, s.pp, s.size(), world);
}

MeshCoords mesh_coords(const MeshShape& s, int rank) {
  MT_CHECK(rank >= 0 && rank < s.size(), "rank {} outside a mesh of {} ranks", rank, s.size());
  return {(rank / s.tp) % s.dp, rank % s.tp, rank / (s.tp * s.dp)};
}

int mesh_rank(const MeshShape& s, const MeshCoords& c) {
  MT_CHECK(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 && c.pp < s.pp,
           "mesh coordinates (dp {}, tp {}, pp {}) outside dp {} x tp {} x pp {}", c.dp, c.tp,
           c.pp, s.dp, s.tp, s.pp);
  return (c.pp * s.dp + c.dp) * s.tp + c.tp;
}

std::vector<int> mesh_group(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = mesh_coords(s, rank);
  std::vector<int> out;
  for (int i = 0; i < s.of(axis); ++i) {
    (axis == Axis::DP ? c.dp : axis == Axis::TP ? c.tp : c.pp) = i;
    out.push_back(mesh_rank(s, c));
  }
  return out;
}

Mesh::Mesh(const comm::Communicator& world, MeshShape shape) : shape_(shape), world_(world) {
  const bool valid = world.valid();
  const int n = valid ? world.size() : 1;
  world_rank_ = valid ? world.rank() : 0;
  check_mesh(shape_, n);
  coords_ = mesh_coords(shape_, world_rank_);
  for (Axis a : {Axis::DP, Axis::TP, Axis::PP}) {
    const int size = shape_.of(a);
    if (size == 1) continue;
    if (size == n) {
      comms_[static_cast<int>(a)] = world;
      continue;
    }
    // One group per combination of the other two coordinates: its colour is
    // the group's first rank; the key orders members by their axis coordinate.
    const int color = mesh_group(shape_, world_rank_, a).front();
    comms_[static_cast<int>(a)] = world.split(color, coords_.of(a));
  }
}

std::string Mesh::describe() const {
  return fmt::format("rank {} = dp {} x tp {} x pp {} of dp {} x tp {} x pp {}", world_rank_,
                     coords_.dp, coords_.tp, coords_.pp, shape_.dp, shape_.tp, shape_.pp);
}

}  // namespace meshtrain::parallel
