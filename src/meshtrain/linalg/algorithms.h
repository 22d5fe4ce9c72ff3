// The distributed GEMM algorithms behind dist_gemm.h (internal to linalg/).
// Each computes C = alpha A B + beta C with C stationary in its layout and A,
// B already in the layouts operand_layouts() names for it; dist_gemm.cpp
// moves the operands there (and transposes them) first when they are not.
#pragma once
#include <utility>

#include "meshtrain/linalg/dist_gemm.h"
#include "meshtrain/linalg/dist_matrix.h"
#include "meshtrain/linalg/local_gemm.h"

namespace meshtrain::linalg::detail {

struct GemmCall {
  Context* ctx;
  double alpha, beta;
  const DistMatrix* A;
  const DistMatrix* B;
  DistMatrix* C;
  int64_t panel;   // k-panel width (SUMMA, 2.5D) or row chunk (split-k); 0: the algorithm's default
  int lookahead;   // panels in flight beyond the one being multiplied
  GemmTimes* times;
};

// Stationary-C SUMMA: k-panels of A broadcast along grid rows and of B along
// grid columns, `lookahead` panels ahead of the local multiply. On a layered
// grid layer l multiplies the panels t with t % c == l.
void run_summa(const GemmCall& call);
// SUMMA inside each of c layers on its share of the panels, after A and B
// are copied to every layer; C's partial sums reduced onto layer 0.
void run_25d(const GemmCall& call, int c);
// Cannon on a square grid: skew, then sqrt(P) multiply-and-shift steps with
// the next blocks' transfers in flight during each multiply.
void run_cannon(const GemmCall& call);
// 1D: C, and the operand it shares rows (columns) with, split over P x 1
// (1 x P); the other operand's blocks travel round a ring, the next block's
// transfer under the current multiply (all-gather + GEMM, overlapped).
void run_ring_1d(const GemmCall& call);
// Split-k: each rank multiplies its k-slice; the partial C's row chunks are
// reduce-scattered while the next chunk is multiplied.
void run_splitk(const GemmCall& call);

// The layouts algorithm `algo` needs A (m x k) and B (k x n) in, for C's
// layout (`c` layers for 2.5D), and whether C's layout suits it at all.
bool c_layout_suits(GemmAlgo algo, const MatrixLayout& C, int world_size, int c);
std::pair<MatrixLayout, MatrixLayout> operand_layouts(GemmAlgo algo, const MatrixLayout& C,
                                                      int64_t k, int64_t panel);
// True when A and B already suit `algo` (SUMMA accepts any k-blocking).
bool operands_suit(GemmAlgo algo, const MatrixLayout& A, const MatrixLayout& B,
                   const MatrixLayout& C);

}  // namespace meshtrain::linalg::detail
