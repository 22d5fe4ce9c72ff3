#include <algorithm>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/linalg/algorithms.h"

namespace meshtrain::linalg::detail {

namespace {

// Scratch slot of 2.5D's reduced C, past the panel buffers (2 per look-ahead slot).
constexpr int kReduceSlot = 64;

struct Panel {
  int64_t k0, w;
};

// k-panels that never cross a block of A's columns or B's rows, at most
// `width` wide.
std::vector<Panel> k_panels(const MatrixLayout& A, const MatrixLayout& B, int64_t width) {
  std::vector<Panel> out;
  const int64_t K = A.cols;
  for (int64_t k0 = 0; k0 < K;) {
    int64_t end = std::min({K, (k0 / A.nb + 1) * A.nb, (k0 / B.mb + 1) * B.mb});
    if (width > 0) end = std::min(end, k0 + width);
    out.push_back({k0, end - k0});
    k0 = end;
  }
  return out;
}

// The panels of SUMMA on grid g, this rank's layer taking every c-th one.
void summa_on(const GemmCall& call, ProcessGrid& g, const DistMatrix& A, const DistMatrix& B,
              DistMatrix& C, double beta) {
  Context& ctx = *call.ctx;
  GemmTimes& tm = *call.times;
  const DType ab = A.dtype(), cd = C.dtype();
  const size_t esz = dtype_size(ab);
  const int64_t lr = C.local_rows(), lc = C.local_cols();
  std::vector<Panel> all = k_panels(A.layout(), B.layout(), call.panel);
  std::vector<Panel> mine;
  for (size_t t = 0; t < all.size(); ++t)
    if (static_cast<int>(t % g.c) == g.layer) mine.push_back(all[t]);
  if (mine.empty()) {
    scale(C.local(), cd, lr, lc, C.ld(), beta);
    return;
  }
  int64_t wmax = 0;
  for (const Panel& p : mine) wmax = std::max(wmax, p.w);
  const int slots = std::max(1, call.lookahead + 1);
  // Scratch slots 2s and 2s + 1 (Context::scratch) hold panel s's A and B.
  std::vector<void*> abuf(slots), bbuf(slots);
  for (int s = 0; s < slots; ++s) {
    abuf[s] = ctx.scratch(2 * s, static_cast<size_t>(lr * wmax) * esz);
    bbuf[s] = ctx.scratch(2 * s + 1, static_cast<size_t>(wmax * lc) * esz);
  }
  struct InFlight {
    comm::Work a, b;
    const void* ap = nullptr;
    const void* bp = nullptr;
    int64_t lda = 0;
  };
  std::vector<InFlight> flight(slots);
  const bool row_alone = g.q == 1, col_alone = g.p == 1;
  auto issue = [&](size_t t) {
    const Panel& p = mine[t];
    InFlight& f = flight[t % slots];
    const int a_root = A.layout().owner_col(p.k0), b_root = B.layout().owner_row(p.k0);
    // A's panel: columns of the owner's local A, packed unless no one else needs it.
    if (row_alone) {
      f.ap = A.local_as<char>() + A.layout().local_col(p.k0) * esz;
      f.lda = A.ld();
    } else {
      void* buf = abuf[t % slots];
      if (g.col == a_root)
        pack(ctx, buf, A.local_as<char>() + A.layout().local_col(p.k0) * esz, A.ld(), lr, p.w, esz, tm);
      if (lr > 0) f.a = g.row_comm.broadcast(buf, static_cast<size_t>(lr * p.w), ab, a_root);
      f.ap = buf;
      f.lda = p.w;
    }
    // B's panel: whole local rows, contiguous; its owner sends from B itself.
    const char* own_b = B.local_as<char>() + B.layout().local_row(p.k0) * B.ld() * esz;
    if (col_alone || g.row == b_root) {
      f.bp = own_b;
      if (!col_alone && lc > 0)
        f.b = g.col_comm.broadcast(const_cast<char*>(own_b), static_cast<size_t>(p.w * lc), ab, b_root);
    } else {
      void* buf = bbuf[t % slots];
      if (lc > 0) f.b = g.col_comm.broadcast(buf, static_cast<size_t>(p.w * lc), ab, b_root);
      f.bp = buf;
    }
  };
  const size_t n = mine.size();
  for (size_t t = 0; t < std::min(n, static_cast<size_t>(slots)); ++t) issue(t);
  for (size_t t = 0; t < n; ++t) {
    InFlight& f = flight[t % slots];
    wait(f.a, tm);
    wait(f.b, tm);
    local_gemm(ctx, ab, false, false, lr, lc, mine[t].w, call.alpha, f.ap, f.lda, f.bp, lc,
               t == 0 ? beta : 1.0, C.local(), C.ld(), tm);
    count_overlap(tm, t + 1 < n, flight[(t + 1) % slots].a, flight[(t + 1) % slots].b,
                  slots > 1 && !(row_alone && col_alone));
    f = InFlight{};
    if (t + slots < n) issue(t + slots);
  }
}

}  // namespace

void run_summa(const GemmCall& call) {
  const MatrixLayout& cl = call.C->layout();
  ProcessGrid& g = call.ctx->grid(cl.p, cl.q, 1);
  if (!g.member) return;
  summa_on(call, g, *call.A, *call.B, *call.C, call.beta);
}

void run_25d(const GemmCall& call, int c) {
  Context& ctx = *call.ctx;
  const MatrixLayout& cl = call.C->layout();
  ProcessGrid& g = ctx.grid(cl.p, cl.q, c);
  if (!g.member) return;
  const int in_layer = ctx.rank() - g.layer * cl.p * cl.q;
  GemmTimes& tm = *call.times;
  // Layer 0 holds the operands; every other layer gets a copy of them.
  DistMatrix a_copy, b_copy, c_part;
  const DistMatrix* A = call.A;
  const DistMatrix* B = call.B;
  DistMatrix* C = call.C;
  if (g.layer != 0) {
    a_copy = DistMatrix(call.A->layout(), call.A->dtype(), in_layer, ctx.device());
    b_copy = DistMatrix(call.B->layout(), call.B->dtype(), in_layer, ctx.device());
    c_part = DistMatrix(cl, call.C->dtype(), in_layer, ctx.device());
    A = &a_copy;
    B = &b_copy;
    C = &c_part;
  }
  comm::Work wa, wb;
  if (A->local_bytes() > 0)
    wa = g.depth_comm.broadcast(A->local(), A->local_bytes() / dtype_size(A->dtype()), A->dtype(), 0);
  if (B->local_bytes() > 0)
    wb = g.depth_comm.broadcast(B->local(), B->local_bytes() / dtype_size(B->dtype()), B->dtype(), 0);
  wait(wa, tm);
  wait(wb, tm);
  summa_on(call, g, *A, *B, *C, g.layer == 0 ? call.beta : 0.0);
  const size_t count = static_cast<size_t>(C->local_rows() * C->local_cols());
  if (count == 0) return;
  if (g.layer == 0) {
    const auto bytes = static_cast<int64_t>(count * dtype_size(C->dtype()));
    void* sum = ctx.scratch(kReduceSlot, static_cast<size_t>(bytes));
    wait(g.depth_comm.reduce(C->local(), sum, count, C->dtype(), comm::ReduceOp::Sum, 0), tm);
    ctx.kernels().copy_2d(default_stream(ctx.device()), C->local(), bytes, sum, bytes, bytes, 1);
  } else {
    wait(g.depth_comm.reduce(C->local(), nullptr, count, C->dtype(), comm::ReduceOp::Sum, 0), tm);
  }
}

}  // namespace meshtrain::linalg::detail
