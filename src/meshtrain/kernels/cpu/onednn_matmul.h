// One oneDNN matmul primitive for C (M,N, f32, row-major, leading dim ldc)
// = op(A) (M,K) x op(B) (K,N) [+ C], with A and B row-major in `ab` (f32 or
// bf16), leading dims lda/ldb, transposed when ta/tb. Shared by the f32 GEMM
// backend (sgemm_onednn) and the bf16 GEMM (gemm_bf16), which cache these
// per problem. Only with oneDNN (MESHTRAIN_HAVE_DNNL).
#pragma once
#if defined(MESHTRAIN_HAVE_DNNL)
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace meshtrain::cpu {

struct OneDnnMatmul {
  std::shared_ptr<dnnl::matmul> prim;
  dnnl::memory::desc a, b, c;
  dnnl::memory::desc bias;  // (1, N) f32, or empty: no bias argument
  std::string impl;  // the implementation oneDNN picked, e.g. "brg:avx512_core"
};

// The one CPU engine every primitive here is made for (never destroyed:
// usable from exit-time code).
const dnnl::engine& onednn_engine();
// accumulate: beta == 1 (a sum post-op reads C); otherwise beta == 0.
// bias: an f32 row of N values added to every row of the product in the
// kernel's epilogue (before the sum), passed to each run.
OneDnnMatmul make_onednn_matmul(dnnl::memory::data_type ab, bool ta,
                                bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                int64_t ldb, int64_t ldc, bool accumulate, bool bias = false);
// Runs it on this thread's stream and waits; bias is required exactly when
// the primitive was made with one.
void run_onednn_matmul(const OneDnnMatmul& m, const void* A, const void* B, float* C,
                       const float* bias = nullptr);

}  // namespace meshtrain::cpu
#endif
