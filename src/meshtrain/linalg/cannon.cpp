#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/linalg/algorithms.h"

namespace meshtrain::linalg::detail {

namespace {

int mod(int a, int s) { return ((a % s) + s) % s; }

// One block in flight to `to` and from `from` on `comm` (a copy when the
// shift is zero): the send reads `out`, the receive fills `in`.
struct Shift {
  comm::Work send, recv;
};
Shift shift(comm::Communicator& comm, const void* out, size_t out_count, int to, void* in,
            size_t in_count, int from, DType t) {
  Shift s;
  if (to == comm.rank()) {
    if (in_count > 0) std::copy_n(static_cast<const char*>(out), in_count * dtype_size(t), static_cast<char*>(in));
    return s;
  }
  if (out_count > 0) s.send = comm.send(out, out_count, t, to);
  if (in_count > 0) s.recv = comm.recv(in, in_count, t, from);
  return s;
}

}  // namespace

void run_cannon(const GemmCall& call) {
  Context& ctx = *call.ctx;
  const MatrixLayout& cl = call.C->layout();
  ProcessGrid& g = ctx.grid(cl.p, cl.q, 1);
  if (!g.member) return;
  const int s = g.p, i = g.row, j = g.col;
  const DistMatrix& A = *call.A;
  const DistMatrix& B = *call.B;
  DistMatrix& C = *call.C;
  GemmTimes& tm = *call.times;
  const DType ab = A.dtype();
  const MatrixLayout& al = A.layout();
  const int64_t lr = C.local_rows(), lc = C.local_cols();
  auto kcount = [&](int block) { return al.local_cols(block); };  // columns of A's block column
  int64_t kmax = 0;
  for (int b = 0; b < s; ++b) kmax = std::max(kmax, kcount(b));
  const size_t esz = dtype_size(ab);
  void* abuf[2];
  void* bbuf[2];
  for (int b = 0; b < 2; ++b) {  // double buffers in scratch slots 0-3
    abuf[b] = ctx.scratch(2 * b, static_cast<size_t>(lr * kmax) * esz);
    bbuf[b] = ctx.scratch(2 * b + 1, static_cast<size_t>(kmax * lc) * esz);
  }
  // Skew: A(i, j) goes to (i, j - i), B(i, j) to (i - j, j); this rank then
  // holds A(i, kk) and B(kk, j) with kk = i + j.
  int kk = mod(i + j, s);
  Shift sa = shift(g.row_comm, A.local(), static_cast<size_t>(A.local_rows() * A.local_cols()),
                   mod(j - i, s), abuf[0], static_cast<size_t>(lr * kcount(kk)), mod(j + i, s), ab);
  Shift sb = shift(g.col_comm, B.local(), static_cast<size_t>(B.local_rows() * B.local_cols()),
                   mod(i - j, s), bbuf[0], static_cast<size_t>(kcount(kk) * lc), mod(i + j, s), ab);
  for (comm::Work* w : {&sa.send, &sa.recv, &sb.send, &sb.recv}) wait(*w, tm);
  for (int t = 0; t < s; ++t) {
    const int cur = t % 2, nxt = 1 - cur;
    const int knext = mod(kk + 1, s);
    Shift na, nb;
    if (t + 1 < s) {  // next blocks: A from the right neighbour, B from below
      na = shift(g.row_comm, abuf[cur], static_cast<size_t>(lr * kcount(kk)), mod(j - 1, s),
                 abuf[nxt], static_cast<size_t>(lr * kcount(knext)), mod(j + 1, s), ab);
      nb = shift(g.col_comm, bbuf[cur], static_cast<size_t>(kcount(kk) * lc), mod(i - 1, s),
                 bbuf[nxt], static_cast<size_t>(kcount(knext) * lc), mod(i + 1, s), ab);
    }
    local_gemm(ctx, ab, false, false, lr, lc, kcount(kk), call.alpha, abuf[cur], kcount(kk),
               bbuf[cur], lc, t == 0 ? call.beta : 1.0, C.local(), C.ld(), tm);
    count_overlap(tm, t + 1 < s, na.recv, nb.recv, true);
    for (comm::Work* w : {&na.send, &na.recv, &nb.send, &nb.recv}) wait(*w, tm);
    kk = knext;
  }
}

}  // namespace meshtrain::linalg::detail
