// Vocabulary of the comm layer: collective kinds, reduction ops, the error
// type, and the per-call description every error message and check uses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshtrain/core/dtype.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

// Product exists for torch.distributed's ReduceOp.PRODUCT (python/csrc/torch_backend).
enum class ReduceOp : uint8_t { Sum, Avg, Max, Min, Product };
enum class CollOp : uint8_t {
  Allreduce, ReduceScatter, Allgather, Broadcast, Reduce, Alltoall, Barrier, Send, Recv, kCount
};
constexpr size_t kCollOpCount = static_cast<size_t>(CollOp::kCount);

std::string_view reduce_op_name(ReduceOp op);
ReduceOp reduce_op_from_name(std::string_view name);
std::string_view coll_op_name(CollOp op);
CollOp coll_op_from_name(std::string_view name);

// A collective that failed: timeout, a dead or aborted peer, a mismatch.
class CommError : public Error {
 public:
  explicit CommError(const std::string& what) : Error(what) {}
};

// What one call asks for; identical on every rank for a collective (the
// debug check compares exactly these fields).
struct CollArgs {
  CollOp op = CollOp::Allreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // see the per-op meaning in communicator.h
  DType dtype = DType::F32;
  ReduceOp redop = ReduceOp::Sum;
  int root = 0;  // broadcast/reduce root; send/recv peer
  size_t bytes() const { return count * dtype_size(dtype); }
};

// Balanced split of `count` elements over `parts`: the first count % parts
// parts get one element more. Used by every algorithm and by reduce-scatter
// and allgather, so counts not divisible by the number of ranks just work.
struct Block {
  size_t offset = 0;
  size_t count = 0;
};
inline Block block_of(size_t count, int parts, int index) {
  size_t base = count / parts, extra = count % parts, i = static_cast<size_t>(index);
  return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

}  // namespace meshtrain::comm
