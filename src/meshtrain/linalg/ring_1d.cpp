#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/linalg/algorithms.h"

namespace meshtrain::linalg::detail {

// Rows variant (C, A on P x 1; B's k-blocks travel): C_r += A_r[:, block b] B_b.
// Columns variant (C, B on 1 x P; A's k-blocks travel): C_r += A_b B_r[block b, :].
// Look-ahead 0 waits for each transfer before multiplying (the all-gather-
// then-GEMM baseline the overlap is measured against).
void run_ring_1d(const GemmCall& call) {
  Context& ctx = *call.ctx;
  const MatrixLayout& cl = call.C->layout();
  const bool rows = cl.q == 1;
  ProcessGrid& g = ctx.grid(cl.p, cl.q, 1);
  if (!g.member) return;
  comm::Communicator& ring = rows ? g.col_comm : g.row_comm;
  const int P = ring.size(), r = ring.rank();
  const DistMatrix& A = *call.A;
  const DistMatrix& B = *call.B;
  DistMatrix& C = *call.C;
  GemmTimes& tm = *call.times;
  const DType ab = A.dtype();
  const size_t esz = dtype_size(ab);
  const int64_t lr = C.local_rows(), lc = C.local_cols();
  // The travelling operand: B's row blocks (rows) or A's column blocks.
  const DistMatrix& moving = rows ? B : A;
  const MatrixLayout& kl = rows ? B.layout() : A.layout();
  auto kcount = [&](int b) { return rows ? kl.local_rows(b) : kl.local_cols(b); };
  auto block_elems = [&](int b) { return static_cast<size_t>(kcount(b) * (rows ? lc : lr)); };
  size_t most = 0;
  for (int b = 0; b < P; ++b) most = std::max(most, block_elems(b));
  void* buf[2] = {ctx.scratch(0, most * esz), ctx.scratch(1, most * esz)};
  const int left = (r + P - 1) % P, right = (r + 1) % P;
  const void* cur = moving.local();
  int b = r;
  for (int step = 0; step < P; ++step) {
    comm::Work sent, got;
    void* next = buf[step % 2];
    const int nb = (b + 1) % P;
    if (step + 1 < P) {  // pass the current block left, take the next from the right
      if (block_elems(b) > 0) sent = ring.send(cur, block_elems(b), ab, left);
      if (block_elems(nb) > 0) got = ring.recv(next, block_elems(nb), ab, right);
    }
    if (call.lookahead == 0) {  // no overlap: the transfer finishes before the multiply
      wait(sent, tm);
      wait(got, tm);
    }
    const int64_t k0 = rows ? kl.global_row(b, 0) : kl.global_col(b, 0);
    const int64_t kb = kcount(b);
    if (rows)
      local_gemm(ctx, ab, false, false, lr, lc, kb, call.alpha,
                 A.local_as<char>() + A.layout().local_col(k0) * esz * (kb > 0), A.ld(), cur, lc,
                 step == 0 ? call.beta : 1.0, C.local(), C.ld(), tm);
    else
      local_gemm(ctx, ab, false, false, lr, lc, kb, call.alpha, cur, kb,
                 B.local_as<char>() + B.layout().local_row(k0) * B.ld() * esz * (kb > 0), B.ld(),
                 step == 0 ? call.beta : 1.0, C.local(), C.ld(), tm);
    count_overlap(tm, step + 1 < P, got, sent, call.lookahead > 0);
    wait(sent, tm);
    wait(got, tm);
    cur = next;
    b = nb;
  }
}

void run_splitk(const GemmCall& call) {
  Context& ctx = *call.ctx;
  const MatrixLayout& cl = call.C->layout();
  ProcessGrid& g = ctx.grid(cl.p, 1, 1);
  if (!g.member) return;
  comm::Communicator& group = g.col_comm;
  const int P = group.size();
  const DistMatrix& A = *call.A;  // 1 x P: this rank's k-slice of columns
  const DistMatrix& B = *call.B;  // P x 1: the same k-slice of rows
  DistMatrix& C = *call.C;        // P x 1 block rows
  GemmTimes& tm = *call.times;
  const DType ab = A.dtype(), cd = C.dtype();
  const size_t csz = dtype_size(cd);
  // Rows per rank: the block (one grid row holds them all whatever its mb).
  const int64_t n = cl.cols, mb = P == 1 ? cl.rows : cl.mb, kr = A.local_cols();
  // Row chunks of every rank's block, multiplied and reduce-scattered in
  // turn (`panel` rows each when set). By default one chunk when the k-slice
  // is longer than C is wide or tall: the transfer (m n words against m n k
  // flops) is then a sliver of the time, and each extra chunk makes the BLAS
  // pack the whole B slice again (1024 x 1024 x 65536 on 2 ranks: 4 chunks ran
  // at 86-91 GFLOP/s, 1 at 103-114). Otherwise 4 chunks.
  const int64_t chunk = call.panel > 0 ? std::min(call.panel, mb)
                        : A.layout().cols / P >= std::max(cl.rows, n) ? mb  // the same on every rank
                                                     : std::max<int64_t>(1, (mb + 3) / 4);
  const int64_t chunks = (mb + chunk - 1) / chunk;
  void* part[2];
  void* mine[2];
  for (int s = 0; s < 2; ++s) {  // scratch slots 0-3
    part[s] = ctx.scratch(2 * s, static_cast<size_t>(P * chunk * n) * csz);
    mine[s] = ctx.scratch(2 * s + 1, static_cast<size_t>(chunk * n) * csz);
  }
  comm::Work pending[2];
  auto finish = [&](int64_t h) {  // chunk h's reduced rows into C
    const int s = static_cast<int>(h % 2);
    wait(pending[s], tm);
    const int64_t r0 = h * chunk, rows = std::max<int64_t>(0, std::min(chunk, C.local_rows() - r0));
    if (rows == 0) return;
    char* dst = C.local_as<char>() + r0 * C.ld() * csz;
    scale(dst, cd, rows, n, C.ld(), call.beta);
    const auto* src = static_cast<const char*>(mine[s]);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) {
        if (cd == DType::F64)
          reinterpret_cast<double*>(dst)[i * C.ld() + j] += reinterpret_cast<const double*>(src)[i * n + j];
        else
          reinterpret_cast<float*>(dst)[i * C.ld() + j] += reinterpret_cast<const float*>(src)[i * n + j];
      }
  };
  const size_t esz = dtype_size(ab);
  for (int64_t h = 0; h < chunks; ++h) {
    const int s = static_cast<int>(h % 2);
    if (h >= 2) finish(h - 2);  // frees this slot
    char* out = static_cast<char*>(part[s]);
    for (int dest = 0; dest < P; ++dest) {  // rows dest * mb + h * chunk ... of this rank's partial C
      const int64_t r0 = dest * mb + h * chunk;
      const int64_t rows = std::max<int64_t>(0, std::min({chunk, mb - h * chunk, cl.rows - r0}));
      char* block = out + dest * chunk * n * csz;
      if (rows < chunk) scale(block + rows * n * csz, cd, chunk - rows, n, n, 0.0);
      if (rows > 0)
        local_gemm(ctx, ab, false, false, rows, n, kr, call.alpha,
                   A.local_as<char>() + r0 * A.ld() * esz, A.ld(), B.local(), B.ld(), 0.0, block, n, tm);
    }
    pending[s] = group.reduce_scatter(out, mine[s], static_cast<size_t>(P * chunk * n), cd,
                                      comm::ReduceOp::Sum);
  }
  for (int64_t h = std::max<int64_t>(0, chunks - 2); h < chunks; ++h) finish(h);
}

}  // namespace meshtrain::linalg::detail
