// f32 GEMM through oneDNN's matmul primitive: the second sgemm backend beside
// OpenBLAS (sgemm_backend.h picks between them per problem). oneDNN's brgemm
// kernels pack differently from OpenBLAS and win on some of the model's shapes
// (the forward NT products) and lose on others (the TN weight gradients).
#pragma once
#include <cstdint>
#include <string>

namespace meshtrain::cpu {

// True when this build links oneDNN (then the f32 path is always usable:
// oneDNN picks its best f32 kernel for the running CPU).
bool onednn_sgemm_available();

// Row-major C (M, N) = op(A) op(B) (+ bias, N values added to every row)
// (+ C when accumulate), op(A) (M, K), op(B) (K, N), leading dimensions as in
// BLAS: the alpha = 1, beta in {0, 1} subset of sgemm, with the bias in the
// kernel's epilogue. One primitive per distinct problem and thread count,
// created on first use and cached; runs on the calling thread's OpenMP thread
// count. Throws when oneDNN is not built in. M, N, K >= 1.
void sgemm_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t lda, const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                  const float* bias = nullptr);

// "oneDNN 2.6.3 brg:avx512_core" (version and the kernel oneDNN picked for a
// typical problem), or "oneDNN: not built in".
std::string onednn_sgemm_description();

}  // namespace meshtrain::cpu
