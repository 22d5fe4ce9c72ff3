// Collective correctness checks shared by the gtest suites and the comm_check
// rank program: inputs are small integers, so sums are exact in every dtype
// and the reference is computed independently of any algorithm.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/half.h"

namespace meshtrain::comm::testing {

inline double input_value(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 + 3) % 17) - 8);
}

inline void set_value(void* buf, DType t, size_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(buf)[i] = v; break;
    case DType::I32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DType::BF16: static_cast<uint16_t*>(buf)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::F16: static_cast<uint16_t*>(buf)[i] = f32_to_f16(static_cast<float>(v)); break;
    default: break;
  }
}

inline double get_value(const void* buf, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(buf)[i];
    case DType::F64: return static_cast<const double*>(buf)[i];
    case DType::I32: return static_cast<const int32_t*>(buf)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    default: return 0;
  }
}

inline double expected_reduction(int n, size_t i, ReduceOp op, DType t) {
  double acc = input_value(0, i);
  for (int r = 1; r < n; ++r) {
    double v = input_value(r, i);
    if (op == ReduceOp::Max) acc = std::max(acc, v);
    else if (op == ReduceOp::Min) acc = std::min(acc, v);
    else if (op == ReduceOp::Product) acc *= v;
    else acc += v;
  }
  if (op == ReduceOp::Avg) {
    if (t == DType::I32 || t == DType::I64) return std::trunc(acc / n);
    return acc / n;
  }
  return acc;
}

inline bool close_enough(double got, double want, DType t) {
  double tol = (t == DType::BF16) ? 0.02 : (t == DType::F16 ? 0.002 : 1e-6);
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

inline std::vector<char> make_input(int rank, size_t count, DType t, size_t first = 0) {
  std::vector<char> b(count * dtype_size(t) + 1);
  for (size_t i = 0; i < count; ++i) set_value(b.data(), t, i, input_value(rank, first + i));
  return b;
}

// Runs one collective with the given algorithm (in and out of place where the
// op allows) and returns "" or a description of the first wrong element.
std::string check_collective(Communicator& c, CollOp op, const std::string& algo, DType t,
                             ReduceOp rop, size_t count, int root = 0, bool in_place = false);

// The whole matrix of ops x algorithms x dtypes x counts this world supports.
// `big` adds a few multi-chunk sizes; returns the failures.
std::vector<std::string> check_matrix(Communicator& c, bool big);

// Point-to-point on its own lanes (needs >= 3 ranks; ranks above 2 only join
// the collective): a send issued behind a collective that cannot finish
// until the receiver has the message; a send to one peer that cannot finish
// before a receive from another; two ranks that both send a large message
// first; and per-peer FIFO order of many messages. "" or what went wrong.
std::string check_p2p_lanes(Communicator& c);

}  // namespace meshtrain::comm::testing
