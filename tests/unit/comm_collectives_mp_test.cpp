// test-links: mt_comm
// Collectives between real processes: every op x algorithm x dtype x count on
// worlds of 1 to 8 ranks (oversubscribed on small machines), against a
// reference computed from the inputs alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "harness.h"
#include "meshtrain/comm/stream_copy.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;

namespace {

CommOptions test_options(double timeout_s = 30) {
  CommOptions o = CommOptions::from_env();
  o.timeout_s = timeout_s;
  return o;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += v[i] + "\n";
  if (v.size() > 8) s += fmt::format("... and {} more\n", v.size() - 8);
  return s;
}

void matrix(int n, bool big) {
  auto w = run_world(n, [big](Communicator& c) { return join(check_matrix(c, big)); }, test_options());
  EXPECT_TRUE(w.ok()) << w.report();
}

}  // namespace

TEST(comm, matrix_world_1) { matrix(1, false); }
TEST(comm, matrix_world_2_with_multichunk) { matrix(2, true); }
TEST(comm, matrix_world_3) { matrix(3, false); }
TEST(comm, matrix_world_4) { matrix(4, false); }
TEST(comm, matrix_world_5) { matrix(5, false); }
TEST(comm, matrix_world_8_oversubscribed) { matrix(8, false); }

// Small allreduces ride in the barrier's cache lines, 56 bytes per line, up to
// 4 lines (shm_layout.h); above that they go through the small slots.
// - Every op gets other inputs, so data left in a line by the op two steps
//   earlier (same parity) cannot pass for this op's; worlds of 2, 3 and 17
//   ranks (17: beyond the ranks the latency path keeps on the stack).
// - Every dtype width, counts on each side of a line boundary and of the last
//   line, Sum and Max, in place or not, against the reference of check.h.
TEST(comm, allreduce_across_tiny_line_boundaries) {
  for (int n : {2, 3, 17}) {
    auto w = run_world(n, [](Communicator& c) {
      std::string e;
      const int64_t ranks = c.size();
      int64_t op_index = 0;
      for (size_t count : {1, 13, 14, 15, 28, 29, 42, 43, 56, 57, 100})
        for (int repeat = 0; repeat < 3; ++repeat, ++op_index) {
          std::vector<int32_t> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i)
            in[i] = static_cast<int32_t>((c.rank() + 1) * (op_index + 1) + static_cast<int64_t>(i) * 7);
          c.allreduce(in.data(), out.data(), count, DType::I32).wait();
          for (size_t i = 0; i < count; ++i) {
            const int64_t want = ranks * (ranks + 1) / 2 * (op_index + 1) + ranks * static_cast<int64_t>(i) * 7;
            if (out[i] != want) {
              e += fmt::format("op {} count {} element {}: {} != {}; ", op_index, count, i, out[i], want);
              break;
            }
          }
        }
      if (ranks > 3) return e;  // the dtype sweep below on the small worlds only
      struct Case { DType t; std::vector<size_t> counts; };
      const Case cases[] = {
          {DType::F32, {13, 14, 15, 28, 29, 42, 43, 56, 57, 100}},
          {DType::F64, {6, 7, 8, 27, 28, 29}},
          {DType::BF16, {27, 28, 29, 111, 112, 113}},
          {DType::I32, {14, 15, 56, 57}}};
      for (const Case& k : cases)
        for (size_t count : k.counts)
          for (bool in_place : {false, true}) {
            e += check_collective(c, CollOp::Allreduce, "direct", k.t, ReduceOp::Sum, count, 0, in_place);
            e += check_collective(c, CollOp::Allreduce, "direct", k.t, ReduceOp::Max, count, 0, in_place);
          }
      return e;
    }, test_options());
    EXPECT_TRUE(w.ok()) << "world " << n << ": " << w.report();
  }
}

TEST(comm, allreduce_tens_of_mib) {
  // Above comm/stream_copy.h's threshold the direct algorithm writes its
  // result with streaming stores. The default threshold depends on the CPU
  // (twice the L3 on Zen 5, 8 MiB on Zen 4, 4 MiB elsewhere), so pin it below these sizes:
  // the ranks are forked after this and read it on first use.
  const char* before = std::getenv("MESHTRAIN_SHM_STREAMING_BYTES");
  const std::string saved = before ? before : "";
  setenv("MESHTRAIN_SHM_STREAMING_BYTES", std::to_string(4u << 20).c_str(), 1);
  auto w = run_world(3, [](Communicator& c) {
    std::string e;
    if (streaming_threshold_bytes() != (4u << 20)) return std::string("streaming threshold not pinned");
    for (std::string algo : {"direct", "ring"})
      e += check_collective(c, CollOp::Allreduce, algo, DType::F32, ReduceOp::Sum, 24u << 18, 0, false);
    // An odd count leaves unaligned ends around the streamed body.
    e += check_collective(c, CollOp::Allreduce, "direct", DType::F32, ReduceOp::Sum, (24u << 18) + 7,
                          0, false);
    e += check_collective(c, CollOp::Allgather, "direct", DType::F32, ReduceOp::Sum, (6u << 18) + 5,
                          0, false);
    return e;
  }, test_options());
  if (before) setenv("MESHTRAIN_SHM_STREAMING_BYTES", saved.c_str(), 1);
  else unsetenv("MESHTRAIN_SHM_STREAMING_BYTES");
  EXPECT_TRUE(w.ok()) << w.report();
}

// The direct allreduce, allgather, reduce-scatter and broadcast write what
// peers read with ordinary or streaming stores, chosen online per size
// (exchange_tuner.h). Both ways must give the
// same results: pin each in turn, in and out of place, odd and multi-chunk
// counts, a reduced precision and three ranks.
TEST(comm, direct_collectives_both_exchange_modes) {
  for (const char* mode : {"cache", "stream", "auto"}) {
    setenv("MESHTRAIN_SHM_EXCHANGE", mode, 1);
    auto w = run_world(3, [](Communicator& c) {
      std::string e;
      for (size_t count : {size_t{70000}, size_t{(3u << 18) + 11}})
        for (bool in_place : {false, true}) {
          e += check_collective(c, CollOp::Allreduce, "direct", DType::F32, ReduceOp::Sum, count, 0, in_place);
          e += check_collective(c, CollOp::Allreduce, "direct", DType::BF16, ReduceOp::Max, count, 0, in_place);
          e += check_collective(c, CollOp::Allgather, "direct", DType::F32, ReduceOp::Sum, count, 0, in_place);
          e += check_collective(c, CollOp::ReduceScatter, "direct", DType::F32, ReduceOp::Sum, count, 0, in_place);
          e += check_collective(c, CollOp::Broadcast, "direct", DType::F32, ReduceOp::Sum, count, 1, in_place);
        }
      return e;
    }, test_options());
    unsetenv("MESHTRAIN_SHM_EXCHANGE");
    EXPECT_TRUE(w.ok()) << mode << ":\n" << w.report();
  }
}

TEST(comm, hierarchical_emulated_nodes) {
  CommOptions o = test_options();
  o.node_size = 2;
  auto w = run_world(6, [](Communicator& c) {
    std::string e;
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{5000}, size_t{600000}})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
        e += check_collective(c, CollOp::Allreduce, "hierarchical", DType::F32, op, count);
    e += check_collective(c, CollOp::Allreduce, "hierarchical", DType::BF16, ReduceOp::Sum, 4097);
    if (c.algorithm_for(CollOp::Allreduce, 1 << 20).empty()) e += "no algorithm chosen";
    return e;
  }, o);
  EXPECT_TRUE(w.ok()) << w.report();
}

TEST(comm, split_into_subgroups) {
  auto w = run_world(6, [](Communicator& c) {
    // A 2 x 3 mesh: rows (same r / 3) and columns (same r % 3).
    Communicator row = c.split(c.rank() / 3, c.rank());
    Communicator col = c.split(c.rank() % 3, -c.rank());  // reversed order by key
    Communicator none = c.split(c.rank() == 0 ? 0 : -1, 0);
    std::string e;
    if (row.size() != 3 || row.rank() != c.rank() % 3) e += "bad row rank/size; ";
    if (col.size() != 2 || col.rank() != 1 - c.rank() / 3) e += "bad column rank/size; ";
    if (none.valid() != (c.rank() == 0)) e += "color -1 should give an invalid communicator; ";
    // Each row sums world ranks of its members.
    double s = row.allreduce_scalar(static_cast<double>(c.rank()));
    double want = c.rank() < 3 ? 0 + 1 + 2 : 3 + 4 + 5;
    if (s != want) e += fmt::format("row sum {} != {}; ", s, want);
    e += check_collective(col, CollOp::Allreduce, "auto", DType::F32, ReduceOp::Sum, 100000);
    e += check_collective(row, CollOp::ReduceScatter, "direct", DType::F32, ReduceOp::Sum, 1001);
    Communicator nested = row.split(row.rank() % 2, 0);
    e += check_collective(nested, CollOp::Broadcast, "ring", DType::I32, ReduceOp::Sum, 77);
    return e;
  }, test_options());
  EXPECT_TRUE(w.ok()) << w.report();
}

TEST(comm, concurrent_outstanding_operations) {
  auto w = run_world(4, [](Communicator& c) {
    const int k = 12;
    const size_t count = 70000;  // above the inline threshold: runs on the engine
    std::vector<std::vector<float>> bufs(k, std::vector<float>(count));
    std::vector<Work> works;
    for (int j = 0; j < k; ++j) {
      for (size_t i = 0; i < count; ++i) bufs[j][i] = static_cast<float>(c.rank() + j);
      works.push_back(c.allreduce(bufs[j].data(), count, DType::F32));
    }
    double scalar = c.allreduce_scalar(1.0);  // issued behind them: must complete after
    std::string e;
    // Issue order is completion order: the scalar was issued last.
    for (const auto& wk : works)
      if (!wk.test()) e += "an earlier operation was still running after a later one finished; ";
    wait_all(works);
    for (int j = 0; j < k; ++j) {
      float want = static_cast<float>(0 + 1 + 2 + 3 + 4 * j);
      for (size_t i = 0; i < count; i += 997)
        if (bufs[j][i] != want) return fmt::format("buffer {} element {} = {} not {}", j, i, bufs[j][i], want);
    }
    if (scalar != 4.0) e += "scalar allreduce wrong";
    for (int j = 0; j + 1 < k; ++j)
      if (works[j].sequence_number() >= works[j + 1].sequence_number()) e += "sequence numbers not increasing; ";
    c.synchronize();
    return e;
  }, test_options());
  EXPECT_TRUE(w.ok()) << w.report();
}

TEST(comm, point_to_point_ring) {
  auto w = run_world(4, [](Communicator& c) {
    int n = c.size(), r = c.rank();
    std::string e;
    for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
      std::vector<int32_t> out(count, r), in(count, -1);
      // Even ranks send first, odd ranks receive first: no deadlock even
      // beyond the FIFO capacity.
      if (r % 2 == 0) {
        c.send(out.data(), count, DType::I32, (r + 1) % n).wait();
        c.recv(in.data(), count, DType::I32, (r - 1 + n) % n).wait();
      } else {
        c.recv(in.data(), count, DType::I32, (r - 1 + n) % n).wait();
        c.send(out.data(), count, DType::I32, (r + 1) % n).wait();
      }
      if (in[0] != (r - 1 + n) % n || in[count - 1] != (r - 1 + n) % n) e += "wrong p2p data; ";
    }
    return e;
  }, test_options());
  EXPECT_TRUE(w.ok()) << w.report();
}

static void check_shared_buffers_zero_copy() {
  auto w = run_world(3, [](Communicator& c) {
    std::string e;
    const size_t count = (3u << 20) / 4 + 17;  // several chunks, odd length
    SharedBuffer buf = c.alloc_shared(count * sizeof(float) + 64);
    if (!buf || buf.bytes() < count * sizeof(float)) return std::string("bad shared buffer");
    for (int round = 0; round < 3; ++round) {
      float* p = buf.as<float>();
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(input_value(c.rank(), i) + round);
      // Whole buffer, then a bucket in the middle (offset views), then avg.
      c.allreduce(p, count, DType::F32).wait();
      for (size_t i = 0; i < count; i += 101) {
        double want = expected_reduction(c.size(), i, ReduceOp::Sum, DType::F32) + 3 * round;
        if (p[i] != want) return fmt::format("round {} element {}: {} != {}", round, i, p[i], want);
      }
      Tensor bucket = buf.tensor(DType::F32, 200000, 5);
      for (int64_t i = 0; i < bucket.numel(); ++i) bucket.data<float>()[i] = static_cast<float>(c.rank());
      c.allreduce(bucket, ReduceOp::Avg).wait();
      if (bucket.data<float>()[0] != 1.0f || bucket.data<float>()[199999] != 1.0f) e += "bucket avg wrong; ";
      if (p[4] != static_cast<float>(expected_reduction(c.size(), 4, ReduceOp::Sum, DType::F32) + 3 * round))
        e += "allreduce of a bucket touched memory outside it; ";
    }
    // Mixed: only rank 0 passes a shared buffer, the others ordinary memory.
    std::vector<float> own(5000, 1.0f);
    float* src = c.rank() == 0 ? buf.as<float>() : own.data();
    std::fill(src, src + 5000, 1.0f);
    c.set_algorithm(CollOp::Allreduce, "direct");
    c.allreduce(src, 5000, DType::F32).wait();
    if (src[4999] != 3.0f) e += "mixed shared/unshared allreduce wrong; ";
    std::vector<float> big(400000, 2.0f);
    float* bsrc = c.rank() == 1 ? buf.as<float>() : big.data();
    std::fill(bsrc, bsrc + 400000, 2.0f);
    c.allreduce(bsrc, 400000, DType::F32).wait();
    if (bsrc[399999] != 6.0f) e += "mixed large allreduce wrong; ";
    // Broadcast from a shared root buffer.
    std::vector<float> b(300000, 0.0f);
    float* bb = c.rank() == 2 ? buf.as<float>() : b.data();
    if (c.rank() == 2) std::fill(bb, bb + 300000, 9.0f);
    c.broadcast(bb, 300000, DType::F32, 2).wait();
    if (bb[299999] != 9.0f) e += "broadcast from shared root wrong; ";
    return e;
  }, test_options());
  EXPECT_TRUE(w.ok()) << w.report();
  EXPECT_TRUE(leftover_segments(w.job_id).empty());
}

TEST(comm, shared_buffers_zero_copy) { check_shared_buffers_zero_copy(); }

// The zero-copy allreduce writes its reduced slice with ordinary or streaming
// stores (exchange_tuner.h): the same checks with each pinned.
TEST(comm, shared_buffers_zero_copy_both_exchange_modes) {
  for (const char* mode : {"cache", "stream"}) {
    SCOPED_TRACE(mode);
    setenv("MESHTRAIN_SHM_EXCHANGE", mode, 1);
    check_shared_buffers_zero_copy();
    unsetenv("MESHTRAIN_SHM_EXCHANGE");
  }
}

TEST(comm, work_handle_semantics) {
  auto w = run_world(2, [](Communicator& c) {
    std::string e;
    Work none;
    if (!none.test()) e += "default Work should be complete; ";
    std::vector<float> v(1 << 20, 1.0f);
    Work a = c.allreduce(v.data(), v.size(), DType::F32);
    a.wait(std::chrono::seconds(20));
    if (!a.test() || a.failed()) e += "completed Work reports wrong state; ";
    if (v[12345] != 2.0f) e += "wrong sum; ";
    if (a.description().find("allreduce #") == std::string::npos) e += "description lacks the op: " + a.description();
    // Bad usage fails at issue time with a usage error.
    try {
      c.broadcast(v.data(), 1, DType::F32, 7);
      e += "broadcast from a rank outside the group should throw; ";
    } catch (const UsageError&) {
    }
    try {
      c.allreduce(v.data(), 1, DType::U8);
      e += "u8 reduction should throw; ";
    } catch (const UsageError&) {
    }
    return e;
  }, test_options());
  EXPECT_TRUE(w.ok()) << w.report();
}
