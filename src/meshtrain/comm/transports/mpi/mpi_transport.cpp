#include "meshtrain/comm/transports/mpi/mpi_transport.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "meshtrain/comm/reduce.h"

namespace meshtrain::comm {

namespace mpi {

namespace {
std::mutex g_mu;
bool g_multiple = false;
MPI_Datatype g_bf16 = MPI_DATATYPE_NULL, g_f16 = MPI_DATATYPE_NULL;
MPI_Op g_half_ops[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
int g_host_id = -1;
bool g_one_host = true;

template <ReduceOp Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype* dt) {
  DType t = *dt == g_bf16 ? DType::BF16 : DType::F16;
  reduce_into(inout, in, static_cast<size_t>(*len), t, Op);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      g_multiple = provided >= MPI_THREAD_MULTIPLE;
      std::atexit(finalize_at_exit);
    }
    MPI_Type_contiguous(1, MPI_UINT16_T, &g_bf16);
    MPI_Type_commit(&g_bf16);
    MPI_Type_contiguous(1, MPI_UINT16_T, &g_f16);
    MPI_Type_commit(&g_f16);
    MPI_Op_create(half_op<ReduceOp::Sum>, 1, &g_half_ops[0]);
    MPI_Op_create(half_op<ReduceOp::Max>, 1, &g_half_ops[2]);
    MPI_Op_create(half_op<ReduceOp::Min>, 1, &g_half_ops[3]);
    MPI_Op_create(half_op<ReduceOp::Product>, 1, &g_half_ops[4]);
    g_half_ops[1] = g_half_ops[0];
    // Hosts: ranks sharing memory form one node; its first world rank names it.
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int me = world_rank(), node_size = 0;
    MPI_Comm_size(node, &node_size);
    int first = me;
    MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, node);
    g_host_id = first;
    int one = node_size == world_size() ? 1 : 0, all = 0;
    MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    g_one_host = all == 1;
    MPI_Comm_free(&node);
  });
}

int world_rank() { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int world_size() { int s = 1; MPI_Comm_size(MPI_COMM_WORLD, &s); return s; }
int host_id() { return g_host_id; }
bool all_on_one_host() { return g_one_host; }

std::string broadcast_job_id(const std::string& mine) {
  char buf[64] = {};
  std::snprintf(buf, sizeof(buf), "%s", mine.c_str());
  MPI_Bcast(buf, sizeof(buf), MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

MPI_Comm dup_world() {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  return c;
}

std::unique_lock<std::mutex> guard() {
  return g_multiple ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(g_mu);
}

void abort_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  // Without MPI_THREAD_MULTIPLE another thread may be inside MPI: wait for
  // its polled call to return, but not for a call that never will.
  std::unique_lock<std::mutex> lock(g_mu, std::defer_lock);
  if (!g_multiple) {
    for (int i = 0; i < 100 && !lock.try_lock(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

MPI_Datatype datatype(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16: return g_bf16;
    case DType::F16: return g_f16;
    case DType::U16: return MPI_UINT16_T;
    case DType::U8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op reduce_op(ReduceOp op, DType t) {
  if (t == DType::BF16 || t == DType::F16) return g_half_ops[static_cast<int>(op)];
  switch (op) {
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Product: return MPI_PROD;
    default: return MPI_SUM;
  }
}

void wait(MPI_Request& req, const OpContext& ctx, int peer) {
  for (int spins = 0;; ++spins) {
    int done = 0;
    {
      auto lock = guard();
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
    if (done) return;
    if (spins > 100) std::this_thread::yield();
    if ((spins & 255) == 0 && std::chrono::steady_clock::now() > ctx.deadline())
      throw CommError(peer >= 0 ? fmt::format("{}: timed out after {:.1f} s waiting for rank {} (MPI)",
                                              ctx.what(), ctx.timeout_s, peer)
                                : fmt::format("{}: timed out after {:.1f} s (MPI)", ctx.what(), ctx.timeout_s));
  }
}

}  // namespace mpi

MpiTransport::MpiTransport(MPI_Comm comm) : MpiTransport(comm, 0, true) {}

MpiTransport::MpiTransport(MPI_Comm comm, int tag, bool owns) : comm_(comm), tag_(tag), owns_(owns) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  if (tag_ == 0) p2p_ = std::make_unique<MpiTransport>(comm_, 1, false);
}

MpiTransport::~MpiTransport() {
  p2p_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Transport* MpiTransport::p2p_lane() { return p2p_.get(); }

void MpiTransport::exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                            const OpContext& ctx) {
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  std::vector<std::vector<char>> temps(recvs.size());
  {
    auto lock = mpi::guard();
    for (size_t i = 0; i < recvs.size(); ++i) {
      const RecvSpec& r = recvs[i];
      if (!r.bytes) continue;
      MT_CHECK(r.bytes <= INT_MAX, "{}: message of {} bytes is too large for MPI", ctx.what(), r.bytes);
      void* dst = r.data;
      if (r.reduce) {
        temps[i].resize(r.bytes);
        dst = temps[i].data();
      }
      reqs.emplace_back();
      peers.push_back(r.peer);
      MPI_Irecv(dst, static_cast<int>(r.bytes), MPI_BYTE, r.peer, tag_, comm_, &reqs.back());
    }
    for (const SendSpec& s : sends) {
      if (!s.bytes) continue;
      MT_CHECK(s.bytes <= INT_MAX, "{}: message of {} bytes is too large for MPI", ctx.what(), s.bytes);
      reqs.emplace_back();
      peers.push_back(s.peer);
      MPI_Isend(s.data, static_cast<int>(s.bytes), MPI_BYTE, s.peer, tag_, comm_, &reqs.back());
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) mpi::wait(reqs[i], ctx, peers[i]);
  for (size_t i = 0; i < recvs.size(); ++i)
    if (recvs[i].reduce && recvs[i].bytes)
      reduce_into(recvs[i].data, temps[i].data(), recvs[i].bytes / dtype_size(recvs[i].dtype),
                  recvs[i].dtype, recvs[i].op);
}

void MpiTransport::barrier(const OpContext& ctx) {
  MPI_Request req;
  {
    auto lock = mpi::guard();
    MPI_Ibarrier(comm_, &req);
  }
  mpi::wait(req, ctx);
}

void MpiTransport::allgather_small(const void* mine, size_t bytes, void* all, const OpContext& ctx) {
  MPI_Request req;
  {
    auto lock = mpi::guard();
    MPI_Iallgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE,
                   comm_, &req);
  }
  mpi::wait(req, ctx);
}

std::unique_ptr<Transport> MpiTransport::split(int color, int key) {
  MPI_Comm child;
  {
    auto lock = mpi::guard();
    MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child);
  }
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiTransport>(child);
}

}  // namespace meshtrain::comm
