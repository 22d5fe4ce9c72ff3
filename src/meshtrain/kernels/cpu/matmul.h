// Linear layers through OpenBLAS sgemm. Row-major; weights are (out, in) like
// torch.nn.Linear. Backward accumulates into weight and bias gradients.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// out (N, OC) = inp (N, C) @ weight^T (C, OC) + bias. With accumulate=true the
// result is added to what `out` already holds (used to fuse residual adds).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC, bool accumulate = false);

// dinp (N, C) = dout @ weight (overwritten, or added when accumulate_dinp);
// dweight (OC, C) += dout^T @ inp; dbias (OC) += column sums of dout.
// Any of dinp, dweight, dbias may be null to skip it.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                     bool accumulate_dinp = false);

// Prepares out (N, OC) for a GEMM that adds into it: with a bias, each row is
// set to the bias (or has it added, when accumulating) and the GEMM's beta to
// return is 1; without, beta is 1 when accumulating, else 0.
float seed_output_with_bias(float* out, const float* bias, int64_t N, int64_t OC, bool accumulate);

// Column sums of a (N, OC) matrix added into out (OC); deterministic order.
void add_column_sums(float* out, const float* m, int64_t N, int64_t OC);

// Plain GEMM helpers on row-major matrices, C = alpha*op(A)*op(B) + beta*C.
// Runs on OpenBLAS or oneDNN, chosen per problem (sgemm_backend.h,
// MESHTRAIN_SGEMM); a given problem always takes the same backend.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* Cm,
           int64_t ldc);

// C (M, N, row stride N) = op(A) op(B) + bias (N values added to every row),
// plus what C holds when accumulate. oneDNN adds the bias in its kernel's
// epilogue; OpenBLAS needs C seeded with it first (one more pass over C).
// Auto times the two that way, so the bias takes part in the choice.
void sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                int64_t lda, const float* B, int64_t ldb, const float* bias, bool accumulate,
                float* C);

}  // namespace meshtrain::cpu
