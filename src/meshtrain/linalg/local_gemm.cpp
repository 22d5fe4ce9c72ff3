#include "meshtrain/linalg/local_gemm.h"

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::linalg {

DType result_dtype(DType ab) { return ab == DType::BF16 ? DType::F32 : ab; }

void local_gemm(const Context& ctx, DType ab, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                double alpha, const void* A, int64_t lda, const void* B, int64_t ldb, double beta,
                void* C, int64_t ldc, GemmTimes& times) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // no product: BLAS leaves beta C (and rejects lda = 0)
    scale(C, result_dtype(ab), M, N, ldc, beta);
    return;
  }
  const auto t0 = GemmClock::now();
  const KernelTable& k = ctx.kernels();
  const Stream s = default_stream(ctx.device());
  switch (ab) {
    case DType::F64:
      k.dgemm(s, ta, tb, M, N, K, alpha, static_cast<const double*>(A), lda,
              static_cast<const double*>(B), ldb, beta, static_cast<double*>(C), ldc);
      break;
    case DType::F32:
      k.sgemm(s, ta, tb, M, N, K, static_cast<float>(alpha), static_cast<const float*>(A), lda,
              static_cast<const float*>(B), ldb, static_cast<float>(beta), static_cast<float*>(C),
              ldc);
      break;
    case DType::BF16:
      k.gemm_half(s, HalfFormat::BF16, ta, tb, M, N, K, static_cast<float>(alpha),
                  static_cast<const uint16_t*>(A), lda, static_cast<const uint16_t*>(B), ldb,
                  static_cast<float>(beta), static_cast<float*>(C), ldc);
      break;
    default: fail("distributed GEMM: dtype {} is not supported", dtype_name(ab));
  }
  times.local_gemm_s += seconds_since(t0);
}

void pack(const Context& ctx, void* dst, const void* src, int64_t ld_src, int64_t rows,
          int64_t cols, size_t esz, GemmTimes& times) {
  if (rows <= 0 || cols <= 0) return;
  const auto t0 = GemmClock::now();
  const int64_t row_bytes = cols * static_cast<int64_t>(esz);
  ctx.kernels().copy_2d(default_stream(ctx.device()), dst, row_bytes, src, ld_src * static_cast<int64_t>(esz),
                        row_bytes, rows);
  times.pack_s += seconds_since(t0);
}

void scale(void* C, DType t, int64_t rows, int64_t cols, int64_t ld, double beta) {
  if (beta == 1.0) return;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      if (t == DType::F64) {
        double& c = static_cast<double*>(C)[i * ld + j];
        c = beta == 0.0 ? 0.0 : beta * c;
      } else {
        float& c = static_cast<float*>(C)[i * ld + j];
        c = beta == 0.0 ? 0.f : static_cast<float>(beta) * c;
      }
    }
}

void wait(const comm::Work& w, GemmTimes& times) {
  const auto t0 = GemmClock::now();
  w.wait();
  times.wait_s += seconds_since(t0);
}

void count_overlap(GemmTimes& times, bool has_next, const comm::Work& a, const comm::Work& b,
                   bool ahead) {
  ++times.multiplies;
  if (!has_next || !ahead) return;
  auto begun = [](const comm::Work& w) { return w.started() || w.test(); };
  if (begun(a) && begun(b)) ++times.overlapped;
}

}  // namespace meshtrain::linalg
