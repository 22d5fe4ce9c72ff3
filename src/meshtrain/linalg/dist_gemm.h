// Distributed matrix multiply: C = alpha op(A) op(B) + beta C on matrices
// spread over the ranks of a Context (dist_matrix.h), f64, f32 or bf16
// operands (bf16 into an f32 C). C stays where its layout puts it; A and B
// are moved (and transposed) into the layouts the algorithm needs when they
// are not in them already, and the result says so.
//
//   linalg::Context ctx(comm::Communicator::from_env());
//   auto C = DistMatrix(MatrixLayout::block_cyclic(m, n, 256, 256, 2, 2), DType::F64, ctx.rank());
//   GemmResult r = linalg::gemm(ctx, false, false, 1.0, A, B, 0.0, C);   // algo auto
//
// Algorithms (docs/LINALG.md says which when, with measurements):
//   summa   any p x q grid and block-cyclic layout; k-panels broadcast along
//           rows and columns, `lookahead` panels in flight during the multiply
//   cannon  square grid, block layout; neighbour shifts, double-buffered
//   2.5d    c layers of a square grid: operands copied to each layer, each
//           layer a 1/c share of SUMMA's panels, C reduced onto layer 0
//   1d      C split into row (P x 1) or column (1 x P) blocks: the other
//           operand's blocks pass round a ring under the multiplies (the
//           tensor-parallel all-gather + GEMM)
//   splitk  A split by columns, B by rows (k): local products, their row
//           chunks reduce-scattered onto C's row blocks as the next chunk runs
#pragma once
#include <string>
#include <string_view>

#include "meshtrain/linalg/dist_matrix.h"
#include "meshtrain/linalg/local_gemm.h"
#include "meshtrain/linalg/traffic.h"

namespace meshtrain::linalg {

enum class GemmAlgo : uint8_t { Auto, OneD, Summa, Cannon, TwoHalfD, SplitK };
std::string_view gemm_algo_name(GemmAlgo a);  // "auto", "1d", "summa", "cannon", "2.5d", "splitk"
GemmAlgo gemm_algo_from_name(std::string_view name);

struct GemmOptions {
  GemmAlgo algo = GemmAlgo::Auto;
  int64_t panel = 0;   // SUMMA/2.5D k-panel width, split-k row chunk; 0: the layout's blocks
  int lookahead = 1;   // panels whose transfers run during a multiply (0: none)
  int layers = 0;      // 2.5D replicas c; 0: as many as the world holds over C's grid
};

struct GemmResult {
  GemmAlgo algo = GemmAlgo::Auto;
  std::string grid;     // "2x2", "2x2x2"
  GemmTimes times;      // this rank's
  Traffic traffic;      // this rank's, moving the operands included
  Traffic moved;        // of which: putting A and B into the algorithm's layouts
  std::string note;     // why this algorithm, what was moved
};

// Collective on the context's world. A is m x k (k x m when trans_a), B
// k x n (n x k when trans_b), C m x n in its layout; dtypes: A and B the
// same, C result_dtype(A's).
GemmResult gemm(Context& ctx, bool trans_a, bool trans_b, double alpha, const DistMatrix& A,
                const DistMatrix& B, double beta, DistMatrix& C, const GemmOptions& opts = {});

// The layouts `algo` wants A and B in for C's layout (the benchmark builds
// its operands there, so nothing moves before the multiply).
std::pair<MatrixLayout, MatrixLayout> gemm_operand_layouts(GemmAlgo algo, const MatrixLayout& C,
                                                           int64_t k, int64_t panel = 0);

}  // namespace meshtrain::linalg
