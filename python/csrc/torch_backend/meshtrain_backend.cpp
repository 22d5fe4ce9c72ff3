#include "meshtrain_backend.h"

#include <fmt/format.h>

#include "store_rendezvous.h"
#include "tensor_staging.h"

namespace meshtrain::torch_backend {

namespace {
constexpr DType kBytes = DType::U8;  // what moves without reducing travels as bytes

bool equal_splits(const std::vector<int64_t>& splits) {
  for (int64_t s : splits)
    if (s != splits.front()) return false;
  return true;
}
}  // namespace

MeshtrainBackend::MeshtrainBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), comm_(communicator_from_store(store, rank, size, timeout)) {}

MeshtrainBackend::~MeshtrainBackend() = default;

c10::intrusive_ptr<c10d::Backend> MeshtrainBackend::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                           int rank, int size,
                                                           const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<MeshtrainBackend>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

template <typename Launch>
c10::intrusive_ptr<c10d::Work> MeshtrainBackend::issue(c10d::OpType type, const char* title,
                                                       std::vector<at::Tensor> outputs, Launch&& launch) {
  PendingOp pending;
  pending.work = c10::make_intrusive<MeshtrainWork>(rank_, type, title, std::move(outputs));
  auto work = pending.work;
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    ++sequence_;
    launch(pending);
  }
  completions_.submit(std::move(pending));
  return work;
}

const std::vector<at::Tensor>& MeshtrainBackend::single(std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, fmt::format("meshtrain backend: {} takes one tensor per call ({} given)", op,
                                          ts.size()));
  check_cpu_dense(ts[0], op);
  return ts;
}

void MeshtrainBackend::check_peer(int peer, const char* op) const {
  TORCH_CHECK(peer >= 0 && peer < size_, fmt::format("meshtrain backend: {} names rank {} of a group of {}",
                                                     op, peer, size_));
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "allreduce")[0];
  DType dt = reduction_dtype(t, "allreduce");
  comm::ReduceOp op = reduction(opts.reduceOp, "allreduce");
  return issue(c10d::OpType::ALLREDUCE, "meshtrain:all_reduce", tensors, [&](PendingOp& p) {
    Staged s = stage(t, true);
    p.works.push_back(comm_.allreduce(s.buffer.data_ptr(), static_cast<size_t>(t.numel()), dt, op));
    p.keep_alive.push_back(s.buffer);
    if (s.deliver) p.deliver.push_back(s.deliver);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "meshtrain backend: allreduce_coalesced got no tensors");
  for (const at::Tensor& t : tensors) {
    check_cpu_dense(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "meshtrain backend: allreduce_coalesced needs tensors of one dtype");
  }
  DType dt = reduction_dtype(tensors[0], "allreduce_coalesced");
  comm::ReduceOp op = reduction(opts.reduceOp, "allreduce_coalesced");
  return issue(c10d::OpType::ALLREDUCE_COALESCED, "meshtrain:all_reduce_coalesced", tensors,
               [&](PendingOp& p) {
                 Staged s = pack(tensors, true, true);
                 p.works.push_back(comm_.allreduce(s.buffer.data_ptr(), static_cast<size_t>(s.buffer.numel()),
                                                   dt, op));
                 p.keep_alive.push_back(s.buffer);
                 p.deliver.push_back(s.deliver);
               });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast")[0];
  check_peer(static_cast<int>(opts.rootRank), "broadcast");
  return issue(c10d::OpType::BROADCAST, "meshtrain:broadcast", tensors, [&](PendingOp& p) {
    Staged s = stage(t, rank_ != opts.rootRank);
    p.works.push_back(comm_.broadcast(s.buffer.data_ptr(), byte_size(t), kBytes, static_cast<int>(opts.rootRank)));
    p.keep_alive.push_back(s.buffer);
    if (s.deliver) p.deliver.push_back(s.deliver);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce")[0];
  check_peer(static_cast<int>(opts.rootRank), "reduce");
  DType dt = reduction_dtype(t, "reduce");
  comm::ReduceOp op = reduction(opts.reduceOp, "reduce");
  return issue(c10d::OpType::REDUCE, "meshtrain:reduce", tensors, [&](PendingOp& p) {
    // The root's result lands in its tensor; the others' stay as they were.
    at::Tensor send = t.contiguous().clone();
    Staged s = stage(t, rank_ == opts.rootRank);
    p.works.push_back(comm_.reduce(send.data_ptr(), s.buffer.data_ptr(), static_cast<size_t>(t.numel()), dt, op,
                                   static_cast<int>(opts.rootRank)));
    p.keep_alive.insert(p.keep_alive.end(), {send, s.buffer});
    if (s.deliver) p.deliver.push_back(s.deliver);
  });
}

void MeshtrainBackend::add_allgather(PendingOp& p, std::vector<at::Tensor>& outputs, const at::Tensor& in) {
  check_cpu_dense(in, "allgather");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_,
              fmt::format("meshtrain backend: allgather needs one list of {} output tensors", size_));
  check_same_shape(outputs, in, "allgather");
  Staged all = pack(outputs, false, true);
  at::Tensor mine = in.contiguous();
  p.works.push_back(comm_.allgather(mine.data_ptr(), all.buffer.data_ptr(), byte_size(all.buffer), kBytes));
  p.keep_alive.insert(p.keep_alive.end(), {mine, all.buffer});
  p.deliver.push_back(all.deliver);
}

void MeshtrainBackend::add_allgather_base(PendingOp& p, at::Tensor& output, const at::Tensor& input) {
  check_cpu_dense(input, "all_gather_into_tensor");
  check_cpu_dense(output, "all_gather_into_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * size_,
              fmt::format("meshtrain backend: all_gather_into_tensor needs an output of {} x the input's "
                          "{} elements and its dtype", size_, input.numel()));
  Staged out = stage(output, true);
  at::Tensor mine = input.contiguous();
  p.works.push_back(comm_.allgather(mine.data_ptr(), out.buffer.data_ptr(), byte_size(output), kBytes));
  p.keep_alive.insert(p.keep_alive.end(), {mine, out.buffer});
  if (out.deliver) p.deliver.push_back(out.deliver);
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "allgather")[0];
  TORCH_CHECK(outputs.size() == 1, "meshtrain backend: allgather needs one list of output tensors");
  return issue(c10d::OpType::ALLGATHER, "meshtrain:all_gather", outputs[0],
               [&](PendingOp& p) { add_allgather(p, outputs[0], in); });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  return issue(c10d::OpType::_ALLGATHER_BASE, "meshtrain:all_gather_into_tensor", {output},
               [&](PendingOp& p) { add_allgather_base(p, output, input); });
}

// The coalesced forms are one operation whose parts are issued back to back.
c10::intrusive_ptr<c10d::Work> MeshtrainBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "meshtrain backend: allgather_coalesced needs one output list per input");
  std::vector<at::Tensor> all;
  for (auto& o : outputs) all.insert(all.end(), o.begin(), o.end());
  return issue(c10d::OpType::ALLGATHER_COALESCED, "meshtrain:all_gather_coalesced", all,
               [&](PendingOp& p) {
                 for (size_t i = 0; i < inputs.size(); ++i) add_allgather(p, outputs[i], inputs[i]);
               });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "meshtrain backend: allgather_into_tensor_coalesced needs one output per input");
  return issue(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, "meshtrain:all_gather_into_tensor_coalesced",
                     outputs,
               [&](PendingOp& p) {
                 for (size_t i = 0; i < inputs.size(); ++i) add_allgather_base(p, outputs[i], inputs[i]);
               });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter")[0];
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              fmt::format("meshtrain backend: reduce_scatter needs one list of {} input tensors", size_));
  check_same_shape(inputs[0], out, "reduce_scatter");
  DType dt = reduction_dtype(out, "reduce_scatter");
  comm::ReduceOp op = reduction(opts.reduceOp, "reduce_scatter");
  return issue(c10d::OpType::REDUCE_SCATTER, "meshtrain:reduce_scatter", outputs, [&](PendingOp& p) {
    Staged all = pack(inputs[0], true, false);
    Staged mine = stage(out, true);
    p.works.push_back(comm_.reduce_scatter(all.buffer.data_ptr(), mine.buffer.data_ptr(),
                                           static_cast<size_t>(all.buffer.numel()), dt, op));
    p.keep_alive.insert(p.keep_alive.end(), {all.buffer, mine.buffer});
    if (mine.deliver) p.deliver.push_back(mine.deliver);
  });
}

void MeshtrainBackend::add_reduce_scatter_base(PendingOp& p, at::Tensor& output, const at::Tensor& input,
                                               const c10d::ReduceOp& reduce_op) {
  check_cpu_dense(input, "reduce_scatter_tensor");
  check_cpu_dense(output, "reduce_scatter_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * size_,
              fmt::format("meshtrain backend: reduce_scatter_tensor needs an input of {} x the output's "
                          "{} elements and its dtype", size_, output.numel()));
  DType dt = reduction_dtype(output, "reduce_scatter_tensor");
  comm::ReduceOp op = reduction(reduce_op, "reduce_scatter_tensor");
  at::Tensor all = input.contiguous();
  Staged mine = stage(output, true);
  p.works.push_back(comm_.reduce_scatter(all.data_ptr(), mine.buffer.data_ptr(), static_cast<size_t>(all.numel()),
                                         dt, op));
  p.keep_alive.insert(p.keep_alive.end(), {all, mine.buffer});
  if (mine.deliver) p.deliver.push_back(mine.deliver);
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  return issue(c10d::OpType::_REDUCE_SCATTER_BASE, "meshtrain:reduce_scatter_tensor", {output},
               [&](PendingOp& p) { add_reduce_scatter_base(p, output, input, opts.reduceOp); });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "meshtrain backend: reduce_scatter_tensor_coalesced needs one output per input");
  return issue(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "meshtrain:reduce_scatter_tensor_coalesced",
                     outputs,
               [&](PendingOp& p) {
                 for (size_t i = 0; i < inputs.size(); ++i)
                   add_reduce_scatter_base(p, outputs[i], inputs[i], opts.reduceOp);
               });
}

void MeshtrainBackend::exchange(PendingOp& p, const std::vector<at::Tensor>& sends,
                                const std::vector<at::Tensor>& recvs) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (recvs[peer].numel() > 0)
      p.works.push_back(comm_.recv(recvs[peer].data_ptr(), byte_size(recvs[peer]), kBytes, peer));
    if (sends[peer].numel() > 0)
      p.works.push_back(comm_.send(sends[peer].data_ptr(), byte_size(sends[peer]), kBytes, peer));
  }
  p.keep_alive.insert(p.keep_alive.end(), sends.begin(), sends.end());
  p.keep_alive.insert(p.keep_alive.end(), recvs.begin(), recvs.end());
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions&) {
  check_cpu_dense(input, "all_to_all_single");
  check_cpu_dense(output, "all_to_all_single");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "meshtrain backend: all_to_all_single needs one dtype");
  const bool equal = (input_splits.empty() || equal_splits(input_splits)) &&
                     (output_splits.empty() || equal_splits(output_splits));
  return issue(c10d::OpType::ALLTOALL_BASE, "meshtrain:all_to_all_single", {output}, [&](PendingOp& p) {
    at::Tensor in = input.contiguous();
    Staged out = stage(output, true);
    if (equal) {
      TORCH_CHECK(in.numel() % size_ == 0 && in.numel() == output.numel(),
                  fmt::format("meshtrain backend: all_to_all_single without splits needs input and output "
                              "of one size divisible by {}", size_));
      p.works.push_back(comm_.alltoall(in.data_ptr(), out.buffer.data_ptr(), byte_size(in) / size_, kBytes));
      p.keep_alive.insert(p.keep_alive.end(), {in, out.buffer});
    } else {
      TORCH_CHECK(static_cast<int>(input_splits.size()) == size_ && static_cast<int>(output_splits.size()) == size_,
                  fmt::format("meshtrain backend: all_to_all_single needs {} input and output splits", size_));
      std::vector<at::Tensor> sends = in.split_with_sizes(input_splits, 0);
      std::vector<at::Tensor> recvs = out.buffer.split_with_sizes(output_splits, 0);
      recvs[rank_].copy_(sends[rank_]);
      exchange(p, sends, recvs);
      p.keep_alive.insert(p.keep_alive.end(), {in, out.buffer});
    }
    if (out.deliver) p.deliver.push_back(out.deliver);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              fmt::format("meshtrain backend: all_to_all needs {} input and {} output tensors", size_, size_));
  for (const at::Tensor& t : inputs) check_cpu_dense(t, "all_to_all");
  for (const at::Tensor& t : outputs) check_cpu_dense(t, "all_to_all");
  return issue(c10d::OpType::ALLTOALL, "meshtrain:all_to_all", outputs, [&](PendingOp& p) {
    std::vector<at::Tensor> sends, recvs;
    for (int r = 0; r < size_; ++r) {
      Staged out = stage(outputs[r], true);
      sends.push_back(inputs[r].contiguous());
      recvs.push_back(out.buffer);
      if (out.deliver) p.deliver.push_back(out.deliver);
    }
    recvs[rank_].copy_(sends[rank_]);
    exchange(p, sends, recvs);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather")[0];
  const int root = static_cast<int>(opts.rootRank);
  check_peer(root, "gather");
  const bool am_root = rank_ == root;
  if (am_root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                fmt::format("meshtrain backend: gather's root needs one list of {} output tensors", size_));
    check_same_shape(outputs[0], in, "gather");
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "meshtrain backend: gather takes outputs only on the root");
  }
  std::vector<at::Tensor> outs = am_root ? outputs[0] : std::vector<at::Tensor>{};
  return issue(c10d::OpType::GATHER, "meshtrain:gather", outs, [&](PendingOp& p) {
    at::Tensor mine = in.contiguous();
    if (!am_root) {
      p.works.push_back(comm_.send(mine.data_ptr(), byte_size(mine), kBytes, root));
      p.keep_alive.push_back(mine);
      return;
    }
    for (int r = 0; r < size_; ++r) {
      Staged out = stage(outs[r], true);
      if (r == rank_)
        out.buffer.copy_(mine.view(out.buffer.sizes()));
      else
        p.works.push_back(comm_.recv(out.buffer.data_ptr(), byte_size(out.buffer), kBytes, r));
      p.keep_alive.push_back(out.buffer);
      if (out.deliver) p.deliver.push_back(out.deliver);
    }
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter")[0];
  const int root = static_cast<int>(opts.rootRank);
  check_peer(root, "scatter");
  const bool am_root = rank_ == root;
  if (am_root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                fmt::format("meshtrain backend: scatter's root needs one list of {} input tensors", size_));
    check_same_shape(inputs[0], out, "scatter");
  }
  return issue(c10d::OpType::SCATTER, "meshtrain:scatter", outputs, [&](PendingOp& p) {
    Staged mine = stage(out, true);
    if (!am_root) {
      p.works.push_back(comm_.recv(mine.buffer.data_ptr(), byte_size(out), kBytes, root));
    } else {
      for (int r = 0; r < size_; ++r) {
        at::Tensor part = inputs[0][r].contiguous();
        if (r == rank_)
          mine.buffer.copy_(part.view(mine.buffer.sizes()));
        else
          p.works.push_back(comm_.send(part.data_ptr(), byte_size(part), kBytes, r));
        p.keep_alive.push_back(part);
      }
    }
    p.keep_alive.push_back(mine.buffer);
    if (mine.deliver) p.deliver.push_back(mine.deliver);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  const at::Tensor& t = single(tensors, "send")[0];
  check_peer(dst, "send");
  TORCH_CHECK(dst != rank_, "meshtrain backend: send to oneself");
  return issue(c10d::OpType::SEND, "meshtrain:send", tensors, [&](PendingOp& p) {
    at::Tensor data = t.contiguous();
    p.works.push_back(comm_.send(data.data_ptr(), byte_size(data), kBytes, dst));
    p.keep_alive.push_back(data);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const at::Tensor& t = single(tensors, "recv")[0];
  check_peer(src, "recv");
  TORCH_CHECK(src != rank_, "meshtrain backend: recv from oneself");
  return issue(c10d::OpType::RECV, "meshtrain:recv", tensors, [&](PendingOp& p) {
    Staged s = stage(t, true);
    p.works.push_back(comm_.recv(s.buffer.data_ptr(), byte_size(t), kBytes, src));
    p.keep_alive.push_back(s.buffer);
    if (s.deliver) p.deliver.push_back(s.deliver);
  });
}

c10::intrusive_ptr<c10d::Work> MeshtrainBackend::barrier(const c10d::BarrierOptions&) {
  return issue(c10d::OpType::BARRIER, "meshtrain:barrier", {},
               [&](PendingOp& p) { p.works.push_back(comm_.barrier()); });
}

}  // namespace meshtrain::torch_backend
