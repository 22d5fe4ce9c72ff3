#include "meshtrain/train/tp_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

// One transfer: `count` elements from shard offset `shard` of rank `src` to
// logical offset `logical`, written by rank `dst`.
struct Transfer {
  int src = 0, dst = 0;
  int64_t shard = 0, logical = 0, count = 0;
};

}  // namespace

TensorParallelCheckpoint::TensorParallelCheckpoint(std::shared_ptr<const ModelSpec> logical,
                                                   const parallel::Mesh& mesh)
    : logical_(std::move(logical)), mesh_(mesh) {
  const int tp = mesh_.size(parallel::Axis::TP);
  for (int t = 0; t < tp; ++t) {
    auto shard = logical_->sharded(ModelShard{t, tp});
    runs_.push_back(shard_runs(logical_->layout(), shard->layout(), t));
  }
}

ckpt::ElemRange TensorParallelCheckpoint::block() const {
  return ckpt::shard_range(logical_numel(), mesh_.world_size(), mesh_.world_rank());
}

std::vector<float> TensorParallelCheckpoint::to_logical_block(const float* data,
                                                              ckpt::ElemRange held) const {
  comm::Communicator world = mesh_.world();
  const int W = mesh_.world_size(), me = mesh_.world_rank();
  const int tp = mesh_.size(parallel::Axis::TP), dp = mesh_.size(parallel::Axis::DP);
  const int64_t N = logical_numel();
  // What every rank holds of its shard buffer (the same on every tp rank of a dp rank).
  std::vector<int64_t> mine = {held.begin, held.end}, all(2 * static_cast<size_t>(W));
  world.allgather(mine.data(), all.data(), all.size(), DType::I64).wait();
  auto held_by = [&](int d, int t) {
    const int r = parallel::mesh_rank(mesh_.shape(), {d, t, 0});
    return ckpt::ElemRange{all[2 * r], all[2 * r + 1]};
  };
  // Every piece of the logical buffer once: split tensors from their shard,
  // whole ones from tp rank 0; cut at the writers' blocks and the holders'
  // ranges. Every rank computes the same list in the same order.
  std::vector<Transfer> transfers;
  for (int t = 0; t < tp; ++t)
    for (const ShardRun& run : runs_[t]) {
      if (run.replicated && t != 0) continue;
      int64_t at = 0;
      while (at < run.count) {
        const int64_t logical = run.logical + at;
        const int dst = static_cast<int>(std::min<int64_t>(W - 1, logical / ((N + W - 1) / W)));
        const ckpt::ElemRange dst_block = ckpt::shard_range(N, W, dst);
        int64_t n = std::min(run.count - at, dst_block.end - logical);
        const int64_t shard = run.shard + at;
        // The writer's own dp group first, then the lowest dp rank holding it.
        const int preferred = parallel::mesh_coords(mesh_.shape(), dst).dp;
        int src_dp = -1;
        for (int k = -1; k < dp && src_dp < 0; ++k) {
          const int d = k < 0 ? preferred : k;
          const ckpt::ElemRange h = held_by(d, t);
          if (shard >= h.begin && shard < h.end) {
            src_dp = d;
            n = std::min(n, h.end - shard);
          }
        }
        MT_CHECK(src_dp >= 0, "checkpoint: no rank holds element {} of tp shard {}", shard, t);
        // Stop where a nearer holder's range would start (the preferred one).
        if (src_dp != preferred) {
          const ckpt::ElemRange p = held_by(preferred, t);
          if (p.begin > shard && p.begin < shard + n) n = p.begin - shard;
        }
        transfers.push_back({parallel::mesh_rank(mesh_.shape(), {src_dp, t, 0}), dst, shard, logical, n});
        at += n;
      }
    }
  const ckpt::ElemRange mine_block = block();
  std::vector<float> out(static_cast<size_t>(mine_block.count()));
  // One message per (src, dst) pair: the transfers' elements in list order.
  std::vector<std::vector<float>> send(W), recv(W);
  std::vector<int64_t> recv_count(W, 0);
  for (const Transfer& x : transfers) {
    if (x.src == me) {
      MT_CHECK(x.shard >= held.begin && x.shard + x.count <= held.end,
               "checkpoint: elements [{}, {}) of this rank's shard are not held", x.shard,
               x.shard + x.count);
      const float* from = data + (x.shard - held.begin);
      if (x.dst == me)
        std::memcpy(out.data() + (x.logical - mine_block.begin), from, sizeof(float) * x.count);
      else
        send[x.dst].insert(send[x.dst].end(), from, from + x.count);
    } else if (x.dst == me) {
      recv_count[x.src] += x.count;
    }
  }
  std::vector<comm::Work> works;
  for (int p = 0; p < W; ++p)
    if (!send[p].empty()) works.push_back(world.send(send[p].data(), send[p].size(), DType::F32, p));
  for (int p = 0; p < W; ++p)
    if (recv_count[p] > 0) {
      recv[p].resize(static_cast<size_t>(recv_count[p]));
      works.push_back(world.recv(recv[p].data(), recv[p].size(), DType::F32, p));
    }
  comm::wait_all(works);
  std::vector<int64_t> taken(W, 0);
  for (const Transfer& x : transfers)
    if (x.dst == me && x.src != me) {
      std::memcpy(out.data() + (x.logical - mine_block.begin), recv[x.src].data() + taken[x.src],
                  sizeof(float) * x.count);
      taken[x.src] += x.count;
    }
  return out;
}

Tensor TensorParallelCheckpoint::gather_whole(const Tensor& mine) const {
  // Every tp shard has the same size: one allgather, then each run to its place.
  comm::Communicator tp_comm = mesh_.comm(parallel::Axis::TP);
  const int tp = mesh_.size(parallel::Axis::TP);
  const int64_t n = mine.numel();
  // The staging is counted (communication buffers) like the assembled model,
  // so the allocator's peak shows what the memory limit's end-of-run
  // prediction counts (TrainingRun::memory_plan: both, 8 bytes per parameter).
  Tensor all = Tensor::zeros({n * tp}, DType::F32, MemCategory::CommBuffers);
  tp_comm.allgather(mine.data<float>(), all.data<float>(), static_cast<size_t>(n * tp), DType::F32).wait();
  Tensor whole = Tensor::zeros({logical_numel()}, DType::F32);
  float* out = whole.data<float>();
  const float* staged = all.data<float>();
  for (int t = 0; t < tp; ++t)
    for (const ShardRun& r : runs_[t])
      std::memcpy(out + r.logical, staged + t * n + r.shard, sizeof(float) * r.count);
  return whole;
}

std::vector<ckpt::FillRequest> TensorParallelCheckpoint::fills(const std::string& buffer,
                                                               ckpt::ElemRange wanted, float* dst,
                                                               bool zero_if_absent) const {
  std::vector<ckpt::FillRequest> out;
  for (const ShardRun& run : runs_[mesh_.rank(parallel::Axis::TP)]) {
    const ckpt::ElemRange part = ckpt::intersect({run.shard, run.shard + run.count}, wanted);
    if (part.count() == 0) continue;
    const int64_t logical = run.logical + (part.begin - run.shard);
    out.push_back({buffer, {logical, logical + part.count()}, dst + (part.begin - wanted.begin),
                   zero_if_absent});
  }
  return out;
}

}  // namespace meshtrain
