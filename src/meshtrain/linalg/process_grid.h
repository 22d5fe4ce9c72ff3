// The ranks of a distributed multiply arranged as c layers of p x q grids
// (world rank = layer * p * q + row * q + col), with the sub-communicators
// the algorithms broadcast and shift on. A Context owns the world and keeps
// each grid shape's communicators once made (splitting is collective, so
// every rank asks for the same shapes in the same order: the algorithms do).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/device.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain {
struct KernelTable;
}

namespace meshtrain::linalg {

struct ProcessGrid {
  int p = 1, q = 1, c = 1;
  int row = 0, col = 0, layer = 0;
  bool member = true;            // false: this rank is past the grid's c * p * q ranks
  comm::Communicator row_comm;   // this rank's grid row in its layer: q ranks, rank = col
  comm::Communicator col_comm;   // its grid column in its layer: p ranks, rank = row
  comm::Communicator depth_comm; // the same (row, col) in every layer: c ranks, rank = layer
  std::string str() const;       // "2x2", "2x2x2" (with layers)
};

class Context {
 public:
  // `device`: where local matrices live and local GEMMs run (its kernel table).
  explicit Context(comm::Communicator world, Device device = Device::cpu());
  const comm::Communicator& world() const { return world_; }
  comm::Communicator& world() { return world_; }
  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }
  const KernelTable& kernels() const { return *kernels_; }
  Device device() const { return device_; }
  // Collective on the world the first time a shape is asked for.
  ProcessGrid& grid(int p, int q, int c = 1);
  // Every communicator this context made, the world first (traffic counts).
  std::vector<const comm::Communicator*> communicators() const;
  // Transfer buffers kept between calls (allocating and faulting in fresh
  // pages each call cost more than a small multiply): slot `slot`, at least
  // `bytes` on the context's device, contents undefined. Calls on one context
  // are sequential, so an algorithm owns its slots for the call.
  void* scratch(int slot, size_t bytes);

 private:
  comm::Communicator world_;
  Device device_;
  const KernelTable* kernels_;
  std::map<std::tuple<int, int, int>, std::unique_ptr<ProcessGrid>> grids_;
  std::vector<Tensor> scratch_;
};

}  // namespace meshtrain::linalg
