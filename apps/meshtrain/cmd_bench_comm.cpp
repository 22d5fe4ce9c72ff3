// meshtrain bench comm: collective benchmarks in nccl-tests' format.
// Rows: size count type redop root | time algbw busbw #wrong, out-of-place
// then in-place; busbw as nccl-tests defines it (docs/COMM.md). Started
// outside a job with -n N it launches N ranks of itself.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "meshtrain/train/cpu_report.h"
#include "meshtrain/comm/algorithms/algorithm.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/reduce.h"
#include "meshtrain/core/half.h"
#include "meshtrain/launch/launcher.h"

namespace meshtrain::cli {

namespace {

using namespace meshtrain::comm;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string ops = "allreduce";
  std::string algo = "auto";
  int nproc = 0;
  std::string min_bytes = "8", max_bytes = "64M";
  double factor = 2;
  std::string dtype = "f32";
  std::string redop = "sum";
  int warmup = 5, iters = 20;
  bool json = false, shared = false, calibrate = false, check = true;
};

size_t parse_size(const std::string& s) {
  if (s.empty()) throw UsageError("empty size");
  size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB") mult = 1024;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B") throw UsageError(fmt::format("size '{}': unit must be K, M or G", s));
  return static_cast<size_t>(v * mult);
}

double bus_factor(CollOp op, int n) {
  if (n <= 1) return 1;
  switch (op) {
    case CollOp::Allreduce: return 2.0 * (n - 1) / n;
    case CollOp::ReduceScatter: case CollOp::Allgather: case CollOp::Alltoall: return double(n - 1) / n;
    default: return 1;
  }
}

std::string_view nccl_type(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "half";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    default: return dtype_name(t);
  }
}

double in_value(int rank, size_t i) { return static_cast<double>((rank + 1) + static_cast<int>(i % 5)); }

void fill(void* p, DType t, size_t count, int rank, size_t first = 0) {
  for (size_t i = 0; i < count; ++i) {
    double v = in_value(rank, first + i);
    switch (t) {
      case DType::F32: static_cast<float*>(p)[i] = float(v); break;
      case DType::F64: static_cast<double*>(p)[i] = v; break;
      case DType::I32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
      case DType::I64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
      case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
      case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v)); break;
      default: break;
    }
  }
}

double read(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}

double reduced(int n, size_t i, ReduceOp op) {
  double acc = in_value(0, i);
  for (int r = 1; r < n; ++r) {
    double v = in_value(r, i);
    acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
  }
  return op == ReduceOp::Avg ? acc / n : acc;
}

// One op on prepared buffers; `count` follows the Communicator conventions.
Work issue(Communicator& c, CollOp op, const void* send, void* recv, size_t count, DType t, ReduceOp rop) {
  switch (op) {
    case CollOp::Allreduce: return c.allreduce(send, recv, count, t, rop);
    case CollOp::ReduceScatter: return c.reduce_scatter(send, recv, count, t, rop);
    case CollOp::Allgather: return c.allgather(send, recv, count, t);
    case CollOp::Broadcast: return c.broadcast(recv, count, t, 0);
    case CollOp::Reduce: return c.reduce(send, recv, count, t, rop, 0);
    case CollOp::Alltoall: return c.alltoall(send, recv, count / c.size(), t);
    default: throw UsageError(fmt::format("cannot benchmark {}", coll_op_name(op)));
  }
}

struct Buffers {
  std::vector<char> own_send, own_recv;
  SharedBuffer shared;
  char* send = nullptr;
  char* recv = nullptr;
};

// Pointers for one variant: in place means the op's natural in-place layout.
std::pair<const void*, void*> variant(CollOp op, Buffers& b, bool in_place, size_t count, DType t, int n, int r) {
  if (!in_place) return {b.send, b.recv};
  size_t esz = dtype_size(t);
  switch (op) {
    case CollOp::ReduceScatter: return {b.recv, b.recv + block_of(count, n, r).offset * esz};
    case CollOp::Allgather: return {b.recv + block_of(count, n, r).offset * esz, b.recv};
    default: return {b.recv, b.recv};
  }
}

// Elements wrong after one more run on fresh inputs, summed over ranks.
int64_t count_wrong(Communicator& c, CollOp op, Buffers& b, bool in_place, size_t count, DType t, ReduceOp rop) {
  const int n = c.size(), r = c.rank();
  const size_t esz = dtype_size(t);
  Block mine = block_of(count, n, r);
  auto [send, recv] = variant(op, b, in_place, count, t, n, r);
  std::memset(b.recv, 0, count * esz);
  switch (op) {
    case CollOp::Allgather: fill(const_cast<void*>(send), t, mine.count, r, mine.offset); break;
    case CollOp::Broadcast: if (r == 0) fill(recv, t, count, 0); break;
    case CollOp::Alltoall: fill(const_cast<void*>(send), t, count, r); break;
    default: fill(const_cast<void*>(send), t, count, r); break;
  }
  issue(c, op, send, recv, count, t, rop).wait();
  int64_t wrong = 0;
  double tol = (t == DType::BF16) ? 0.02 : (t == DType::F16 ? 0.002 : 1e-6);
  auto bad = [&](double got, double want) { return std::fabs(got - want) > tol * std::max(1.0, std::fabs(want)); };
  switch (op) {
    case CollOp::Allreduce:
      for (size_t i = 0; i < count; ++i) wrong += bad(read(recv, t, i), reduced(n, i, rop));
      break;
    case CollOp::Reduce:
      if (r == 0) for (size_t i = 0; i < count; ++i) wrong += bad(read(recv, t, i), reduced(n, i, rop));
      break;
    case CollOp::ReduceScatter:
      for (size_t i = 0; i < mine.count; ++i) wrong += bad(read(recv, t, i), reduced(n, mine.offset + i, rop));
      break;
    case CollOp::Allgather:
      for (int p = 0; p < n; ++p) {
        Block bp = block_of(count, n, p);
        for (size_t i = 0; i < bp.count; ++i) wrong += bad(read(recv, t, bp.offset + i), in_value(p, bp.offset + i));
      }
      break;
    case CollOp::Broadcast:
      for (size_t i = 0; i < count; ++i) wrong += bad(read(recv, t, i), in_value(0, i));
      break;
    case CollOp::Alltoall: {
      size_t per = count / n;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < per; ++i) wrong += bad(read(recv, t, p * per + i), in_value(p, r * per + i));
      break;
    }
    default: break;
  }
  return c.allreduce_scalar(wrong);
}

// Microseconds per call, the slowest rank's average.
double time_op(Communicator& c, CollOp op, const void* send, void* recv, size_t count, DType t,
               ReduceOp rop, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) issue(c, op, send, recv, count, t, rop).wait();
  c.barrier().wait();
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) issue(c, op, send, recv, count, t, rop).wait();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  return c.allreduce_scalar(us, ReduceOp::Max);
}

// Node-wide memory bandwidth (read + write bytes per second) with every rank
// copying at once: the budget the collectives' DRAM traffic is measured against.
double memory_bandwidth_gbs(Communicator& c) {
  const size_t bytes = 128u << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int k = 0; k < 3; ++k) {
    c.barrier().wait();
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = c.allreduce_scalar(2.0 * bytes / s / 1e9);  // sum over ranks
    best = std::max(best, total);
  }
  return best;
}

void calibrate(Communicator& c, const BenchOptions& o) {
  CostModel model = c.cost_model();
  std::string kind(c.transport());
  const size_t small = 8, large = 8u << 20;
  for (const auto& a : all_algorithms()) {
    if (!a.supports(CollOp::Allreduce, kind) || a.name == "hierarchical") continue;
    c.set_algorithm(CollOp::Allreduce, std::string(a.name));
    std::vector<float> buf(large / 4, 1.0f);
    double ts = time_op(c, CollOp::Allreduce, buf.data(), buf.data(), small / 4, DType::F32, ReduceOp::Sum, 50, 500);
    double tl = time_op(c, CollOp::Allreduce, buf.data(), buf.data(), large / 4, DType::F32, ReduceOp::Sum, 2, 8);
    CostShape ss = cost_shape(a.name, CollOp::Allreduce, small, c.size());
    CostShape sl = cost_shape(a.name, CollOp::Allreduce, large, c.size());
    // Solve ts = A*ss.steps + B*ss.bytes, tl = A*sl.steps + B*sl.bytes.
    double det = ss.steps * sl.bytes - sl.steps * ss.bytes;
    AlphaBeta ab = model.get(kind, a.name);
    if (std::fabs(det) > 1e-12) {
      ab.alpha_us = std::max(0.01, (ts * sl.bytes - tl * ss.bytes) / det);
      ab.beta_us_per_byte = std::max(1e-7, (ss.steps * tl - sl.steps * ts) / det);
    }
    model.set(kind, a.name, ab);
    if (c.rank() == 0)
      std::printf("# calibrated %-18s alpha %.3f us/step  beta %.3f us/MiB  (8 B: %.2f us, 8 MiB: %.1f us)\n",
                  std::string(a.name).c_str(), ab.alpha_us, ab.beta_us_per_byte * (1 << 20), ts, tl);
  }
  c.set_algorithm(CollOp::Allreduce, "auto");
  if (c.rank() == 0) {
    std::string path = CostModel::default_path();
    model.save(path);
    std::printf("# wrote %s\n", path.c_str());
  }
}

void run_in_world(const BenchOptions& o) {
  Communicator c = Communicator::from_env();
  const int n = c.size(), r = c.rank();
  DType t = dtype_from_name(o.dtype);
  ReduceOp rop = reduce_op_from_name(o.redop);
  if (o.calibrate) return calibrate(c, o);
  size_t lo = parse_size(o.min_bytes), hi = parse_size(o.max_bytes);
  if (lo > hi || o.factor <= 1) throw UsageError("need -b <= -e and -f > 1");
  std::vector<CollOp> ops;
  if (o.ops == "all") ops = {CollOp::Allreduce, CollOp::ReduceScatter, CollOp::Allgather, CollOp::Broadcast};
  else {
    std::string_view list(o.ops);
    while (!list.empty()) {
      auto comma = list.find(',');
      ops.push_back(coll_op_from_name(list.substr(0, comma)));
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
  }
  double membw = o.shared ? memory_bandwidth_gbs(c) : 0;
  const size_t esz = dtype_size(t);
  for (CollOp op : ops) {
    c.set_algorithm(op, o.algo);
    bool reduces = op == CollOp::Allreduce || op == CollOp::ReduceScatter || op == CollOp::Reduce;
    Buffers b;
    size_t cap = hi + n * esz + 64;
    if (o.shared) {
      b.shared = c.alloc_shared(2 * cap);
      b.send = static_cast<char*>(b.shared.data());
      b.recv = b.send + cap;
    } else {
      b.own_send.assign(cap, 0);
      b.own_recv.assign(cap, 0);
      b.send = b.own_send.data();
      b.recv = b.own_recv.data();
    }
    std::memset(b.send, 0, cap);  // touch every page before timing
    std::memset(b.recv, 0, cap);
    if (r == 0 && !o.json) {
      std::printf("# meshtrain bench comm: %s, %d ranks, transport %s, algorithm %s, %s buffers, warmup %d, iters %d\n",
                  std::string(coll_op_name(op)).c_str(), n, std::string(c.transport()).c_str(), o.algo.c_str(),
                  o.shared ? "shared-memory" : "user", o.warmup, o.iters);
      std::printf("# %s\n", cpu_report_line().c_str());
      if (o.shared && op == CollOp::Allreduce)
        std::printf("# memory bandwidth, %d ranks copying together: %.1f GB/s (read+write); zero-copy "
                    "allreduce moves (3n-1)S bytes -> algbw ceiling %.2f GB/s at large sizes\n",
                    n, membw, membw / (3.0 * n - 1));
      std::printf("#%62s%40s\n", "out-of-place", "in-place");
      std::printf("#%11s %12s %8s %6s %5s %9s %8s %8s %6s %9s %8s %8s %6s  %s\n", "size", "count", "type",
                  "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "algo");
      std::printf("#%11s %12s %8s %6s %5s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "", "",
                  "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    double bw_sum = 0;
    int rows = 0;
    for (size_t bytes = lo; bytes <= hi; bytes = std::max(bytes + 1, static_cast<size_t>(bytes * o.factor))) {
      size_t count = std::max<size_t>(1, bytes / esz);
      if (op == CollOp::Alltoall) count = std::max<size_t>(n, count / n * n);
      size_t sz = count * esz;
      int iters = sz <= (1u << 20) ? o.iters * 5 : o.iters;
      double us[2] = {0, 0};
      int64_t wrong[2] = {0, 0};
      for (int v = 0; v < 2; ++v) {
        bool in_place = v == 1;
        if (op == CollOp::Alltoall && in_place) { us[v] = -1; continue; }
        auto [send, recv] = variant(op, b, in_place, count, t, n, r);
        // An allgather's input is this rank's block only (in place it sits
        // inside the output at the block's offset: filling `count` from
        // there ran past the buffer at the largest size).
        const Block mine = block_of(count, n, r);
        if (op == CollOp::Allgather)
          fill(const_cast<void*>(send), t, mine.count, r, mine.offset);
        else
          fill(const_cast<void*>(send), t, count, r);
        us[v] = time_op(c, op, send, recv, count, t, rop, o.warmup, iters);
        wrong[v] = o.check ? count_wrong(c, op, b, in_place, count, t, rop) : 0;
      }
      std::string algo_used = c.algorithm_for(op, op == CollOp::Alltoall ? sz : sz);
      if (r != 0) continue;
      auto alg = [&](double u) { return u > 0 ? sz / u / 1e3 : 0.0; };
      double bf = bus_factor(op, n);
      bw_sum += alg(us[0]) * bf;
      ++rows;
      int root = (op == CollOp::Broadcast || op == CollOp::Reduce) ? 0 : -1;
      if (o.json) {
        nlohmann::json j = {{"op", coll_op_name(op)}, {"algo", algo_used}, {"ranks", n}, {"transport", c.transport()},
                            {"shared", o.shared}, {"size", sz}, {"count", count}, {"type", dtype_name(t)},
                            {"redop", reduces ? reduce_op_name(rop) : "none"}, {"root", root},
                            {"oop_time_us", us[0]}, {"oop_algbw", alg(us[0])}, {"oop_busbw", alg(us[0]) * bf},
                            {"oop_wrong", wrong[0]}, {"ip_time_us", us[1]}, {"ip_algbw", alg(us[1])},
                            {"ip_busbw", alg(us[1]) * bf}, {"ip_wrong", wrong[1]}};
        if (o.shared && op == CollOp::Allreduce) j["ceiling_algbw"] = membw / (3.0 * n - 1);
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf(" %11zu %12zu %8s %6s %5d %9.2f %8.2f %8.2f %6lld %9.2f %8.2f %8.2f %6lld  %s\n", sz, count,
                    std::string(nccl_type(t)).c_str(), reduces ? std::string(reduce_op_name(rop)).c_str() : "none",
                    root, us[0], alg(us[0]), alg(us[0]) * bf, static_cast<long long>(wrong[0]), us[1], alg(us[1]),
                    alg(us[1]) * bf, static_cast<long long>(wrong[1]), algo_used.c_str());
      }
      std::fflush(stdout);
    }
    if (r == 0 && !o.json && rows)
      std::printf("# Avg bus bandwidth    : %.3f\n#\n", bw_sum / rows);
  }
}

}  // namespace

void register_bench_comm(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("comm", "Collective benchmarks in nccl-tests format (size | time algbw busbw #wrong)");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--op", o->ops, "allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, a comma list, or all")
      ->capture_default_str();
  cmd->add_option("--algo", o->algo, "Algorithm: auto, direct, ring, tree, halving_doubling, hierarchical, mpi")
      ->capture_default_str();
  cmd->add_option("-n,--nproc", o->nproc, "Launch this many ranks (outside a launched job)");
  cmd->add_option("-b,--minbytes", o->min_bytes, "Smallest size (e.g. 8, 1K, 4M)")->capture_default_str();
  cmd->add_option("-e,--maxbytes", o->max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", o->factor, "Size multiplier between rows")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "f32, f64, bf16, f16, i32, i64")->capture_default_str();
  cmd->add_option("--redop", o->redop, "sum, avg, max, min")->capture_default_str();
  cmd->add_option("-w,--warmup", o->warmup, "Warm-up iterations per size")->capture_default_str();
  cmd->add_option("--iters", o->iters, "Timed iterations per size (5x below 1 MiB)")->capture_default_str();
  cmd->add_flag("--shared", o->shared,
                "Buffers in the transport's shared memory (zero-copy path); prints the memory-bandwidth ceiling");
  cmd->add_flag("!--no-check", o->check, "Skip the correctness check (#wrong column)");
  cmd->add_flag("--json", o->json, "One JSON object per row");
  cmd->add_flag("--calibrate", o->calibrate, "Measure alpha/beta per algorithm and write the cost-model file");
  cmd->callback([o] {
    if (o->nproc > 0 && !std::getenv("MESHTRAIN_RANK") && !std::getenv("OMPI_COMM_WORLD_RANK")) {
      launch::LaunchOptions lo;
      lo.nproc = o->nproc;
      lo.prefix_output = false;
      lo.command = {"/proc/self/exe", "bench", "comm", "--op", o->ops, "--algo", o->algo, "-b", o->min_bytes,
                    "-e", o->max_bytes, "-f", fmt::format("{}", o->factor), "--dtype", o->dtype, "--redop", o->redop,
                    "-w", std::to_string(o->warmup), "--iters", std::to_string(o->iters)};
      char self[4096];
      ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (len > 0) lo.command[0] = std::string(self, static_cast<size_t>(len));
      if (o->shared) lo.command.push_back("--shared");
      if (!o->check) lo.command.push_back("--no-check");
      if (o->json) lo.command.push_back("--json");
      if (o->calibrate) lo.command.push_back("--calibrate");
      auto r = launch::run_local(lo);
      if (r.exit_code != 0) throw Error(r.message);
      return;
    }
    run_in_world(*o);
  });
}

}  // namespace meshtrain::cli
