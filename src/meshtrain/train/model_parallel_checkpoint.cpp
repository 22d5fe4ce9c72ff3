#include "meshtrain/train/model_parallel_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <set>

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

// Every piece of the logical buffer (N elements) once, from a rank holding
// it to the rank writing it: split tensors from their shard, whole ones from
// tp rank 0, a tensor of two stages from the first; cut at the writers'
// blocks and the holders' ranges (`held`: each world rank's [begin, end) of
// its shard buffer). `runs[pp * tp + t]`: shard (pp, t)'s runs. Every rank
// computes the same list in the same order.
std::vector<Transfer> plan_transfers(const parallel::Mesh& mesh,
                                     const std::vector<std::vector<ShardRun>>& runs, int64_t N,
                                     const std::vector<int64_t>& held) {
  const int W = mesh.world_size(), tp = mesh.size(parallel::Axis::TP);
  const int dp = mesh.size(parallel::Axis::DP), pp = mesh.size(parallel::Axis::PP);
  auto held_by = [&](int d, int t, int s) {
    const int r = parallel::mesh_rank(mesh.shape(), {d, t, s});
    return ckpt::ElemRange{held[2 * r], held[2 * r + 1]};
  };
  std::vector<Transfer> out;
  std::set<std::pair<int64_t, int64_t>> earlier_stages;  // (logical, count) of their runs
  for (int s = 0; s < pp; ++s) {
    std::set<std::pair<int64_t, int64_t>> this_stage;
    for (int t = 0; t < tp; ++t) {
      for (const ShardRun& run : runs[static_cast<size_t>(s * tp + t)]) {
        if (run.replicated && t != 0) continue;
        this_stage.insert({run.logical, run.count});
        if (earlier_stages.count({run.logical, run.count})) continue;
        for (int64_t at = 0; at < run.count;) {
          const int64_t logical = run.logical + at, shard = run.shard + at;
          const int dst = static_cast<int>(std::min<int64_t>(W - 1, logical / ((N + W - 1) / W)));
          int64_t n = std::min(run.count - at, ckpt::shard_range(N, W, dst).end - logical);
          // The writer's own dp group first, then the lowest dp rank holding it.
          const int preferred = parallel::mesh_coords(mesh.shape(), dst).dp;
          int src_dp = -1;
          for (int k = -1; k < dp && src_dp < 0; ++k) {
            const int d = k < 0 ? preferred : k;
            const ckpt::ElemRange h = held_by(d, t, s);
            if (shard >= h.begin && shard < h.end) {
              src_dp = d;
              n = std::min(n, h.end - shard);
            }
          }
          MT_CHECK(src_dp >= 0, "checkpoint: no rank holds element {} of tp shard {} of stage {}",
                   shard, t, s);
          // Stop where a nearer holder's range would start (the preferred one).
          if (src_dp != preferred) {
            const ckpt::ElemRange p = held_by(preferred, t, s);
            if (p.begin > shard && p.begin < shard + n) n = p.begin - shard;
          }
          out.push_back({parallel::mesh_rank(mesh.shape(), {src_dp, t, s}), dst, shard, logical, n});
          at += n;
        }
      }
    }
    earlier_stages.insert(this_stage.begin(), this_stage.end());
  }
  return out;
}

}  // namespace

ModelParallelCheckpoint::ModelParallelCheckpoint(
    std::shared_ptr<const ModelSpec> logical,
    const std::vector<std::shared_ptr<const ModelSpec>>& shards, const parallel::Mesh& mesh)
    : logical_(std::move(logical)), mesh_(mesh) {
  const int tp = mesh_.size(parallel::Axis::TP), pp = mesh_.size(parallel::Axis::PP);
  MT_CHECK(static_cast<int>(shards.size()) == tp * pp, "{} shard specs for tp {} x pp {}",
           shards.size(), tp, pp);
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t)
      runs_.push_back(shard_runs(logical_->layout(), shards[shard_index(s, t)]->layout(), t));
}

ckpt::ElemRange ModelParallelCheckpoint::block() const {
  return ckpt::shard_range(logical_numel(), mesh_.world_size(), mesh_.world_rank());
}

std::vector<float> ModelParallelCheckpoint::to_logical_block(const float* data,
                                                             ckpt::ElemRange held) const {
  comm::Communicator world = mesh_.world();
  const int W = mesh_.world_size(), me = mesh_.world_rank();
  // What every rank holds of its shard buffer (the same on every tp rank of a dp rank).
  std::vector<int64_t> mine = {held.begin, held.end}, all(2 * static_cast<size_t>(W));
  world.allgather(mine.data(), all.data(), all.size(), DType::I64).wait();
  const std::vector<Transfer> transfers = plan_transfers(mesh_, runs_, logical_numel(), all);
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

Tensor ModelParallelCheckpoint::gather_whole(const Tensor& mine) const {
  // Every tp shard has the same size: one allgather, then each run to its place.
  MT_CHECK(mesh_.size(parallel::Axis::PP) == 1, "gather_whole assembles tp shards of one stage");
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

std::vector<ckpt::FillRequest> ModelParallelCheckpoint::fills(const std::string& buffer,
                                                               ckpt::ElemRange wanted, float* dst,
                                                               bool zero_if_absent) const {
  std::vector<ckpt::FillRequest> out;
  for (const ShardRun& run :
       runs_[shard_index(mesh_.rank(parallel::Axis::PP), mesh_.rank(parallel::Axis::TP))]) {
    const ckpt::ElemRange part = ckpt::intersect({run.shard, run.shard + run.count}, wanted);
    if (part.count() == 0) continue;
    const int64_t logical = run.logical + (part.begin - run.shard);
    out.push_back({buffer, {logical, logical + part.count()}, dst + (part.begin - wanted.begin),
                   zero_if_absent});
  }
  return out;
}

}  // namespace meshtrain
