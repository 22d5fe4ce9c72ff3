// Many independent multiplies (f32) partitioned across the ranks in 1D: the
// batch is split into contiguous ranges, one per rank (equal counts for a
// uniform batch, equal flops for mixed sizes), so a rank's share needs no
// messages at all; each rank runs its share as one batched local call.
//
//   strided:        C_i = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i * stride_x
//   pointer array:  the same shape, one pointer per operand and product
//   grouped:        products of mixed shapes
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/comm/types.h"
#include "meshtrain/linalg/local_gemm.h"
#include "meshtrain/linalg/process_grid.h"

namespace meshtrain::linalg {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};

// The products [begin, end) of a batch rank r runs: block_of for a uniform
// batch, contiguous ranges of near-equal flops for mixed shapes.
comm::Block batch_share(int64_t batch, int ranks, int rank);
comm::Block grouped_share(const std::vector<GemmShape>& shapes, int ranks, int rank);

// This rank's share of a strided batch (`count` products from A, B, C).
void batched_gemm_strided(const Context& ctx, bool ta, bool tb, GemmShape s, float alpha,
                          const float* A, int64_t stride_a, const float* B, int64_t stride_b,
                          float beta, float* C, int64_t stride_c, int64_t count, GemmTimes& t);

struct GemmPointers {
  const float* A;
  const float* B;
  float* C;
};
// This rank's share of a pointer-array batch (one shape, dense operands).
void batched_gemm_pointers(const Context& ctx, bool ta, bool tb, GemmShape s, float alpha,
                           const std::vector<GemmPointers>& products, float beta, GemmTimes& t);
// This rank's share of a grouped batch: shapes[i] for products[i].
void batched_gemm_grouped(const Context& ctx, const std::vector<GemmShape>& shapes, float alpha,
                          const std::vector<GemmPointers>& products, float beta, GemmTimes& t);

}  // namespace meshtrain::linalg
