#include "meshtrain/comm/types.h"

#include <array>

namespace meshtrain::comm {

namespace {
constexpr std::array<std::string_view, 5> kReduceNames = {"sum", "avg", "max", "min", "product"};
constexpr std::array<std::string_view, kCollOpCount> kCollNames = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall",
    "barrier", "send", "recv"};
}  // namespace

std::string_view reduce_op_name(ReduceOp op) { return kReduceNames.at(static_cast<size_t>(op)); }

ReduceOp reduce_op_from_name(std::string_view name) {
  for (size_t i = 0; i < kReduceNames.size(); ++i)
    if (kReduceNames[i] == name) return static_cast<ReduceOp>(i);
  throw UsageError(fmt::format("unknown reduction '{}' (sum, avg, max, min, product)", name));
}

std::string_view coll_op_name(CollOp op) { return kCollNames.at(static_cast<size_t>(op)); }

CollOp coll_op_from_name(std::string_view name) {
  for (size_t i = 0; i < kCollNames.size(); ++i)
    if (kCollNames[i] == name) return static_cast<CollOp>(i);
  if (name == "all_reduce") return CollOp::Allreduce;
  if (name == "reducescatter") return CollOp::ReduceScatter;
  if (name == "all_gather") return CollOp::Allgather;
  throw UsageError(fmt::format(
      "unknown collective '{}' (allreduce, reduce_scatter, allgather, broadcast, reduce, "
      "alltoall, barrier)", name));
}

}  // namespace meshtrain::comm
