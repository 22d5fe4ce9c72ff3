#include "check.h"

#include <fmt/format.h>

#include "meshtrain/comm/algorithms/algorithm.h"

namespace meshtrain::comm::testing {

namespace {
std::string where(CollOp op, const std::string& algo, DType t, ReduceOp rop, size_t count, bool in_place) {
  return fmt::format("{} algo={} dtype={} op={} count={} {}", coll_op_name(op), algo, dtype_name(t),
                     reduce_op_name(rop), count, in_place ? "in-place" : "out-of-place");
}
}  // namespace

std::string check_collective(Communicator& c, CollOp op, const std::string& algo, DType t,
                             ReduceOp rop, size_t count, int root, bool in_place) {
  const int n = c.size(), r = c.rank();
  const size_t esz = dtype_size(t);
  c.set_algorithm(op, algo);
  std::string ctx = where(op, algo, t, rop, count, in_place);
  auto mismatch = [&](size_t i, double got, double want) {
    return fmt::format("rank {}: {}: element {} is {} instead of {}", r, ctx, i, got, want);
  };
  switch (op) {
    case CollOp::Allreduce: {
      auto in = make_input(r, count, t);
      std::vector<char> out(count * esz + 1, 0);
      void* dst = in_place ? in.data() : out.data();
      c.allreduce(in.data(), dst, count, t, rop).wait();
      for (size_t i = 0; i < count; ++i) {
        double want = expected_reduction(n, i, rop, t), got = get_value(dst, t, i);
        if (!close_enough(got, want, t)) return mismatch(i, got, want);
      }
      return "";
    }
    case CollOp::ReduceScatter: {
      auto in = make_input(r, count, t);
      Block mine = block_of(count, n, r);
      std::vector<char> out(mine.count * esz + 1, 0);
      void* dst = in_place ? in.data() + mine.offset * esz : out.data();
      c.reduce_scatter(in.data(), dst, count, t, rop).wait();
      for (size_t i = 0; i < mine.count; ++i) {
        double want = expected_reduction(n, mine.offset + i, rop, t), got = get_value(dst, t, i);
        if (!close_enough(got, want, t)) return mismatch(mine.offset + i, got, want);
      }
      return "";
    }
    case CollOp::Allgather: {
      // Rank p contributes the values rank p would have at its block.
      Block mine = block_of(count, n, r);
      std::vector<char> out(count * esz + 1, 0);
      auto own = make_input(r, mine.count, t, mine.offset);
      const void* src = own.data();
      if (in_place) {
        std::memcpy(out.data() + mine.offset * esz, own.data(), mine.count * esz);
        src = out.data() + mine.offset * esz;
      }
      c.allgather(src, out.data(), count, t).wait();
      for (int p = 0; p < n; ++p) {
        Block b = block_of(count, n, p);
        for (size_t i = 0; i < b.count; ++i) {
          double want = input_value(p, b.offset + i), got = get_value(out.data(), t, b.offset + i);
          if (got != want) return mismatch(b.offset + i, got, want);
        }
      }
      return "";
    }
    case CollOp::Broadcast: {
      auto buf = r == root ? make_input(root, count, t) : std::vector<char>(count * esz + 1, 0);
      c.broadcast(buf.data(), count, t, root).wait();
      for (size_t i = 0; i < count; ++i) {
        double want = input_value(root, i), got = get_value(buf.data(), t, i);
        if (got != want) return mismatch(i, got, want);
      }
      return "";
    }
    case CollOp::Reduce: {
      auto in = make_input(r, count, t);
      std::vector<char> out(count * esz + 1, 0);
      void* dst = in_place ? in.data() : out.data();
      c.reduce(in.data(), dst, count, t, rop, root).wait();
      if (r != root) return "";
      for (size_t i = 0; i < count; ++i) {
        double want = expected_reduction(n, i, rop, t), got = get_value(dst, t, i);
        if (!close_enough(got, want, t)) return mismatch(i, got, want);
      }
      return "";
    }
    case CollOp::Alltoall: {
      // Block p of rank r's input: values of (rank r*n+p).
      std::vector<char> in(n * count * esz + 1), out(n * count * esz + 1, 0);
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i) set_value(in.data(), t, p * count + i, input_value(r * n + p, i));
      c.alltoall(in.data(), out.data(), count, t).wait();
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i) {
          double want = input_value(p * n + r, i), got = get_value(out.data(), t, p * count + i);
          if (got != want) return mismatch(p * count + i, got, want);
        }
      return "";
    }
    default:
      return "unsupported op in check";
  }
}

std::vector<std::string> check_matrix(Communicator& c, bool big) {
  std::vector<std::string> failures;
  const int n = c.size();
  const DType dtypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64};
  const ReduceOp rops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product};
  std::vector<size_t> counts = {0, 1, 7, static_cast<size_t>(n) * 3 + 1, 1000};
  const CollOp ops[] = {CollOp::Allreduce, CollOp::ReduceScatter, CollOp::Allgather,
                        CollOp::Broadcast, CollOp::Reduce, CollOp::Alltoall};
  for (CollOp op : ops) {
    for (const auto& a : all_algorithms()) {
      if (!a.supports(op, c.transport())) continue;
      if (a.name == "hierarchical" && c.options().node_size == 0) continue;
      bool reduces = op == CollOp::Allreduce || op == CollOp::ReduceScatter || op == CollOp::Reduce;
      for (DType t : dtypes) {
        for (size_t count : counts) {
          for (ReduceOp rop : rops) {
            if (!reduces && rop != ReduceOp::Sum) continue;
            if (count == 1000 && rop != ReduceOp::Sum && t != DType::F32) continue;
            // Products of up to 8 inputs in [-8, 8] reach 2^24: exact in these,
            // beyond 16-bit floats' range.
            if (rop == ReduceOp::Product && (t == DType::BF16 || t == DType::F16)) continue;
            int root = (op == CollOp::Broadcast || op == CollOp::Reduce) ? (n > 1 ? 1 : 0) : 0;
            for (bool in_place : {false, true}) {
              if (op == CollOp::Alltoall && in_place) continue;
              if (op == CollOp::Broadcast && in_place) continue;
              std::string e = check_collective(c, op, std::string(a.name), t, rop, count, root, in_place);
              if (!e.empty()) failures.push_back(e);
            }
          }
        }
      }
      if (big) {
        // Several chunks of the direct algorithm and several ring segments.
        for (size_t count : {size_t{700001}, size_t{3 << 20}}) {
          if (count > 1000000 && op != CollOp::Allreduce) continue;
          for (DType t : {DType::F32, DType::BF16}) {
            std::string e = check_collective(c, op, std::string(a.name), t, ReduceOp::Sum, count, 0, op == CollOp::Allreduce);
            if (!e.empty()) failures.push_back(e);
          }
        }
      }
      c.set_algorithm(op, "auto");
    }
  }
  return failures;
}

std::string check_p2p_lanes(Communicator& c) {
  const int r = c.rank();
  std::string e;
  // Larger than a shm channel holds (8 x 64 KiB), so a send completes only
  // once the receiver reads it.
  const size_t big = 300000;
  std::vector<int32_t> out(big), in(big, -1);
  for (size_t i = 0; i < big; ++i) out[i] = static_cast<int32_t>(i * 3 + static_cast<size_t>(r));

  // 1. Rank 0's allreduce needs rank 1, which first waits for rank 0's send,
  //    issued after the allreduce: the send must not queue behind it.
  std::vector<float> grads(1 << 18, 1.0f);  // 1 MiB: runs on the engine, not inline
  if (r == 0) {
    Work ar = c.allreduce(grads.data(), grads.size(), DType::F32);
    c.send(out.data(), big, DType::I32, 1).wait();
    ar.wait();
  } else if (r == 1) {
    c.recv(in.data(), big, DType::I32, 0).wait();
    c.allreduce(grads.data(), grads.size(), DType::F32).wait();
    if (in[big - 1] != out[big - 1] - 1) e += "send behind a collective: wrong data; ";
  } else {
    c.allreduce(grads.data(), grads.size(), DType::F32).wait();
  }
  if (grads[7] != static_cast<float>(c.size())) e += "allreduce beside p2p: wrong sum; ";

  // 2. Rank 0 sends big to 1 and receives from 2; rank 2 waits for rank 0's
  //    acknowledgement before telling rank 1 to receive. One queue for all
  //    of rank 0's peers would deadlock here.
  int32_t token = 0;
  if (r == 0) {
    Work s = c.send(out.data(), big, DType::I32, 1);
    c.recv(&token, 1, DType::I32, 2).wait();
    c.send(&token, 1, DType::I32, 2).wait();
    s.wait();
    if (token != 42) e += "cross-peer: wrong token; ";
  } else if (r == 1) {
    c.recv(&token, 1, DType::I32, 2).wait();
    c.recv(in.data(), big, DType::I32, 0).wait();
    if (in[5] != out[5] - 1) e += "cross-peer: wrong data; ";
  } else if (r == 2) {
    token = 42;
    c.send(&token, 1, DType::I32, 0).wait();
    c.recv(&token, 1, DType::I32, 0).wait();
    c.send(&token, 1, DType::I32, 1).wait();
  }

  // 3. Ranks 0 and 1 both send first: sends never run on the caller.
  if (r <= 1) {
    const int peer = 1 - r;
    Work s = c.send(out.data(), big, DType::I32, peer);
    Work v = c.recv(in.data(), big, DType::I32, peer);
    s.wait();
    v.wait();
    if (in[big / 2] != static_cast<int32_t>((big / 2) * 3 + static_cast<size_t>(peer)))
      e += "simultaneous sends: wrong data; ";
  }

  // 4. Many messages to one peer arrive in the order they were sent.
  if (r <= 1) {
    const int peer = 1 - r, count = 64;
    std::vector<int32_t> got(count, -1);
    std::vector<int32_t> values(count);
    for (int k = 0; k < count; ++k) values[k] = k;
    std::vector<Work> works;
    for (int i = 0; i < count; ++i) {
      works.push_back(c.send(&values[i], 1, DType::I32, peer));
      works.push_back(c.recv(&got[i], 1, DType::I32, peer));
    }
    wait_all(works);
    for (int i = 0; i < count; ++i)
      if (got[i] != i) {
        e += fmt::format("message {} arrived as {}; ", i, got[i]);
        break;
      }
  }
  c.barrier().wait();
  return e;
}

}  // namespace meshtrain::comm::testing
