#include "meshtrain/linalg/process_grid.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::linalg {

std::string ProcessGrid::str() const {
  return c > 1 ? fmt::format("{}x{}x{}", p, q, c) : fmt::format("{}x{}", p, q);
}

Context::Context(comm::Communicator world, Device device)
    : world_(std::move(world)), device_(device), kernels_(&kernels_for(device)) {
  MT_CHECK(world_.valid(), "linalg context: invalid communicator");
}

ProcessGrid& Context::grid(int p, int q, int c) {
  auto key = std::make_tuple(p, q, c);
  if (auto it = grids_.find(key); it != grids_.end()) return *it->second;
  MT_CHECK(p >= 1 && q >= 1 && c >= 1, "process grid {}x{}x{}: every side must be at least 1",
           p, q, c);
  MT_CHECK(p * q * c <= size(), "process grid {}x{}x{} needs {} ranks; the job has {}", p, q, c,
           p * q * c, size());
  auto g = std::make_unique<ProcessGrid>();
  g->p = p;
  g->q = q;
  g->c = c;
  const int r = rank();
  g->member = r < p * q * c;
  if (g->member) {
    g->layer = r / (p * q);
    g->row = (r % (p * q)) / q;
    g->col = r % q;
  }
  // Ranks past the grid take color -1 (no communicator) in every split.
  const int layer_id = g->member ? g->layer : -1;
  g->row_comm = world_.split(g->member ? layer_id * p + g->row : -1, g->col);
  g->col_comm = world_.split(g->member ? layer_id * q + g->col : -1, g->row);
  g->depth_comm = world_.split(g->member ? g->row * q + g->col : -1, g->layer);
  return *grids_.emplace(key, std::move(g)).first->second;
}

void* Context::scratch(int slot, size_t bytes) {
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(static_cast<size_t>(slot) + 1);
  Tensor& t = scratch_[static_cast<size_t>(slot)];
  if (!t.defined() || t.nbytes() < bytes)
    t = Tensor::zeros({static_cast<int64_t>(std::max<size_t>(bytes, 64))}, DType::U8, MemCategory::CommBuffers,
                      device_);
  return t.raw();
}

std::vector<const comm::Communicator*> Context::communicators() const {
  std::vector<const comm::Communicator*> all{&world_};
  for (const auto& [key, g] : grids_)
    for (const comm::Communicator* c : {&g->row_comm, &g->col_comm, &g->depth_comm})
      if (c->valid()) all.push_back(c);
  return all;
}

}  // namespace meshtrain::linalg
